"""int4-AWQ against an independent reading of upstream's tile layout
(matrix_vector_multiplication/int4_awq/matvec_int4_packed.py `pack_inputs` at mlir-air
e972f2942d41: per tile Q = m_tile rows of k_chunk/2 bytes, low nibble = even column; then
bf16 S[k_chunk/128][m_tile]; then uint8 Z[k_chunk/128][m_tile]; tiles row tile major), and
against AutoAWQ tensors packed here in AutoAWQ's column order [0, 2, 4, 6, 1, 3, 5, 7]."""

import numpy as np
import pytest
import torch

from npu_deploy.formats import (
    AWQ_INT4,
    AWQ_INT4_CODEC,
    AWQ_INT4_GEMM_CODEC,
    AwqInt4Codec,
    QuantParts,
    from_autoawq,
)

SMALL = AwqInt4Codec("awq-small", 128, 8, 256)


def random_tiles(codec, rows: int, cols: int, seed: int = 0) -> bytes:
    """Random valid tiles: any nibbles, finite bf16 scales, zeros 0..15."""
    rng = np.random.default_rng(seed)
    fmt = codec.format
    tiles = rng.integers(0, 256, (fmt.nbytes((rows, cols)) // fmt.bytes_per_block,
                                  fmt.bytes_per_block), dtype=np.uint8)
    s, z = fmt.field("scales"), fmt.field("zeros")
    scales = rng.uniform(0.005, 0.02, (len(tiles), s.nbytes // 2)).astype(np.float32)
    tiles[:, s.offset:z.offset] = (scales.view(np.uint32) >> 16).astype(np.uint16) \
        .view(np.uint8)
    tiles[:, z.offset:] &= 0xF
    return tiles.tobytes()


def read_documented(data: bytes, rows: int, cols: int, m_tile: int, k_chunk: int):
    """(q, scale, zero) of every weight [rows, cols], read at the documented byte offsets."""
    raw = np.frombuffer(data, np.uint8)
    gpc = k_chunk // 128
    q_bytes, s_bytes = m_tile * k_chunk // 2, 2 * gpc * m_tile
    tile_bytes = q_bytes + s_bytes + gpc * m_tile
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    base = ((r // m_tile) * (cols // k_chunk) + c // k_chunk) * tile_bytes
    row, col = r % m_tile, c % k_chunk
    byte = raw[base + row * (k_chunk // 2) + col // 2]
    q = np.where(col % 2 == 0, byte & 0xF, byte >> 4).astype(np.float32)
    at = base + q_bytes + 2 * ((col // 128) * m_tile + row)
    bits = raw[at].astype(np.uint32) | (raw[at + 1].astype(np.uint32) << 8)
    scale = (bits << 16).view(np.float32)
    zero = raw[base + q_bytes + s_bytes + (col // 128) * m_tile + row].astype(np.float32)
    return q, scale, zero


@pytest.mark.parametrize("codec,rows,cols", [(SMALL, 16, 512), (AWQ_INT4_CODEC, 16, 4096),
                                             (AWQ_INT4_GEMM_CODEC, 32, 256)],
                         ids=["8x256", "gemv-8x2048", "gemm-16x128"])
def test_dequantize_is_the_documented_tile_layout(codec, rows, cols):
    data = random_tiles(codec, rows, cols)
    q, scale, zero = read_documented(data, rows, cols, codec.m_tile, codec.k_chunk)
    got = codec.dequantize(data, (rows, cols)).numpy()
    want = (q - zero) * scale
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    assert codec.pack(codec.unpack(data, (rows, cols))) == data


def test_tile_sizes():
    # 8 rows x 1024 bytes of nibbles + 16 groups x 8 rows of bf16 scales + of uint8 zeros
    assert AWQ_INT4.bytes_per_block == 8 * 1024 + 16 * 8 * 2 + 16 * 8 == 8576
    assert [(f.name, f.offset) for f in AWQ_INT4.fields] == [
        ("q", 0), ("scales", 8192), ("zeros", 8448)]
    assert AWQ_INT4_GEMM_CODEC.format.bytes_per_block == 16 * 64 + 2 * 16 + 16


def test_parts_round_trip():
    rng = np.random.default_rng(3)
    parts = QuantParts(torch.from_numpy(rng.integers(0, 16, (16, 512), dtype=np.uint8)),
                       torch.rand(16, 4).to(torch.bfloat16),
                       torch.from_numpy(rng.integers(0, 16, (16, 4), dtype=np.uint8)))
    assert SMALL.unpack(SMALL.pack(parts), (16, 512)).same_bits(parts)


def test_autoawq_tensors_map_exactly_but_for_the_bf16_scales():
    rng = np.random.default_rng(5)
    k, n = 256, 32
    nib = rng.integers(0, 16, (k, n), dtype=np.uint32)
    zeros = rng.integers(0, 16, (k // 128, n), dtype=np.uint32)
    scales = rng.uniform(0.005, 0.02, (k // 128, n)).astype(np.float16)
    qweight = np.zeros((k, n // 8), np.uint32)
    qzeros = np.zeros((k // 128, n // 8), np.uint32)
    for i, column in enumerate([0, 2, 4, 6, 1, 3, 5, 7]):
        qweight |= nib[:, column::8] << (4 * i)
        qzeros |= zeros[:, column::8] << (4 * i)
    parts = from_autoawq(qweight.view(np.int32), qzeros.view(np.int32), scales)
    assert np.array_equal(parts.q.numpy(), nib.T) and np.array_equal(parts.offsets.numpy(),
                                                                     zeros.T)
    assert torch.equal(parts.scales, torch.from_numpy(scales.T.astype(np.float32)).bfloat16())
    with pytest.raises(ValueError, match=r"AutoAWQ tensors disagree: qweight gives K=256"):
        from_autoawq(qweight.view(np.int32), qzeros.view(np.int32), scales[:, :8])


def test_quantizer_is_upstreams_asymmetric_min_max():
    """scale = (max - min)/15 (1e-7 for a flat group), zero = clip(round(-min/scale)),
    q = clip(round(w/scale + zero)) per row and 128 columns."""
    w = torch.randn(8, 256)
    w[2, 128:] = 0.0
    parts = SMALL.quantize_parts(w)
    chunk = w[5, :128].numpy()
    scale = np.float32(chunk.max() - chunk.min()) / np.float32(15)
    zero = np.clip(np.round(-chunk.min() / scale), 0, 15)
    assert parts.offsets[5, 0] == zero and parts.scales[5, 0] == torch.tensor(scale).bfloat16()
    assert np.array_equal(parts.q[5, :128].numpy(),
                          np.clip(np.round(chunk / scale + zero), 0, 15).astype(np.uint8))
    assert parts.scales[2, 1] == torch.tensor(1e-7).bfloat16()
    assert not SMALL.dequantize_parts(parts)[2, 128:].any()


def test_bad_input_is_a_one_line_value_error():
    with pytest.raises(ValueError, match=r"K=576 is not a multiple of 2048; pad K .* 2048"):
        AWQ_INT4_CODEC.quantize(torch.randn(8, 576))
    with pytest.raises(ValueError, match=r"rows=12 is not a multiple of 8"):
        SMALL.quantize(torch.randn(12, 256))
    with pytest.raises(ValueError, match=r"k_chunk=200 must be an even multiple of the group"):
        AwqInt4Codec("bad", 128, 8, 200)
    with pytest.raises(ValueError, match=r"q and zeros must lie in 0..15"):
        SMALL.pack(QuantParts(torch.full((8, 256), 16, dtype=torch.uint8),
                              torch.ones(8, 2).bfloat16(), torch.zeros(8, 2, dtype=torch.uint8)))
