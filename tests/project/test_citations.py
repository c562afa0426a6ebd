"""Every Markdown file the project cites is one a clone can read: the code (.py), the kernel data
(kernels/data/*.json), the docs (README.md, docs/*.md) and the skill catalog
(skills/catalog/*/SKILL.md) cite `.md` files, with or without a `#heading`, and each must be a file
of this repository with that heading, or a page of upstream Xilinx/mlir-air that the citation names
as upstream.

What counts as a citation: a Markdown link `[text](path.md#anchor)` in a page (resolved
from the page's folder, as GitHub does), and any other `name.md` or `path/name.md#anchor` in
the text, code spans, comments and strings included (resolved from the citing file's folder,
the repository's root, or docs/, and otherwise by its path's tail anywhere in the tree:
`phase-0-cpu-oracle/SKILL.md` is skills/catalog/phase-0-cpu-oracle/SKILL.md). An anchor must
be the GitHub id of one of the target's headings (`anchors`).

Not citations of a file of ours, and so not failed:

* patterns, not one file: a path with `*`, `<...>` or `{...}` (`skills/catalog/<name>/SKILL.md`,
  `f"{LLMS}/README.md"`);
* URLs (`https://...`);
* `RUN_TIME_FILES`: the files a run writes (report.md, lessons.md, evaluation.md);
* `FIXTURES`: names a test makes up on purpose (this file's own synthetic citations among
  them);
* upstream citations (`upstream`), recognized by one of three rules:
  1. the path starts in upstream's tree: `programming_examples/`, or a folder of it the text
     names from inside (`details/`, `kernel_registry/`, `llms/`, `.claude/`, or one of
     upstream's `programming_examples/llms/<model>/` folders, e.g. `llama32_1b/docs/profile.md`);
  2. the file name is one only upstream has (`UPSTREAM_NAMES`: the kernel registry's pages,
     the llms pages' docs/, mlir-air's build guide), e.g. `GEMV_bf16.md`, `docs/profile.md`;
  3. the file name is one upstream and this project could both mean (`SHARED_NAMES`:
     `ARCHITECTURE.md`) and the line, or the one before it, says it is upstream's: it names
     `upstream`, `Xilinx/mlir-air` or a path under `programming_examples/` or `llms/`.
  A name of ours (`NPU_FACTS.md`, `design.md`) is never upstream, whatever the line says.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from paths import ROOT

DOCS = ROOT / "docs"
DATA = ROOT / "kernels" / "data"

#: Folders never scanned: not ours (virtualenvs, builds, caches) or not tracked.
SKIP_DIRS = {"__pycache__", "build", "dist", "node_modules", "reports"}

#: Files a deployment writes at run time (npu-deploy report -o DIR): named, never in the tree.
RUN_TIME_FILES = {"report.md", "lessons.md", "evaluation.md"}

#: Names tests make up on purpose, per test file (paths from the root). This file's own
#: synthetic citations (the checker's unit tests) are all exempt.
FIXTURES: dict[str, set[str] | None] = {
    "tests/project/test_citations.py": None,                       # every one
    "tests/project/test_docs.py": {"page.md", "other.md", "a-link.md", "inside-a-fence.md"},
    "tests/agents/test_claude.py": {"notes/plan.md"},              # a file in an agent's workspace
}

#: Upstream's tree, entered at its top or at a folder the text names from inside (rule 1).
UPSTREAM_PREFIXES = ("programming_examples/", "details/", "kernel_registry/", "llms/",
                     ".claude/")

#: File names only upstream has (rule 2): the kernel registry's pages
#: (programming_examples/kernel_registry/), the llms pages' docs/ (profile, explain, usage)
#: and mlir-air's build guide (docs/buildingRyzenLin.md), at e972f2942d41.
UPSTREAM_NAMES = {
    "supported_kernels.md", "EltwiseAdd_bf16.md", "FlashAttention_bf16.md", "GELU_bf16.md",
    "GEMM_bf16_in_bf16_out.md", "GEMM_bf16_in_fp32_out.md", "GEMV_bf16.md",
    "LayerNorm_bf16.md", "RMSNorm_bf16.md", "RoPE_bf16.md", "SiLU_Mul_bf16.md",
    "profile.md", "explain.md", "usage.md", "buildingRyzenLin.md",
}

#: File names upstream uses that this project's own notes used too (rule 3): upstream's only
#: when the line says so.
SHARED_NAMES = {"ARCHITECTURE.md"}

_UPSTREAM_CONTEXT = re.compile(r"upstream|Xilinx/mlir-air|programming_examples/|\bllms/", re.I)
_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s)\"'`>\]]+", re.I)
_CITATION = re.compile(r"(?<![\w./<>{}*$@-])([\w./<>{}*-]*\w\.md)(?:#([\w-]+))?(?![\w-])")
_MD_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)


@dataclass(frozen=True)
class Citation:
    source: str          # the citing file, from the root
    line: int
    target: str          # as written, without the anchor
    anchor: str
    link: bool           # a Markdown link (resolved from the page's folder only)
    context: str         # the line and the one before it

    def __str__(self) -> str:
        anchor = f"#{self.anchor}" if self.anchor else ""
        return f"{self.source}:{self.line}: {self.target}{anchor}"


# --- reading -------------------------------------------------------------------------------

def sources(root: Path = ROOT) -> list[Path]:
    """The files scanned: every .py of the tree, the kernel data, the README, docs/ and the
    skills."""
    found: list[Path] = []
    for folder, dirs, files in os.walk(root):        # symlinked folders are not entered
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS
                         and not d.endswith(".egg-info"))
        found += [Path(folder) / f for f in sorted(files) if f.endswith(".py")]
    found += sorted((root / "kernels" / "data").glob("*.json"))
    found += [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    found += sorted((root / "skills" / "catalog").glob("*/SKILL.md"))
    return [p for p in found if p.is_file()]


def citations(text: str, source: str, markdown: bool) -> Iterator[Citation]:
    """The `.md` citations of one file's text."""
    lines = text.splitlines()

    def at(offset: int) -> tuple[int, str]:
        n = text.count("\n", 0, offset)
        return n + 1, "\n".join(lines[max(n - 1, 0):n + 1])

    text_wo_urls = _URL.sub(lambda m: " " * len(m.group()), text)
    if markdown:
        for m in _MD_LINK.finditer(text_wo_urls):
            path, _, anchor = m.group(1).partition("#")
            if path.endswith(".md"):
                n, context = at(m.start(1))
                yield Citation(source, n, path, anchor, True, context)
        # the links are done; the rest of the text is read for bare citations
        text_wo_urls = _MD_LINK.sub(lambda m: " " * len(m.group()), text_wo_urls)
    for m in _CITATION.finditer(text_wo_urls):
        n, context = at(m.start(1))
        yield Citation(source, n, m.group(1), m.group(2) or "", False, context)


