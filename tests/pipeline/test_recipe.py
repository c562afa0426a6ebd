"""The token-set check (vLLM's check_logprobs_close idea) and the recipe as data."""

from __future__ import annotations

from npu_deploy.kernels.specs import Decode, Prefill
from npu_deploy.models.catalog import CATALOG
from npu_deploy.pipeline.deployed import Greedy, topk_check
from npu_deploy.pipeline.recipe import Recipe

REF = Greedy([1, 2, 3, 4], [[1, 9, 8], [2, 7, 6], [3, 5, 0], [4, 0, 0]])


def test_identical_runs_pass_with_every_token_agreed():
    tc = topk_check("p", REF, REF)
    assert tc.passed and tc.agreed == 4 and tc.steps == 4


def test_at_the_first_difference_each_token_must_be_in_the_others_top_k():
    ok = topk_check("p", Greedy([1, 7, 0, 0], [[1], [7, 2], [0], [0]]), REF)
    assert ok.passed and ok.agreed == 1 and (ok.ours, ok.theirs) == (7, 2)
    # ours (5) is not in the reference's top-k at step 1
    assert not topk_check("p", Greedy([1, 5], [[1], [5, 2]]), REF).passed
    # the reference's token (2) is not in ours
    assert not topk_check("p", Greedy([1, 7], [[1], [7, 9]]), REF).passed


def test_nothing_after_the_first_difference_is_compared():
    # the sequences differ at step 0 acceptably; what follows is free
    tc = topk_check("p", Greedy([9, 0, 0, 0], [[9, 1], [0], [0], [0]]), REF)
    assert tc.passed and tc.agreed == 0


def test_a_recipe_round_trips_and_rebuilds_its_plans():
    r = Recipe({"gemm_bf16 K=576 M=8 N=576": {"tile_n": 64}}, "bf16",
               ("align_layouts", "merge_dispatches"), ("reuse_buffers",))
    assert Recipe.from_json(r.to_json()) == r
    args = CATALOG["smollm2-135m"].args
    pre = r.plan("smollm2-135m", args, Prefill(8))
    base = r.baseline("smollm2-135m", args, Prefill(8))
    assert len(pre.dispatches) < len(base.dispatches)
    gemms = [ln for ln in base.launches() if ln.kernel.startswith("gemm")]
    assert gemms and all(ln.config_dict["datapath"] == "bf16" for ln in gemms)
    q = next(ln for ln in base.launches() if ln.role == "q_proj")
    assert q.config_dict["tile_n"] == 64            # the recipe's configuration, not selection's
    assert "reuse_buffers" in r.plan("smollm2-135m", args, Decode(8)).history
    assert "merge_dispatches" not in r.plan("smollm2-135m", args, Decode(8)).history
