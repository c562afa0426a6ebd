"""kernels/ in areas (issue 35): each area's public face, no import cycle among the modules
(imports inside functions counted), and no module over 600 lines."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import npu_deploy.kernels
from npu_deploy.kernels._public_face import exports

KERNELS = Path(npu_deploy.kernels.__file__).parent
AREAS = sorted(p.parent.name for p in KERNELS.glob("*/__init__.py")
               if p.parent.name != "families")


def test_the_areas_are_the_ones_the_docs_list():
    assert AREAS == ["air_programs", "definition", "emulation", "fidelity", "measured",
                     "npu_runtime", "performance", "plans"]


@pytest.mark.parametrize("area", AREAS)
def test_an_areas_public_names_are_its_type_checking_imports_and_resolve(area: str):
    package = importlib.import_module(f"npu_deploy.kernels.{area}")
    where = exports(package.__file__)
    assert sorted(package.__all__) == sorted(where)
    for name, module in where.items():
        defined = importlib.import_module(f"npu_deploy.kernels.{area}.{module}")
        assert getattr(package, name) is getattr(defined, name)
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError):
        package.no_such_name  # noqa: B018


def test_importing_the_kernels_package_loads_neither_the_emitter_nor_the_planner():
    code = ("import sys, npu_deploy.kernels\n"
            "print(sorted(m for m in ('npu_deploy.kernels.air_programs.air',\n"
            "    'npu_deploy.kernels.plans.plan', 'npu_deploy.kernels.performance.calibration')\n"
            "    if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def _module(path: Path) -> str:
    parts = list(path.relative_to(KERNELS).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(["kernels", *parts])


def _imports(path: Path) -> set[str]:
    """The kernels modules `path` imports anywhere (inside functions too), except under
    `if TYPE_CHECKING:`."""
    tree = ast.parse(path.read_text())
    skip = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If)
            and ast.unparse(node.test) == "TYPE_CHECKING" for n in ast.walk(node)}
    me = _module(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if id(node) in skip or not isinstance(node, ast.ImportFrom):
            continue
        if node.level:
            base = package.split(".")[:len(package.split(".")) - node.level + 1]
        elif (node.module or "").startswith("npu_deploy.kernels"):
            base = ["kernels"]
            node = ast.ImportFrom(node.module[len("npu_deploy.kernels."):] or None,
                                  node.names, 1)
        else:
            continue
        target = ".".join(base + ([node.module] if node.module else []))
        for alias in node.names:
            out.add(f"{target}.{alias.name}")
            out.add(target)
    return out


def test_no_import_cycle_among_the_kernels_modules():
    files = {_module(p): p for p in KERNELS.rglob("*.py")}
    graph = {m: sorted(t for t in _imports(p) if t in files and t != m)
             for m, p in files.items()}
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        if m in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(m):] + [m]))
        if m in done:
            return
        for t in graph[m]:
            visit(t, [*path, m])
        done.add(m)

    for m in graph:
        visit(m, [])


def test_no_kernels_module_is_over_600_lines():
    long = {str(p.relative_to(KERNELS)): n for p in KERNELS.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}
