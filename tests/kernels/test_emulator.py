"""The emulator backend and Phase 1's validate_kernel: every kernel against its FP32
reference at the models' shapes, and kernels that cheat or err are caught."""

from __future__ import annotations

import pytest
import torch

from npu_deploy.kernels import SPECS, XDNA2
from npu_deploy.kernels.emulation.emulator import EmulatorBackend
from npu_deploy.kernels.emulation.numerics import to_bf16
from npu_deploy.kernels.emulation.validate import seeded_inputs, validate_kernel
from npu_deploy.kernels.families.rope import cos_sin
from npu_deploy.models import RopeScaling
from npu_deploy.oracle import reference_of

EMU = EmulatorBackend()

CASES = [
    ("gemm_bf16", {"M": 64, "K": 896, "N": 4864}),        # Qwen2.5-0.5B gate/up, unaligned
    ("gemm_bf16", {"M": 33, "K": 1536, "N": 8960}),       # Qwen2.5-1.5B, odd M
    ("gemm_fp32", {"M": 64, "K": 8192, "N": 512}),
    ("gemv", {"M": 896, "K": 4864}),
    ("gemv", {"M": 8960, "K": 1536}),
    ("rmsnorm", {"rows": 64, "width": 896}),
    ("qk_norm", {"rows": 128, "width": 128}),
    ("rope", {"rows": 4 * 64, "width": 128, "seq": 64}),
    ("rope", {"rows": 14 * 32, "width": 64, "seq": 32}),
    ("flash_attention", {"heads": 4, "kv_heads": 2, "Lq": 256, "Lk": 256, "head_dim": 128}),
    ("flash_attention", {"heads": 6, "kv_heads": 6, "Lq": 96, "Lk": 96, "head_dim": 64}),
    ("decode_attention", {"heads": 9, "kv_heads": 3, "Lq": 1, "Lk": 77, "head_dim": 64}),
    ("silu_mul", {"rows": 16, "width": 8960}),
    ("add", {"rows": 16, "width": 896}),
    ("bias_add", {"rows": 16, "width": 1152}),
]


@pytest.mark.parametrize("kernel,shape", CASES, ids=[f"{k}-{'x'.join(map(str, s.values()))}"
                                                      for k, s in CASES])
def test_every_kernel_passes_against_its_fp32_reference(kernel, shape):
    from npu_deploy.kernels.definition.selection import select
    from npu_deploy.kernels.definition.specs import KernelUse

    config = select(KernelUse(kernel, SPECS[kernel], shape), XDNA2).config
    report = validate_kernel(SPECS[kernel], shape, config, EMU)
    assert report.passed, report.summary()
    assert report.backend == "emulator" and report.rtol == 1.6e-2


@pytest.mark.parametrize("layout", ["head-first", "seq-first"])
def test_decode_attention_counts_no_position_past_the_steps_length(layout):
    """The NPU's decode attention is built for a context and reads the step's length at run
    time: handed a cache buffer of the context's positions (here junk past the step's),
    the emulator attends over the first Lk alone, bit for bit what it computes from a cache
    of exactly Lk positions, at every length."""
    spec = SPECS["npu_decode_attention"]
    heads, hkv, hd, context = 6, 2, 64, 192
    g = torch.Generator().manual_seed(7)
    q = to_bf16(torch.randn(heads, 1, hd, generator=g))
    k, v = (to_bf16(torch.randn(hkv, context, hd, generator=g)) for _ in range(2))

    def stored(t: torch.Tensor) -> torch.Tensor:
        return t if layout == "head-first" else t.transpose(0, 1).reshape(t.shape[1], -1)

    config = {**spec.tunables, "context": context, "layouts": {"k": layout, "v": layout}}
    outs = []
    for lk in (1, 2, 63, 64, 65, 130, 192):
        shape = {"heads": heads, "kv_heads": hkv, "Lq": 1, "Lk": lk, "head_dim": hd}
        exact, full = (torch.empty(heads, 1, hd, dtype=torch.bfloat16) for _ in range(2))
        EMU.run(spec, shape, config, {"q": q, "k": stored(k[:, :lk].contiguous()),
                                      "v": stored(v[:, :lk].contiguous())}, {"o": exact})
        EMU.run(spec, shape, config, {"q": q, "k": stored(k), "v": stored(v)}, {"o": full})
        assert torch.equal(full, exact), lk
        outs.append(exact)          # and each length counts: no two outputs alike
    assert all(not torch.equal(a, b) for a, b in zip(outs, outs[1:], strict=False))


