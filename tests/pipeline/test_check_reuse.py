"""The token-set check reused by arithmetic signature (pipeline.check_reuse,
kernels.plans.signature): a transform that leaves every kernel's arithmetic as it was reuses
the earlier check, with the proof in its event, and gets what running the check gives; one
that changes a kernel (decode attention on the host, a GEMV moved to mv_bf16) runs it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from npu_deploy.agents.autopilot import pipeline
from npu_deploy.kernels.definition.specs import Decode, Prefill
from npu_deploy.kernels.plans.plan import Dispatch, baseline_plan
from npu_deploy.kernels.plans.signature import plan_signature
from npu_deploy.kernels.plans.transforms import TRANSFORMS
from npu_deploy.machine import Conductor, Policy
from npu_deploy.pipeline.check_reuse import check_modes, token_checks
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.workspace import Workspace, read_json
from npu_deploy.store import EventStore

L = 32


def _apply(plan, *names):
    for name in names:
        plan = TRANSFORMS[name].apply(plan)
    return plan


def test_transforms_that_keep_the_kernels_keep_the_signature(tiny_models):
    args = tiny_models["tiny-llama"].args
    base = baseline_plan("tiny-llama", args, Prefill(L))
    aligned = _apply(base, "align_layouts", "reuse_buffers")
    assert plan_signature(aligned, layouts=False) == plan_signature(base, layouts=False)
    # a backend that builds a program per layout: the layouts count
    assert plan_signature(aligned, layouts=True) != plan_signature(base, layouts=True)
    assert plan_signature(_apply(base, "reuse_buffers"), layouts=True) == \
        plan_signature(base, layouts=True)


def test_a_changed_kernel_or_configuration_changes_the_signature(tiny_models):
    args = tiny_models["tiny-llama"].args
    decode = baseline_plan("tiny-llama", args, Decode(L, L + 8))
    sig = plan_signature(decode, layouts=False)
    assert plan_signature(_apply(decode, "decode_attention_on_cpu"), layouts=False) != sig
    assert plan_signature(baseline_plan("tiny-llama", args, Decode(L + 1, L + 8)),
                          layouts=False) != sig
    # one GEMV's configuration changed, nothing else
    steps = list(decode.steps)
    k = next(i for i, s in enumerate(steps) if isinstance(s, Dispatch)
             and s.launches[0].kernel == "gemv")
    ln = steps[k].launches[0]
    steps[k] = replace(steps[k], launches=(ln.with_config(tile_m=ln.config_dict["tile_m"] // 2),))
    assert plan_signature(replace(decode, steps=tuple(steps)), layouts=False) != sig


@pytest.mark.e2e
def test_a_deployment_reuses_the_check_only_where_the_arithmetic_is_the_same(tmp_path: Path):
    db = tmp_path / "runs.db"
    with EventStore.open(db) as store:
        c = Conductor.start(store, pipeline(), Policy(auto_approve=True), model="tiny-llama",
                            config={"seq_len": L, "steps": 12})
        assert c.run().reason == "finished"
        c.close()
        events = list(store.events(c.run_id))
        assert events[-1].payload["verdict"] == "PASS"
        done = [e for e in events if e.type == "tool.completed" and e.payload["ok"]]
        gate3 = next(e for e in done if e.payload["tool"] == "gate3")
        first = gate3.payload["result"]["check_proofs"][0]
        assert "reused_from" not in first            # the first check ran
        tried = {(e.phase, e.payload["result"]["transform"]): e.payload["result"]
                 for e in done if e.payload["tool"] == "apply_transform"
                 and "check_proof" in e.payload["result"]}
        ws = Workspace(store, c.run_id)
        answers = read_json(store, ws.latest("answers", tool="build_oracle")["answers"])
        # bits-preserving: the same signature over every plan the check runs, reused from
        # the gate's event, and the runs are what the check computes when run
        for key in ((4, "align_layouts"), (4, "reuse_buffers"), (5, "reuse_buffers")):
            proof = tried[key]["check_proof"]
            assert proof["signature"] == first["signature"], key
            assert proof["reused_from"] == gate3.event_id, key
            assert proof["plans"] == len(check_modes(ws)) > 2
        recipe = Recipe.from_json(store.get_blob(tried[(4, "align_layouts")]["recipe"]))
        assert token_checks(ws, recipe, answers) == tried[(4, "align_layouts")]["checks"]
        # a kernel swapped (decode attention on the host): a new signature, the check ran
        moved = tried[(5, "decode_attention_on_cpu")]["check_proof"]
        assert moved["signature"] != first["signature"] and "reused_from" not in moved
        assert read_json(store, moved["runs"]) == tried[(5, "decode_attention_on_cpu")]["checks"]
        # the later gates reuse the check of the recipe they evaluate
        gate6 = next(e for e in done if e.payload["tool"] == "gate6")
        assert all("reused_from" in p for p in gate6.payload["result"]["check_proofs"])
