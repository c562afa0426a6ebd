"""The layout as a newcomer meets it: no import cycle anywhere, no module too long to read,
and the README's "Where to find" table leads to symbols that exist."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import click
import pytest
from paths import ROOT
from test_layers import layers

from npu_deploy.cli import main

MAX_LINES = 600
#: what the line limit does not cover: benchmarks (scripts, read top to bottom once) and the
#: virtual environment
NOT_MODULES = ("benchmarks", ".venv", ".site", "build")


# --- the import graph -----------------------------------------------------------------------

def package_modules(package: Path | None = None) -> dict[str, Path]:
    """Every module of the installed package (or of a made-up one) by its dotted name, as
    docs/layers.py walks it."""
    if package is None:
        return dict(layers.modules())
    layers.PACKAGE, saved = package, layers.PACKAGE
    try:
        return dict(layers.modules())
    finally:
        layers.PACKAGE = saved


def made_up_package(root: Path, modules: dict[str, str]) -> Path:
    """npu_deploy/ under `root` with an empty __init__ and `modules` (path -> source)."""
    package = root / "npu_deploy"
    package.mkdir()
    (package / "__init__.py").write_text("")
    for path, source in modules.items():
        (package / path).parent.mkdir(parents=True, exist_ok=True)
        (package / path).write_text(source)
    return package


def import_graph(package: Path | None = None) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports, anywhere in it (inside functions too),
    TYPE_CHECKING blocks aside, read by docs/layers.py. `from pkg import name` is an edge to
    pkg.name when that is a module, else to pkg (the name is defined in its __init__)."""
    files = package_modules(package)

    def module_of(target: str) -> str | None:
        while target and target not in files:
            target = target.rpartition(".")[0]
        return target or None

    return {name: {m for t in layers.imported(name, file, for_types=False)
                   if (m := module_of(t)) and m != name}
            for name, file in files.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.mark.slow         # 6 s on 2 busy cores: out of the fast core
def test_no_module_imports_itself_back_through_others():
    """No cycle between modules, whole project, imports inside functions included: an import
    put inside a function to dodge a cycle is still the cycle."""
    assert cycles(import_graph()) == []


def test_the_cycle_check_finds_a_cycle_through_a_function_level_import(tmp_path: Path):
    pkg = made_up_package(tmp_path, {
        "a/__init__.py": "from .x import X\n",
        "a/x.py": "X = 1\ndef f():\n    from .y import Y\n    return Y\n",
        "a/y.py": "from typing import TYPE_CHECKING\nfrom .x import X\nY = X\n"
                  "if TYPE_CHECKING:\n    from npu_deploy.a import z\n",
        "a/z.py": "from npu_deploy.a.y import Y\n"})
    graph = import_graph(pkg)
    assert graph["npu_deploy.a"] == {"npu_deploy.a.x"}
    assert cycles(graph) == [["npu_deploy.a.x", "npu_deploy.a.y"]]   # z: TYPE_CHECKING only


def unresolved_imports(package: Path | None = None) -> list[str]:
    """Imports of ours that name nothing: `from npu_deploy.x import y` where npu_deploy.x is
    no module, or defines no `y` and has no submodule `y` (a module moved, an importer left
    behind: found here before any process tries it)."""
    files = package_modules(package)
    problems = []
    for name, file in files.items():
        for target in sorted(layers.imported(name, file)):
            if target in files:
                continue
            module, _, attribute = target.rpartition(".")
            if module not in files:
                problems.append(f"{name} imports {target}: no such module")
            elif attribute not in defined_names(files[module]):
                problems.append(f"{name} imports {target}: {module} defines no {attribute}")
    return problems


@pytest.mark.slow         # several seconds: out of the fast core (make test-fast)
def test_every_import_of_ours_names_a_module_or_a_name_it_defines():
    assert unresolved_imports() == []


def test_the_import_check_finds_a_moved_module_and_a_missing_name(tmp_path: Path):
    pkg = made_up_package(tmp_path, {
        "a/__init__.py": "from .x import X\n", "a/x.py": "X = 1\n",
        "a/y.py": "from npu_deploy.progress import P\nfrom .x import Y, X\n"
                  "from npu_deploy.a import X as Z\n"})
    assert unresolved_imports(pkg) == [
        "npu_deploy.a.y imports npu_deploy.a.x.Y: npu_deploy.a.x defines no Y",
        "npu_deploy.a.y imports npu_deploy.progress.P: no such module"]


# --- module size ----------------------------------------------------------------------------

def test_no_module_is_over_600_lines():
    """A module a reader can hold: 600 lines at most, benchmarks aside."""
    long = []
    for path in sorted(ROOT.rglob("*.py")):
        relative = path.relative_to(ROOT)
        if relative.parts[0] in NOT_MODULES:
            continue
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            long.append(f"{relative}: {lines} lines")
    assert not long, "split along a real seam:\n" + "\n".join(long)


# --- the README's "Where to find" -----------------------------------------------------------

_ROW = re.compile(r"^\| (?P<what>[^|]+?) \| (?P<where>.+) \|$", re.M)
_LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)#]+)(?:#[^)]*)?\)")
_CODE = re.compile(r"`([^`]+)`")


