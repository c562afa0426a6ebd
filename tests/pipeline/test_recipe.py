"""The recipe as data: it round-trips and rebuilds its plans."""

from __future__ import annotations

from npu_deploy.kernels.definition.specs import Decode, Prefill
from npu_deploy.models.catalog import CATALOG
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
