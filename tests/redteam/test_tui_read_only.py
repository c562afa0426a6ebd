"""Red team, area "media" (issue 39): the TUI on a store it cannot write, a person browsing
the runs on a read-only disk, a snapshot or a colleague's store mounted read-only.

The TUI opens such a store read-only and works as a viewer (the browser, previews, replay,
the tabs, search, help, the theme); it says once, on the browser's title line and on the
run screen, that the store is read-only and why (store/medium.py `why_unwritable`'s
words); every key that would write (a new deployment, resume, fork, a decision, pause) is
refused in one notice that names why and what to do; and nothing is created beside the
store or changed in it.

The media are real (test_media.py): a read-only bind mount, and a file chmod'ed 0444 read
by a process without CAP_DAC_OVERRIDE, which runs this module as a script on the store."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
import tui_runs
from cli_stores import checkpoint  # everything into the main file, no -wal or -shm
from textual.widgets import Static
from tui_pilot import SIZE, until

from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.decision import DecisionDialog
from npu_deploy.tui.screens.help import HelpScreen
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.screens.runs import RunsScreen
from npu_deploy.tui.settings import read_settings, settings_path
from redteam.test_media import (
    _env,
    _store_with,
    _without_dac_override,
    listing,
    needs_root,
    read_only_view,
)

pytestmark = pytest.mark.tui

AREA = "media"
RUNS = (tui_runs.stopped_run, tui_runs.checkpoint_run, tui_runs.working_run,
        tui_runs.failed_gate_run)
STOPPED, CHECKPOINT, CUT, PICK = "stopped-p2", "live-p0", "work-p1", "debug-p1"
#: What `why_unwritable` says of each medium.
ON_READ_ONLY_MOUNT = "it is on a read-only file system"
READ_ONLY_FILE = "its permissions let you read it, not write it"


def redteam(case: str, before: str) -> pytest.MarkDecorator:
    return pytest.mark.redteam(area=AREA, case=case, before=before)


def _store(folder: Path) -> Path:
    """A store with a run stopped for a person, one at a checkpoint and one cut mid-phase
    (crashed: r would resume it), everything in the main file (no -wal, no -shm)."""
    folder.mkdir(parents=True, exist_ok=True)
    db = folder / "runs.db"
    tui_runs.build_store(db, *RUNS)
    checkpoint(db)
    return db


def _words(app: DeployApp, selector: str) -> str:
    widget = app.screen.query_one(selector, Static)
    return str(widget.content) if widget.display else ""


async def _refused(pilot, app: DeployApp, *keys: str) -> str:
    """Press `keys`; the last must be refused in one notice naming the store's medium and
    the way out. The notice."""
    said = {n.identity for n in app._notifications}      # an older one may expire meanwhile
    for key in keys:
        await pilot.press(key)
    await pilot.pause()
    notices = [n.message for n in app._notifications if n.identity not in said]
    assert len(notices) == 1, f"{keys}: {notices}"
    [notice] = notices
    assert "read-only" in notice and "nothing was written" in notice and "--db" in notice, \
        notice
    return notice


async def look_around(db: Path, reason: str) -> None:
    """A person's tour of a read-only store under Pilot: every reading works, every writing
    key is refused where it was pressed."""
    app = DeployApp(db)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        runs = app.screen
        assert isinstance(runs, RunsScreen)
        title = _words(app, "#runs-title")
        assert "read-only" in title and reason in title, title
        assert sorted(runs.summaries) == sorted([STOPPED, CHECKPOINT, CUT, PICK])
        # the browser's writing keys
        for key in ("n", "k"):
            assert reason in await _refused(pilot, app, key)
            assert app.screen is runs
        runs.select(CUT)
        await pilot.pause()
        assert runs.selected() == CUT and runs.summaries[CUT].status == "crashed"
        await _refused(pilot, app, "r")
        assert app.screen is runs
        # the filter (reads), then a run in replay
        await pilot.press("slash", *"stopped", "enter")
        await until(pilot, lambda: runs.selected() == STOPPED)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.run_id == STOPPED
        line = _words(app, "#read-only")
        assert "read-only" in line and reason in line, line
        for key in ("right_square_bracket", "f", "2", "3", "1", "g"):
            await pilot.press(key)
        await pilot.press("escape")                       # the go-to dialog
        await pilot.press("end")
        await until(pilot, lambda: screen.cursor == screen.timeline.head)
        # the decision dialog opens (to read); each decision in it is refused
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DecisionDialog))
        dialog = app.screen
        for keys in (("p",), ("x",), ("o",), ("r", *"tile", "enter")):
            await _refused(pilot, app, *keys)
            assert app.screen is dialog, keys
        await pilot.press("escape", "escape")
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        await _refused(pilot, app, "P")                  # pause the run
        await _refused(pilot, app, "k")                  # fork here
        # search, help, the theme (kept in the settings file, not in the store)
        await pilot.press("slash", *"gate", "enter", "escape", "escape")   # closed, cleared
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        app.theme = "textual-light"
        await pilot.pause()
        assert read_settings(settings_path()).get("theme") == "textual-light"
        # the run at its checkpoint: approving it is refused too
        await pilot.press("escape")
        await until(pilot, lambda: isinstance(app.screen, RunsScreen))
        await pilot.press("escape")                       # the filter, cleared
        runs.select(CHECKPOINT)
        await pilot.pause()
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen)
                    and app.screen.run_id == CHECKPOINT)
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DecisionDialog))
        await _refused(pilot, app, "a")
        await pilot.press("escape")
    assert app.return_code in (None, 0)
    errors = [n.message for n in app._notifications if n.severity == "error"
              and "read-only" not in n.message]
    assert not errors, errors


async def attach(db: Path, reason: str) -> None:
    """`npu-deploy attach`'s screen (live) on the run cut mid-phase: it says the store is
    read-only, and r (resume, offered for a crashed run) is refused; on the run whose debug
    directions wait, picking one in the Decide dialog is refused."""
    app = DeployApp(db, run_id=CUT, live=True)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        assert reason in _words(app, "#read-only")
        banner = _words(app, "#banner")
        assert "writable copy" in banner and "r resumes" not in banner, banner
        await _refused(pilot, app, "r")
        app.open_run(PICK, live=True)
        await until(pilot, lambda: isinstance(app.screen, RunScreen)
                    and app.screen.run_id == PICK)
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DecisionDialog))
        await _refused(pilot, app, "1")
        assert app.driving == set()


def _nothing_written(db: Path, before: dict[str, str | None]) -> None:
    assert listing(db.parent) == before
    with EventStore.open(db, readonly=True) as store:
        assert not any(store.pending_commands(r) for r in (STOPPED, CHECKPOINT, CUT))


@needs_root
@redteam("the TUI on a store on a read-only bind mount",
         before="`npu-deploy tui`: 'cannot write .../runs.db: it is on a read-only file "
                "system; nothing was written. ...' and no TUI; DeployApp failed to mount")
async def test_the_tui_browses_a_store_on_a_read_only_bind_mount(tmp_path):
    db = _store(tmp_path / "source")
    before = listing(db.parent)
    with read_only_view(db.parent, tmp_path / "ro") as view:
        await look_around(view / db.name, ON_READ_ONLY_MOUNT)
        await attach(view / db.name, ON_READ_ONLY_MOUNT)
        _nothing_written(view / db.name, before)
    assert listing(db.parent) == before


@needs_root
@redteam("the TUI on a store with its -wal on a read-only bind mount",
         before="`npu-deploy replay r1`: 'cannot write .../runs.db: it is on a read-only "
                "file system; ...' and no TUI")
async def test_replay_reads_the_wal_of_a_store_on_a_read_only_bind_mount(tmp_path):
    """The store's newest event is only in its -wal (a store copied while written): the
    replay shows it, from connections that keep the -wal's index in their own memory."""
    source = tmp_path / "source"
    source.mkdir()
    db, run_id = _store_with(source, wal=True)
    before = listing(source)
    with read_only_view(source, tmp_path / "ro") as view:
        app = DeployApp(view / db.name, run_id=run_id, live=False)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: isinstance(app.screen, RunScreen))
            screen = app.screen
            assert isinstance(screen, RunScreen)
            assert ON_READ_ONLY_MOUNT in _words(app, "#read-only")
            await pilot.press("end")
            await until(pilot, lambda: screen.cursor == screen.timeline.head)
            newest = screen.timeline.event(screen.timeline.head)
            assert newest is not None and newest.payload.get("text") == "message 99 "
            await _refused(pilot, app, "k")
        assert listing(view) == before


@redteam("the TUI on a chmod'ed read-only store",
         before="`npu-deploy tui` on a 0444 file: 'cannot write ...: its permissions let "
                "you read it, not write it; ...' and no TUI")
def test_the_tui_browses_a_read_only_file(tmp_path):
    prefix = _without_dac_override()
    db = _store(tmp_path / "store")
    db.chmod(0o444)
    before = listing(db.parent)
    done = subprocess.run([*prefix, sys.executable, __file__, str(db), READ_ONLY_FILE],
                          capture_output=True, text=True, timeout=120, env=_env())
    assert done.returncode == 0, done.stdout + done.stderr
    _nothing_written(db, before)


if __name__ == "__main__":      # the tour in a process of its own (a 0444 file, above)
    asyncio.run(look_around(Path(sys.argv[1]), sys.argv[2]))
