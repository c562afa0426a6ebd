"""Every weight format through the one interface the kernels will use: bytes of any valid
content and any whole-block shape round-trip bit for bit, and a matrix quantized into any
format dequantizes back near its weights."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_deploy.formats import CODECS, QuantizedMatrix, codec


def valid_bytes(name: str, shape: tuple[int, int], seed: int) -> bytes:
    """Random bytes of a `shape` matrix in format `name`, the AWQ zeros kept to 0..15 (the
    one field whose bytes are not all valid)."""
    fmt = CODECS[name].format
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (fmt.nbytes(shape) // fmt.bytes_per_block,
                                   fmt.bytes_per_block), dtype=np.uint8)
    if name.startswith("awq"):
        blocks[:, fmt.field("zeros").offset:] &= 0xF
    return blocks.tobytes()


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(sorted(CODECS)), row_blocks=st.integers(1, 3),
       col_blocks=st.integers(1, 3), seed=st.integers(0, 2 ** 32 - 1))
def test_any_valid_bytes_round_trip_bit_for_bit(name, row_blocks, col_blocks, seed):
    c = CODECS[name]
    shape = (row_blocks * c.format.block_rows, col_blocks * c.format.block_cols)
    data = valid_bytes(name, shape, seed)
    parts = c.unpack(data, shape)
    assert parts.shape == shape
    assert c.pack(parts) == data
    assert c.unpack(c.pack(parts), shape).same_bits(parts)


@pytest.mark.parametrize("name", sorted(set(CODECS) - {"q4nx-legacy"}))
def test_every_format_quantizes_and_dequantizes_a_matrix(name):
    fmt = CODECS[name].format
    shape = (2 * fmt.block_rows * (32 // fmt.block_rows or 1), 2 * max(fmt.block_cols, 256))
    w = torch.randn(shape, generator=torch.Generator().manual_seed(1)) * 0.05
    m = QuantizedMatrix.quantize(name, w)
    assert len(m.data) == fmt.nbytes(shape)
    back = m.dequantize()
    assert back.dtype == torch.float32 and back.shape == shape
    step = 0.05 * 8 / (127 if name == "gguf-q8_0" else 7.5)     # about one grid step
    assert float((back - w).abs().max()) < step
    assert m.parts().shape == shape


def test_every_format_is_named_by_its_format_and_cites_a_source():
    for name, c in CODECS.items():
        assert codec(name) is c and c.format.name == name
        assert c.format.sources and all(s.path and s.commit for s in c.format.sources)


@pytest.mark.parametrize("name", sorted(CODECS))
def test_unpacked_parts_are_copies_not_views_of_the_bytes(name):
    fmt = CODECS[name].format
    shape = (fmt.block_rows, fmt.block_cols)
    data = bytearray(valid_bytes(name, shape, 0))
    parts = CODECS[name].unpack(data, shape)
    before = CODECS[name].pack(parts)
    data[:] = bytes(len(data))                         # the caller reuses its buffer
    assert CODECS[name].pack(parts) == before
