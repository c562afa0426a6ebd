"""Gemma 3's additions on the NPU path, one by one, on SmolLM2-135M's shape with the feature
added (Gemma 3 as a whole is planned once every one is in): the per-layer RoPE tables."""

from __future__ import annotations

from dataclasses import replace

import torch

from npu_deploy.kernels import XDNA2
from npu_deploy.kernels.definition.specs import Decode, Prefill
from npu_deploy.models.config import FULL, SLIDING, ModelArgs, RopeScaling


def dual_theta() -> ModelArgs:
    """Gemma 3's attention pattern on SmolLM2-135M's shape: local layers (window 128,
    theta 1e4) alternating with global ones (theta 1e6, linear x8)."""
    from npu_deploy.cli.models import model_shape

    _, args = model_shape("smollm2-135m")
    return replace(args, sliding_window=128, local_rope_theta=1e4, rope_theta=1e6,
                   rope_scaling=RopeScaling("linear", factor=8.0),
                   layer_types=tuple((SLIDING, FULL)[i % 2] for i in range(args.n_layers)))


def test_local_and_global_layers_read_their_own_rope_table():
    """Each layer's rope launches read the table of its theta, in prefill and decode, and
    the runner builds both: the local one from theta 1e4 unscaled, the global one from 1e6
    with the linear factor, each the FP32 oracle's table of such a layer in bf16."""
    from npu_deploy.kernels.emulation.numerics import to_bf16
    from npu_deploy.kernels.families.rope import lut
    from npu_deploy.kernels.plans.plan import baseline_plan
    from npu_deploy.kernels.plans.plan_runner import rope_luts
    from npu_deploy.oracle import reference as ref_ops

    args = dual_theta()
    for mode in (Prefill(256), Decode(299)):
        plan = baseline_plan("smollm2-135m", args, mode, XDNA2)
        read = {(ln.layer, ln.binding("lut").tensor) for ln in plan.launches()
                if ln.kernel == "rope"}
        assert read == {(i, "rope.local.lut" if i % 2 == 0 else "rope.lut")
                        for i in range(args.n_layers)}
    positions = torch.arange(256)
    tables = rope_luts(args, positions, 256)
    assert set(tables) == {"rope.local.lut", "rope.lut"}
    for name, layer in (("rope.local.lut", 0), ("rope.lut", 1)):
        cos, sin = ref_ops.rope_table(args, positions, layer)
        assert torch.equal(tables[name], to_bf16(lut(cos, sin, args.head_dim)))
    local = ref_ops.rope_cos_sin(args.head_dim, 1e4, RopeScaling(), positions)
    assert torch.equal(tables["rope.local.lut"], to_bf16(lut(*local)))
    assert not torch.equal(tables["rope.local.lut"], tables["rope.lut"])
    # a model of one theta keeps its one table
    plain = replace(args, local_rope_theta=None)
    assert set(rope_luts(plain, positions, 256)) == {"rope.lut"}


def with_post_norms(model):
    """A tiny model with Gemma 3's post-sublayer norms added (random weights around 1, as
    the adapter's 1 + w fold leaves them): its args and weights."""
    from npu_deploy.models.adapters import Weights

    g = torch.Generator().manual_seed(11)
    h = model.args.hidden

    def norm() -> torch.Tensor:
        return 0.5 + torch.rand(h, generator=g)

    layers = tuple(replace(lw, post_attn_norm=norm(), post_ffn_norm=norm())
                   for lw in model.weights.layers)
    weights = Weights(model.weights.embed, layers, model.weights.final_norm,
                      model.weights.lm_head)
    return replace(model.args, sandwich_norms=True), weights


