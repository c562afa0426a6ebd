"""What an event says (events/describe.py): one summary for every surface, styled parts as
spans with roles (never markup), the aside and the detail lines the wide surfaces add."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import new_event

from npu_deploy.events import GENESIS_HASH, NewEvent, describe
from npu_deploy.events.describe import EventView, check_text, gate_figures, plain, view
from npu_deploy.store.writer import prepare

CHECKS = [{"subject": "L0 block output", "metric": "cosine", "value": 0.9812, "threshold": 0.99,
           "comparison": ">=", "passed": False, "gating": True},
          {"subject": "L0 block output", "metric": "rel_l2", "value": 0.2, "threshold": 0.05,
           "comparison": "<=", "passed": False, "gating": False}]


def sealed(type_: str, payload: dict, **envelope) -> object:
    return prepare(NewEvent(type_, payload, **envelope), run_id="r1", run_version=1,
                   prev_hash=GENESIS_HASH)


def test_a_failed_gate_says_which_checks_failed_and_shows_them_under_it():
    v = view(sealed("gate.evaluated", {"gate": "phase2.block", "passed": False,
                                       "checks": CHECKS}, phase=2))
    assert (v.glyph, v.tone) == ("⊨", "fail")
    assert v.summary == (("phase2.block: ", ""), ("FAIL (1 of 2 checks)", "fail"))
    assert plain(v.summary) == describe(sealed("gate.evaluated", {
        "gate": "phase2.block", "passed": False, "checks": CHECKS}))
    assert [plain(line) for line in v.details] == [
        "BAD L0 block output/cosine = 0.9812 (needs >= 0.99)",
        "BAD L0 block output/rel_l2 = 0.2 (needs <= 0.05)"]
    assert check_text(CHECKS[0]) == "L0 block output/cosine = 0.9812 (needs >= 0.99)"


def test_a_gate_value_just_short_of_its_threshold_never_reads_as_the_threshold():
    # issue 25: one element out of tolerance read "1 (needs >= 1)"; here 1 of 131072
    near = {"subject": "flash_attention", "metric": "within_frac", "value": 1 - 1 / 131072,
            "threshold": 1.0, "comparison": ">=", "passed": False}
    assert check_text(near) == "flash_attention/within_frac = 0.99999 (needs >= 1)"
    assert gate_figures(0.99996, 1.0) == ("0.99996", "1")
    assert gate_figures(0.98996, 0.99) == ("0.98996", "0.99")
    assert gate_figures(32, 32) == ("32", "32") and gate_figures(0.9812, 0.99)[0] == "0.9812"
    assert gate_figures(1.0, 1.0 - 2 ** -52) != ("1", "1")


@given(st.floats(allow_nan=False, width=64), st.floats(allow_nan=False, width=64))
def test_gate_figures_differ_whenever_the_numbers_do(value, threshold):
    shown, wanted = gate_figures(value, threshold)
    assert shown != wanted or value == threshold
    assert math.isclose(float(shown), value, rel_tol=1e-3) or not math.isfinite(value)


def test_a_decision_keeps_a_persons_words_as_data_and_says_who_decided():
    instruction = "[bold]use[/] smaller tiles [/]"
    v = view(sealed("human.decision", {"decision": "redirect", "command_id": "c1",
                                       "author": "ada@tui", "instruction": instruction},
                    actor="human", phase=0))
    assert v.summary == (("redirect", "strong"), (" ", ""), (instruction, ""))
    assert (v.tone, v.aside) == ("human", "by ada@tui")
    override = view(sealed("human.decision", {"decision": "approve", "command_id": "c2",
                                              "override": True}, actor="human", phase=0))
    assert plain(override.summary) == "approve OVERRIDING THE FAILED GATE"
    assert ("OVERRIDING THE FAILED GATE", "fail") in override.summary


def test_a_retry_says_its_attempt_its_direction_and_its_instruction():
    v = view(sealed("phase.entered", {"name": "single block", "instruction": "look at RoPE",
                                      "debug_direction": "silent-gemm-corruption"},
                    phase=2, attempt=3))
    assert (v.summary, v.aside) == ((("single block", "strong"),), "attempt 3")
    assert [plain(line) for line in v.details] == [
        "following debug direction silent-gemm-corruption",
        "a person's instruction: look at RoPE"]


def test_describe_is_one_line_of_at_most_its_width():
    e = sealed("agent.message", {"role": "assistant", "text": "line one\nline two " + "x" * 80})
    assert describe(e) == "line one line two " + "x" * 80     # the agent's words, as said
    assert describe(e, 20) == "line one line two x…" and len(describe(e, 20)) == 20
    user = sealed("agent.message", {"role": "user", "text": "look at RoPE"})
    assert describe(user) == "user: look at RoPE"                  # another role is named


def test_a_tool_call_says_what_it_is_about_not_the_conductors_bookkeeping():
    e = sealed("tool.requested", {"call_id": "p1.a1.c7", "tool": "validate_kernel", "arguments": {
        "backend": True, "idempotent": True, "kernel": "silu_mul rows=128 width=1536", "seed": 0}})
    assert describe(e) == "validate_kernel silu_mul rows=128 width=1536 seed=0"
    e = sealed("tool.requested", {"call_id": "c", "tool": "profile", "arguments": {
        "mode": "decode p=128", "transforms": ["reuse_buffers", "merge_dispatches"],
        "overrides": {}}})
    assert describe(e) == "profile decode p=128 transforms=reuse_buffers,merge_dispatches " \
        "overrides={}"


@settings(max_examples=200, deadline=None)
@given(new_event())
def test_every_event_has_a_view_and_its_summary_is_what_describe_says(new):
    e = prepare(new, run_id="r1", run_version=1, prev_hash=GENESIS_HASH)
    v = view(e)
    assert isinstance(v, EventView) and v.glyph and v.tone
    assert describe(e, 10_000) == " ".join(plain(v.summary).split())
