"""GGUF Q4_0, Q4_1 and Q8_0: our split of a block into its fields, checked bit for bit
against the `gguf` package's own dequantization, on random blocks and on the bundled
SmolLM2 GGUF's real tensors."""

import gguf
import numpy as np
import pytest
import torch
from gguf import GGML_QUANT_SIZES

from npu_deploy.formats import GGUF_Q4_0, GGUF_Q4_1, GGUF_Q8_0, QuantParts

CODECS = [GGUF_Q4_0, GGUF_Q4_1, GGUF_Q8_0]


def random_blocks(codec, rows: int, cols: int, seed: int = 0) -> bytes:
    """Random valid blocks: finite float16 d (and m), any quant bytes."""
    rng = np.random.default_rng(seed)
    size = GGML_QUANT_SIZES[codec.qtype][1]
    blocks = rng.integers(0, 256, (rows * cols // 32, size), dtype=np.uint8)
    head = 4 if codec is GGUF_Q4_1 else 2
    blocks[:, :head] = rng.normal(0, 0.02, (len(blocks), head // 2)).astype(np.float16) \
        .view(np.uint8)
    return blocks.tobytes()


def formula(codec, parts: QuantParts) -> np.ndarray:
    """Each block type's formula applied to our unpacked fields, in float32."""
    rows, cols = parts.shape
    q = parts.q.numpy().astype(np.float32).reshape(rows, cols // 32, 32)
    d = parts.scales.numpy().astype(np.float32)[..., None]
    if codec is GGUF_Q4_0:
        return ((q - 8) * d).reshape(rows, cols)
    if codec is GGUF_Q4_1:
        return (d * q + parts.offsets.numpy().astype(np.float32)[..., None]).reshape(rows, cols)
    return (q * d).reshape(rows, cols)


def same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype == np.float32 and np.array_equal(a.view(np.uint32),
                                                               b.view(np.uint32))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.format.name)
def test_our_fields_give_ggufs_dequantization_bit_for_bit(codec):
    data = random_blocks(codec, 8, 256)
    parts = codec.unpack(data, (8, 256))
    reference = gguf.quants.dequantize(np.frombuffer(data, np.uint8).reshape(8, -1),
                                       codec.qtype)
    assert same(formula(codec, parts), reference)
    assert same(codec.dequantize(data, (8, 256)).numpy(), reference)
    assert codec.pack(parts) == data
    assert codec.unpack(codec.pack(parts), (8, 256)).same_bits(parts)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.format.name)
def test_block_sizes_are_ggufs(codec):
    block, nbytes = GGML_QUANT_SIZES[codec.qtype]
    assert (codec.format.block_cols, codec.format.bytes_per_block) == (block, nbytes)
    assert codec.format.nbytes((3, 64)) == 3 * 2 * nbytes


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.format.name)
def test_quantize_is_ggufs_and_round_trips(codec):
    w = torch.randn(16, 128)
    data = codec.quantize(w)
    assert data == gguf.quants.quantize(w.numpy(), codec.qtype).tobytes()
    assert codec.pack(codec.unpack(data, (16, 128))) == data
    assert float((codec.dequantize(data, (16, 128)) - w).abs().max()) < 0.6


@pytest.fixture
def bundled_tensors(bundled_quantized_tensors):
    """One tensor of each (type, shape) in the bundled GGUF: (codec, (rows, K), bytes)."""
    by_type = {c.qtype: c for c in CODECS}
    return [(by_type[qtype], shape, data)
            for (qtype, shape), data in bundled_quantized_tensors.items()]


def test_the_bundled_ggufs_tensors_read_bit_for_bit(bundled_tensors):
    kinds = {(codec.format.name, shape) for codec, shape, _ in bundled_tensors}
    assert ("gguf-q8_0", (49152, 576)) in kinds and ("gguf-q4_1", (576, 1536)) in kinds
    for codec, shape, data in bundled_tensors:
        rows = min(shape[0], 2048)                  # the embedding's first rows suffice
        part = data[:codec.format.nbytes((rows, shape[1]))]
        parts = codec.unpack(part, (rows, shape[1]))
        reference = gguf.quants.dequantize(np.frombuffer(part, np.uint8).reshape(rows, -1),
                                           codec.qtype)
        assert same(formula(codec, parts), reference), (codec.format.name, shape)
        assert codec.pack(parts) == part


def test_bad_input_is_a_one_line_value_error():
    with pytest.raises(ValueError, match=r"K=40 is not a multiple of 32; pad K .* to 64"):
        GGUF_Q4_1.unpack(b"\0" * 40, (1, 40))
    with pytest.raises(ValueError, match=r"19 bytes given for a 1x32 matrix, which takes 18"):
        GGUF_Q4_0.dequantize(b"\0" * 19, (1, 32))
    with pytest.raises(ValueError, match=r"offsets must be torch.float16 \[1, 1\], got None"):
        GGUF_Q4_1.pack(QuantParts(torch.zeros(1, 32, dtype=torch.uint8),
                                  torch.ones(1, 1, dtype=torch.float16)))