def test_post_sublayer_norms_run_as_rmsnorm_dispatches_and_match_the_oracle(tiny_models):
    """Each sublayer's output goes through an rmsnorm launch (its own weight, the model's
    eps) before the residual add, in prefill and decode; the emulated plan's logits match
    the FP32 oracle of the normed model, which the model without the norms does not."""
    from npu_deploy.kernels.emulation.emulator import EmulatorBackend
    from npu_deploy.kernels.plans.plan import baseline_plan
    from npu_deploy.kernels.plans.plan_runner import PlanRunner
    from npu_deploy.metrics.comparison import compare
    from npu_deploy.oracle.reference import Reference

    model = tiny_models["tiny-llama"]
    args, weights = with_post_norms(model)
    for mode, rows in ((Prefill(40), 40), (Decode(40), 1)):
        launches = {(ln.layer, ln.role): ln for ln in
                    baseline_plan("tiny-llama", args, mode, XDNA2).launches()}
        for role, out, add in (("post_attn_norm", "attn", "attn_residual"),
                               ("post_ffn_norm", "ffn", "ffn_residual")):
            ln = launches[(0, role)]
            assert ln.kernel == "rmsnorm" and ln.shape_dict == {"rows": rows,
                                                                "width": args.hidden}
            assert ln.config_dict["eps"] == args.norm_eps
            assert ln.binding("weight").tensor == f"w.L0.{role}"
            assert ln.binding("x").tensor == f"L0.{out}"
            assert launches[(0, add)].binding("b").tensor == ln.binding("y").tensor
    tokens = torch.arange(3, 43) % args.vocab
    got = PlanRunner(args, weights, EmulatorBackend()).run(
        baseline_plan("tiny-llama", args, Prefill(40), XDNA2), tokens)
    want = Reference(args, weights).prefill(tokens)[0]
    c = compare(want[-1:], got.logits.float())
    assert c.cosine > 0.999 and int(got.logits.argmax()) == int(want[-1].argmax())
    plain = Reference(model.args, model.weights).prefill(tokens)[0]
    assert compare(want[-1:], plain[-1:]).cosine < 0.99


def test_a_gelu_tanh_ffn_runs_gelu_and_mul_and_matches_the_oracle(tiny_models):
    """A GELU-tanh model's FFN activation is the gelu_mul launch (upstream's
    gelu_and_mul_bf16: its program calls that symbol and verifies clean), and the emulated
    prefill matches the FP32 oracle of the GELU model, which the SiLU model does not."""
    from npu_deploy.kernels.air_programs.air import emit_dispatch
    from npu_deploy.kernels.air_programs.air_verify import verify
    from npu_deploy.kernels.emulation.emulator import EmulatorBackend
    from npu_deploy.kernels.plans.plan import baseline_plan
    from npu_deploy.kernels.plans.plan_runner import PlanRunner
    from npu_deploy.metrics.comparison import compare
    from npu_deploy.oracle.reference import Reference

    model = tiny_models["tiny-llama"]
    args = replace(model.args, activation="gelu_tanh")
    for mode in (Prefill(40), Decode(40)):
        plan = baseline_plan("tiny-llama", args, mode, XDNA2)
        kernels = {ln.kernel for ln in plan.launches()}
        assert "gelu_mul" in kernels and "silu_mul" not in kernels
    plan = baseline_plan("tiny-llama", args, Prefill(40), XDNA2)
    dispatch = next(d for d in plan.dispatches if d.launches[0].kernel == "gelu_mul")
    program = emit_dispatch(dispatch, XDNA2, args.head_dim)
    assert "gelu_and_mul_bf16" in program.source and verify(program) == []
    tokens = torch.arange(3, 43) % args.vocab
    got = PlanRunner(args, model.weights, EmulatorBackend()).run(plan, tokens)
    want = Reference(args, model.weights).prefill(tokens)[0]
    c = compare(want[-1:], got.logits.float())
    assert c.cosine > 0.999 and int(got.logits.argmax()) == int(want[-1].argmax())
    silu = Reference(model.args, model.weights).prefill(tokens)[0]
    assert compare(want[-1:], silu[-1:]).cosine < c.cosine


