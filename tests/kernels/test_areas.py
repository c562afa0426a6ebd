"""kernels/ in areas (issue 35): each area's public face, and importing the package loads
neither the emitter nor the planner. That no module imports itself back and none is over 600
lines is held for the whole project (tests/project/test_layout.py)."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

import npu_deploy.kernels

KERNELS = Path(npu_deploy.kernels.__file__).parent
AREAS = sorted(p.parent.name for p in KERNELS.glob("*/__init__.py")
               if p.parent.name != "families")


def test_the_areas_are_the_ones_the_docs_list():
    assert AREAS == ["air_programs", "definition", "emulation", "fidelity", "measured",
                     "npu_runtime", "performance", "plans"]


def exports(stub: Path) -> dict[str, str]:
    """name -> the module of its area that an area's `__init__.pyi` imports it from."""
    return {a.asname or a.name: node.module for node in ast.parse(stub.read_text()).body
            if isinstance(node, ast.ImportFrom) and node.module for a in node.names}


@pytest.mark.parametrize("area", AREAS)
def test_an_areas_public_names_are_its_stubs_imports_and_resolve(area: str):
    package = importlib.import_module(f"npu_deploy.kernels.{area}")
    where = exports(KERNELS / area / "__init__.pyi")
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
