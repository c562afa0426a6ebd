"""The docs/ pages as a reader meets them: what is generated from the code is current."""

from __future__ import annotations

import re
import subprocess
import sys

from paths import ROOT

from npu_deploy.cli import main

DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))


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
