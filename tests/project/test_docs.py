"""The README and docs/ as a reader meets them: what is generated is current, every relative
link leads somewhere, and the README stays short enough to read to the end."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

from npu_deploy.cli import main

README = ROOT / "README.md"
DOCS = ROOT / "docs"
PAGES = [README, *sorted(DOCS.glob("*.md"))]

#: Pages that another generator writes (not cog, not in this branch): a link to one may
#: lead nowhere until it has been generated, and is checked like any other once it exists.
GENERATED_ELSEWHERE = {
    "docs/kernels.md": "the kernel families' tables, generated from the kernel registry",
}

README_MAX_LINES = 250


@pytest.mark.slow         # several seconds: out of the fast core (make test-fast)
def test_the_generated_docs_are_current():
    """`make docs` (cog) has been run since the last change to what the pages are drawn
    from: every command's --help for docs/cli.md, and whatever else a page's cog block
    reads from the code."""
    cogged = [str(p.relative_to(ROOT)) for p in PAGES if "[[[cog" in p.read_text()]
    assert "docs/cli.md" in cogged
    result = subprocess.run(
        [sys.executable, "-m", "cogapp", "--check", "--diff",
         "--check-fail-msg=run `make docs` and commit the pages", *cogged],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_cli_reference_has_every_command_once_in_the_order_it_is_registered():
    documented = re.findall(r"^### npu-deploy (\S+)$", (DOCS / "cli.md").read_text(), re.M)
    assert documented == list(main.commands), (
        "docs/cli.md's GROUPS must list every command as npu_deploy/cli/__init__.py "
        "registers it")


def test_the_readme_is_at_most_250_lines():
    lines = len(README.read_text().splitlines())
    assert lines <= README_MAX_LINES, (
        f"README.md has {lines} lines; move reference material into docs/")


def test_every_page_of_docs_is_linked_from_the_readme():
    linked = {target.split("#")[0] for target in links(README)}
    for page in DOCS.glob("*.md"):
        assert f"docs/{page.name}" in linked, f"README.md does not link docs/{page.name}"


def test_every_relative_link_leads_to_a_file_and_heading_that_exist():
    broken = []
    for page in PAGES:
        for target in links(page):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):      # https:, mailto:, ...
                continue
            path, _, anchor = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            where = f"{page.relative_to(ROOT)} -> {target}"
            if not file.exists():
                if _relative(file) not in GENERATED_ELSEWHERE:
                    broken.append(f"{where}: no such file")
                continue
            if anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{where}: no such heading")
    assert not broken, "\n".join(broken)


def test_the_link_check_finds_a_missing_file_and_a_missing_heading(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text("# A page\n\n## Where to find\n\nSee [here](#where-to-find), "
                    "[there](other.md#nowhere), ![pic](gone.svg) and `[not](a-link.md)`.\n"
                    "```\n[also not](inside-a-fence.md)\n```\n")
    (tmp_path / "other.md").write_text("# Other\n")
    assert links(page) == ["#where-to-find", "other.md#nowhere", "gone.svg"]
    assert "where-to-find" in anchors(page)
    assert "nowhere" not in anchors(tmp_path / "other.md")


# --- reading Markdown as GitHub renders it ---------------------------------------------------

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.M | re.S)
_COMMENT = re.compile(r"<!--.*?-->", re.S)
_CODE_SPAN = re.compile(r"(`+).+?\1", re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?\s*$", re.M)


def _prose(page: Path) -> str:
    """The page without its code and comments, where a bracket is not a link."""
    text = _COMMENT.sub("", page.read_text())
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def links(page: Path) -> list[str]:
    prose = _prose(page)
    return _LINK.findall(prose) + _REFERENCE.findall(prose)


def anchors(page: Path) -> set[str]:
    """The ids GitHub gives the page's headings: lower case, punctuation dropped, spaces as
    hyphens, a repeated heading numbered from -1."""
    seen: dict[str, int] = {}
    out = set()
    text = _FENCE.sub("", _COMMENT.sub("", page.read_text()))
    for heading in re.findall(r"^#{1,6}\s+(.+?)\s*#*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _relative(file: Path) -> str:
    try:
        return file.relative_to(ROOT).as_posix()
    except ValueError:
        return file.as_posix()
