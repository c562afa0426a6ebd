"""Phase 1's FlashAttention check of every tiny model passes with room to spare at the
gate's seed (issue 25). The reported miss (within_frac 0.99988: 1 element of 8192) was the
former 4-head, head_dim-16 shape: there a row that attends to two keys of opposite sign
(-2.42 and 2.59) has a reference near zero (-0.143) by cancellation, and the BFP16 datapath
(AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16, blocks of 8 along head_dim: two per head at 16)
moves its two softmax weights by ~0.009: |err| 0.0545 against the 0.0523 allowed. That is
the hardware's arithmetic, not an emulator defect; the models now run head_dim 32, where the
worst element of 20 seeds uses 68% of the tolerance."""

from __future__ import annotations

import pytest

from npu_deploy.kernels.definition.hardware import XDNA2
from npu_deploy.kernels.definition.selection import select
from npu_deploy.kernels.definition.specs import SPECS, KernelUse
from npu_deploy.kernels.emulation.emulator import REFERENCE, EmulatorBackend
from npu_deploy.kernels.emulation.validate import (
    atol_for,
    output_buffers,
    phase1_rtol,
    seeded_inputs,
)
from npu_deploy.models.random_models import RANDOM_MODELS

FA = SPECS["flash_attention"]
GATE_SEED = 1                      # pipeline.gates.kernels.KERNEL_SEED


def attention_shape(model: str, seq: int) -> dict[str, int]:
    cfg = RANDOM_MODELS[model][1]
    heads, kv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    return {"heads": heads, "kv_heads": kv, "Lq": seq, "Lk": seq,
            "head_dim": cfg.get("head_dim", cfg["hidden_size"] // heads)}


def tolerance_used(shape: dict[str, int], seed: int) -> float:
    """max |out - ref| / (atol + rtol |ref|) over the output: above 1 fails the gate."""
    config = select(KernelUse("attn", FA, shape), XDNA2).config
    inputs, out = seeded_inputs(FA, shape, seed), output_buffers(FA, shape)
    EmulatorBackend().run(FA, shape, config, inputs, out)
    ref = REFERENCE[FA.name](shape, {**FA.tunables, **config}, inputs)["o"]
    ref, got = ref.reshape(out["o"].shape).double(), out["o"].double()
    return float(((got - ref).abs() / (atol_for(FA, config) + phase1_rtol() * ref.abs())).max())


@pytest.mark.parametrize("seq", (16, 100, 128))
@pytest.mark.parametrize("model", sorted(RANDOM_MODELS))
def test_every_tiny_models_attention_passes_the_gate_with_margin(model, seq):
    assert tolerance_used(attention_shape(model, seq), GATE_SEED) < 0.85


def test_the_reported_miss_is_the_bfp16_datapath_at_head_dim_16():
    # the former tiny-qwen2 (4 heads, 2 KV heads, head_dim 16) at the default 128 tokens
    shape = {"heads": 4, "kv_heads": 2, "Lq": 128, "Lk": 128, "head_dim": 16}
    assert 1.0 < tolerance_used(shape, GATE_SEED) < 1.1