def test_a_gemm_whose_n_the_tiles_do_not_divide_writes_a_corrupt_output():
    """docs/hardware-facts.md#gemm-tiling-and-herds: N not divisible by tile_n x herd_n is
    silently corrupt (cosine ~0.02).
    The spec's defaults span 1024 columns; 4864 is not a multiple."""
    report = validate_kernel(SPECS["gemm_bf16"], {"M": 64, "K": 896, "N": 4864}, {}, EMU)
    c = report.metrics["c"]
    assert not report.passed and c.within_frac < 0.2 and abs(c.cosine) < 0.2
    assert any(f.severity == "corrupt" and "tile_n" in f.message for f in report.findings)
    # the first row is where the DMA starts: it is still right
    assert report.metrics["c"].n_outside < 64 * 4864


def test_emulated_gemm_shows_the_hardware_error_not_bf16_rounding():
    report = validate_kernel(SPECS["gemm_bf16"], {"M": 64, "K": 2048, "N": 2048}, {}, EMU)
    assert 7e-3 <= report.metrics["c"].mean_rel_l1 <= 1.2e-2


class Lazy(EmulatorBackend):
    """Writes nothing, or only the first half of each output."""

    def __init__(self, half: bool) -> None:
        self.half = half

    def run(self, spec, shape, config, inputs, outputs):
        if self.half:
            scratch = {k: v.clone() for k, v in outputs.items()}
            super().run(spec, shape, config, inputs, scratch)
            for k, v in outputs.items():
                flat, done = v.view(-1), scratch[k].view(-1)
                flat[: flat.numel() // 2] = done[: flat.numel() // 2]


@pytest.mark.parametrize("half", [False, True])
def test_a_kernel_that_does_not_write_its_output_fails(half):
    report = validate_kernel(SPECS["add"], {"rows": 4, "width": 256}, {}, Lazy(half))
    assert not report.passed
    assert report.metrics["y"].n_nonfinite_cand == (512 if half else 1024)


class Interleaved(EmulatorBackend):
    """RoPE in the interleaved (GPT-J) convention instead of half-split."""

    def run(self, spec, shape, config, inputs, outputs):
        x = inputs["x"].float().view(-1, shape["seq"], shape["width"])
        cos, sin = cos_sin(inputs["lut"].float())
        pairs = torch.stack((-x[..., 1::2], x[..., ::2]), dim=-1).flatten(-2)
        outputs["y"].copy_(to_bf16(x * cos + pairs * sin).reshape(outputs["y"].shape))


def test_a_wrong_convention_fails():
    report = validate_kernel(SPECS["rope"], {"rows": 64, "width": 64, "seq": 16}, {},
                             Interleaved())
    assert not report.passed and report.metrics["y"].n_outside > 0


def test_report_carries_the_checker_findings():
    config = {"tile_m": 64, "tile_k_l2": 256, "tile_k_l1": 32, "tile_n": 128, "herd_m": 8,
              "herd_n": 4}
    report = validate_kernel(SPECS["gemm_bf16"], {"M": 64, "K": 896, "N": 896}, config, EMU,
                             hw=XDNA2)
    assert any(f.severity == "corrupt" for f in report.findings)


def test_seeded_inputs_are_bf16_and_repeatable():
    a = seeded_inputs(SPECS["gemm_bf16"], {"M": 4, "K": 8, "N": 16}, seed=3)
    b = seeded_inputs(SPECS["gemm_bf16"], {"M": 4, "K": 8, "N": 16}, seed=3)
    assert all(t.dtype == torch.bfloat16 for t in a.values())
    assert all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-phi3",
                                  "tiny-gemma3"])
