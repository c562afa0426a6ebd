"""The vocabulary: validation names the field, ids sort by time, the fold is pure."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from strategies import event_lists

from npu_deploy.events import (
    GENESIS_HASH,
    DeploymentState,
    InvalidEvent,
    NewEvent,
    canonical_json,
    describe,
    fold,
    upcast,
    uuid7,
    validate_payload,
)
from npu_deploy.events.state import fold_slowly
from npu_deploy.store.writer import prepare


def seal_all(news: list[NewEvent], run_id: str = "r1") -> list:
    started = NewEvent("run.started", {"model": "m", "backend": "emulator", "agent": "autopilot",
                                       "code_version": "t"})
    out, prev = [], GENESIS_HASH
    for version, new in enumerate([started, *news], 1):
        event = prepare(new, run_id=run_id, run_version=version, prev_hash=prev)
        out.append(event)
        prev = event.hash
    return out


CHECK: dict[str, Any] = {"subject": "gemm_q", "metric": "max_abs", "value": 0.5,
                         "threshold": 0.1, "comparison": "<=", "passed": False}
GATE: dict[str, Any] = {"gate": "kernel", "passed": False, "checks": [CHECK]}


@pytest.mark.parametrize("type_,payload,field", [
    ("gate.evaluated", {**GATE, "checks": [{**CHECK, "value": "big"}]},
     "gate.evaluated.checks[0].value"),
    ("gate.evaluated", {k: v for k, v in GATE.items() if k != "passed"}, "gate.evaluated.passed"),
    ("gate.evaluated", {**GATE, "passed": True}, "gate.evaluated.passed"),
    ("gate.evaluated", {**GATE, "checks": [{**CHECK, "passed": True}]},
     "gemm_q/max_abs"),
    ("agent.message", {"role": "robot", "text": "x"}, "agent.message.role"),
    ("agent.message", {"role": "assistant", "text": "x", "mood": "ok"}, "agent.message.mood"),
    ("agent.message", {"role": "assistant", "text": "x", 7: "ok", "zz": 1}, "agent.message.7"),
    ("model.called", {"model": "c", "input_tokens": True, "output_tokens": 1, "cost_usd": 0.0,
                      "stop_reason": "end_turn", "duration_s": 1.0}, "model.called.input_tokens"),
    ("profile.recorded", {"scope": "prefill", "source": "measured-npu", "total_s": float("nan")},
     "profile.recorded.total_s"),
    ("profile.recorded", {"scope": "prefill", "source": "guessed", "total_s": 1.0},
     "profile.recorded.source"),
    ("profile.recorded", {"scope": "prefill", "source": "measured-npu", "total_s": 1.0,
                          "runs": [1.0, float("nan")]}, "profile.recorded.runs[1]"),
    ("human.decision", {"decision": "redirect", "command_id": "c1"},
     "human.decision.instruction"),
    ("tool.requested", {"call_id": "1", "tool": "t", "arguments": {"x": float("inf")}},
     "tool.requested.arguments.x"),
    ("run.finished", {"verdict": "PASS", "summary": "", "report": "not-a-hash"},
     "run.finished.report"),
    ("no.such.type", {}, "unknown event type"),
])
def test_a_malformed_payload_is_refused_naming_the_field(type_, payload, field):
    with pytest.raises(InvalidEvent, match=field.replace("[", r"\[").replace("]", r"\]")):
        validate_payload(type_, payload)


@pytest.mark.parametrize("changes,field", [
    ({"actor": "robot"}, "actor"), ({"phase": 8}, "phase"), ({"attempt": 0}, "attempt"),
    ({"phase": 2.0}, "phase"), ({"phase": True}, "phase"), ({"attempt": 1.0}, "attempt"),
    ({"causation_id": "a\nb"}, "causation_id"),
    ({"idempotency_key": ""}, "idempotency_key"),
])
def test_a_malformed_envelope_is_refused_naming_the_field(changes, field):
    new = NewEvent("agent.message", {"role": "assistant", "text": "x"}, **changes)
    with pytest.raises(InvalidEvent, match=f"^{field}"):
        prepare(new, run_id="r", run_version=1, prev_hash=GENESIS_HASH)


def test_validation_fills_defaults_so_stored_payloads_are_complete():
    payload = validate_payload("phase.entered", {"name": "build CPU oracle"})
    assert payload == {"name": "build CPU oracle", "instruction": None, "debug_direction": None}


def test_canonical_json_is_independent_of_key_order_and_ascii():
    assert canonical_json({"b": 1, "a": "é"}) == canonical_json({"a": "é", "b": 1}) == \
        '{"a":"\\u00e9","b":1}'


def test_uuid7_ids_are_version_7_and_sort_in_creation_order():
    ids = [uuid7() for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)
    assert {uuid.UUID(i).version for i in ids} == {7}


def test_the_hash_chain_links_every_event_to_the_previous_one():
    events = seal_all([NewEvent("agent.message", {"role": "assistant", "text": str(i)})
                       for i in range(5)])
    assert events[0].prev_hash == GENESIS_HASH
    for before, after in zip(events, events[1:], strict=False):
        assert after.prev_hash == before.hash
        assert after.computed_hash() == after.hash


def test_upcaster_brings_model_called_v1_to_the_current_form():
    v1 = {"model": "claude", "input_tokens": 10, "output_tokens": 5, "cost_usd": 0.01,
          "stop_reason": "end_turn", "duration_s": 1.5}
    current = upcast("model.called", 1, v1)
    assert current["cache_read_tokens"] == 0 and current["cache_write_tokens"] == 0
    assert validate_payload("model.called", current) == current


def test_fold_follows_a_phase_through_failure_debug_pick_pass_and_approval():
    def at(type_, payload, actor="harness"):
        return NewEvent(type_, payload, actor=actor, phase=1, attempt=1)
    passed_gate = {**GATE, "passed": True, "checks": [
        {**CHECK, "value": 0.01, "passed": True}]}
    events = seal_all([
        at("phase.entered", {"name": "kernel validation"}),
        at("model.called", {"model": "c", "input_tokens": 100, "output_tokens": 20,
                            "cost_usd": 0.5, "stop_reason": "end_turn", "duration_s": 1.0},
           actor="agent"),
        at("gate.evaluated", GATE),
        at("debug.proposed", {"proposal_id": "p1", "symptom": "cosine ~0.02 on one GEMM",
                              "directions": [{"direction_id": "d1", "skill": "tile-divisibility",
                                              "title": "smaller tile_n", "rationale": "N % 128",
                                              "score": 0.9}]}),
        at("human.decision", {"decision": "pick", "command_id": "c1", "direction_id": "d1",
                              "proposal_id": "p1"}, actor="human"),
        at("gate.evaluated", passed_gate),
        at("checkpoint.requested", {"checkpoint_id": "k1", "summary": "kernels pass"}),
    ])
    state = fold(events)
    phase = state.phases[1]
    assert (state.status, phase.status, phase.pending_checkpoint) == \
        ("running", "awaiting_human", "k1")
    assert phase.debug_direction == "d1" and phase.pending_directions == ()
    assert [g.passed for g in phase.gates] == [False, True]
    assert (state.totals.input_tokens, state.totals.cost_usd) == (100, 0.5)
    approve = seal_all([NewEvent("human.decision", {"decision": "approve", "command_id": "c2",
                                                    "checkpoint_id": "k1"},
                                 actor="human", phase=1)])[1]
    assert fold([approve], state).phases[1].pending_checkpoint is None
    assert "FAIL (1 of 1 checks)" in describe(events[3])


@settings(max_examples=150, deadline=None)
@given(event_lists)
def test_fold_is_deterministic_and_resumable_from_any_point(news):
    events = seal_all(news)
    whole = fold(events)
    assert fold(events) == whole == fold_slowly(events)
    for cut in (0, len(events) // 2, len(events)):
        assert fold(events[cut:], fold(events[:cut])) == whole
    # Snapshots store the state as canonical JSON: it must come back equal.
    assert DeploymentState.from_dict(json.loads(canonical_json(whole.to_dict()))) == whole
    assert whole.version == len(events) and whole.last_hash == events[-1].hash


def test_every_event_type_the_system_needs_is_defined():
    from npu_deploy.events import EVENT_TYPES
    assert set(EVENT_TYPES) == {
        "run.started", "run.resumed", "run.forked", "run.finished", "phase.entered",
        "phase.exited", "agent.message", "model.called", "tool.requested", "tool.completed",
        "tool.abandoned", "gate.evaluated", "profile.recorded", "checkpoint.requested",
        "human.decision", "debug.proposed", "skill.loaded", "lesson.recorded",
        "lesson.approved", "experience.recorded", "error"}


def test_a_forked_process_does_not_repeat_its_parents_event_ids():
    import os

    uuid7()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:   # child: report its next ids, then leave without running pytest's atexit
        os.write(write, ",".join(uuid7() for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    parent = {uuid7() for _ in range(50)}
    with os.fdopen(read) as f:
        child = set(f.read().split(","))
    os.waitpid(pid, 0)
    # Ids made in the same millisecond share their leading bits; the random tail differs.
    assert not parent & child and len(child) == 50
    assert not {i[-12:] for i in parent} & {i[-12:] for i in child}
