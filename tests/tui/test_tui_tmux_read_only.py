"""A read-only store in a real terminal (issue 39): `npu-deploy tui` and `npu-deploy replay
RUN` in a tmux pane (a private socket, test_tui_tmux.Pane) on a store on a read-only bind
mount open as viewers, say the store is read-only and why, refuse a writing key in one
notice, and leave nothing beside the store. The Pilot tour of every key is
tests/redteam/test_tui_read_only.py."""

from __future__ import annotations

import uuid
from pathlib import Path

import tui_runs
from cli_stores import checkpoint
from redteam.test_media import listing, needs_root, read_only_view
from test_tui_tmux import NPU_DEPLOY, Pane, pane_env

RUN = "stopped-p2"
WHY = "read-only: it is on a read-only file system"


@needs_root
def test_tui_and_replay_open_a_store_on_a_read_only_mount_as_viewers(tmp_path: Path):
    source = tmp_path / "source"
    source.mkdir()
    assert tui_runs.build_store(source / "runs.db", tui_runs.stopped_run) == [RUN]
    checkpoint(source / "runs.db")
    before = listing(source)
    pane = Pane(f"npu-deploy-test-{uuid.uuid4().hex[:8]}", "read-only")
    with read_only_view(source, tmp_path / "ro") as view:
        db = view / "runs.db"
        try:
            pane.start(pane_env(tmp_path))
            pane.type(f"cd {tmp_path} && {NPU_DEPLOY} tui --db {db}")
            screen = pane.wait_for(WHY, timeout=30)           # the browser's title line
            assert "1 runs" in screen and RUN in screen
            pane.keys("n")
            pane.wait_for("cannot start a new deployment")
            pane.keys("q")
            pane.wait_for(lambda s: WHY not in s)               # back in the shell
            pane.type(f"{NPU_DEPLOY} replay {RUN[:7]} --db {db}")
            screen = pane.wait_for("deciding needs a writable copy", timeout=30)
            assert WHY in screen and "REPLAY" in screen
            pane.keys("P")
            pane.wait_for(f"cannot pause run {RUN}")
            pane.keys("q")
            screen = pane.wait_for(lambda s: WHY not in s)
            assert "error" not in screen.lower(), screen
        finally:
            pane.kill()
        assert listing(view) == before
    assert listing(source) == before