def test_a_whole_prefill_runs_on_the_emulator_close_to_the_reference(tiny_models, name):
    from npu_deploy.kernels.emulation.emulated_model import EmulatedModel

    loaded = tiny_models[name]
    tokens = torch.arange(3, 99)
    logits = EmulatedModel(loaded.args, loaded.weights, EMU).prefill(tokens)
    ref, _ = reference_of(loaded).prefill(tokens)
    from npu_deploy.metrics.comparison import compare

    c = compare(ref, logits)
    assert c.cosine > 0.999 and 1e-3 < c.mean_rel_l1 < 5e-2    # NPU-sized error, not zero
    assert (ref.argmax(-1) == logits.argmax(-1)).float().mean() > 0.9


@pytest.mark.slow
def test_emulator_speed_benchmark_smoke():
    from benchmark_runs import run_benchmark

    out = run_benchmark("emulator_speed", "--model", "tiny-qwen3", "--seq-len", "64",
                        timeout=300)
    assert out.returncode == 0, out.stderr
    assert "measured on the CPU" in out.stdout and "emulated / HF FP32 <= 1.0" in out.stdout


def test_validate_kernel_on_the_oracle_golden_tensors(tiny_models):
    loaded = tiny_models["tiny-qwen3"]
    goldens = reference_of(loaded).capture(torch.arange(5, 69))
    w = loaded.weights.layers[1]
    a = to_bf16(goldens["L01.attn_norm"])
    shape = {"M": a.shape[0], "K": a.shape[1], "N": w.wq.shape[0]}
    from npu_deploy.kernels.definition.selection import select
    from npu_deploy.kernels.definition.specs import KernelUse

    config = select(KernelUse("q_proj", SPECS["gemm_bf16"], shape), XDNA2).config
    report = validate_kernel(SPECS["gemm_bf16"], shape, config, EMU,
                             inputs={"a": a, "b": to_bf16(w.wq.t().contiguous())})
    assert report.passed, report.summary()
    # The emulated GEMM lands near the oracle's own q projection, with the NPU's error.
    assert 1e-3 < report.metrics["c"].mean_rel_l1 < 3e-2


