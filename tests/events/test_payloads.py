"""Typed payloads as values: a writer builds the event type's class, a reader gets it back,
and what is stored is the same JSON object a hand-built dict of the same fields gave."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import PAYLOADS

from npu_deploy.events import InvalidEvent, NewEvent, canonical_json, validate_payload
from npu_deploy.events.payloads import (
    EVENT_TYPES,
    DebugDirection,
    DebugProposed,
    GateCheck,
    GateEvaluated,
    HumanDecision,
    PhaseEntered,
    PhaseExited,
    ProfileEntry,
    ProfileRecorded,
    RunStarted,
    ToolCompleted,
    payload_class,
)
from npu_deploy.machine import Conductor, PhaseRun, Policy

typed_payloads = st.sampled_from(sorted(PAYLOADS)).flatmap(
    lambda name: st.tuples(st.just(name), PAYLOADS[name]))


@given(typed_payloads)
def test_a_payload_value_stores_exactly_what_its_checked_dict_stores(named):
    type_name, data = named
    checked = validate_payload(type_name, data)
    value = payload_class(type_name).from_dict(data)
    assert value.event_type == type_name
    assert canonical_json(value.to_dict()) == canonical_json(checked)
    assert payload_class(type_name).from_dict(value.to_dict()) == value


def test_every_event_type_has_its_payload_class():
    for name, (cls, _) in EVENT_TYPES.items():
        assert payload_class(name) is cls and cls.event_type == name
    with pytest.raises(InvalidEvent, match="unknown event type 'phase.skipped'"):
        payload_class("phase.skipped")


def test_nested_values_are_built_and_stored_as_objects():
    gate = GateEvaluated(gate="g", passed=True, checks=[
        GateCheck(subject="L0", metric="cosine", value=1.0, threshold=0.99, comparison=">=",
                  passed=True)])
    new = NewEvent.of(gate, phase=2, attempt=1, idempotency_key="p2.a1.gate.result")
    assert (new.type, new.phase, new.attempt, new.actor) == ("gate.evaluated", 2, 1, "harness")
    assert new.payload == {"gate": "g", "passed": True, "inputs": None, "checks": [
        {"subject": "L0", "metric": "cosine", "value": 1.0, "threshold": 0.99,
         "comparison": ">=", "passed": True, "gating": True, "message": ""}]}
    assert GateEvaluated.from_dict(new.payload) == gate
    proposed = DebugProposed.from_dict({"proposal_id": "p1.a1", "symptom": "s", "directions": [
        {"direction_id": "d", "skill": "k", "title": "t", "rationale": "r", "score": 1}]})
    assert proposed.directions == [DebugDirection("d", "k", "t", "r", 1.0)]
    profile = ProfileRecorded.from_dict({"scope": "decode", "source": "modeled", "total_s": 1,
                                         "entries": [{"name": "gemv", "seconds": 1}]})
    assert profile.entries == [ProfileEntry("gemv", 1.0)]


def test_from_dict_checks_as_an_append_does_naming_the_field():
    with pytest.raises(InvalidEvent, match="phase.exited.outcome: 'won' is not one of"):
        PhaseExited.from_dict({"outcome": "won"})
    with pytest.raises(InvalidEvent, match="human.decision.instruction: a redirect needs"):
        HumanDecision.from_dict({"decision": "redirect", "command_id": "c1"})
    with pytest.raises(InvalidEvent, match="gate.evaluated.passed: true although L0/cosine"):
        GateEvaluated.from_dict({"gate": "g", "passed": True, "checks": [
            {"subject": "L0", "metric": "cosine", "value": 0.5, "threshold": 0.99,
             "comparison": ">=", "passed": False}]})


def test_a_stored_event_reads_back_as_its_value(store):
    with store.create_run(RunStarted(model="m", backend="emulator", agent="a",
                                     code_version="t")) as w:
        event = w.append(NewEvent.of(ToolCompleted(call_id="p0.a1.s1", tool="t", ok=True,
                                                   result={"x": [1, 2]}, duration_s=2),
                                     phase=0, attempt=1, idempotency_key="p0.a1.s1.done"))
        first = store.event_at(w.run_id, 1)
    assert first is not None and first.typed(RunStarted).model == "m"
    done = event.typed(ToolCompleted)
    assert (done.ok, done.result, done.duration_s) == (True, {"x": [1, 2]}, 2.0)
    with pytest.raises(TypeError, match="is a tool.completed, not a phase.entered"):
        event.typed(PhaseEntered)


def test_an_agent_records_only_facts_and_model_calls(store, fake):
    c = Conductor.start(store, fake(), Policy(), model="tiny")
    c._enter(0)
    run = PhaseRun(c, 0, 1)
    with pytest.raises(ValueError, match="an agent records profile.recorded, .* not phase"):
        run.record(PhaseEntered(name="build CPU oracle"))
    with pytest.raises(ValueError, match="a model call records model.called or error"):
        run.exchange(lambda: PhaseExited(outcome="passed"))  # type: ignore[arg-type,return-value]
    c.close()
