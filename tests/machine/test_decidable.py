"""Every sequence of pause, resume, quit and decide leaves a run decidable (issue 25).

A run that waits for a person (stopped after its budget, or at a checkpoint) is walked
through every sequence of up to four of: `decide RUN pause`, `resume RUN --no-wait`, the TUI's
quit (it leaves a pause in the inbox, as `DeployApp.on_unmount` does) and `decide` of what the
run waits for. After each step the folded run has a state in the machine, and a person can
still answer it: it ended, a decision about a phase is open, one waits in the inbox, or one
is recorded and the next resume acts on it. Sequences that reach the same situation are
walked once (the situation is the key of `_situation`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from npu_deploy.events import DeploymentState
from npu_deploy.events.decisions import open_decisions, queued
from npu_deploy.machine import Conductor, Policy
from npu_deploy.machine.machine import state_of
from npu_deploy.store import EventStore

ACTIONS = ("pause", "resume", "quit", "decide")


def _copy(src: Path, dst: Path) -> None:
    """A store file as it is now (the SQLite backup API: the WAL included)."""
    dst.parent.mkdir(parents=True)
    with sqlite3.connect(src) as a, sqlite3.connect(dst) as b:
        a.backup(b)
    b.close()
    a.close()


def _decidable(s: DeploymentState, inbox: list[dict]) -> bool:
    k = s.current_phase
    recorded = (k is not None and s.phases[k].decision is not None
                and s.status in ("paused", "needs_human"))
    return (s.terminal or open_decisions(s).decides_a_phase or queued(inbox) is not None
            or recorded)


def _situation(db: Path) -> tuple:
    with EventStore.open(db, readonly=True) as store:
        s = store.fold("r1")
        inbox = tuple(c["kind"] for c in store.pending_commands("r1"))
    k = s.current_phase
    ph = s.phases[k] if k is not None else None
    return (state_of(s), s.status, k, ph and ph.status, ph and ph.decision, inbox)


def _step(cli, db: Path, action: str) -> None:
    if action == "pause":
        result = cli("--db", db, "decide", "r1", "pause")
    elif action == "resume":
        result = cli("--db", db, "resume", "r1", "--no-wait")
    elif action == "quit":
        with EventStore.open(db) as store:
            store.post_command("r1", "pause", author="ada@tui")
        return
    else:
        with EventStore.open(db, readonly=True) as store:
            legal = open_decisions(store.fold("r1"))
        if legal.allows("approve"):
            result = cli("--db", db, "decide", "r1", "approve")
        else:
            result = cli("--db", db, "decide", "r1", "redirect", "fix it")
    # every answer is a result or a one-line error, never a traceback (the cli fixture raises)
    if result.exit_code not in (0, 3):
        assert len(result.stderr.splitlines()) == 1, result.stderr


@pytest.mark.parametrize("depth", [2, pytest.param(4, marks=pytest.mark.slow)])
@pytest.mark.parametrize("start", ["stopped", "checkpoint"])
def test_every_sequence_of_pause_resume_quit_and_decide_leaves_the_run_decidable(
        cli, tmp_path, monkeypatch, start, depth):
    monkeypatch.setenv("FAKE_FAIL", "1:99" if start == "stopped" else "")
    from fake_pipeline import make

    root = tmp_path / "root" / "runs.db"
    root.parent.mkdir()
    policy = Policy(auto_approve=True, budget=1) if start == "stopped" else Policy()
    with EventStore.open(root) as store:
        c = Conductor.start(store, make(), policy, model="tiny", run_id="r1",
                            config={"pipeline": "fake_pipeline:make"})
        halt = c.run(wait=False)
        c.close()
    assert halt.reason == ("needs_human" if start == "stopped" else "awaiting_human")

    seen = {_situation(root)}
    frontier = [(root, ())]
    reached = [root]
    walked = 0
    for _ in range(depth):
        following = []
        for db, path in frontier:
            for action in ACTIONS:
                walked += 1
                here = tmp_path / f"n{walked}" / "runs.db"
                _copy(db, here)
                _step(cli, here, action)
                with EventStore.open(here, readonly=True) as store:
                    s = store.fold("r1")
                    inbox = store.pending_commands("r1")
                state_of(s)        # the machine has a state for it (raises otherwise)
                assert _decidable(s, inbox), (path + (action,), s.status)
                key = _situation(here)
                if key not in seen:
                    seen.add(key)
                    following.append((here, path + (action,)))
                    reached.append(here)
        frontier = following
    # and every situation reached, resumed and then answered, moves on and stays decidable
    for db in reached:
        for action in ("resume", "decide", "resume"):
            _step(cli, db, action)
            with EventStore.open(db, readonly=True) as store:
                s = store.fold("r1")
                assert _decidable(s, store.pending_commands("r1")), (db, action, s.status)
    assert len(reached) > 5, len(reached)
