"""The LM head writing FP32 logits (kernels.families.gemv_fp32, Recipe.lm_head_out) and the
localizer (pipeline.localize) that names the dispatch behind a wrong greedy token.

The near tie is crafted on tiny-llama-mha (an untied LM head, so that its rows change no
hidden state): two rows of the LM head that share every weight but one, 0.05 apart in FP32
at a logit of about 40, where bf16 stores values 0.25 apart. The bf16 GEMV rounds both to
one value and the lower index wins; FP32 logits keep the oracle's order.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from npu_deploy.kernels.air_programs.air import emit_dispatch, layout_of
from npu_deploy.kernels.air_programs.air_verify import check_programs
from npu_deploy.kernels.definition.hardware import XDNA2
from npu_deploy.kernels.definition.registry import FAMILIES
from npu_deploy.kernels.definition.selection import select
from npu_deploy.kernels.definition.specs import SPECS, Decode, KernelUse, Prefill
from npu_deploy.kernels.emulation.emulator import EmulatorBackend
from npu_deploy.kernels.emulation.numerics import gemv_fp32acc
from npu_deploy.kernels.performance.model import estimate
from npu_deploy.kernels.plans.plan import Binding, Dispatch, Launch, baseline_plan
from npu_deploy.oracle.reference import Reference
from npu_deploy.pipeline.deployed import DeployedModel, reference_greedy
from npu_deploy.pipeline.localize import localize
from npu_deploy.pipeline.recipe import Recipe

MODEL = "tiny-llama-mha"
IDS = torch.tensor([5, 17, 42, 99, 7, 3])
ORACLE, OURS = 300, 200         # the lower index wins a bf16 tie


def _alone(kernel: str, shape: dict[str, int]) -> Launch:
    config = select(KernelUse("lm_head", SPECS[kernel], shape), XDNA2).config
    bindings = tuple(Binding(o.name, f"t.{o.name}", "output" if o.role == "output" else "input")
                     for o in SPECS[kernel].operands(shape))
    return Launch(kernel, "lm_head.0", None, tuple(sorted(shape.items())),
                  tuple(sorted(config.items())), bindings)


# --- the FP32-logits GEMV -----------------------------------------------------------------

def test_the_fp32_gemv_is_the_gemv_without_its_output_cast():
    torch.manual_seed(0)
    w = torch.randn(64, 128).to(torch.bfloat16)
    x = torch.randn(128).to(torch.bfloat16)
    ours = FAMILIES["gemv_fp32"].numerics.emulate({"M": 64, "K": 128}, {}, {"w": w, "x": x})["y"]
    bf16 = FAMILIES["gemv"].numerics.emulate({"M": 64, "K": 128}, {"kernel": "mv"},
                                             {"w": w, "x": x})["y"]
    assert ours.dtype == torch.float32 and bf16.dtype == torch.bfloat16
    assert torch.equal(ours.to(torch.bfloat16), bf16)
    assert not torch.equal(ours, bf16.float())


def test_the_fp32_gemv_emits_a_program_the_verifier_accepts():
    launch = _alone("gemv_fp32", {"M": 16384, "K": 576})
    program = emit_dispatch(Dispatch("lm_head.0", (launch,)))
    verdict = check_programs([program], XDNA2)
    assert verdict.clean == 1, [v.line() for _, found in verdict.results for v in found]
    # our own object, compiled from our source, its output tile FP32
    (obj,) = layout_of(launch).kernels
    assert obj.recipe()["repository"] == "npu-deploy"
    assert obj.recipe()["source"] == "kernels/aie/mv_f32.cc"
    assert "MemRefType.get([16384], f32)" in program.source
    y = next(b for b in layout_of(launch).l1 if b.name == "y_l1")
    assert y.dtype == "f32"


def test_the_verifier_refuses_a_call_of_a_symbol_our_source_does_not_export():
    launch = _alone("gemv_fp32", {"M": 16384, "K": 576})
    program = emit_dispatch(Dispatch("lm_head.0", (launch,)))
    broken = dataclasses.replace(program, source=program.source.replace(
        "matvec_vectorized_bf16_f32_m", "matvec_vectorized_bf16_f64_m"))
    verdict = check_programs([broken], XDNA2)
    assert verdict.clean == 0
    assert any(v.check == "extern" for _, found in verdict.results for v in found)


def test_a_recipe_with_fp32_logits_plans_them_in_prefill_and_decode(tiny_models):
    args = tiny_models[MODEL].args
    recipe = Recipe(lm_head_out="f32")
    assert Recipe.from_json(recipe.to_json()) == recipe
    assert Recipe.from_json(Recipe().to_json()).lm_head_out == "bf16"
    for mode in (Prefill(128), Decode(6, 8)):
        heads = [ln for ln in recipe.plan(MODEL, args, mode).launches()
                 if ln.role.startswith("lm_head")]
        assert heads and all(ln.kernel == "gemv_fp32" for ln in heads)
    with pytest.raises(ValueError, match="lm_head_out must be one of"):
        Recipe(lm_head_out="fp16")  # type: ignore[arg-type]


def test_the_fp32_logits_are_priced_above_the_bf16_ones():
    """Modeled: the wider output stream and twice the logits' bytes read back."""
    from npu_deploy.models.catalog import CATALOG

    args = CATALOG["smollm2-135m"].args
    mode = Decode(128)
    bf16 = estimate(baseline_plan("smollm2-135m", args, mode), XDNA2)
    f32 = estimate(baseline_plan("smollm2-135m", args, mode, lm_head_out="f32"), XDNA2)
    assert f32.total_s > bf16.total_s

    def head_bytes(profile) -> int:
        return sum(s.host_bytes for s in profile.steps if s.name.startswith("lm_head"))
    # the logits read back at 4 bytes a token, not 2 (the W and x uploads the same)
    assert head_bytes(f32) - head_bytes(bf16) == 2 * args.vocab


