"""GGUF blocks repacked into the device formats: the bundled SmolLM2's Q4_1 tensors into
Q4NX, Q4_0 blocks (made by gguf from the bundled weights) into the Q4_0 container. The
nibbles move exactly; only d and m round, from float16 to bfloat16."""

import gguf
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as T

from npu_deploy.formats import (
    GGUF_Q4_0,
    GGUF_Q4_1,
    Q4_0_CODEC,
    Q4NX_CODEC,
    repack_error,
    repack_gguf,
)


@pytest.fixture
def q4_1_tensors(bundled_quantized_tensors):
    """One bundled Q4_1 tensor of each shape: {(rows, K): bytes}."""
    return {shape: data for (qtype, shape), data in bundled_quantized_tensors.items()
            if qtype == T.Q4_1}


def rounding_bound(d: torch.Tensor, m: torch.Tensor | None, cols: int) -> torch.Tensor:
    """Per weight, the most rounding d and m to bf16 can move q*d + m (q <= 15): bf16 keeps
    8 significant bits, so a value moves by at most 2**-8 of itself; plus the two results'
    own float32 roundings (2**-24 of each)."""
    size = 15 * d.float().abs() + (m.float().abs() if m is not None else 0)
    return (size * (2.0 ** -8 + 2.0 ** -23)).repeat_interleave(32, dim=1)[:, :cols]


def test_the_bundled_q4_1_tensors_repack_into_q4nx(q4_1_tensors):
    assert set(q4_1_tensors) == {(576, 576), (192, 576), (1536, 576), (576, 1536)}
    for (rows, cols), data in q4_1_tensors.items():
        source = GGUF_Q4_1.unpack(data, (rows, cols))
        repacked = repack_gguf(data, (rows, cols), T.Q4_1)
        assert repacked.codec is Q4NX_CODEC and repacked.logical == (rows, cols)
        assert repacked.shape == (rows, -(-cols // 256) * 256)
        device = Q4NX_CODEC.unpack(repacked.data, repacked.shape)
        assert torch.equal(device.q[:, :cols], source.q)                 # exact
        assert torch.equal(device.scales[:, :cols // 32], source.scales.to(torch.bfloat16))
        assert torch.equal(device.offsets[:, :cols // 32], source.offsets.to(torch.bfloat16))
        padded = Q4NX_CODEC.dequantize(repacked.data, repacked.shape)[:, cols:]
        assert not padded.any()                                          # zero weights
        err = (repacked.dequantize() - GGUF_Q4_1.dequantize(data, (rows, cols))).abs()
        assert bool((err <= rounding_bound(source.scales, source.offsets, cols)).all())
        assert float(err.max()) > 0                                      # it does round


def test_q4_0_blocks_repack_into_the_q4_0_container(q4_1_tensors):
    weights = GGUF_Q4_1.dequantize(q4_1_tensors[(192, 576)], (192, 576))
    data = GGUF_Q4_0.quantize(weights)
    source = GGUF_Q4_0.unpack(data, (192, 576))
    repacked = repack_gguf(data, (192, 576), T.Q4_0)
    device = Q4_0_CODEC.unpack(repacked.data, repacked.shape)
    assert torch.equal(device.q[:, :576].to(torch.int16), source.q.to(torch.int16) - 8)
    assert not device.offsets.any()
    err = (repacked.dequantize() - GGUF_Q4_0.dequantize(data, (192, 576))).abs()
    assert bool((err <= rounding_bound(source.scales, None, 576)).all())


def test_repack_error_measures_the_rounding(q4_1_tensors):
    data = q4_1_tensors[(576, 576)]
    e = repack_error(data, (576, 576), T.Q4_1)
    diff = repack_gguf(data, (576, 576), T.Q4_1).dequantize() - \
        torch.from_numpy(gguf.quants.dequantize(np.frombuffer(data, np.uint8).reshape(576, -1),
                                                T.Q4_1))
    assert e.count == 576 * 576 and e.max_abs == pytest.approx(float(diff.abs().max()))
    assert e.rms == pytest.approx(float(diff.double().square().mean().sqrt()))
    assert 0 < e.relative_rms < 0.01
    both = e.combine(e)
    assert both.count == 2 * e.count and both.rms == pytest.approx(e.rms)


def test_q8_0_has_no_device_format():
    with pytest.raises(ValueError, match=r"GGUF Q8_0 has no 4-bit device format.*q4nx instead"):
        repack_gguf(b"\0" * 34, (1, 32), T.Q8_0)