def test_gelu_and_mul_passes_against_its_fp32_reference():
    """The kernel alone at Gemma 3 4B's FFN width (10240), emulated against GELU-tanh x up
    in FP32, within the gate's tolerance; a 40-element tile (not whole vectors) is refused."""
    from npu_deploy.kernels import SPECS
    from npu_deploy.kernels.definition.checker import check
    from npu_deploy.kernels.definition.selection import select
    from npu_deploy.kernels.definition.specs import KernelUse
    from npu_deploy.kernels.emulation.emulator import EmulatorBackend
    from npu_deploy.kernels.emulation.validate import validate_kernel

    spec, shape = SPECS["gelu_mul"], {"rows": 16, "width": 10240}
    config = select(KernelUse("gelu_mul", spec, shape), XDNA2).config
    report = validate_kernel(spec, shape, config, EmulatorBackend())
    assert report.passed, report.summary()
    found = check(spec, shape, {**config, "tile": 40}, XDNA2)
    assert any(f.kind == "divisible" and f.severity == "error" for f in found)


def test_the_embedding_scale_is_applied_in_bf16_by_the_hosts_lookup():
    """Gemma 3's embedding times sqrt(hidden): the plan hands the lookup the scale, which it
    multiplies in bf16 as the bf16 model does (sqrt(2560) = 50.596 becomes 50.5), leaving the
    table (which a tied LM head reads) unscaled; a model without it looks rows up as they are."""
    from npu_deploy.kernels.definition.registry import HOST_KERNELS
    from npu_deploy.kernels.plans.plan import baseline_plan
    from npu_deploy.kernels.plans.steps import HostStep

    args = replace(dual_theta(), embed_scale=2560 ** 0.5)
    for mode in (Prefill(64), Decode(64)):
        embed = next(s for s in baseline_plan("smollm2-135m", args, mode, XDNA2).steps
                     if isinstance(s, HostStep) and s.op == "embedding")
        assert embed.params_dict == {"scale": 2560 ** 0.5}
    table = torch.randn(32, 16).bfloat16()
    before = table.clone()
    tokens = torch.tensor([3, 1, 3, 30])
    out: dict[str, torch.Tensor] = {}
    inputs = {"table": table, "tokens": tokens}
    lookup = HOST_KERNELS["embedding"].host
    lookup.run({"rows": 4, "width": 16, "vocab": 32}, {"scale": 2560 ** 0.5},
               inputs.__getitem__, out.__setitem__)
    assert out["y"].dtype == torch.bfloat16
    assert torch.equal(out["y"], (table[tokens].float() * 50.5).bfloat16())
    assert not torch.equal(out["y"], (table[tokens].float() * 2560 ** 0.5).bfloat16())
    assert torch.equal(table, before)
    lookup.run({"rows": 4, "width": 16, "vocab": 32}, {}, inputs.__getitem__, out.__setitem__)
    assert torch.equal(out["y"], table[tokens])


def test_every_program_of_tiny_gemma3_verifies_clean():
    """tiny-gemma3's prefill and decode plans as MLIR-AIR programs (the window mask, both
    RoPE tables, the post norms, gelu_and_mul_bf16 among them) pass every check of the
    verifier."""
    from npu_deploy.cli.models import model_shape
    from npu_deploy.kernels.air_programs.air import emit_plan
    from npu_deploy.kernels.air_programs.air_verify import check_programs
    from npu_deploy.kernels.plans.plan import baseline_plan

    _, args = model_shape("tiny-gemma3")
    for mode in (Prefill(128), Decode(100)):
        programs = emit_plan(baseline_plan("tiny-gemma3", args, mode, XDNA2))
        verdict = check_programs(programs)
        assert not [v for _, found in verdict.results for v in found], mode
    sources = "".join(p.source for p in emit_plan(
        baseline_plan("tiny-gemma3", args, Prefill(128), XDNA2)))
    assert "apply_window_mask" in sources and "gelu_and_mul_bf16" in sources
