"""The recipe as data: it round-trips and rebuilds its plans."""

from __future__ import annotations

from npu_deploy.kernels.definition.hardware import XDNA2
from npu_deploy.kernels.definition.specs import Decode, Prefill
from npu_deploy.kernels.plans.optimize import DECODE_ORDER
from npu_deploy.kernels.plans.signature import plan_signature
from npu_deploy.models.catalog import CATALOG
from npu_deploy.pipeline.deployed import PlanCache
from npu_deploy.pipeline.recipe import Recipe


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


def test_the_plan_cache_builds_what_the_recipe_builds_and_shares_it_across_modes():
    """`PlanCache` (pipeline/deployed.py): each plan equal to `Recipe.plan`'s, a recipe that
    changes only its prefill transforms gets the very decode plan built before, and a
    recipe that adds a transform applies it to the plan built without it."""
    args = CATALOG["smollm2-135m"].args
    cache = PlanCache()
    decode, prefill = Decode(20, 40), Prefill(16)
    done: list[Recipe] = []
    r = Recipe()
    for name in DECODE_ORDER:
        r = r.with_transform(decode, name)
        done.append(r)
        assert cache.plan(r, "smollm2-135m", args, decode, XDNA2) == \
            r.plan("smollm2-135m", args, decode)
    full = done[-1]
    assert full.plan("smollm2-135m", args, decode).history[-len(DECODE_ORDER):] == DECODE_ORDER
    kept = cache.plan(full, "smollm2-135m", args, decode, XDNA2)
    other = full.with_transform(prefill, "align_layouts")
    assert cache.plan(other, "smollm2-135m", args, decode, XDNA2) is kept
    assert cache.plan(other, "smollm2-135m", args, prefill, XDNA2) == \
        other.plan("smollm2-135m", args, prefill)
    # what a plan depends on, and only that: another numerics setting is another plan
    assert full.plan_key(decode) == other.plan_key(decode) != other.plan_key(prefill)
    assert full.with_settings({"lm_head_out": "f32"}).plan_key(decode) != full.plan_key(decode)
    # the signature is computed once per plan, and is the plan's
    sig = cache.signature(full, "smollm2-135m", args, decode, XDNA2, layouts=False)
    assert sig == plan_signature(kept, layouts=False)
