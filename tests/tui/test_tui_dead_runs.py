"""A run nothing runs (crashed, paused) says so everywhere it shows, with the key or the
command that continues it, and nothing on it ticks; a run this window is starting is not
called crashed; the scrubber follows a live run from its first event to its last. The
real conductor on the fake pipeline, the real app under Pilot."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import tui_runs
from tui_pilot import SIZE, start, until

from npu_deploy.cli.tui import ConductorDriver
from npu_deploy.machine import Policy
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.dialogs import ResumeConfirm
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.widgets.banner import Banner
from npu_deploy.tui.widgets.event_stream import EventStream
from npu_deploy.tui.widgets.scrubber import Scrubber
from npu_deploy.tui.widgets.step_progress import StepProgress


def screen_text(app: DeployApp) -> str:
    """What the terminal shows, as text, line by line."""
    update = app.screen._compositor.render_full_update()
    return "\n".join("".join(seg.text for strip in chops for seg in strip).rstrip()
                     for chops in update.strips)


def scrubber_bands(screen: RunScreen) -> str:
    scrubber = screen.query_one(Scrubber)
    return "".join(seg.text for seg in scrubber.render_line(0))


@pytest.fixture
def crashed_db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """work-p1: crashed mid-step in phase 1 (its last tool call has no result)."""
    monkeypatch.setenv("NPU_DEPLOY_KEYMAP", str(tmp_path / "no-keymap.toml"))
    path = tmp_path / "runs.db"
    tui_runs.build_store(path, tui_runs.working_run)
    return path


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)])
async def test_a_crashed_run_says_so_and_how_to_resume_and_nothing_ticks(crashed_db, size):
    app = DeployApp(crashed_db, run_id="work-p1", live=True,
                    driver=ConductorDriver(crashed_db))
    async with app.run_test(size=size) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        banner = screen.query_one(Banner)
        await until(pilot, lambda: banner.display)
        await pilot.pause(0.3)
        text = screen_text(app)
        assert "crashed" in text and "r resumes" in text, text
        assert "npu-deploy resume work-p1" in text, text
        # its last step has no result and never will: not "running"
        stream = screen.query_one(EventStream)
        assert "running" not in "".join(s.text for s in stream.render_line(
            stream.cursor_row - stream.scroll_offset.y)), text
        assert "LIVE" not in text.splitlines()[0]
        # nothing ticks: the step line stays hidden and two frames a second apart are equal
        assert not screen.query_one(StepProgress).display
        first = screen_text(app)
        await pilot.pause(1.2)
        assert screen_text(app) == first
        # r asks to resume it here
        await pilot.press("r")
        await until(pilot, lambda: isinstance(app.screen, ResumeConfirm))
        await pilot.press("escape")
        assert app.screen is screen


async def test_a_run_this_window_starts_is_not_crashed_and_its_scrubber_follows(
        store, db_path, fake):
    """deploy in the TUI: while it loads and starts the run reads starting, never crashed;
    the scrubber shows each phase as it comes, up to the last."""
    fake()
    driver = ConductorDriver(db_path, "fake_pipeline:make",
                             Policy(auto_approve=True, pause_at=frozenset({3})), "tiny",
                             {"pipeline": "fake_pipeline:make"})
    app = DeployApp(db_path, run_id="dep", live=True, driver=driver, drive="deploy")
    seen: set[str] = set()
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        end = asyncio.get_running_loop().time() + 20
        while not screen.head_state.phases[3].pending_checkpoint:
            assert asyncio.get_running_loop().time() < end, "the run did not reach phase 3"
            seen.add(screen_text(app).splitlines()[0])
            await pilot.pause(0.02)
        assert not [line for line in seen if "crashed" in line], seen
        await pilot.pause(0.3)
        bands = scrubber_bands(screen)
        assert all(str(k) in bands for k in range(4)), bands
        await pilot.press("d")
        await pilot.press("enter")                                 # approve phase 3
        await until(pilot, lambda: screen.head_state.status == "finished", timeout=20)
        await pilot.pause(0.3)
        bands = scrubber_bands(screen)
        assert all(str(k) in bands for k in range(8)), bands


async def test_a_resumed_run_s_scrubber_reaches_its_last_phase(store, db_path, fake):
    c = start(store, fake(), Policy(auto_approve=True, pause_at=frozenset({3})))
    assert c.run(wait=False).reason == "awaiting_human"
    c.close()                                        # "crashed" while waiting at phase 3
    app = DeployApp(db_path, run_id="r1", live=True, driver=ConductorDriver(db_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        await pilot.pause(0.3)
        assert all(str(k) in scrubber_bands(screen) for k in range(4))
        await pilot.press("d")
        await pilot.press("enter")
        await until(pilot, lambda: screen.head_state.status == "finished", timeout=20)
        await pilot.pause(0.3)
        bands = scrubber_bands(screen)
        assert all(str(k) in bands for k in range(8)), bands