@cache
def _tree(root: Path) -> tuple[str, ...]:
    """Every file under root, from the root (hidden and skipped folders left out)."""
    out = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in SKIP_DIRS]
        rel = Path(folder).relative_to(root).as_posix()
        out += [f if rel == "." else f"{rel}/{f}" for f in files]
    return tuple(sorted(out))


def resolve(c: Citation, root: Path = ROOT) -> Path | None:
    """The file of ours a citation names, or None."""
    citing = (root / c.source).parent
    if c.link:
        candidates = [citing / c.target]
    else:
        candidates = [citing / c.target, root / c.target, root / "docs" / c.target]
    for p in candidates:
        if p.is_file():
            return p
    if c.link or c.target.startswith(("/", "../", "./")):
        return None
    tail = "/" + c.target
    matches = [f for f in _tree(root) if f == c.target or f.endswith(tail)]
    return root / matches[0] if matches else None


def upstream(c: Citation) -> bool:
    """Whether a citation names a file of upstream Xilinx/mlir-air (the module's three rules)."""
    target = c.target[2:] if c.target.startswith("./") else c.target
    name = target.rsplit("/", 1)[-1]
    if target.startswith(UPSTREAM_PREFIXES) or target.startswith(_llms_folders()):
        return True
    if name in UPSTREAM_NAMES:
        return True
    return name in SHARED_NAMES and bool(_UPSTREAM_CONTEXT.search(c.context))


@cache
def _llms_folders() -> tuple[str, ...]:
    """upstream's programming_examples/llms/<model>/ folders the kernel data cites."""
    text = "".join(p.read_text() for p in sorted(DATA.glob("*.json")))
    return tuple(sorted({f"{m}/" for m in re.findall(r"programming_examples/llms/(\w+)/", text)}))


def exempt(c: Citation) -> bool:
    if any(ch in c.target for ch in "*<>{}"):
        return True                                      # a pattern, not one file
    if c.target.rsplit("/", 1)[-1] in RUN_TIME_FILES:
        return True
    if c.source in FIXTURES:
        names = FIXTURES[c.source]
        return names is None or c.target in names
    return False


def anchors(page: Path) -> set[str]:
    """The ids GitHub gives a page's headings: lower case, punctuation other than hyphens
    and underscores dropped, spaces as hyphens, a repeated heading numbered from -1."""
    seen: dict[str, int] = {}
    out = set()
    text = _FENCE.sub("", _COMMENT.sub("", page.read_text()))
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M):
        heading = re.sub(r"`|\*\*|\[([^\]]*)\]\([^)]*\)", r"\1", heading)
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def problems(found: Iterable[Citation], root: Path = ROOT) -> list[str]:
    """What is wrong with these citations: a file that is not in the repository (and is
    not upstream's), or an anchor its file lacks."""
    out = []
    for c in found:
        if exempt(c):
            continue
        file = resolve(c, root)
        if file is None:
            if not upstream(c):
                out.append(f"{c}: no such file in the repository (and not an upstream path)")
            continue
        if c.anchor and file.suffix == ".md" and c.anchor not in anchors(file):
            out.append(f"{c}: {file.relative_to(root).as_posix()} has no heading "
                       f"#{c.anchor}")
    return out


