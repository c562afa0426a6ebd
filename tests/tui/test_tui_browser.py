"""The run browser at 80x24, 120x40 and 200x60: every row keeps what says which run it is
and how it stands (its id or the shortest start of it that names it alone, its status, its
verdict), and width goes to those before the rest; a run nothing runs says how it goes on;
back from a run, the cursor is on that run. Real stores, the real app under Pilot."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import pytest
import tui_runs
from textual.widgets import DataTable

from npu_deploy.events import uuid7
from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.screens.runs import RunsScreen
from npu_deploy.tui.widgets.run_title import unique_prefix

SIZES = [(80, 24), (120, 40), (200, 60)]
#: Five runs with the ids a deployment gets (uuid7: runs made within a minute share their
#: first eight characters).
BUILDERS = (tui_runs.finished_run, tui_runs.stopped_run, tui_runs.failed_gate_run,
            tui_runs.checkpoint_run, tui_runs.working_run)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    path = tmp_path_factory.mktemp("tui-browser") / "runs.db"
    ids = tui_runs.build_store(path, *(functools.partial(b, run_id=uuid7()) for b in BUILDERS))
    return path, ids


@pytest.fixture
def db(built: tuple[Path, list[str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
       ) -> Iterator[tuple[Path, list[str]]]:
    yield tui_runs.private_copy(built[0], tmp_path, monkeypatch), built[1]


def screen_lines(app: DeployApp) -> list[str]:
    update = app.screen._compositor.render_full_update()
    return ["".join(seg.text for strip in chops for seg in strip).rstrip()
            for chops in update.strips]


@pytest.mark.parametrize("size", SIZES)
async def test_every_row_shows_its_run_status_and_verdict(db, size):
    path, ids = db
    app = DeployApp(path)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.2)
        lines = screen_lines(app)
        with EventStore.open(path, readonly=True) as store:
            for run in store.runs():
                # its row: the one whose first word is the start of its id, and of no other
                [line] = [ln for ln in lines if ln.split() and len(ln.split()[0]) >= 8 and
                          [i for i in ids if i.startswith(ln.split()[0].rstrip("…"))]
                          == [run.run_id]]
                assert store.resolve_run(line.split()[0].rstrip("…")) == run.run_id
                assert run.status in line.split()
                assert (run.verdict or "—") in line.split()
                assert "more characters" not in line
        table = app.screen.query_one(DataTable)
        assert table.scroll_x == 0 and table.virtual_size.width <= table.size.width, \
            "the rows fit: nothing hides to the right"
        if size[0] >= 200:                          # room for everything: the whole id
            assert any(ids[0] in ln for ln in lines)


@pytest.mark.parametrize("size", SIZES)
async def test_a_crashed_run_s_preview_says_how_it_goes_on(db, size):
    path, ids = db
    app = DeployApp(path)
    async with app.run_test(size=size) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        crashed = ids[4]                                  # working_run: crashed mid-step
        screen.select(crashed)
        await pilot.pause(0.2)
        text = "\n".join(screen_lines(app))
        # the words may wrap in the preview: the key, the command and the run's short id
        assert "r resumes it here" in text and "npu-deploy" in text, text
        assert unique_prefix(crashed, ids) in text


async def test_back_from_a_run_the_cursor_is_on_that_run(db):
    path, ids = db
    # opened from the browser, while another run is added above it
    app = DeployApp(path)
    async with app.run_test(size=(120, 40)) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        table = screen.query_one(DataTable)
        table.move_cursor(row=table.get_row_index(ids[1]))
        await pilot.press("down")
        opened = screen.selected()
        await pilot.press("enter")
        assert isinstance(app.screen, RunScreen) and app.screen.run_id == opened
        with EventStore.open(path) as store, tui_runs.deterministic():
            newer = tui_runs.finished_run(store, run_id=uuid7())
        await pilot.pause(1.2)                         # the browser reloads meanwhile
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert app.screen is screen and screen.selected() == opened
        assert newer in screen.summaries
    # opened on a run (`replay`, `attach`, `deploy`): esc goes to the browser, on that run
    app = DeployApp(path, run_id=ids[2], live=False)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("escape")
        await pilot.pause(0.2)
        assert isinstance(app.screen, RunsScreen) and app.screen.selected() == ids[2]


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
async def test_the_table_is_filled_once_on_opening(db, size, monkeypatch):
    """The table's width is known before its first fill: a wide screen's preview takes its
    share from the first reload, not after the first resize, which filled the table a second
    time (over 10,000 runs, 0.4 s more before the first paint; benchmarks/scale_bench.py)."""
    path, _ = db
    fills: list[int] = []
    original = RunsScreen.reload

    def reload(self: RunsScreen) -> None:
        original(self)
        fills.append(self._width)

    monkeypatch.setattr(RunsScreen, "reload", reload)
    app = DeployApp(path)
    async with app.run_test(size=size) as pilot:
        await pilot.pause(0.3)
        assert len(fills) == 1, fills
        assert fills[0] == app.screen._table_width()
