"""The pieces of validate-hardware that decide what to compile and what a failure means
(pipeline.hardware_kit): the ETA, the structure of a program, the quick mode's choice, the
verdict."""

from __future__ import annotations

import pytest

from npu_deploy.kernels.air_programs.air import emit_plan
from npu_deploy.kernels.definition.hardware import XDNA2
from npu_deploy.kernels.definition.specs import SPECS, Prefill
from npu_deploy.kernels.plans.plan import baseline_plan
from npu_deploy.models import CATALOG
from npu_deploy.pipeline.hardware_kit import (
    MODELED_COMPILE_S,
    Eta,
    diagnose,
    quick_choice,
)
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import model_kernel_uses


def test_the_eta_is_modeled_until_a_compile_is_measured_then_measured():
    eta = Eta(10)
    assert eta.remaining() == (10 * MODELED_COMPILE_S, "modeled")
    assert 37.9 < MODELED_COMPILE_S < 38.0            # upstream's 24.3, 51.3, 38.3 s
    eta.add(3.0)
    eta.add(5.0)
    assert eta.remaining() == (8 * 4.0, "measured")
    for _ in range(8):
        eta.add(4.0)
    assert eta.remaining() == (0.0, "measured")


def test_programs_of_different_layers_are_one_program_and_other_shapes_are_not():
    args = CATALOG["smollm2-135m"].args
    programs = {p.dispatch: p for p in emit_plan(baseline_plan("smollm2-135m", args,
                                                               Prefill(128), XDNA2))}
    q0, q1, o0 = programs["L0.q_proj"], programs["L1.q_proj"], programs["L0.o_proj"]
    assert q0.source == q1.source and q0.function == q1.function     # one build
    assert q0.tensors != q1.tensors                      # on each layer's own buffers
    k0 = programs["L0.k_proj"]                           # another N: another program
    assert k0.digest != q0.digest
    assert o0.digest == q0.digest                        # the same GEMM shape


@pytest.mark.parametrize("model", ["smollm2-135m", "qwen3-0.6b"])
def test_quick_takes_the_largest_prefill_shape_of_each_npu_kernel(model):
    uses = model_kernel_uses(model, CATALOG[model].args, 128, Recipe(), XDNA2)
    chosen = quick_choice(uses)
    # every kernel the model launches but the embedding lookup, which runs on the CPU
    assert set(chosen) == {u["kernel"] for u in uses.values()} - {"embedding"}
    for kernel, key in chosen.items():
        assert uses[key]["kernel"] == kernel
        prefill = [u for u in uses.values() if u["kernel"] == kernel
                   and u["mode"] == "prefill"]
        if prefill:                       # the largest prefill shape of it
            flops = SPECS[kernel].flops
            assert uses[key]["mode"] == "prefill"
            assert flops(uses[key]["shape"]) == max(flops(u["shape"]) for u in prefill)


def test_the_verdict_follows_the_control():
    control = {"example": "programming_examples/silu_and_mul", "passed": True}
    ours = [{"program": "L0_q_proj", "stage": "compile", "message": "m"}]
    assert diagnose(control, [])["verdict"] == "none"
    assert diagnose(control, ours)["verdict"] == "ours"
    failed = {**control, "passed": False}
    assert diagnose(failed, ours)["verdict"] == "setup"
    assert diagnose(failed, [])["verdict"] == "setup"
    assert diagnose(None, ours)["verdict"] == "unknown"
    assert diagnose(None, [])["verdict"] == "none"
