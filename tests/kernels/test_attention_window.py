"""Gemma 3's attention on the NPU path: FlashAttention (and decode attention, which shares
its numerics) with a sliding window as attn_npu2.cc's apply_window_mask keeps it, and the
checker's rules for the window and the softmax scale the kernel compiles."""

from __future__ import annotations

import math

import pytest
import torch

from npu_deploy.kernels import SPECS, XDNA2
from npu_deploy.kernels.definition.checker import check
from npu_deploy.kernels.emulation.emulator import EMULATED, EmulatorBackend
from npu_deploy.kernels.emulation.validate import seeded_inputs, validate_kernel

FA = SPECS["flash_attention"]
PREFILL = {"heads": 4, "kv_heads": 2, "Lq": 200, "Lk": 200, "head_dim": 64}
DECODE = {"heads": 4, "kv_heads": 2, "Lq": 1, "Lk": 150, "head_dim": 64}


def errors(found, kind: str) -> list[str]:
    return [f.message for f in found if f.kind == kind and f.severity == "error"]


@pytest.mark.parametrize("shape", [PREFILL, DECODE], ids=["prefill", "decode"])
@pytest.mark.parametrize("exact", [True, False])
def test_windowed_attention_passes_against_the_windowed_reference(shape, exact):
    """The emulated kernel with window 64 passes the gate against the FP32 reference with
    the same window; the unwindowed kernel fails it (the window matters at 200 tokens)."""
    config = {**FA.tunables, "window": 64, "exact_tiles": exact}
    report = validate_kernel(FA, shape, config, EmulatorBackend())
    assert report.passed, report.summary()
    x = seeded_inputs(FA, shape, seed=3)
    plain = EMULATED["flash_attention"](shape, {**config, "window": None}, x)["o"].float()
    want = EMULATED["flash_attention"](shape, config, x)["o"].float()
    assert (plain - want).abs().max() > 0.05


@pytest.mark.parametrize("exact", [True, False])
def test_keys_older_than_the_window_change_no_bit(exact):
    """A query at position p reads keys in (p - window, p] only: changing K and V at every
    position at or before the last query's p - window changes no output of that query."""
    shape, win = PREFILL, 64
    config = {**FA.tunables, "window": win, "exact_tiles": exact}
    x = seeded_inputs(FA, shape, seed=4)
    last = shape["Lq"] - 1
    old = last - win + 1                  # keys 0 .. last - win are out of the last row's reach
    y = {**x, "k": x["k"].clone(), "v": x["v"].clone()}
    y["k"][:, :old] = -y["k"][:, :old]
    y["v"][:, :old] = 3 * y["v"][:, :old]
    a = EMULATED["flash_attention"](shape, config, x)["o"]
    b = EMULATED["flash_attention"](shape, config, y)["o"]
    assert torch.equal(a[:, last].view(torch.int16), b[:, last].view(torch.int16))
    # ...and the first key inside the window does count
    y["v"][:, old] = 3 * y["v"][:, old] + 1
    c = EMULATED["flash_attention"](shape, config, y)["o"]
    assert not torch.equal(a[:, last], c[:, last])


def test_a_window_must_be_whole_k_chunks():
    """attn_npu2.py's build_module asserts window % lkp == 0: 96 against 64-wide chunks is
    refused in one line that names both, 128 passes."""
    shape = {"heads": 8, "kv_heads": 4, "Lq": 512, "Lk": 512, "head_dim": 64}
    bad = errors(check(FA, shape, {"window": 96}, XDNA2), "window")
    assert len(bad) == 1 and "96" in bad[0] and "k_tile=64" in bad[0]
    assert not errors(check(FA, shape, {"window": 128}, XDNA2), "window")
    assert not errors(check(FA, shape, {}, XDNA2), "window")


def test_only_the_compiled_softmax_scale_is_taken():
    """attn_npu2.cc compiles 1/sqrt(head_dim) into its softmax: Gemma 3's
    query_pre_attn_scalar ** -0.5 passes where it equals that (256 at head_dim 256, as on
    the 4B) and is refused where it does not."""
    shape = {"heads": 8, "kv_heads": 4, "Lq": 512, "Lk": 512, "head_dim": 256}
    config = {"layout": "head-first", "k_tile": 32, "q_tile": 128, "dv_tile": 32}
    assert not errors(check(FA, shape, {**config, "scale": 256 ** -0.5}, XDNA2), "unsupported")
    bad = errors(check(FA, shape, {**config, "scale": 1 / math.sqrt(128)}, XDNA2),
                 "unsupported")
    assert len(bad) == 1 and "1/sqrt(head_dim)=0.0625" in bad[0]


