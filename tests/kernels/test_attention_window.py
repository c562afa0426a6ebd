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
