"""Idempotency keys and call ids: one type spells them exactly as stored runs have them,
reads back every key a deployment writes, and is the only place that builds them."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from fake_pipeline import FakeAgent, make
from hypothesis import given
from hypothesis import strategies as st
from paths import ROOT

from npu_deploy.events.keys import (
    FACT,
    MESSAGE,
    MODEL_CALL,
    RUN_FINISHED,
    RUN_START,
    STEP,
    AttemptKey,
    capture_keys,
)
from npu_deploy.events.payloads import ModelCalled, SkillLoaded
from npu_deploy.machine import Conductor, Policy

part = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_-", min_size=1, max_size=8)
keys = st.builds(AttemptKey, st.integers(0, 99), st.integers(1, 999),
                 st.lists(part, max_size=4).map(".".join))


@given(keys)
def test_every_key_round_trips_through_its_text(key):
    assert AttemptKey.parse(str(key)) == key


def test_keys_are_spelled_as_stored_runs_have_them():
    attempt = AttemptKey(3, 2)
    assert str(attempt) == "p3.a2"                                   # a checkpoint's id
    assert str(attempt.child("entered")) == "p3.a2.entered"
    assert str(attempt.counted(MESSAGE, 7)) == "p3.a2.m7"
    assert str(attempt.counted(FACT, 1)) == "p3.a2.f1"
    assert str(attempt.counted(MODEL_CALL, 12)) == "p3.a2.c12"
    assert str(attempt.counted(STEP, 4).done()) == "p3.a2.s4.done"
    assert str(AttemptKey(3, 2, "gate").counted(STEP, 1)) == "p3.a2.gate.s1"
    assert str(AttemptKey(3, 2, "gate").child("result")) == "p3.a2.gate.result"
    assert str(attempt.child("policy", "approve")) == "p3.a2.policy.approve"
    assert (RUN_START, RUN_FINISHED) == ("run.start", "run.finished")
    assert capture_keys("goldens-ab12") == ("goldens-ab12:requested", "goldens-ab12:completed")


@pytest.mark.parametrize("text", ["run.start", "run.finished", "goldens-ab12:requested", "",
                                  "p0.a0.entered", "p01.a1", "p0.a01", "p0.a1.", "p0.a1..s1",
                                  "p0.a1.s1.", "P0.a1", "p0a1", "p-1.a1", "x0.a1.s1"])
def test_text_that_is_no_attempt_key_parses_to_none(text):
    assert AttemptKey.parse(text) is None


@pytest.mark.parametrize("text, role, counter", [
    ("p0.a1.m7", "", 7), ("p0.a1.s8.done", "", 8), ("p0.a1.c2", "", 2),
    ("p0.a1.gate.s3", "gate", 3), ("p0.a1.gate.f1", "gate", 1), ("p0.a1.debug.s1.done", "debug", 1),
    ("p0.a1.gate", "", None), ("p0.a1.gate.done", "", None), ("p0.a1.gate.result", "", None),
    ("p0.a1.entered", "", None), ("p0.a1.policy.pick", "", None), ("p0.a1", "", None)])
def test_a_key_says_which_phase_run_numbered_it(text, role, counter):
    key = AttemptKey.parse(text)
    assert key is not None and (key.role, key.counter) == (role, counter)


@pytest.mark.parametrize("args", [(-1, 1), (0, 0), (0, 1, "s1..done"), (0, 1, ".s1"),
                                  (True, 1), (0, 1.0)])
def test_a_key_that_could_not_be_read_back_is_refused(args):
    with pytest.raises(ValueError):
        AttemptKey(*args)
    with pytest.raises(ValueError):
        AttemptKey(0, 1).counted("x", 1)


# --- every key a deployment writes ---------------------------------------------------------

class Worker(FakeAgent):
    """The fake agent, plus a recorded fact and a model call each attempt."""

    def work(self, run: Any) -> None:
        run.record(SkillLoaded(skill="deploy-new-llm", digest="0" * 64))
        run.exchange(lambda: ModelCalled(model="m", input_tokens=1, output_tokens=1,
                                         cost_usd=0.0, stop_reason="end_turn", duration_s=0.0))
        super().work(run)


class SteppingGate:
    """The fake gate, run through a step of its own."""

    def __init__(self, gate: Any) -> None:
        self.gate = gate

    def evaluate(self, run: Any) -> Any:
        run.step("read_result", {}, lambda: {})
        return self.gate.evaluate(run)


class SteppingMatcher:
    def __init__(self, matcher: Any) -> None:
        self.matcher = matcher

    def propose(self, run: Any, gate: Any) -> Any:
        run.step("match_symptom", {}, lambda: {})
        return self.matcher.propose(run, gate)


def test_every_key_and_call_id_a_deployment_writes_parses_back(store, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "1:1")
    pipeline = make()
    pipeline.agent = Worker(0.0, 2)
    pipeline.gates = {k: SteppingGate(g) for k, g in pipeline.gates.items()}
    pipeline.matcher = SteppingMatcher(pipeline.matcher)
    c = Conductor.start(store, pipeline, Policy(auto_approve=True), model="tiny")
    assert c.run().reason == "finished"
    c.close()
    seen: set[str] = set()
    for e in store.events(c.run_id):
        key = e.idempotency_key
        if key in (RUN_START, RUN_FINISHED) or (key is None and e.type == "human.decision"):
            continue
        parsed = AttemptKey.parse(key or "")
        assert parsed is not None, (e.type, key)
        assert str(parsed) == key and (parsed.phase, parsed.attempt) == (e.phase, e.attempt)
        seen.add(re.sub(r"[0-9]*(\.done)?$", "", parsed.what))
        ids = [e.payload.get(name) for name in ("call_id", "checkpoint_id", "proposal_id")]
        for text in filter(None, ids):
            id_ = AttemptKey.parse(text)
            assert id_ is not None and id_.attempt_key == parsed.attempt_key, (e.type, text)
        if e.type == "tool.completed":
            assert key == str(AttemptKey.parse(e.payload["call_id"]).done())   # type: ignore
    # the run wrote every kind of key there is
    assert seen == {"entered", "exited", "m", "f", "c", "s", "gate.s", "debug.s", "gate",
                    "gate.result", "checkpoint", "debug", "policy.approve", "policy.pick"}


# --- the type is the only place that spells them -----------------------------------------

def spelled_outside_the_type(root: Path = ROOT) -> list[str]:
    """Every f-string of the Python files under `root` that spells ".a{...}" (an attempt
    key) anywhere but events/keys.py."""
    found = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root)
        if rel.parts[0].startswith(".") or rel.parts[0] in ("build", "npu_deploy") \
                or rel.as_posix() == "events/keys.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(rel))):
            if not isinstance(node, ast.JoinedStr):
                continue
            parts = node.values
            if any(isinstance(a, ast.Constant) and str(a.value).endswith(".a")
                   and isinstance(b, ast.FormattedValue)
                   for a, b in zip(parts, parts[1:], strict=False)):
                found.append(f"{rel}:{node.lineno}")
    return found


def test_no_key_is_spelled_outside_the_type():
    assert spelled_outside_the_type() == []


def test_the_spelling_check_finds_keys_built_by_hand(tmp_path):
    (tmp_path / "events").mkdir()
    (tmp_path / "events" / "keys.py").write_text('def key(k, n): return f"p{k}.a{n}"\n')
    (tmp_path / "agent.py").write_text(
        'import re\n'
        'def key(k, n): return f"p{k}.a{n}.s1"\n'
        'def pattern(k, n): return re.compile(rf"p{k}\\.a{n}\\.s(\\d+)")\n'
        'def label(k, n): return f"p{k}.{n}"\n')
    assert spelled_outside_the_type(tmp_path) == ["agent.py:2", "agent.py:3"]