def scan(root: Path = ROOT) -> list[Citation]:
    found: list[Citation] = []
    for path in sources(root):
        rel = path.relative_to(root).as_posix()
        found += citations(path.read_text(encoding="utf-8"), rel, path.suffix == ".md")
    return found


# --- the project --------------------------------------------------------------------------

def test_every_cited_markdown_file_and_heading_exists():
    found = scan()
    assert len(found) > 100, "the scan found almost no citations: is it reading the tree?"
    broken = problems(found)
    assert not broken, "\n".join(broken)


def test_the_facts_sheet_and_the_design_notes_are_cited_where_the_code_relies_on_them():
    """The two pages that replaced the team's notes are the ones the code cites."""
    targets = {(c.target.rsplit("/", 1)[-1], c.anchor) for c in scan()}
    assert ("hardware-facts.md", "array-and-memories") in targets
    assert ("design.md", "phase-3-full-model") in targets


def test_nothing_cites_the_team_notes_by_their_bare_name():
    """The notes the project once cited (NPU_FACTS, without `.md`) are not in the repository
    either: their figures are docs/hardware-facts.md's."""
    bare = re.compile(r"\bNPU_FACTS\b")
    found = [f"{p.relative_to(ROOT)}:{n}" for p in sources() if p.name != "test_citations.py"
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
             if bare.search(line)]
    assert not found, found


def test_the_kernel_data_names_its_upstream_sources_as_upstream_paths():
    """Every `.md` a data file names as its source is upstream's, by rule 1: a full path."""
    for path in sorted(DATA.glob("*.json")):
        data = json.loads(path.read_text())
        src = data.get("source", {})
        for key in ("path", "summary"):
            if str(src.get(key, "")).endswith(".md"):
                assert src[key].startswith("programming_examples/"), (path.name, key)


# --- the checker itself, on made-up text --------------------------------------------------

def _found(tmp_path: Path, text: str, name: str = "pkg/mod.py") -> list[str]:
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs" / "facts.md").write_text("# Facts\n\n## Array and memories\n\n"
                                                "## DMA limits (`repeat`)\n")
    (tmp_path / "pkg").mkdir(exist_ok=True)
    source = tmp_path / name
    source.write_text(text)
    return problems(citations(text, name, name.endswith(".md")), tmp_path)


def test_the_checker_fails_a_missing_file(tmp_path: Path):
    assert _found(tmp_path, '# why: NPU_FACTS.md, "Array and memories"\n') == [
        "pkg/mod.py:1: NPU_FACTS.md: no such file in the repository (and not an upstream path)"]
    # a name of ours is not upstream's because the line names mlir-air
    assert _found(tmp_path, "# from `NOTES.md` (public figures from Xilinx/mlir-air)\n")
    # nor is a shared name without upstream on the line
    assert _found(tmp_path, '    "ARCHITECTURE.md phase 0: logits within 1e-4"\n')


def test_the_checker_fails_a_missing_anchor(tmp_path: Path):
    assert _found(tmp_path, "# docs/facts.md#array-and-memories, facts.md#dma-limits-repeat\n"
                  ) == []
    assert _found(tmp_path, "# see docs/facts.md#array-and-memory\n") == [
        "pkg/mod.py:1: docs/facts.md#array-and-memory: docs/facts.md has no heading "
        "#array-and-memory"]
    # a Markdown link resolves from the page's folder only
    assert _found(tmp_path, "See [the facts](facts.md#array-and-memories).\n",
                  "docs/page.md") == []
    assert _found(tmp_path, "See [the facts](docs/facts.md).\n", "docs/page.md") == [
        "docs/page.md:1: docs/facts.md: no such file in the repository (and not an upstream "
        "path)"]


def test_the_checker_accepts_upstream_paths(tmp_path: Path):
    text = ("# programming_examples/kernel_registry/details/GEMV_bf16.md, details/RoPE_bf16.md\n"
            "# GELU_bf16.md's table; llama32_1b/docs/profile.md; `docs/profile.md`\n"
            "# upstream's per-layer diagrams of `ARCHITECTURE.md`\n"
            "# programming_examples/llms/qwen3_4b/ARCHITECTURE.md\n"
            "# https://github.com/Xilinx/mlir-air/blob/main/NOWHERE.md\n"
            "# skills/catalog/<name>/SKILL.md, f\"{LLMS}/README.md\", report.md\n")
    assert _found(tmp_path, text) == []
