"""Q4NX and Q4_0-in-the-container against an independent reading of upstream's documented
block layout (fused_decode/proj_qmm_pack.py's header at mlir-air e972f2942d41: bf16
scales[8][32] at byte 0, bf16 mins[8][32] at byte 512, qs[2][256][8] at byte 1024 with
byte = (odd row << 4) | even row; blocks in (row block, column block) order), written here
from those byte offsets without calling the codec."""

import numpy as np
import pytest
import torch

from npu_deploy.formats import (
    Q4_0_CODEC,
    Q4NX,
    Q4NX_CODEC,
    Q4NX_LEGACY_CODEC,
    QuantizedMatrix,
    QuantParts,
    codec_for_header,
)


def random_blocks(rng: np.random.Generator, n_blocks: int) -> bytes:
    """Random valid blocks: finite bf16 scales and mins, any nibbles."""
    blocks = rng.integers(0, 256, (n_blocks, 5120), dtype=np.uint8)
    scales = rng.normal(0, 0.05, (n_blocks, 512)).astype(np.float32)
    blocks[:, :1024] = (scales.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    return blocks.tobytes()


def bf16_value(raw: np.ndarray, offset: np.ndarray) -> np.ndarray:
    """The bf16 at byte `offset` of `raw`, little endian, as float32 (bits << 16)."""
    bits = raw[offset].astype(np.uint32) | (raw[offset + 1].astype(np.uint32) << 8)
    return (bits << 16).view(np.float32)


def read_documented(data: bytes, rows: int, cols: int) -> tuple[np.ndarray, ...]:
    """(nibble, scale, min) of every weight, each [rows, cols], read at the byte offsets of
    upstream's documented layout."""
    raw = np.frombuffer(data, dtype=np.uint8)
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    block = (r // 32) * (cols // 256) + c // 256
    row, col = r % 32, c % 256
    base = block * 5120
    group = col // 32
    scale = bf16_value(raw, base + 2 * (group * 32 + row))
    low = bf16_value(raw, base + 512 + 2 * (group * 32 + row))
    byte = raw[base + 1024 + (row // 16) * 256 * 8 + col * 8 + (row % 16) // 2]
    nibble = np.where(row % 2 == 0, byte & 0xF, byte >> 4).astype(np.int32)
    return nibble, scale, low


def test_a_block_is_5120_bytes_at_upstreams_offsets():
    assert Q4NX.bytes_per_block == 5120
    assert [(f.name, f.offset, f.nbytes) for f in Q4NX.fields] == [
        ("scales", 0, 512), ("mins", 512, 512), ("qs", 1024, 4096)]
    assert (Q4NX.block_rows, Q4NX.block_cols, Q4NX.group) == (32, 256, 32)
    assert Q4NX.nbytes((64, 768)) == 6 * 5120
    assert len(Q4NX_CODEC.quantize(torch.randn(96, 512))) == 6 * 5120


@pytest.mark.parametrize("rows,cols", [(32, 256), (96, 768)])
def test_each_form_dequantizes_as_the_documented_layout_reads(rows, cols):
    data = random_blocks(np.random.default_rng(rows + cols), rows * cols // (32 * 256))
    nibble, scale, low = read_documented(data, rows, cols)
    q = nibble.astype(np.float32)
    signed = np.where(nibble >= 8, nibble - 16, nibble).astype(np.float32)
    expected = {
        Q4NX_CODEC: scale * q + low,
        Q4NX_LEGACY_CODEC: scale * (q - low),
        Q4_0_CODEC: signed * scale,
    }
    for codec, want in expected.items():
        got = codec.dequantize(data, (rows, cols)).numpy()
        assert got.dtype == np.float32
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), codec.format.name
    parts = Q4_0_CODEC.unpack(data, (rows, cols))
    assert np.array_equal(parts.q.numpy(), signed.astype(np.int8))
    assert np.array_equal(parts.offsets.float().numpy(), low[:, ::32])   # unused mins kept


@pytest.mark.parametrize("codec", [Q4NX_CODEC, Q4NX_LEGACY_CODEC, Q4_0_CODEC],
                         ids=lambda c: c.format.name)
def test_bytes_and_parts_round_trip_bit_exactly(codec):
    rng = np.random.default_rng(7)
    data = random_blocks(rng, 12)              # a 96 x 1024 matrix
    assert codec.pack(codec.unpack(data, (96, 1024))) == data
    if codec is Q4_0_CODEC:
        q = torch.from_numpy(rng.integers(-8, 8, (64, 512), dtype=np.int8))
    else:
        q = torch.from_numpy(rng.integers(0, 16, (64, 512), dtype=np.uint8))
    parts = QuantParts(q, torch.randn(64, 16).to(torch.bfloat16),
                       torch.randn(64, 16).to(torch.bfloat16))
    assert codec.unpack(codec.pack(parts), (64, 512)).same_bits(parts)


def test_additive_quantizer_is_upstreams_min_max_rule():
    """Per row and 32-column group: scale = (max - min)/15 (1 for a flat group), min the
    group's min, q = clip(round((w - min)/scale), 0, 15); scale and min stored as bf16."""
    w = torch.randn(32, 512) * 0.1
    w[3, 64:96] = 0.25                           # a flat group
    parts = Q4NX_CODEC.unpack(Q4NX_CODEC.quantize(w), (32, 512))
    for r, g in [(0, 0), (17, 9), (31, 15)]:
        chunk = w[r, 32 * g:32 * g + 32].numpy()
        step = np.float32(chunk.max() - chunk.min()) / np.float32(15)
        q = np.clip(np.round((chunk - chunk.min()) / step), 0, 15)
        assert np.array_equal(parts.q[r, 32 * g:32 * g + 32].numpy(), q.astype(np.uint8))
        assert parts.scales[r, g] == torch.tensor(step).to(torch.bfloat16)
        assert parts.offsets[r, g] == torch.tensor(chunk.min()).to(torch.bfloat16)
    assert parts.scales[3, 2] == 1 and parts.offsets[3, 2] == torch.tensor(0.25).bfloat16()
    assert int(parts.q[3, 64:96].abs().sum()) == 0
    error = (Q4NX_CODEC.dequantize_parts(parts) - w).abs().max()
    assert error <= float(parts.scales.float().max()) * 0.51 + 0.25 * 2 ** -8


def test_q4_0_quantizer_is_upstreams_symmetric_rule():
    """scale = max|w|/8 per group, q = clip(rint(w/scale), -8, 7), mins zero."""
    w = torch.randn(32, 256)
    parts = Q4_0_CODEC.unpack(Q4_0_CODEC.quantize(w), (32, 256))
    chunk = w[5, 32:64].numpy()
    scale = np.float32(np.abs(chunk).max()) / np.float32(8)
    assert np.array_equal(parts.q[5, 32:64].numpy(),
                          np.clip(np.rint(chunk / scale), -8, 7).astype(np.int8))
    assert parts.scales[5, 1] == torch.tensor(scale).bfloat16()
    assert not parts.offsets.any()
    assert int(parts.q.min()) >= -8 and int(parts.q.max()) <= 7


def test_the_legacy_form_has_no_quantizer():
    with pytest.raises(ValueError, match="only reads this legacy form.*quantize into q4nx"):
        Q4NX_LEGACY_CODEC.quantize(torch.randn(32, 256))


def test_a_bundle_header_dtype_selects_the_form():
    assert codec_for_header("I8") is Q4NX_CODEC
    assert codec_for_header("Q4NX") is Q4NX_LEGACY_CODEC
    with pytest.raises(ValueError, match="'F16' is not a Q4NX bundle encoding"):
        codec_for_header("F16")


@pytest.mark.parametrize("call,message", [
    (lambda: Q4NX_CODEC.unpack(b"\0" * 5119, (32, 256)),
     r"5119 bytes given for a 32x256 matrix, which takes 5120"),
    (lambda: Q4NX_CODEC.dequantize(b"\0" * 5120 * 3, (32, 576)),
     r"K=576 is not a multiple of 256; pad K with zero columns to 768"),
    (lambda: Q4NX_CODEC.quantize(torch.randn(48, 256)),
     r"rows=48 is not a multiple of 32; pad with zero rows to 64"),
    (lambda: Q4NX_CODEC.quantize(torch.randn(4, 32, 256)), r"must be a 2-D \[rows, K\]"),
    (lambda: Q4NX_CODEC.quantize(torch.full((32, 256), float("nan"))), r"inf or NaN"),
    (lambda: Q4NX_CODEC.pack(QuantParts(torch.full((32, 256), 16, dtype=torch.uint8),
                                        torch.ones(32, 8).bfloat16(),
                                        torch.ones(32, 8).bfloat16())),
     r"q must lie in 0..15"),
    (lambda: Q4NX_CODEC.pack(QuantParts(torch.zeros(32, 256, dtype=torch.uint8),
                                        torch.ones(32, 8), torch.ones(32, 8).bfloat16())),
     r"scales must be torch.bfloat16 \[32, 8\]"),
    (lambda: QuantizedMatrix("q4nx", (32, 256), b"\0" * 10), r"10 bytes given"),
    (lambda: QuantizedMatrix("q5", (32, 256), b""), r"no weight format 'q5'; known: q4nx"),
])
def test_bad_input_is_a_one_line_value_error(call, message):
    with pytest.raises(ValueError, match=message) as caught:
        call()
    assert "\n" not in str(caught.value)


def test_a_quantized_matrix_gives_its_bytes_and_its_float_weights():
    w = torch.randn(64, 512)
    m = QuantizedMatrix.quantize("q4nx", w)
    assert len(m.data) == 4 * 5120 and m.shape == (64, 512)
    assert torch.equal(m.dequantize(), Q4NX_CODEC.dequantize(m.data, (64, 512)))
    assert m.parts().same_bits(Q4NX_CODEC.quantize_parts(w))
