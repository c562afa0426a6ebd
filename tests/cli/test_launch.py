"""The entry point's loading line (npu_deploy/loading.py, written by npu_deploy/launch.py): a
command that takes seconds to open says at once what it opens; one that answers at once says
nothing; what a person typed is shown as text, never as terminal control."""

from __future__ import annotations

import subprocess
import sys

import pytest

from npu_deploy.loading import loading_line


@pytest.mark.parametrize(("argv", "said"), [
    (["tui", "--db", "/nonexistent/runs.db"], "npu-deploy tui: opening the TUI"),
    (["replay", "r1", "--db", "/nonexistent/runs.db"], "npu-deploy replay r1: opening the TUI"),
    (["attach", "--db", "x.db", "r1"], "npu-deploy attach r1: opening the TUI"),
    (["deploy", "tiny"], "npu-deploy deploy tiny: opening the TUI"),
    # the group's --db before the command, and options before the subject
    (["--db", "/nonexistent/runs.db", "tui"], "npu-deploy tui: opening the TUI"),
    (["--db=/nonexistent/runs.db", "replay", "r1"], "npu-deploy replay r1: opening the TUI"),
    (["--db", "x.db", "deploy", "--pipeline", "p:make", "--run-id", "d1", "tiny"],
     "npu-deploy deploy tiny: opening the TUI"),
    (["resume", "--pipeline", "p:make", "--", "r1"],
     "npu-deploy resume r1: loading the store and the run's pipeline"),
    (["--db", "x.db", "deploy", "tiny", "--headless"], None),
    (["--db", "x.db", "--help"], None),
    (["--version"], None),
    (["--db", "tui"], None),                    # "tui" is the store, and no command follows
    (["resume", "r1", "--db", "/nonexistent/runs.db"],
     "npu-deploy resume r1: loading the store and the run's pipeline"),
    (["deploy", "tiny", "--headless"], None),
    (["tui", "--help"], None),
    (["runs"], None),
    ([], None),
])
def test_what_each_command_says_before_it_imports(argv, said):
    line = loading_line(["npu-deploy", *argv])
    assert (line is None) if said is None else line.startswith(said)


def test_the_options_that_take_a_value_are_the_command_lines():
    """What loading.py skips as an option's value is what click takes as one, for the group
    and each command that says it loads (an option added there must be added here)."""
    import click

    from npu_deploy.cli import main
    from npu_deploy.loading import LOADING, VALUE_OPTIONS

    taking = {name for command in (main, *(main.commands[c] for c in LOADING))
              for p in command.params
              if isinstance(p, click.Option) and not p.is_flag and not p.count
              for name in p.opts if name.startswith("--")}
    assert taking == VALUE_OPTIONS


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


def test_nothing_the_entry_point_starts_imports_it_back():
    """launch.py imports the command line (in `main`); no module of the package imports
    launch.py, so there is no cycle: the loading line's state, which the TUI erases, is
    npu_deploy/loading.py."""
    import ast

    from paths import ROOT

    importers = []
    for path in sorted((ROOT / "npu_deploy").rglob("*.py")) + sorted(
            (ROOT / "npu_tui").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [f"{node.module}.{a.name}" for a in node.names]
                     if isinstance(node, ast.ImportFrom) and node.module else [])
            if "npu_deploy.launch" in names:
                importers.append(str(path.relative_to(ROOT)))
    assert importers == []


@pytest.fixture(scope="module")
def runs_db(tmp_path_factory: pytest.TempPathFactory):
    import tui_runs

    path = tmp_path_factory.mktemp("launch") / "runs.db"
    tui_runs.build_store(path, tui_runs.checkpoint_run, tui_runs.finished_run)
    return path


@pytest.mark.parametrize("held", [False, True])
@pytest.mark.parametrize("run_id", ["live-p0", "done-pass"])
def test_a_runs_line_is_its_header_as_the_store_has_it(runs_db, run_id, held):
    """attach/replay/resume RUN: id, model, phase, status (by the writer's lock, as the
    TUI's title says it) and verdict, read with the standard library's sqlite3."""
    import contextlib

    import tui_runs

    from npu_deploy.store import EventStore

    with EventStore.open(runs_db) as store, \
            (tui_runs.held(store, run_id) if held else contextlib.nullcontext()):
        s = store.fold(run_id)
        status = store.live_status(run_id, s.status)
        line = loading_line(["npu-deploy", "attach", run_id[:6], "--db", str(runs_db)])
        before = loading_line(["npu-deploy", "--db", str(runs_db), "attach", run_id[:6]])
    assert before == line
    verdict = f"verdict {s.verdict}" if s.verdict else "no verdict yet"
    assert line is not None and line.startswith(
        f"npu-deploy attach {run_id}  {s.model}  phase {s.current_phase}  run {status}  "
        f"{verdict}: opening the TUI")


def test_the_browsers_line_counts_the_runs_and_a_bad_store_is_left_to_the_command(
        runs_db, tmp_path):
    for argv in (["tui", "--db", str(runs_db)], ["--db", str(runs_db), "tui"]):
        assert loading_line(["npu-deploy", *argv]).startswith(
            "npu-deploy tui (2 runs): opening the TUI")
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"not a database" * 100)
    for argv in (["tui", f"--db={junk}"], ["attach", "r1", "--db", str(junk)],
                 ["attach", "no-such-run", "--db", str(runs_db)]):
        line = loading_line(["npu-deploy", *argv])
        assert line is not None and ": opening the TUI" in line     # no header, no error
