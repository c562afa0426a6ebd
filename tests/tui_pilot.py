"""What the TUI's Pilot tests share (tests/tui/test_tui_*.py): the terminal size, a run
started by the real conductor on the fake pipeline, waiting for the TUI, and the inbox
commands the TUI left."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from npu_deploy.machine import Conductor, Policy
from npu_deploy.store import EventStore

SIZE = (150, 45)


def start(store: EventStore, pipeline, policy: Policy | None = None, run_id: str = "r1"
          ) -> Conductor:
    return Conductor.start(store, pipeline, policy or Policy(), model="tiny", run_id=run_id,
                           config={"pipeline": "fake_pipeline:make"})


async def until(pilot, cond: Callable[[], object], timeout: float = 8.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("timed out waiting for the TUI")
        await pilot.pause(0.05)


def tui_commands(store: EventStore, run_id: str) -> list[dict]:
    return [c for c in store.pending_commands(run_id) if c["author"].endswith("@tui")]