def test_the_kit_builds_the_fp32_gemv_object(tiny_models):
    from npu_deploy.kernels.npu_runtime.needed_objects import needed_objects

    objects = needed_objects(MODEL, tiny_models[MODEL].args, 128)
    ours = [o for name, o in objects.items() if name.startswith("mv_f32_")]
    assert ours and all(o.kernels == ("gemv_fp32",) for o in ours)


# --- the near tie -------------------------------------------------------------------------

def near_tie(m):
    """The model's weights with LM head rows ORACLE and OURS crafted (see the module
    docstring), against the deployment's own final-norm row."""
    dep = DeployedModel(MODEL, m.args, m.weights, Recipe(), EmulatorBackend())
    xd = dep.runner.run(dep.prefill_plan(len(IDS)), IDS).tensors["xn"][0]
    xo = Reference(m.args, m.weights).capture(IDS)[f"L{m.args.n_layers:02d}.final_norm"][-1]
    x = xd.float()
    agree = torch.where(x.sign() == xo.sign(), torch.minimum(x.abs(), xo.abs()), 0)
    j = int(agree.argmax())              # the one weight the rows differ in
    agree[j] = 0
    i = int(agree.argmax())              # the weight that centres both in a bf16 step
    common = 40 * x / x.dot(x)
    common[j] = 0

    def rows(shift: float) -> tuple[torch.Tensor, torch.Tensor]:
        a = common.clone()
        a[i] += shift / x[i]
        a = a.to(torch.bfloat16).float()
        b = a.clone()
        b[j] = (-x[j].sign() * 0.05 / x[j].abs()).to(torch.bfloat16).float()
        return a, b

    def logits(a: torch.Tensor, b: torch.Tensor) -> list[float]:
        return gemv_fp32acc(torch.stack((a, b)).to(torch.bfloat16), xd,
                            out_dtype=torch.float32).tolist()

    a, b = rows(0.0)
    a, b = rows(40.025 - logits(a, b)[0])
    la, lb = logits(a, b)
    assert la > lb and torch.tensor(la).to(torch.bfloat16) == torch.tensor(lb).to(torch.bfloat16)
    w = m.weights.lm_head.clone()
    w[ORACLE], w[OURS] = a, b
    return dataclasses.replace(m.weights, lm_head=w)


def test_the_localizer_names_the_lm_head_and_fp32_logits_fix_the_token(tiny_models):
    m = tiny_models[MODEL]
    weights = near_tie(m)
    reference = Reference(m.args, weights)
    oracle = reference_greedy(reference, IDS, 1).tokens
    assert oracle == [ORACLE]
    deployed = DeployedModel(MODEL, m.args, weights, Recipe(), EmulatorBackend())
    assert deployed.generate(IDS, 1).tokens == [OURS]          # the bf16 logits tie

    found = localize(deployed, reference, IDS, oracle, 0)
    assert (found.oracle_token, found.our_token) == (ORACLE, OURS)
    assert found.margin_before <= 0
    assert found.named is not None and found.named.startswith("lm_head")
    named = [t for t in found.trials if t.step == found.named and t.swap == "fp32"]
    assert named and named[0].restores and named[0].margin > 0
    # the oracle's values at the device's dtype keep the tie: rounding decides it
    assert not any(t.restores for t in found.trials if t.swap == "oracle")
    assert found.proposal is not None
    assert found.proposal.change == "lm_head_out=f32"
    assert found.proposal.recipe == dataclasses.replace(Recipe(), lm_head_out="f32")
    assert found.proposal.after_s > found.proposal.before_s
    assert any("named: lm_head" in line for line in found.lines())

    fixed = DeployedModel(MODEL, m.args, weights, found.proposal.recipe, EmulatorBackend())
    logits, _ = fixed.prefill(IDS)
    assert logits.dtype == torch.float32
    assert fixed.generate(IDS, 1).tokens == oracle


def test_the_localizer_refuses_a_step_where_the_tokens_agree(tiny_models):
    m = tiny_models[MODEL]
    reference = Reference(m.args, m.weights)
    oracle = reference_greedy(reference, IDS, 1).tokens
    deployed = DeployedModel(MODEL, m.args, m.weights, Recipe(), EmulatorBackend())
    if deployed.generate(IDS, 1).tokens != oracle:
        pytest.skip("the random model already differs at its first token")
    with pytest.raises(ValueError, match="nothing to localize"):
        localize(deployed, reference, IDS, oracle, 0)
    with pytest.raises(ValueError, match="outside the oracle's"):
        localize(deployed, reference, IDS, oracle, 3)
