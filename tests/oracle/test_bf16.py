"""The bf16 reference (oracle/bf16.py): Hugging Face's own bf16 run of the canonical
prompts, and the bar phases 3-6 hold a deployment to (summed greedy agreement with the FP32
oracle, and no different first token where the bf16 run keeps the oracle's)."""

from __future__ import annotations

import dataclasses
import warnings

import pytest
import torch

from npu_deploy.events import phases
from npu_deploy.oracle import reference_of
from npu_deploy.oracle.bf16 import (
    Bf16Run,
    against_bar,
    bf16_model,
    bf16_reference,
    hf_greedy,
    hf_teacher_forced,
)
from npu_deploy.oracle.prompts import canonical_prompts
from npu_deploy.pipeline.deployed import reference_greedy
from npu_deploy.pipeline.gates.model import FIRST_TOKEN, SUMMED, bf16_checks


def bar(**agreed: int) -> dict[str, Bf16Run]:
    """A bf16 reference of 8 steps a prompt that shares `agreed[p]` tokens with the oracle."""
    return {p: Bf16Run(p, [0] * 8, a, 8, None if a == 8 else a) for p, a in agreed.items()}


def test_the_summed_agreement_must_reach_the_bf16_runs():
    ref = bar(a=8, b=3, c=5)
    # behind on one prompt, ahead on another: the sums decide (16 against 16)
    assert against_bar({"a": (8, 8), "b": (5, 8), "c": (3, 8)}, ref).passed
    low = against_bar({"a": (8, 8), "b": (3, 8), "c": (4, 8)}, ref)
    assert (low.ours, low.theirs, low.bar, low.steps) == (15, 16, 16, 24)
    assert not low.summed_holds and not low.passed and not low.first_tokens_lost
    assert "shares 15 greedy tokens with the FP32 oracle, Hugging Face in bf16 16" in low.reason()


def test_a_different_first_token_fails_where_the_bf16_run_keeps_the_oracles():
    ref = bar(a=1, b=0)
    # the deployment is far ahead in sum, but answers prompt a with another first token
    lost = against_bar({"a": (0, 8), "b": (8, 8)}, ref)
    assert lost.summed_holds and lost.first_tokens_lost == ["a"] and not lost.passed
    assert "different first token" in lost.reason() and "on a" in lost.reason()
    # where the bf16 run itself does not keep the first token (a near tie), neither need it
    assert against_bar({"a": (1, 8), "b": (0, 8)}, ref).passed


def test_a_later_tie_bf16_cannot_represent_counts_at_the_bf16_runs_figure():
    ref = bar(a=8, b=8)
    # b parts at step 3 where the oracle's two tokens tie below one bf16 step: counted as 8
    tied = against_bar({"a": (8, 8), "b": (3, 8)}, ref, ties=["b"])
    assert tied.passed and (tied.ours, tied.ties) == (16, ("b",))
    # not a tie: held to it
    assert not against_bar({"a": (8, 8), "b": (3, 8)}, ref).passed
    # the first token is never excused, whatever the margin
    first = against_bar({"a": (8, 8), "b": (0, 8)}, ref, ties=["b"])
    assert not first.passed and first.first_tokens_lost == ["b"] and first.ties == ()
    # a tie never counts above what the deployment itself kept where the bf16 run kept less
    assert against_bar({"a": (5, 8)}, bar(a=2), ties=["a"]).ours == 5


def test_the_margin_is_the_phase_tables(monkeypatch):
    agreed = {"a": (6, 8)}
    assert not against_bar(agreed, bar(a=8)).passed
    table = phases.PHASES
    looser = dataclasses.replace(table[3], thresholds=tuple(
        dataclasses.replace(t, value=2) if t.name == "bf16_agreed_margin" else t
        for t in table[3].thresholds))
    monkeypatch.setattr(phases, "PHASES", (*table[:3], looser, *table[4:]))
    within = against_bar(agreed, bar(a=8))
    assert within.bar == 6 and within.passed


