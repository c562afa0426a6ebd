"""A phase's time splits into the agent's, the backend's, a person's waiting and pauses,
folded from the log's timestamps (issue 25 point 7): replay gives the same figures, and a
phase's own time (its speed) is never charged with a person's waiting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from npu_deploy.events import GENESIS_HASH, NewEvent, fold
from npu_deploy.events.describe import view
from npu_deploy.store.writer import prepare

T0 = datetime(2026, 1, 1, tzinfo=UTC)
GATE = {"gate": "kernels", "passed": True, "checks": [
    {"subject": "gemm", "metric": "max_abs", "value": 0.01, "threshold": 0.1,
     "comparison": "<=", "passed": True}]}


def timed(steps: list[tuple[float, NewEvent]]) -> list:
    """Seal the events at the given seconds after T0, as the store would have."""
    started = NewEvent("run.started", {"model": "m", "backend": "emulator",
                                       "agent": "autopilot", "code_version": "t"})
    out, prev = [], GENESIS_HASH
    for version, (at, new) in enumerate([(0.0, started), *steps], 1):
        ts = (T0 + timedelta(seconds=at)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        event = prepare(new, run_id="r1", run_version=version, prev_hash=prev, ts=ts)
        out.append(event)
        prev = event.hash
    return out


def p1(type_: str, payload: dict, attempt: int = 1) -> NewEvent:
    return NewEvent(type_, payload, phase=1, attempt=attempt)


def decision(kind: str, **fields) -> NewEvent:
    return NewEvent("human.decision", {"decision": kind, "command_id": f"c-{kind}",
                                       "author": "ada", **fields}, actor="human", phase=1,
                    attempt=1)


def test_a_checkpoint_wait_and_a_pause_are_the_persons_not_the_phases():
    events = timed([
        (1.0, p1("phase.entered", {"name": "kernel validation"})),
        (4.0, p1("gate.evaluated", GATE)),
        (5.0, p1("checkpoint.requested", {"checkpoint_id": "p1.a1", "summary": "ok"})),
        (65.0, decision("pause")),                           # 60 s waiting, then a pause
        (365.0, NewEvent("run.resumed", {"from_version": 5, "reason": "paused"})),
        (385.0, decision("approve", checkpoint_id="p1.a1")),  # 20 s more waiting
        (386.0, p1("phase.exited", {"outcome": "passed", "reason": "approved",
                                    "agent_s": 1.0, "backend_s": 3.0})),
    ])
    ph = fold(events).phases[1]
    assert ph.wall_time_s == 385.0
    assert ph.waiting_time_s == 80.0 and ph.paused_time_s == 300.0
    assert (ph.agent_time_s, ph.backend_time_s) == (1.0, 3.0)
    assert ph.work_time_s == 5.0               # the phase's speed: 385 s less 380 s of people
    assert fold(events[:4]).phases[1].waiting_since is not None   # replay: still waiting
    assert fold(events[:5]).phases[1].waiting_time_s == 60.0       # paused: the wait stops


def test_a_stop_for_a_person_counts_until_the_redirect_and_joins_the_phase_wall():
    failed = {**GATE, "passed": False,
              "checks": [{**GATE["checks"][0], "value": 0.5, "passed": False}]}
    events = timed([
        (0.0, p1("phase.entered", {"name": "kernel validation"})),
        (2.0, p1("gate.evaluated", failed)),
        (3.0, p1("phase.exited", {"outcome": "needs_human", "reason": "budget spent",
                                  "agent_s": 0.5, "backend_s": 1.5})),
        (603.0, decision("redirect", instruction="use tile_n 64")),    # ten minutes later
        (604.0, p1("phase.entered", {"name": "kernel validation",
                                     "instruction": "use tile_n 64"}, attempt=2)),
        (607.0, p1("phase.exited", {"outcome": "passed", "reason": "approved",
                                    "agent_s": 1.0, "backend_s": 3.5}, attempt=2)),
    ])
    ph = fold(events).phases[1]
    assert ph.wall_time_s == 607.0 and ph.waiting_time_s == 600.0
    assert ph.work_time_s == 7.0
    # the conductor's figures are the phase's so far: a second exit replaces, never adds
    assert (ph.agent_time_s, ph.backend_time_s) == (1.0, 3.5)


def test_the_exit_line_shows_the_four_parts():
    exited = timed([(9.0, p1("phase.exited", {
        "outcome": "passed", "reason": "approved", "wall_s": 30.0, "agent_s": 0.3,
        "backend_s": 9.7, "waiting_s": 20.0, "paused_s": 0.0}))])[-1]
    assert view(exited).aside == ("wall 30.0 s: agent 0.3 s, backend 9.7 s, "
                                  "waiting 20.0 s, paused 0.0 s")
