"""A person's redirect acts on the autopilot: the instructions it understands
(agents/instructions.py) change the next attempt and say so in an event that answers the
decision; text it cannot follow is refused with what it can do, and the wait stays open."""

from __future__ import annotations

import pytest

from npu_deploy.agents.autopilot import pipeline
from npu_deploy.agents.instructions import INSTRUCTIONS, parse
from npu_deploy.events.decisions import waiting_on
from npu_deploy.machine import Conductor, Policy
from npu_deploy.store import EventStore

FAST = {"seq_len": 32, "steps": 8}


@pytest.mark.parametrize("form,example,phases", INSTRUCTIONS)
def test_every_documented_example_parses_for_its_phases_only(form, example, phases):
    for phase in range(8):
        got = parse(example, phase)
        assert isinstance(got, str) != (phase in phases), (example, phase, got)


def test_what_the_autopilot_cannot_follow_is_answered_with_what_it_can():
    why = parse("make it faster please", 1)
    assert isinstance(why, str) and "does not understand" in why
    assert all(form in why for form, _, _ in INSTRUCTIONS)
    assert "transforms:" in parse("skip transform nope", 4)
    assert "tunables:" in parse("use tile_q 64 for q_proj", 1)


def _at_phase1_checkpoint(db, tmp_path) -> tuple[EventStore, Conductor]:
    store = EventStore.open(db)
    c = Conductor.start(store, pipeline(), Policy(auto_approve=True,
                                                  pause_at=frozenset({1})),
                        model="tiny-llama", config=FAST, run_id="r1")
    assert c.run(wait=False).reason == "awaiting_human"
    assert c.state.current_phase == 1
    return store, c


@pytest.mark.slow
def test_a_redirect_the_autopilot_understands_changes_the_next_attempt(tmp_path):
    store, c = _at_phase1_checkpoint(tmp_path / "runs.db", tmp_path)
    try:
        # refused: the checkpoint stays open, and the answer lists what it can do
        store.post_command("r1", "redirect", {"instruction": "make the kernels better",
                                              "checkpoint_id": "p1.a1"})
        assert c.run(wait=False).reason == "awaiting_human"
        assert waiting_on(c.state).id == "p1.a1"
        refused = [e for e in store.events("r1") if e.type == "error"][-1]
        assert refused.payload["kind"] == "instruction_not_understood"
        assert "use TUNABLE VALUE for KERNEL" in refused.payload["message"]
        # understood: the next attempt validates with the person's tile_n
        store.post_command("r1", "redirect", {"instruction": "use tile_n 64 for q_proj",
                                              "checkpoint_id": "p1.a1"})
        halt = c.run(wait=False)
    finally:
        c.close()
    events = list(store.events("r1"))
    (decision,) = [e for e in events if e.type == "human.decision" and e.actor == "human"]
    answers = [e for e in events if e.causation_id == decision.event_id]
    assert answers and "tile_n = 64" in answers[0].payload["text"]
    selected = [e for e in events if e.type == "tool.requested"
                and e.payload["tool"] == "select_tiles" and e.attempt == 2]
    overrides = selected[0].payload["arguments"]["overrides"]
    assert overrides and all(v == {"tile_n": 64} for v in overrides.values())
    assert all("q_proj" in k or "gemm" in k for k in overrides)
    # tile_n 64 does not divide tiny-llama's q_proj (N 128 over 4 columns): attempt 2 fails,
    # the policy picks the direction that changes that configuration, and attempt 3 takes
    # the change over the person's earlier setting (the later decision wins) and passes
    gates = [e for e in events if e.type == "gate.evaluated" and e.phase == 1]
    assert [g.payload["passed"] for g in gates] == [True, False, True]
    retry = [e for e in events if e.type == "tool.requested"
             and e.payload["tool"] == "select_tiles" and e.attempt == 3]
    assert all(v.get("tile_n") != 64 for v in retry[0].payload["arguments"]["overrides"].values())
    assert halt.reason == "awaiting_human" and waiting_on(store.fold("r1")).id == "p1.a3"
    store.close()
