"""Every weight format by name, and a weight matrix in one of them: what a kernel needs per
weight matrix is its device bytes and the float32 weights they stand for
(`QuantizedMatrix.data`, `QuantizedMatrix.dequantize()`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .awq import AWQ_INT4_CODEC, AWQ_INT4_GEMM_CODEC
from .gguf_blocks import GGUF_Q4_0, GGUF_Q4_1, GGUF_Q8_0
from .layout import QuantParts, WeightCodec
from .q4nx import Q4_0_CODEC, Q4NX_CODEC, Q4NX_LEGACY_CODEC

#: Every format's codec, by the format's name.
CODECS: dict[str, WeightCodec] = {c.format.name: c for c in (
    Q4NX_CODEC, Q4NX_LEGACY_CODEC, Q4_0_CODEC, AWQ_INT4_CODEC, AWQ_INT4_GEMM_CODEC,
    GGUF_Q4_0, GGUF_Q4_1, GGUF_Q8_0)}


def codec(name: str) -> WeightCodec:
    """The codec of the format called `name`, or a one-line ValueError listing them."""
    try:
        return CODECS[name]
    except KeyError:
        raise ValueError(f"no weight format {name!r}; known: {', '.join(CODECS)}") from None


@dataclass(frozen=True)
class QuantizedMatrix:
    """One weight matrix of (rows, K) = `shape` stored in the format called `format`."""

    format: str
    shape: tuple[int, int]
    data: bytes

    def __post_init__(self) -> None:
        self.codec.format.check_bytes(self.data, self.shape)

    @property
    def codec(self) -> WeightCodec:
        """The format's codec."""
        return codec(self.format)

    @classmethod
    def quantize(cls, format: str, weights: torch.Tensor) -> QuantizedMatrix:
        """`weights` [rows, K] quantized into `format` by upstream's quantizer for it."""
        c = codec(format)
        return cls(format, (int(weights.shape[0]), int(weights.shape[1])), c.quantize(weights))

    def parts(self) -> QuantParts:
        """The stored pieces: q, scales and offsets."""
        return self.codec.unpack(self.data, self.shape)

    def dequantize(self) -> torch.Tensor:
        """The float32 [rows, K] weights the bytes stand for."""
        return self.codec.dequantize(self.data, self.shape)

    def rows(self, start: int, stop: int) -> QuantizedMatrix:
        """Rows [start, stop) as a matrix of their own (an LM head's partition): the same
        codes, scales and offsets, packed again (a format's groups run along a row, so rows
        part without re-quantizing; the format checks the cut is whole blocks)."""
        p = self.parts()
        cut = QuantParts(p.q[start:stop], p.scales[start:stop],
                         None if p.offsets is None else p.offsets[start:stop])
        return QuantizedMatrix(self.format, (stop - start, self.shape[1]), self.codec.pack(cut))