def windowed_smollm2():
    """SmolLM2-135M's shape with a 128-token window on every other layer (Gemma 3's local
    layers; its other additions left out, so the plan can be built today)."""
    from dataclasses import replace

    from npu_deploy.cli.models import model_shape
    from npu_deploy.models.config import FULL, SLIDING

    _, args = model_shape("smollm2-135m")
    return replace(args, sliding_window=128,
                   layer_types=tuple((SLIDING, FULL)[i % 2] for i in range(args.n_layers)))


def test_a_sliding_layers_prefill_program_masks_with_apply_window_mask():
    """The plan hands the local layers' FlashAttention its window; their program calls
    apply_window_mask with the window in K chunks (128 / 64 = 2) and verifies clean, while
    the global layers keep apply_causal_mask."""
    from npu_deploy.kernels.air_programs.air import emit_dispatch
    from npu_deploy.kernels.air_programs.air_verify import verify
    from npu_deploy.kernels.definition.specs import Prefill
    from npu_deploy.kernels.plans.plan import baseline_plan

    args = windowed_smollm2()
    plan = baseline_plan("smollm2-135m", args, Prefill(256), XDNA2)
    attention = {ln.layer: (d, ln) for d in plan.dispatches for ln in d.launches
                 if ln.kernel == "flash_attention"}
    local, glob = attention[0], attention[1]
    assert local[1].config_dict["window"] == 128 and "window" not in glob[1].config_dict
    windowed = emit_dispatch(local[0], XDNA2, args.head_dim)
    assert "CallOp(apply_window_mask, [g_l1, q_block, " in windowed.source
    assert "arith.ConstantOp(i32, 2)])" in windowed.source
    assert "apply_causal_mask" not in windowed.source
    assert verify(windowed) == []
    plain = emit_dispatch(glob[0], XDNA2, args.head_dim)
    assert "apply_causal_mask" in plain.source and "apply_window_mask" not in plain.source


def test_a_sliding_layers_decode_attention_runs_on_the_host_within_its_window():
    """The NPU decode attention scores the whole cache, so a local layer's step moves to the
    host with the reason and its window; the host's attention leaves out the keys older
    than the window (the FP32 reference's rule), and a global layer stays on the NPU."""
    from npu_deploy.kernels.definition.registry import HOST_KERNELS
    from npu_deploy.kernels.definition.specs import Decode
    from npu_deploy.kernels.plans.plan import baseline_plan
    from npu_deploy.kernels.plans.steps import HostStep
    from npu_deploy.oracle import reference as ref_ops

    args = windowed_smollm2()
    plan = baseline_plan("smollm2-135m", args, Decode(299), XDNA2)
    on_host = {s.layer: s for s in plan.steps
               if isinstance(s, HostStep) and s.op == "decode_attention"}
    on_npu = {ln.layer for ln in plan.launches() if ln.kernel == "npu_decode_attention"}
    assert set(on_host) == set(range(0, args.n_layers, 2))
    assert on_npu == set(range(1, args.n_layers, 2))
    local = on_host[0]
    assert local.params_dict == {"window": 128} and "sliding window 128" in local.reason

    heads, kv, hd, lk = args.n_heads, args.n_kv_heads, args.head_dim, 300
    torch.manual_seed(0)
    x = {"q": torch.randn(1, heads * hd).bfloat16(),
         "k": torch.randn(kv, 320, hd).bfloat16(), "v": torch.randn(kv, 320, hd).bfloat16()}
    out: dict[str, torch.Tensor] = {}
    shape = {"heads": heads, "kv_heads": kv, "Lq": 1, "Lk": lk, "head_dim": hd}
    HOST_KERNELS["decode_attention"].host.run(shape, local.params_dict, x.__getitem__,
                                             out.__setitem__)
    q = x["q"].float().view(heads, 1, hd)
    k, v = x["k"][:, lk - 128:lk].float(), x["v"][:, lk - 128:lk].float()
    want = ref_ops.attention(q, k, v, start=127).transpose(0, 1).reshape(1, -1)
    assert torch.equal(out["o"], want.bfloat16())
    full = ref_ops.attention(q, x["k"][:, :lk].float(), x["v"][:, :lk].float(), start=lk - 1)
    assert not torch.equal(out["o"], full.transpose(0, 1).reshape(1, -1).bfloat16())