def test_a_prompt_without_a_bf16_run_is_refused_in_words():
    with pytest.raises(KeyError, match="no run of b: run phase 0 again"):
        against_bar({"a": (8, 8), "b": (8, 8)}, bar(a=8))


def run(prompt: str, agreed: int, steps: int = 8) -> dict[str, object]:
    """One of `token_checks`' results: a deployment's run of `prompt`."""
    differs = agreed < steps
    return {"prompt": prompt, "passed": True, "agreed": agreed, "steps": steps,
            "ours": 7 if differs else None, "theirs": 9 if differs else None,
            "ours_token": " L" if differs else None, "theirs_token": " The" if differs else None}


def test_each_check_carries_the_deployments_figure_and_the_bf16_runs():
    checks = bf16_checks([run("a", 0), run("b", 8)], bar(a=1, b=2))
    summed = next(c for c in checks if c["metric"] == SUMMED)
    assert (summed["value"], summed["threshold"], summed["passed"]) == (8, 3, True)
    assert "share 8 of 16 tokens" in summed["message"] and "bf16 shares 3" in summed["message"]
    first = {c["subject"]: c for c in checks if c["metric"] == FIRST_TOKEN}
    assert (first["a"]["value"], first["a"]["threshold"], first["a"]["passed"]) == (0, 1, False)
    assert "' L' is not the FP32 oracle's ' The'" in first["a"]["message"]
    assert first["b"]["passed"] and all(c["gating"] for c in checks)


def test_a_run_recorded_before_the_bar_is_said_so_and_not_gated():
    (lens,) = bf16_checks([run("a", 0)], None)
    assert not lens["gating"] and not lens["passed"]
    assert "recorded no bf16 reference" in lens["message"]


def test_a_run_keeps_its_json_form():
    r = Bf16Run("capital", [1, 2, 3], 2, 3, 2)
    assert Bf16Run.from_dict(r.to_dict()) == r
    assert not Bf16Run("p", [4], 0, 1, 0).keeps_first_token and r.keeps_first_token


@pytest.mark.slow         # several seconds: out of the fast core (make test-fast)
def test_the_bf16_reference_is_hugging_faces_own_run_in_bf16(tiny_models):
    """Against the oracle: its `agreed` is the token-set check's, its tokens are the bf16
    model's own greedy run, and the model is really bf16 (the FP32 one agrees throughout)."""
    loaded = tiny_models["tiny-llama-mha"]
    prompts = canonical_prompts(32, chat=True)
    ref = reference_of(loaded)
    ids = {p.name: p.token_ids(loaded.tokenizer) for p in prompts}
    answers = {n: reference_greedy(ref, i, 12).to_dict() for n, i in ids.items()}
    runs = bf16_reference(loaded, [(p, ids[p.name]) for p in prompts], answers)
    assert sorted(runs) == sorted(answers)
    model = bf16_model(loaded)
    assert next(model.parameters()).dtype == torch.bfloat16
    for name, r in runs.items():
        tokens = hf_greedy(model, ids[name], 12)[1]
        oracle = answers[name]["tokens"]
        same = next((i for i, (a, b) in enumerate(zip(tokens, oracle, strict=True)) if a != b),
                    12)
        assert r.tokens == tokens and r.agreed == same and r.steps == 12
        assert r.diverged_at == (None if same == 12 else same)
    # the FP32 model keeps every token (the phase-0 gate); the bf16 one need not
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)    # the cache by its current name
        fp32 = {n: hf_greedy(loaded.hf, i, 12)[1] for n, i in ids.items()}
        forced = hf_teacher_forced(loaded.hf, ids["capital"], answers["capital"]["tokens"])[1]
    assert all(fp32[n] == answers[n]["tokens"] for n in ids)
    assert [int(t) for t in forced.argmax(-1)] == fp32["capital"]
