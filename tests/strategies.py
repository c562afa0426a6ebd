"""Hypothesis strategies for valid events of every type."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from npu_deploy.events import NewEvent

text = st.text(max_size=40)
ident = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-", min_size=1, max_size=12)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
small = st.integers(min_value=0, max_value=10_000)
phase = st.one_of(st.none(), st.integers(min_value=0, max_value=7))
attempt = st.one_of(st.none(), st.integers(min_value=1, max_value=5))
json_leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**53, 2**53), finite, text)
json_value = st.recursive(json_leaf, lambda inner: st.one_of(
    st.lists(inner, max_size=3), st.dictionaries(text, inner, max_size=3)), max_leaves=8)


@st.composite
def gate_check(draw):
    value, threshold = draw(finite), draw(finite)
    comparison = draw(st.sampled_from(["<=", "<", ">=", ">", "=="]))
    passed = {"<=": value <= threshold, "<": value < threshold, ">=": value >= threshold,
              ">": value > threshold, "==": value == threshold}[comparison]
    return {"subject": draw(ident), "metric": draw(ident), "value": value,
            "threshold": threshold, "comparison": comparison, "passed": passed}


@st.composite
def gate_payload(draw):
    checks = draw(st.lists(gate_check(), min_size=1, max_size=4))
    return {"gate": draw(ident), "passed": all(c["passed"] for c in checks), "checks": checks}


@st.composite
def decision_payload(draw):
    decision = draw(st.sampled_from(["approve", "redirect", "pick", "pause", "abort"]))
    return {"decision": decision, "command_id": draw(ident),
            "instruction": draw(st.text(min_size=1, max_size=20))
            if decision == "redirect" else None,
            "direction_id": draw(ident) if decision == "pick" else None}


PAYLOADS = {
    "phase.entered": st.fixed_dictionaries({"name": text}, optional={"instruction": text}),
    "phase.exited": st.fixed_dictionaries(
        {"outcome": st.sampled_from(["passed", "failed", "needs_human", "aborted"])}),
    "agent.message": st.fixed_dictionaries(
        {"role": st.sampled_from(["assistant", "user", "system"]), "text": text}),
    "model.called": st.fixed_dictionaries({
        "model": ident, "input_tokens": small, "output_tokens": small,
        "cost_usd": st.floats(min_value=0, max_value=10), "stop_reason": ident,
        "duration_s": st.floats(min_value=0, max_value=100)}),
    "tool.requested": st.fixed_dictionaries(
        {"call_id": ident, "tool": ident,
         "arguments": st.dictionaries(text, json_value, max_size=3)}),
    "tool.completed": st.fixed_dictionaries({"call_id": ident, "tool": ident, "ok": st.booleans()}),
    "gate.evaluated": gate_payload(),
    "profile.recorded": st.fixed_dictionaries({
        "scope": st.sampled_from(["prefill", "decode"]),
        "source": st.sampled_from(["measured-npu", "measured-cpu", "modeled"]),
        "total_s": st.floats(min_value=0, max_value=10)}),
    "checkpoint.requested": st.fixed_dictionaries({"checkpoint_id": ident, "summary": text}),
    "human.decision": decision_payload(),
    "debug.proposed": st.fixed_dictionaries({
        "proposal_id": ident, "symptom": text,
        "directions": st.lists(st.fixed_dictionaries({
            "direction_id": ident, "skill": ident, "title": text, "rationale": text,
            "score": st.floats(min_value=0, max_value=1)}), max_size=3)}),
    "error": st.fixed_dictionaries({"kind": ident, "message": text}),
    "run.resumed": st.fixed_dictionaries({"from_version": small, "reason": text}),
}


@st.composite
def new_event(draw):
    type_ = draw(st.sampled_from(sorted(PAYLOADS)))
    return NewEvent(type_, draw(PAYLOADS[type_]),
                    actor=draw(st.sampled_from(["agent", "harness", "human", "evaluator"])),
                    phase=draw(phase), attempt=draw(attempt))


event_lists = st.lists(new_event(), min_size=0, max_size=25)


def _as_stored(new: NewEvent) -> NewEvent:
    """An event as a writer appends it without an inbox command: a human.decision is then
    the auto-approve policy's (store/writer.py records a person's only from their command,
    and a policy's only where it decides): an approve or a pick, by "policy:...", outside
    any paused phase (the stores these go into are started with auto_approve)."""
    if new.type != "human.decision":
        return new
    payload = dict(new.payload)
    if payload["decision"] not in ("approve", "pick"):
        payload.update(decision="approve", instruction=None, direction_id=None)
    return replace(new, payload={**payload, "author": "policy:auto-approve"}, actor="harness")


#: Event lists a writer takes as they are (`_as_stored`), into a run started with
#: STORED_CONFIG.
stored_event_lists = st.lists(new_event().map(_as_stored), min_size=0, max_size=25)
STORED_CONFIG = {"auto_approve": True}
