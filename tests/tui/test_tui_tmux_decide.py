"""Deciding in a real terminal (issue 38): `npu-deploy attach` in a tmux pane (a private
socket, test_tui_tmux.Pane) on a run stopped for a person (tests/tui_runs.py stopped_run).
The keys the Decide dialog advertises act as keys, the abort asks first and says what it
ends, esc at the question writes nothing, and confirming leaves one abort in the inbox; the
run screen's own abort (the palette's "Abort the run") asks the same question."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import tui_runs
from test_tui_tmux import NPU_DEPLOY, Pane, pane_env, wait_until

from npu_deploy.store import EventStore

RUN = "stopped-p2"
KEYS = "keys: r redirect · o override · p pause · x abort · esc cancel"
#: The question, as the 72-column dialog wraps it: the run, the phase and what it ends.
ABORT_QUESTION = ("Abort run stopped-p2 at phase 2 (single block, attempt 2)?", "ABORTED",
                  "the run cannot be", "Nothing recorded", "Abort the run", "Keep it")

pytestmark = pytest.mark.slow


@pytest.fixture
def attached(tmp_path: Path) -> Iterator[tuple[Pane, Path]]:
    """The stopped run in a store of its own, attached in a tmux pane."""
    db = tmp_path / "runs.db"
    assert tui_runs.build_store(db, tui_runs.stopped_run) == [RUN]
    pane = Pane(f"npu-deploy-test-{uuid.uuid4().hex[:8]}", "decide")
    try:
        pane.start(pane_env(tmp_path))
        pane.type(f"cd {tmp_path} && {NPU_DEPLOY} attach {RUN} --db {db}")
        pane.wait_for("press d to decide", timeout=30)
        yield pane, db
    finally:
        pane.kill()


def escape(pane: Pane) -> None:
    """esc, alone: an ESC followed at once by a letter reaches the app as alt+letter."""
    pane.keys("Escape")
    time.sleep(0.3)


def inbox(db: Path) -> list[str]:
    with EventStore.open(db, readonly=True) as store:
        return [c["kind"] for c in store.pending_commands(RUN)]


def asks_to_abort(screen: str) -> bool:
    return all(part in screen for part in ABORT_QUESTION)


def test_the_stopped_runs_dialog_keys_act_and_its_abort_asks_first(attached):
    pane, db = attached
    pane.keys("d")
    pane.wait_for(KEYS)
    pane.keys("r")                                    # r: into the instruction field
    time.sleep(0.3)         # which takes the focus a message later (typed at once, the first
    pane.tmux("send-keys", "-t", pane.name, "-l", "try a smaller tile")   # letters are keys)
    pane.wait_for("try a smaller tile")
    escape(pane)                                      # out of the field, the dialog stays
    pane.keys("o")                                    # o: the override asks first
    pane.wait_for("Gate fake-2 of phase 2 FAILED")
    escape(pane)
    pane.wait_for(lambda s: KEYS in s and "Gate fake-2 of phase 2 FAILED" not in s)
    pane.keys("x")                                    # x: the abort asks what it ends
    pane.wait_for(asks_to_abort)
    escape(pane)                                      # esc keeps the run
    pane.wait_for(lambda s: KEYS in s and not asks_to_abort(s))
    assert inbox(db) == []
    pane.keys("x")
    pane.wait_for(asks_to_abort)
    pane.keys("BTab", "Enter")                        # the focus starts on "Keep it"
    wait_until(lambda: inbox(db), "the abort in the inbox")
    assert inbox(db) == ["abort"]
    pane.wait_for(lambda s: KEYS not in s and "Aborting: run stopped-p2" in s)


def test_p_pauses_and_the_run_screens_abort_asks_what_it_ends(attached):
    pane, db = attached
    pane.keys("d")
    pane.wait_for(KEYS)
    pane.keys("p")                                    # p: a pause, at once
    wait_until(lambda: inbox(db), "the pause in the inbox")
    pane.wait_for(lambda s: KEYS not in s)
    for confirm in (False, True):
        pane.keys("C-p")
        pane.wait_for("Search for commands")
        pane.tmux("send-keys", "-t", pane.name, "-l", "Abort the run")
        pane.wait_for("ends it as ABORTED")
        pane.keys("Enter")
        pane.wait_for(asks_to_abort)
        if not confirm:
            escape(pane)
            pane.wait_for(lambda s: not asks_to_abort(s) and "press d to decide" in s)
            assert inbox(db) == ["pause"]
        else:
            pane.keys("BTab", "Enter")
            wait_until(lambda: len(inbox(db)) == 2, "the abort in the inbox")
    assert inbox(db) == ["pause", "abort"]


def test_back_from_a_run_in_a_real_terminal_the_cursor_is_on_that_run(tmp_path):
    """`npu-deploy replay RUN` (not the newest run), esc: the browser opens with its cursor
    on RUN, so enter opens RUN again; before, it sat on the newest run."""
    db = tmp_path / "runs.db"
    ids = tui_runs.build_store(db, *tui_runs.ALL_RUNS)
    run = "debug-p1"
    assert ids[-1] != run                         # the browser lists the newest first
    pane = Pane(f"npu-deploy-test-{uuid.uuid4().hex[:8]}", "cursor")
    try:
        pane.start(pane_env(tmp_path))
        pane.type(f"cd {tmp_path} && {NPU_DEPLOY} replay {run} --db {db}")
        pane.wait_for(lambda s: s.lstrip().startswith(f"{run} "), timeout=30)
        escape(pane)
        pane.wait_for("5 runs")
        pane.keys("Enter")                        # the run under the cursor, opened
        pane.wait_for(lambda s: s.lstrip().startswith(f"{run} "))
    finally:
        pane.kill()
