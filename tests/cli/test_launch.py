"""The entry point's loading line (npu_deploy/launch.py): a command that takes seconds to
open says at once what it opens; one that answers at once says nothing; what a person typed
is shown as text, never as terminal control."""

from __future__ import annotations

import subprocess
import sys

import pytest

from npu_deploy.launch import loading_line


@pytest.mark.parametrize(("argv", "said"), [
    (["tui"], "npu-deploy tui: opening the TUI"),
    (["replay", "r1", "--db", "x.db"], "npu-deploy replay r1: opening the TUI"),
    (["attach", "--db", "x.db", "r1"], "npu-deploy attach: opening the TUI"),
    (["deploy", "tiny"], "npu-deploy deploy tiny: opening the TUI"),
    (["resume", "r1"], "npu-deploy resume r1: loading the store and the run's pipeline"),
    (["deploy", "tiny", "--headless"], None),
    (["tui", "--help"], None),
    (["runs"], None),
    ([], None),
])
def test_what_each_command_says_before_it_imports(argv, said):
    line = loading_line(["npu-deploy", *argv])
    assert (line is None) if said is None else line.startswith(said)


def test_an_argument_is_shown_as_text_and_cut():
    line = loading_line(["npu-deploy", "replay", "\x1b[2J\x1b]52;c;eA==\x07" + "r" * 80])
    assert line is not None and "\x1b" not in line and "\x07" not in line
    assert len(line) < 140 and "…" in line


def test_the_entry_point_imports_nothing_but_the_standard_library():
    """Its point is to write before the half second of imports: a module of its own."""
    code = ("import sys; before = set(sys.modules); import npu_deploy.launch; "
            "new = set(sys.modules) - before; "
            "print(sorted(m for m in new if m.split('.')[0] in "
            "('click', 'rich', 'textual', 'sqlite_utils', 'numpy', 'torch')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
