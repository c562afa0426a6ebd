"""GGUF blocks into the device formats, and what that rounds.

- **GGUF Q4_1 -> Q4NX (additive).** Both are `w = scale*q + min` with one scale and one min
  per 32 consecutive K of a row, so each GGUF block becomes one Q4NX group: the 32 nibbles
  move exactly (re-ordered from GGUF's j / j+16 byte pairs into Q4NX's row pairs); d and m go
  from float16 to bfloat16, rounded to nearest even, which is NOT exact (bf16 keeps 8
  significant bits to fp16's 11; every fp16 value, subnormals included, is inside bf16's
  range, so only the mantissa rounds).
- **GGUF Q4_0 -> Q4_0 in the container.** GGUF stores q + 8 unsigned, the container q
  signed: the nibble q - 8 is exact; d rounds to bf16 as above; the mins field is written
  zero (upstream's `requant_q4_0` does the same, fused_decode/qwen25_3b_requant.py).
- **Padding.** Q4NX needs rows in 32s and K in 256s. A matrix that does not fill whole
  blocks (SmolLM2-135M's K = 576) is padded with zero groups: q = 0, scale = 1, min = 0, so
  the padded weights are exactly 0 and a zero-padded activation sees the same products.
  That is what upstream's quantizer writes for all-zero groups (the zero-scale-to-1 rule of
  `_requant_q4k`; padded rows are "quantized zeros" in qwen25_3b_requant.py's header).
- Q8_0 has no device format upstream (its fused decode and int4 GEMV take 4-bit weights
  only), so it is not repacked.

`repack_error` measures the rounding: the repacked weights dequantized by the device
formula against gguf's own dequantization of the original blocks."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from gguf import GGMLQuantizationType

from .gguf_blocks import GGUF_CODECS
from .layout import QuantParts
from .q4nx import COLS, Q4_0_CODEC, Q4NX_CODEC, ROWS, Q4Container

#: The device format each GGUF block type repacks into.
REPACK_TARGETS: dict[GGMLQuantizationType, Q4Container] = {
    GGMLQuantizationType.Q4_1: Q4NX_CODEC,
    GGMLQuantizationType.Q4_0: Q4_0_CODEC,
}


@dataclass(frozen=True)
class Repacked:
    """A weight matrix in a device format: `data` holds the blocks of the padded `shape`;
    `logical` is the matrix's own (rows, K), at the top left."""

    codec: Q4Container
    data: bytes
    shape: tuple[int, int]
    logical: tuple[int, int]

    def dequantize(self) -> torch.Tensor:
        """The float32 [rows, K] weights of the logical matrix, by the device formula."""
        rows, cols = self.logical
        return self.codec.dequantize(self.data, self.shape)[:rows, :cols].contiguous()


@dataclass(frozen=True)
class RepackError:
    """How far the repacked weights are from gguf's: the largest absolute difference, the
    RMS difference, and the RMS of gguf's weights (for scale), over `count` weights."""

    max_abs: float
    rms: float
    weight_rms: float
    count: int

    @property
    def relative_rms(self) -> float:
        """rms / weight_rms."""
        return self.rms / self.weight_rms if self.weight_rms else 0.0

    def combine(self, other: RepackError) -> RepackError:
        """The error over both sets of weights."""
        n = self.count + other.count

        def pooled(a: float, b: float) -> float:
            return math.sqrt((a * a * self.count + b * b * other.count) / n)

        return RepackError(max(self.max_abs, other.max_abs), pooled(self.rms, other.rms),
                           pooled(self.weight_rms, other.weight_rms), n)


def _pad(t: torch.Tensor, rows: int, cols: int, fill: float) -> torch.Tensor:
    """`t` [r, c] at the top left of a [rows, cols] tensor filled with `fill`."""
    out = torch.full((rows, cols), fill, dtype=t.dtype)
    out[:t.shape[0], :t.shape[1]] = t
    return out


def repack_gguf(data: bytes, shape: tuple[int, int],
                qtype: GGMLQuantizationType) -> Repacked:
    """The GGUF tensor `data` of (rows, K) and block type `qtype` in its device format
    (`REPACK_TARGETS`), padded to whole blocks."""
    target = REPACK_TARGETS.get(qtype)
    if target is None:
        raise ValueError(f"GGUF {qtype.name} has no 4-bit device format to repack into; only "
                         f"{', '.join(t.name for t in REPACK_TARGETS)} do (dequantize it and "
                         f"quantize into q4nx instead)")
    parts = GGUF_CODECS[qtype].unpack(data, shape)
    rows, cols = parts.shape
    padded = (-(-rows // ROWS) * ROWS, -(-cols // COLS) * COLS)
    groups = (padded[0], padded[1] // Q4NX_CODEC.format.group)
    if qtype == GGMLQuantizationType.Q4_1:
        assert parts.offsets is not None
        q = _pad(parts.q, *padded, 0)
        mins = _pad(parts.offsets.to(torch.bfloat16), *groups, 0.0)
    else:
        q = _pad((parts.q.to(torch.int16) - 8).to(torch.int8), *padded, 0)
        mins = torch.zeros(groups, dtype=torch.bfloat16)
    scales = _pad(parts.scales.to(torch.bfloat16), *groups, 1.0)
    return Repacked(target, target.pack(QuantParts(q, scales, mins)), padded, (rows, cols))


def repack_error(data: bytes, shape: tuple[int, int],
                 qtype: GGMLQuantizationType) -> RepackError:
    """What repacking the GGUF tensor `data` rounds, against gguf's dequantization."""
    reference = GGUF_CODECS[qtype].dequantize(data, shape).to(torch.float64)
    diff = repack_gguf(data, shape, qtype).dequantize().to(torch.float64) - reference
    return RepackError(float(diff.abs().max()), float(diff.square().mean().sqrt()),
                       float(reference.square().mean().sqrt()), diff.numel())
