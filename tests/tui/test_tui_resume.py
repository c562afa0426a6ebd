"""Resuming from the TUI's run browser goes through the command line's resume
(deploy_request.resume_run): a run it refuses (Claude's without ANTHROPIC_API_KEY, an xrt
run without the NPU) is refused in the window with the line `npu-deploy resume` prints, and
nothing is stored."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from conftest import assert_one_error

from npu_deploy.cli.tui import ConductorDriver
from npu_deploy.deploy_request import CLAUDE_PIPELINE
from npu_deploy.events.describe import printable
from npu_deploy.machine import Conductor, Policy
from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.dialogs import ResumeConfirm

SIZE = (150, 45)


async def until(pilot: Any, cond: Callable[[], object], timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("timed out waiting for the TUI")
        await pilot.pause(0.05)


@pytest.mark.parametrize("config", [
    {"pipeline": CLAUDE_PIPELINE},
    {"pipeline": "fake_pipeline:make", "backend": "xrt", "air_objects": "/nonexistent"},
], ids=["claude-without-its-key", "xrt-without-an-npu"])
async def test_a_refused_resume_in_the_browser_says_the_clis_line_and_stores_nothing(
        cli, store, db_path, fake, monkeypatch, config):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    c = Conductor.start(store, fake(), Policy(), model="tiny", run_id="r1",
                        backend=config.get("backend", "emulator"), config=config)
    c.close()                                          # as after a crash
    before = [e.hash for e in store.events("r1")]
    line = assert_one_error(cli("--db", db_path, "resume", "r1",
                                env={"ANTHROPIC_API_KEY": None}))
    app = DeployApp(db_path, driver=ConductorDriver(db_path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        assert isinstance(app.screen, ResumeConfirm)
        await pilot.click("#yes")
        await until(pilot, lambda: app.conducting.get("r1") is not None
                    and app.conducting["r1"].is_set() and not app.driving)
        await pilot.pause(0.1)
        notices = [(n.message, n.severity) for n in app._notifications]
    # the same line, as the window shows every notice (long ones cut: npu_tui/app.py notify)
    assert (printable(line), "error") in notices, notices
    with EventStore.open(db_path, readonly=True) as s:
        assert [e.hash for e in s.events("r1")] == before