def per_head_attention(s, x):
    """The attention kernel written the slow, obvious way: gemm_bfp16 per head."""
    import math

    from npu_deploy.kernels.emulation.numerics import gemm_bfp16
    from npu_deploy.kernels.emulation.softmax import softmax_bf16

    q, k, v = x["q"], x["k"], x["v"]
    group, start = s["heads"] // s["kv_heads"], s["Lk"] - s["Lq"]
    valid = torch.arange(s["Lq"]) + start + 1
    out = torch.empty(s["heads"], s["Lq"], s["head_dim"], dtype=torch.bfloat16)
    for h in range(s["heads"]):
        scores = gemm_bfp16(q[h], k[h // group].t().contiguous(), out_dtype=torch.float32)
        p = softmax_bf16(scores, valid, 1 / math.sqrt(s["head_dim"]))
        out[h] = gemm_bfp16(p, v[h // group])
    return out


@pytest.mark.parametrize("shape", [
    {"heads": 4, "kv_heads": 2, "Lq": 200, "Lk": 200, "head_dim": 128},
    {"heads": 3, "kv_heads": 3, "Lq": 1, "Lk": 77, "head_dim": 64},
    {"heads": 9, "kv_heads": 3, "Lq": 700, "Lk": 700, "head_dim": 64},
])
@pytest.mark.slow         # 15 s in all on 2 busy cores: out of the fast core
def test_batched_attention_equals_gemm_bfp16_per_head_bit_for_bit(shape):
    from npu_deploy.kernels.emulation.emulator import EMULATED

    x = seeded_inputs(SPECS["flash_attention"], shape, seed=5)
    got = EMULATED["flash_attention"](shape, {}, x)["o"]
    assert torch.equal(got, per_head_attention(shape, x))


@pytest.mark.parametrize("exact", [False, True])
def test_grouped_query_heads_give_the_bits_of_one_batch_per_head(exact):
    """GQA stacks the query heads of a KV head into one matmul; the same attention as MHA
    with K and V repeated per query head comes out bit for bit, on both paths."""
    from npu_deploy.kernels.emulation.emulator import EMULATED

    gqa = {"heads": 6, "kv_heads": 2, "Lq": 300, "Lk": 300, "head_dim": 64}
    mha = {**gqa, "kv_heads": 6}
    x = seeded_inputs(SPECS["flash_attention"], gqa, seed=8)
    wide = {**x, "k": x["k"].repeat_interleave(3, dim=0), "v": x["v"].repeat_interleave(3, dim=0)}
    config = {**SPECS["flash_attention"].tunables, "exact_tiles": exact}
    got = EMULATED["flash_attention"](gqa, config, x)["o"]
    want = EMULATED["flash_attention"](mha, config, wide)["o"]
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


@pytest.mark.parametrize("shape", [
    {"heads": 9, "kv_heads": 3, "Lq": 1501, "Lk": 1501, "head_dim": 64},   # blocks, odd last
    {"heads": 9, "kv_heads": 3, "Lq": 130, "Lk": 130, "head_dim": 64},     # one block
])
@pytest.mark.slow         # 6 s in all on 2 busy cores: out of the fast core
def test_splitting_each_kv_heads_rows_for_the_threads_keeps_the_bits(shape, monkeypatch):
    """The fast path hands torch's threads equal batches by splitting each KV head's rows
    (`batch_parts`: 3 KV heads on 2 threads make 6 batches); the outputs are the bits of one
    batch per KV head."""
    from npu_deploy.kernels.emulation.emulator import EMULATED
    from npu_deploy.kernels.families import flash_attention

    x = seeded_inputs(SPECS["flash_attention"], shape, seed=11)
    config = {**SPECS["flash_attention"].tunables, "exact_tiles": False}
    with monkeypatch.context() as m:
        m.setattr(torch, "get_num_threads", lambda: 2)
        assert flash_attention.batch_parts(3, 9 * 64) == 2
        split = EMULATED["flash_attention"](shape, config, x)["o"]
    monkeypatch.setattr(flash_attention, "batch_parts", lambda kv_heads, rows: 1)
    whole = EMULATED["flash_attention"](shape, config, x)["o"]
    assert torch.equal(split.view(torch.int16), whole.view(torch.int16))


@pytest.mark.parametrize("kernel,shape", [
    ("gemm_bf16", {"M": 48, "K": 896, "N": 640}),
    ("gemm_fp32", {"M": 48, "K": 2048, "N": 256}),
    ("flash_attention", {"heads": 4, "kv_heads": 2, "Lq": 300, "Lk": 300, "head_dim": 64}),
])
def test_blas_ordered_fp32_sums_stay_within_1e6_of_the_exact_tile_order(kernel, shape):
    from npu_deploy.kernels.emulation.emulator import EMULATED
    from npu_deploy.metrics.comparison import compare

    x = seeded_inputs(SPECS[kernel], shape, seed=2)
    config = {**SPECS[kernel].tunables}
    exact = EMULATED[kernel](shape, {**config, "exact_tiles": True}, x)
    fast = EMULATED[kernel](shape, {**config, "exact_tiles": False}, x)
    for name in exact:
        c = compare(exact[name], fast[name])
        # One bf16 ulp where a sum lands on a rounding boundary, otherwise FP32-level.
        assert c.rel_l2 < (1e-3 if exact[name].dtype == torch.bfloat16 else 1e-6), c.rel_l2


@pytest.mark.slow         # 5 s on 2 busy cores: out of the fast core
def test_attentions_pv_as_a_bf16_matmul_is_the_fp32_path_up_to_summation_order(monkeypatch):
    """The fast path multiplies P by V as a bf16 matmul where that adds the same exact
    products in FP32 (`exact_in_bf16_matmul`): the output is the FP32 matmul's but for a
    rare last bf16 bit (another summation order). A V whose products with P could be
    subnormal takes the FP32 matmul, bit for bit."""
    from npu_deploy.kernels.emulation.emulator import EMULATED
    from npu_deploy.kernels.families import flash_attention

    shape = {"heads": 9, "kv_heads": 3, "Lq": 700, "Lk": 700, "head_dim": 64}
    x = seeded_inputs(SPECS["flash_attention"], shape, seed=4)
    config = {**SPECS["flash_attention"].tunables, "exact_tiles": False}
    taken = []
    real = flash_attention.exact_in_bf16_matmul

    def spy(*args):
        taken.append(real(*args))
        return taken[-1]
    monkeypatch.setattr(flash_attention, "exact_in_bf16_matmul", spy)
    fast = EMULATED["flash_attention"](shape, config, x)["o"]
    assert taken and all(taken)
    monkeypatch.setattr(flash_attention, "exact_in_bf16_matmul", lambda *a: False)
    fp32 = EMULATED["flash_attention"](shape, config, x)["o"]
    ulps = (fast.view(torch.int16).int() - fp32.view(torch.int16).int()).abs()
    assert int(ulps.max()) <= 1 and float((ulps > 0).float().mean()) < 1e-3

    tiny = {**x, "v": (x["v"].float() * 2.0 ** -110).to(torch.bfloat16)}
    monkeypatch.setattr(flash_attention, "exact_in_bf16_matmul", spy)
    taken.clear()
    got = EMULATED["flash_attention"](shape, config, tiny)["o"]
    assert taken and not any(taken)
    monkeypatch.setattr(flash_attention, "exact_in_bf16_matmul", lambda *a: False)
    want = EMULATED["flash_attention"](shape, config, tiny)["o"]
    assert torch.equal(got.view(torch.int16), want.view(torch.int16))


def test_gemms_share_a_converted_a_until_a_kernel_writes_it():
    """Consecutive GEMMs on one activation (Q, K, V) convert it to the block format once;
    a kernel that then writes the tensor in place makes the next GEMM convert it again."""
    from npu_deploy.kernels.emulation import bf16_blas

    spec, shape = SPECS["gemm_bf16"], {"M": 64, "K": 256, "N": 128}
    config = {**spec.tunables, "exact_tiles": False, "method": "drain"}   # nearest even
    x = seeded_inputs(spec, shape, seed=3)
    other = seeded_inputs(spec, shape, seed=4)
    backend = EmulatorBackend()
    conversions = []
    real = bf16_blas._quantize_bf16_rows

    def counted(a, *args):
        conversions.append(a.shape)
        return real(a, *args)

    def gemm(b: torch.Tensor) -> torch.Tensor:
        out = {"c": torch.empty(64, 128, dtype=torch.bfloat16)}
        backend.run(spec, shape, config, {"a": x["a"], "b": b}, out)
        return out["c"]

    with pytest.MonkeyPatch.context() as m:
        m.setattr(bf16_blas, "_quantize_bf16_rows", counted)
        first, second = gemm(x["b"]), gemm(other["b"])
        assert conversions.count((64, 256)) == 1      # A, not the B operands (K x N)
        add = {"rows": 64, "width": 256}
        backend.run(SPECS["add"], add, dict(SPECS["add"].tunables),
                    {"a": other["a"], "b": other["a"]}, {"y": x["a"]})    # written in place
        third = gemm(x["b"])
        assert conversions.count((64, 256)) == 2
    want = {"c": torch.empty(64, 128, dtype=torch.bfloat16)}
    EmulatorBackend().run(spec, shape, config, {"a": x["a"].clone(), "b": x["b"]}, want)
    assert torch.equal(third.view(torch.int16), want["c"].view(torch.int16))
    assert not torch.equal(first, third) and not torch.equal(first, second)


@pytest.mark.parametrize("layout", ["seq-first", "head-first"])
def test_rope_partial_rotates_the_leading_dims_and_copies_the_rest(layout):
    """The emulated kernel against the FP32 oracle's own partial rotary: 96 of 128 dims
    rotated by the LUT's first 96 entries, the last 32 of each row passed through bit for
    bit (rope_partial copies them)."""
    from npu_deploy.kernels.families.rope import emulate, lut
    from npu_deploy.oracle.reference import apply_rope, rope_cos_sin

    seq, heads, width, rd = 16, 2, 128, 96
    cos, sin = rope_cos_sin(rd, 10000.0, RopeScaling(), torch.arange(seq))
    table = to_bf16(lut(cos, sin, width))
    assert table.shape == (seq, width) and not table[:, rd:].any()
    x = to_bf16(torch.randn(heads * seq, width, generator=torch.Generator().manual_seed(0)))
    c = {"rope_dim": rd, "layouts": {"x": layout, "y": layout}}
    y = emulate({"rows": heads * seq, "width": width, "seq": seq}, c, {"x": x, "lut": table})["y"]
    rows = x.float().view(seq, heads, width) if layout == "seq-first" \
        else x.float().view(heads, seq, width)
    c_, s_ = (cos[:, None], sin[:, None]) if layout == "seq-first" else (cos, sin)
    want = apply_rope(rows, to_bf16(c_).float(), to_bf16(s_).float()).reshape(-1, width)
    assert torch.equal(y[:, rd:], x[:, rd:])
    assert torch.allclose(y.float(), want, atol=2e-2, rtol=1e-2)
    full = emulate({"rows": heads * seq, "width": width, "seq": seq},
                   {"layouts": c["layouts"]}, {"x": x, "lut": table})["y"]
    assert not torch.equal(full[:, rd:], x[:, rd:])   # without rope_dim the tail rotates


def test_a_padded_prefill_takes_longrope_factors_by_the_prompts_length(tiny_models):
    """tiny-phi3's LongRoPE switches to its long factors past 64 positions. A prompt of 40
    run by a plan padded to 100 must rotate with the short ones, as the oracle and
    transformers do for 40 tokens: the host's table goes by the prompt, not the padding."""
    import dataclasses

    from npu_deploy.kernels.definition.specs import Prefill
    from npu_deploy.kernels.plans.plan import baseline_plan
    from npu_deploy.kernels.plans.plan_runner import PlanRunner
    from npu_deploy.metrics.comparison import compare
    from npu_deploy.oracle.reference import Reference

    loaded = tiny_models["tiny-phi3"]
    a = loaded.args
    tokens = torch.arange(3, 43)
    plan = baseline_plan("tiny-phi3", a, Prefill(100), XDNA2)
    logits = PlanRunner(a, loaded.weights, EMU).run(plan, tokens).logits[0].float()
    short = reference_of(loaded).prefill(tokens)[0][-1]
    always_long = dataclasses.replace(a, rope_scaling=dataclasses.replace(
        a.rope_scaling, short_factor=a.rope_scaling.long_factor))
    long = Reference(always_long, loaded.weights).prefill(tokens)[0][-1]
    assert compare(short, logits).cosine > 0.999
    assert compare(long, logits).cosine < compare(short, logits).cosine - 1e-3
