"""GGUF's Q4_0, Q4_1 and Q8_0 as the `gguf` package reads and writes them. The package does
the dequantization (`gguf.quants.dequantize`), the quantization (`gguf.quants.quantize`) and
the block sizes (`gguf.GGML_QUANT_SIZES`); our code only splits a block into its fields and
joins them back (`unpack`, `pack`), which is what repacking into the device formats needs.

A GGUF tensor of shape (ne0=K, ne1=rows) is `rows` rows of K elements, cut along K into
blocks of 32; `GGUFReader` hands its data as uint8 [rows, K/32 * bytes per block]. A block:

| format | bytes | fields                            | weight                 |
|--------|-------|-----------------------------------|------------------------|
| Q4_0   | 18    | f16 d, 16 bytes of nibbles        | (q - 8)*d, q in 0..15  |
| Q4_1   | 20    | f16 d, f16 m, 16 bytes of nibbles | q*d + m                |
| Q8_0   | 34    | f16 d, 32 int8 q                  | q*d                    |

In the 4-bit blocks byte j holds element j in its low nibble and element j + 16 in its
high one (`Q4_0.dequantize_blocks` and `Q4_1.dequantize_blocks` in gguf/quants.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib.metadata import version

import gguf
import numpy as np
import torch
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from .layout import (
    BlockField,
    QuantParts,
    Upstream,
    WeightCodec,
    WeightFormat,
    as_float32,
    check_parts,
    owned,
)

BLOCK = 32
#: Where these layouts are read from: the installed gguf package (gguf-py of llama.cpp).
GGUF_SOURCE = Upstream("ggml-org/llama.cpp", "gguf-py/gguf/quants.py",
                       f"gguf=={version('gguf')}", "dequantize_blocks, GGML_QUANT_SIZES")

_SPECS: dict[GGMLQuantizationType, tuple[str, str, int]] = {
    # qtype: (formula, q's dtype, bytes of f16 fields before q)
    GGMLQuantizationType.Q4_0: ("w = (q - 8)*d", "u4 pairs", 2),
    GGMLQuantizationType.Q4_1: ("w = q*d + m", "u4 pairs", 4),
    GGMLQuantizationType.Q8_0: ("w = q*d", "i8", 2),
}


def _format(qtype: GGMLQuantizationType) -> WeightFormat:
    formula, q_dtype, head = _SPECS[qtype]
    block, nbytes = GGML_QUANT_SIZES[qtype]
    assert block == BLOCK, (qtype, block)
    fields = [BlockField("d", "f16", (1,), 0, 2, "the block's scale")]
    if head == 4:
        fields.append(BlockField("m", "f16", (1,), 2, 2, "the block's min, added"))
    layout = ("byte j: element j in its low nibble, element j+16 in its high one"
              if q_dtype == "u4 pairs" else "element j at byte j")
    fields.append(BlockField("qs", q_dtype, (nbytes - head,), head, nbytes - head, layout))
    return WeightFormat(f"gguf-{qtype.name.lower()}", 1, BLOCK, BLOCK, nbytes, tuple(fields),
                        formula, "row major: a row's blocks along K, then the next row",
                        (GGUF_SOURCE,))


@dataclass(frozen=True)
class GgufCodec(WeightCodec):
    """One GGUF block type. Parts: q [rows, K] as stored (uint8 nibbles 0..15 for Q4_0 and
    Q4_1, int8 for Q8_0), scales = d float16 [rows, K/32], offsets = m float16 (Q4_1) or
    None."""

    qtype: GGMLQuantizationType
    format: WeightFormat = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "format", _format(self.qtype))

    @property
    def _head(self) -> int:
        return _SPECS[self.qtype][2]

    @property
    def _nibbles(self) -> bool:
        return self.qtype != GGMLQuantizationType.Q8_0

    def _blocks(self, data: bytes | np.ndarray, shape: tuple[int, int]) -> np.ndarray:
        """`data` as [rows, K/32 * bytes per block], the array gguf reads and writes."""
        rows, _ = self.format.check_shape(shape)
        return self.format.check_bytes(data, shape).reshape(rows, -1)

    def pack(self, parts: QuantParts) -> bytes:
        """The blocks of `parts`, bit for bit."""
        q_dtype = torch.uint8 if self._nibbles else torch.int8
        offsets = torch.float16 if self._head == 4 else None
        check_parts(self.format, parts, q_dtype, torch.float16, offsets)
        q: np.ndarray = parts.q.numpy().view(np.uint8).reshape(-1, BLOCK)
        if self._nibbles:
            if q.size and int(q.max()) > 15:
                raise ValueError(f"{self.format.name}: q must lie in 0..15, got up to "
                                 f"{int(q.max())}")
            q = q[:, :BLOCK // 2] | (q[:, BLOCK // 2:] << 4)
        head = [parts.scales.numpy().reshape(-1, 1).view(np.uint8)]
        if parts.offsets is not None:
            head.append(parts.offsets.numpy().reshape(-1, 1).view(np.uint8))
        return np.concatenate([*head, q], axis=1).tobytes()

    def unpack(self, data: bytes, shape: tuple[int, int]) -> QuantParts:
        """The fields of the blocks in `data`, a (rows, K) matrix."""
        rows, cols = self.format.check_shape(shape)
        blocks = self._blocks(data, shape).reshape(-1, self.format.bytes_per_block)
        per_group = (rows, cols // BLOCK)

        def f16(at: int) -> torch.Tensor:
            raw = np.ascontiguousarray(blocks[:, at:at + 2]).view(np.float16)
            return owned(raw.reshape(per_group))

        qs = blocks[:, self._head:]
        if self._nibbles:
            q = owned(np.concatenate([qs & 0xF, qs >> 4], axis=1).reshape(rows, cols))
        else:
            q = owned(qs.view(np.int8).reshape(rows, cols))
        return QuantParts(q, f16(0), f16(2) if self._head == 4 else None)

    def dequantize(self, data: bytes, shape: tuple[int, int]) -> torch.Tensor:
        """gguf's own dequantization, as float32 [rows, K]."""
        out = gguf.quants.dequantize(self._blocks(data, shape), self.qtype)
        return torch.from_numpy(np.ascontiguousarray(out, dtype=np.float32))

    def quantize(self, weights: torch.Tensor) -> bytes:
        """gguf's own quantization (its port of ggml-quants.c's reference quantizers)."""
        w = as_float32(weights, self.format.name)
        self.format.check_shape((w.shape[0], w.shape[1]))
        return bytes(gguf.quants.quantize(w.numpy(), self.qtype).tobytes())


GGUF_Q4_0 = GgufCodec(GGMLQuantizationType.Q4_0)
GGUF_Q4_1 = GgufCodec(GGMLQuantizationType.Q4_1)
GGUF_Q8_0 = GgufCodec(GGMLQuantizationType.Q8_0)
#: The codec of each GGUF block type we read.
GGUF_CODECS = {c.qtype: c for c in (GGUF_Q4_0, GGUF_Q4_1, GGUF_Q8_0)}