def where_to_find(page: Path) -> dict[str, str]:
    """The rows of the page's "Where to find" table: what a reader looks for -> the cell."""
    section = page.read_text().split("## Where to find", 1)[1].split("\n## ", 1)[0]
    return {m["what"].strip(): m["where"] for m in _ROW.finditer(section)
            if not set(m["what"]) <= {"-", " "} and m["what"].strip() != "you look for"}


def defined_names(path: Path) -> set[str]:
    """What a module defines at any depth (functions, classes, assigned names, attributes of
    a class, the names it imports), and the string constants it holds (binding ids, keys,
    environment variables)."""
    if path.is_dir():
        return set().union(*(defined_names(p) for p in path.rglob("*.py")))
    stub = path.with_suffix(".pyi")        # a package whose names lazy_loader imports on use
    tree = ast.parse(path.read_text() + ("\n" + stub.read_text() if stub.exists() else ""))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets for t in ast.walk(t) if isinstance(t, ast.Name))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.add(node.value)
        elif isinstance(node, ast.Import | ast.ImportFrom):       # what it re-exports
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def resolve_cell(cell: str, page_dir: Path = ROOT, root: Path = ROOT) -> list[str]:
    """What in one "it is in" cell does not resolve: a linked file that does not exist, a
    code span naming no symbol of the row's linked Python files, a path in a code span that is
    in none of the row's linked folders, a command the CLI lacks."""
    problems = []
    files = []
    folders = [root]
    for target in _LINK.findall(cell):
        path = (page_dir / target).resolve()
        if not path.exists():
            problems.append(f"no file {target}")
        elif path.suffix == ".py" or path.is_dir():
            files.append(path)
            if path.is_dir():
                folders.append(path)
    defined = set().union(*(defined_names(f) for f in files)) if files else set()
    for span in _CODE.findall(cell):
        if span.startswith("npu-deploy "):
            words = span.split()
            command: click.Command | None = main
            for word in words[1:]:
                if not isinstance(command, click.Group) or word.isupper() or word.startswith("-"):
                    break
                command = command.commands.get(word)
                if command is None:
                    problems.append(f"no command {span!r}")
                    break
            continue
        if span.startswith("python -m "):
            if importlib.util.find_spec(span.split()[2]) is None:
                problems.append(f"no module {span!r}")
            continue
        if span.startswith("make "):
            makefile = (root / "Makefile").read_text()
            if not re.search(rf"^{re.escape(span.split()[1])}:", makefile, re.M):
                problems.append(f"no target {span!r}")
            continue
        name = span.split("(")[0].split(".")[-1] if re.fullmatch(r"[\w.]+(\(\))?", span) else span
        if "/" in span or span.endswith((".md", ".json", ".py", ".cc", ".tcss")):
            if not any((folder / span.rstrip("/")).exists() for folder in folders):
                problems.append(f"no path {span}")
        elif files and span not in defined and name not in defined:
            problems.append(f"{span!r} is not in {[str(f.relative_to(root)) for f in files]}")
    return problems


#: what a newcomer must find from the README in one step (issue 35's acceptance)
NEWCOMER_SEARCHES = ("the RoPE kernel's hardware rule", "the phase-3 threshold and its reason",
                     "the resume path", "the key that approves a checkpoint",
                     "where to add a kernel family, and every file it touches",
                     "where the anchor key lives")


@pytest.mark.parametrize("page", ["README.md", "docs/architecture.md"])
def test_every_where_to_find_row_resolves_to_real_files_and_symbols(page: str):
    rows = where_to_find(ROOT / page)
    assert rows
    problems = [f"{what}: {p}" for what, cell in rows.items()
                for p in resolve_cell(cell, (ROOT / page).parent)]
    assert not problems, "\n".join(problems)


def test_the_readme_answers_a_newcomers_searches():
    rows = where_to_find(ROOT / "README.md")
    assert [s for s in NEWCOMER_SEARCHES if s not in rows] == []


def test_the_row_check_finds_a_missing_file_symbol_and_command(tmp_path: Path):
    (tmp_path / "m.py").write_text("def here(): ...\nclass There: ...\nKEY = 'run.decide'\n")
    assert resolve_cell("[m.py](m.py): `here`, `There`, `run.decide`, `npu-deploy resume RUN`",
                        tmp_path, tmp_path) == []
    assert resolve_cell("[m.py](m.py): `gone()`", tmp_path, tmp_path) == [
        "'gone()' is not in ['m.py']"]
    assert resolve_cell("[n.py](n.py)", tmp_path, tmp_path) == ["no file n.py"]
    assert resolve_cell("`npu-deploy rewind RUN`", tmp_path, tmp_path) == [
        "no command 'npu-deploy rewind RUN'"]
    (tmp_path / "Makefile").write_text("docs: setup\n\tcog -r docs/*.md\n")
    assert resolve_cell("`make docs`, `python -m npu_deploy.kernels.measured.ingest`",
                        tmp_path, tmp_path) == []
    assert resolve_cell("`make bread`, `python -m npu_deploy.nowhere`", tmp_path, tmp_path) == [
        "no target 'make bread'", "no module 'python -m npu_deploy.nowhere'"]
