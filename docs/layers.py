"""The installed package's parts, lowest first, and which of the others each may import:
the one statement of the rule that docs/architecture.md's table ("Which way the imports
go", a cog block) prints and tests/project/test_layers.py enforces.

A part is a name under `npu_deploy`: a package folder (events/, store/, ..., npu_tui/ as
`tui`, all linked into npu_deploy/), the command line (npu_deploy/cli/), or a module of
npu_deploy/ itself (launch.py, deploy_request.py, ...; `__init__` is npu_deploy/__init__.py).
Every module of the installed package belongs to the part its dotted name starts with.
Imports are read from the source (ast), those inside functions included.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "npu_deploy"


class Part(NamedTuple):
    name: str                      # npu_deploy.<name>
    may_import: tuple[str, ...]    # the parts it may import, each listed before it
    role: str


_CORE = ("events", "store", "formats", "models", "metrics", "oracle", "kernels", "skills")

#: Lowest first. A part imports only what it may; what it may import is listed above it.
PARTS: tuple[Part, ...] = (
    Part("__init__", (), "the package's name"),
    Part("import_path", (),
         "the checkout taken off sys.path when a package runs from it with -m (standard "
         "library only)"),
    Part("events", (),
         "the vocabulary: events, payloads, the hash chain, the fold, the stages a step marks"),
    Part("store", ("events",),
         "the SQLite event log: runs, events, blobs, snapshots, inbox, verification, the "
         "writer; the default path and the progress file"),
    Part("machine", ("events", "store"),
         "the phase machine and the conductor, the only writer of a run"),
    Part("formats", (),
         "weight formats as data: the 4-bit device formats and GGUF's blocks, each packed, "
         "unpacked and round-tripped, with the upstream file each fact comes from"),
    Part("models", ("formats",),
         "where a model comes from, its configuration and weights, the catalog"),
    Part("metrics", ("events",),
         "how every numerical gate compares a candidate with its reference"),
    Part("oracle", ("events", "models", "metrics"),
         "Phase 0's FP32 reference, the canonical prompts, the goldens, the bf16 reference"),
    Part("kernels", ("events", "formats", "models", "metrics", "oracle"),
         "what an NPU2 kernel is, what it costs, whether a configuration fits"),
    Part("skills", ("events", "store"),
         "the skill catalog, its trigger matcher, lessons and memory"),
    Part("pipeline", _CORE,
         "the phases' substance: workspace, toolbox, gates, recipe, report, evaluator"),
    Part("agents", ("machine", "pipeline", *_CORE),
         "who works the phases: the offline autopilot and claude"),
    Part("deploy_request", ("machine", "agents", "pipeline", *_CORE),
         "a new deployment checked, for the command line and the TUI"),
    Part("cluster", ("import_path", "machine", "agents", "pipeline", "deploy_request", *_CORE),
         "matrices of deployments across hosts on Ray: the spec, a node's task, the head's "
         "collector, the driver, the comparison of two matrices"),
    Part("tui", ("events", "store", "deploy_request"),
         "the terminal UI: reads the store and the events, never the conductor"),
    Part("loading", ("store",),
         "the line the command writes before its heavy imports (standard library and the "
         "store's default path only), and erases after the TUI"),
    Part("cli", ("machine", "agents", "pipeline", "deploy_request", "cluster", "tui", "loading",
                 *_CORE),
         "the command line"),
    Part("launch", ("loading", "cli"), "the console entry point"),
    Part("__main__", ("import_path", "launch"), "`python -m npu_deploy`"),
)

#: The parts' names, lowest first.
PARTS_ORDER = tuple(p.name for p in PARTS)


def part(name: str) -> Part:
    return next(p for p in PARTS if p.name == name)


def where(name: str) -> str:
    """Where a part's source is, from the repository's top (a folder of npu_deploy/ is
    shown where its link leads)."""
    path = PACKAGE / name
    if path.is_dir():
        return str(path.resolve().relative_to(ROOT)) if path.is_symlink() else \
            str(path.relative_to(ROOT))
    return str((PACKAGE / f"{name}.py").relative_to(ROOT))


def modules() -> Iterator[tuple[str, Path]]:
    """Every module of the installed package: its dotted name and its file."""
    for entry in sorted(PACKAGE.iterdir()):
        if entry.is_dir() and (entry / "__init__.py").exists():
            for file in sorted(entry.rglob("*.py")):
                rel = file.relative_to(entry).with_suffix("")
                names = [p for p in rel.parts if p != "__init__"]
                yield ".".join(["npu_deploy", entry.name, *names]), file
        elif entry.suffix == ".py":
            yield ("npu_deploy" if entry.stem == "__init__" else
                   f"npu_deploy.{entry.stem}"), entry


def part_of(dotted: str) -> str:
    """The part a module of ours is in (`npu_deploy.x.y` is in `x`; a name that npu_deploy
    itself defines, in `__init__`)."""
    parts = dotted.split(".")
    if len(parts) == 1:
        return "__init__"
    head = parts[1]
    if (PACKAGE / head).is_dir() or (PACKAGE / f"{head}.py").exists():
        return head
    return "__init__"


def rows_of(dotted: str) -> list[str]:
    """The rows of PARTS a module belongs to (exactly one, when PARTS is complete)."""
    return [p.name for p in PARTS if p.name == part_of(dotted)]


def imported(dotted: str, file: Path, *, for_types: bool = True) -> set[str]:
    """The modules of ours a module imports (as dotted names; `from npu_deploy.x import y`
    gives `npu_deploy.x.y`, which is in the same part as `npu_deploy.x`); without those
    under `if TYPE_CHECKING:` when not `for_types`."""
    found: set[str] = set()
    package = dotted.split(".") if file.name == "__init__.py" else dotted.split(".")[:-1]
    tree = ast.parse(file.read_text(), str(file))
    typing_only = set() if for_types else {
        id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
        and "TYPE_CHECKING" in ast.unparse(node.test)
        for stmt in node.body for inner in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.update(f"{module}.{a.name}" for a in node.names)
    return {m for m in found if m == "npu_deploy" or m.startswith("npu_deploy.")}


def imports() -> dict[str, dict[str, set[str]]]:
    """For each part: the other parts it imports, each with the modules that import it."""
    out: dict[str, dict[str, set[str]]] = {}
    for dotted, file in modules():
        mine = part_of(dotted)
        for target in imported(dotted, file):
            theirs = part_of(target)
            if theirs != mine:
                out.setdefault(mine, {}).setdefault(theirs, set()).add(dotted)
    return out


def broken() -> list[str]:
    """Every import that goes against PARTS: of a part no row holds, or of one the
    importing part may not import."""
    known = {p.name for p in PARTS}
    problems = []
    for mine, targets in sorted(imports().items()):
        allowed = set(part(mine).may_import) if mine in known else set()
        for theirs, by in sorted(targets.items()):
            if theirs == "__init__":
                continue
            if theirs not in known or mine not in known or theirs not in allowed:
                why = ("no row holds it" if theirs not in known else
                       f"{mine!r} is in no row" if mine not in known else
                       f"{mine!r} may import only {', '.join(sorted(allowed))}" if allowed else
                       f"{mine!r} may import nothing of ours")
                problems.append(f"{', '.join(sorted(by))} imports npu_deploy.{theirs}: {why}")
    return problems
