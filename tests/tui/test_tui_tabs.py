"""The run screen's tabs in replay: the Agent, Gates and Plan tabs show the run as it was
at the event under the cursor, the Plan tab's tables and the trend sparklines."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import tui_runs
from textual.widgets import TabbedContent

from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.widgets.panels import AgentPanel

SIZE = (160, 48)
RUN = "plan-done"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tui-plan") / "runs.db"
    assert tui_runs.build_store(path, tui_runs.planned_run) == [RUN]
    return path


@pytest.fixture
def db(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "runs.db").write_bytes(built.read_bytes())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NPU_DEPLOY_KEYMAP", str(tmp_path / "no-keymap.toml"))
    yield Path("runs.db")


def versions(text: str) -> list[int]:
    """The event numbers the Agent tab's transcript lines start with."""
    return [int(m[1]) for m in re.finditer(r"^\s*(\d+) ", text, re.M)]


def on_screen(panel, version: int) -> bool:
    """Whether the transcript line of event `version` is inside the panel's viewport."""
    lines = panel.text.splitlines()
    [row] = [i for i, line in enumerate(lines) if re.match(rf"\s*{version} ", line)]
    top = panel.scroll_offset.y
    return top <= row < top + panel.scrollable_content_region.height


async def replay_at(pilot, tab: str, version: int) -> RunScreen:
    screen = pilot.app.screen
    assert isinstance(screen, RunScreen)
    screen.query_one(TabbedContent).active = tab
    await pilot.pause()
    screen.seek(version)
    await pilot.pause()
    return screen


async def test_the_agent_tab_shows_the_transcript_up_to_the_cursor(db):
    with EventStore.open(db, readonly=True) as store:
        agent = [e.run_version for e in store.events(RUN) if e.actor == "agent"
                 and e.type in ("agent.message", "tool.requested", "tool.completed")]
    early = agent[5]
    app = DeployApp(db, run_id=RUN, live=False)
    async with app.run_test(size=SIZE) as pilot:
        for tab_first in (True, False):        # the tab shown before the seek, and after
            screen = pilot.app.screen
            assert isinstance(screen, RunScreen)
            if tab_first:
                await replay_at(pilot, "tab-agent", early)
            else:
                screen.query_one(TabbedContent).active = "tab-gates"
                screen.seek(early)
                await pilot.pause()
                screen.query_one(TabbedContent).active = "tab-agent"
                await pilot.pause()
            panel = screen.query_one(AgentPanel)
            shown = versions(panel.text)
            assert shown and max(shown) == early
            assert set(agent[:6]) <= set(shown)
            assert on_screen(panel, early)
            screen.seek(screen.timeline.head)
            await pilot.pause()


async def test_the_agent_tab_keeps_the_cursors_event_in_view_as_the_cursor_moves(db):
    """Stepping through the run with the Agent tab open: the tab's newest line is the
    agent's newest event at the cursor, and it is on screen, not below the fold."""
    with EventStore.open(db, readonly=True) as store:
        agent = [e.run_version for e in store.events(RUN) if e.actor == "agent"
                 and e.type in ("agent.message", "tool.requested", "tool.completed")]
    app = DeployApp(db, run_id=RUN, live=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = await replay_at(pilot, "tab-agent", agent[50])
        panel = screen.query_one(AgentPanel)
        for v in (agent[50], agent[25], agent[-1], agent[2]):
            screen.seek(v)
            await pilot.pause()
            assert max(versions(panel.text)) == v and on_screen(panel, v), v
        await pilot.press("full_stop")           # one event on, in the keys' way
        await pilot.pause()
        newest = max(a for a in agent if a <= screen.cursor)
        assert max(versions(panel.text)) == newest and on_screen(panel, newest)
