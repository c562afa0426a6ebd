"""Q4NX: the 4-bit device format of upstream's fused decode (`proj_qmm`), in its three
readings of one 5120-byte block: the additive form the current bundles and the kernel use,
the legacy subtractive form of the older bundles, and Q4_0 (signed, scale only) in the
same container.

Every number below is upstream's, at mlir-air e972f2942d41 (2026-08-22):

- **32 rows x 256 K columns a block, groups of 32 along K, 16 rows a row group**:
  `ROW_BLOCK`, `COL_BLOCK`, `GROUP`, `PARALLEL` in
  programming_examples/fused_decode/proj_qmm_pack.py; `Q4NX_ROW_BLOCK_SIZE = 32`,
  `Q4NX_COL_BLOCK_SIZE = 256`, `Q4NX_GROUP_SIZE = 32` in fused_decode/models/*.h (e.g.
  llama3.2-1b.h); the kernel's `pr = 16` rows per step in fused_decode/kernels/q4_k.h.
- **bf16 scales[8 groups][32 rows] at byte 0 (512 B), bf16 mins[8][32] at byte 512
  (512 B)**: the layout comment and `pack_q4k_block` of proj_qmm_pack.py; `q4k_block_t` in
  fused_decode/kernels/model_spec.h (`scales[32*256/32]`, `mins[...]`, then `qs`); the
  kernel reads `scales + row + sub_chunk*M` (q4_k.h, `_qmm_q4k_bf16`), i.e. [group][row].
- **qs[2 row groups][256 columns][8 bytes] at byte 1024 (4096 B), byte =
  (odd row << 4) | even row**: `pack_q4k_block` (`qs[g, h, kk] = (w1 << 4) | w0`, rows
  `g*16 + 2*kk` and `+1`); the kernel loads 128 nibbles (8 columns x 16 rows) per vector
  and extracts one column of 16 rows each 16 nibbles (q4_k.h).
- **5120 bytes = 2560 bf16 a block**: `BLOCK_BF16` in proj_qmm_pack.py.
- **Blocks of a matrix in (row block, column block) order** in a bundle:
  `Q4nxModel.dequant` in programming_examples/llms/llama32_1b_q4nx/llama32_1b_q4nx_weights.py
  (its reshape `(nbi, nbj, 32, 256)`). The decode's memtile-cascade order
  (`pack_q4k_cascade`) is a deployment's concern, not the format's.
- **Additive `w = scale*q + min`, q unsigned**: the kernel (`c += (q*b)*scale`,
  `c += min*sum(b)`, q4_k.h) and the current bundles, whose safetensors header says dtype
  "I8" and shape [n_blocks, 5120] (`Q4nxModel`, llama32_1b_q4nx_weights.py).
- **Legacy subtractive `w = scale*(q - zero)`**, zero unscaled in the mins field: bundles
  whose header says dtype "Q4NX" and the logical shape [M, K] (same file, `Q4nxModel`).
- **Q4_0 in the container: `w = q*scale`, q signed two's complement, mins unused**: the
  `#ifdef Q4_0` branch of q4_k.h (sign fix `(u ^ 8) - 8`), `requant_q4_0` in
  fused_decode/qwen25_3b_requant.py ("mins field is unused", zeros written).
- **Quantizers**: additive Q4NX is upstream's `_requant_q4k` in
  llms/llama32_1b_q4nx/q4nx_requant.py (per-group min/max, scale = (max - min)/15, a zero
  scale replaced by 1, q = clip(round((w - min)/scale), 0, 15), scale and min computed in
  float32, stored as bf16); Q4_0 is `requant_q4_0` in fused_decode/qwen25_3b_requant.py
  (scale = max|w|/8, a zero scale replaced by 1, q = clip(rint(w/scale), -8, 7)). Upstream
  has no quantizer for the legacy form (it only reads old bundles), so neither have we.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .layout import (
    BlockField,
    QuantParts,
    WeightCodec,
    WeightFormat,
    air,
    as_float32,
    bf16_bits,
    bf16_from_bits,
    check_parts,
    owned,
)

ROWS, COLS, GROUP, ROW_GROUP = 32, 256, 32, 16
GROUPS = COLS // GROUP                       # 8 scale groups along a block's K
BLOCK_BYTES = 2 * (2 * GROUPS * ROWS) + ROWS * COLS // 2   # 512 + 512 + 4096 = 5120

_PACK = air("programming_examples/fused_decode/proj_qmm_pack.py", "pack_q4k_block")
_SPEC = air("programming_examples/fused_decode/kernels/model_spec.h", "q4k_block_t")
_KERNEL = air("programming_examples/fused_decode/kernels/q4_k.h", "_qmm_q4k_bf16")
_BUNDLE = air("programming_examples/llms/llama32_1b_q4nx/llama32_1b_q4nx_weights.py",
              "Q4nxModel.dequant")
_REQUANT = air("programming_examples/llms/llama32_1b_q4nx/q4nx_requant.py", "_requant_q4k")
_Q4_0 = air("programming_examples/fused_decode/qwen25_3b_requant.py", "requant_q4_0")


def _fields(nibbles: str, offsets: str) -> tuple[BlockField, ...]:
    half = 2 * GROUPS * ROWS
    return (
        BlockField("scales", "bf16", (GROUPS, ROWS), 0, half, "[group of 32 K][row]"),
        BlockField("mins", "bf16", (GROUPS, ROWS), half, half, f"[group][row]: {offsets}"),
        BlockField("qs", "u4 pairs", (ROWS // ROW_GROUP, COLS, ROW_GROUP // 2), 2 * half,
                   ROWS * COLS // 2,
                   f"[row group of 16][column][byte]; byte b of row group g holds row "
                   f"16g+2b in its low nibble and row 16g+2b+1 in its high one ({nibbles})"),
    )


_ORDER = "row block major: block (i, j) covers rows 32i.., columns 256j.."

Q4NX = WeightFormat(
    "q4nx", ROWS, COLS, GROUP, BLOCK_BYTES, _fields("unsigned 0..15", "the min, added"),
    "w = scale*q + min", _ORDER, (_PACK, _SPEC, _KERNEL, _BUNDLE, _REQUANT))
Q4NX_LEGACY = WeightFormat(
    "q4nx-legacy", ROWS, COLS, GROUP, BLOCK_BYTES,
    _fields("unsigned 0..15", "the unscaled zero point, subtracted"),
    "w = scale*(q - zero)", _ORDER, (_PACK, _BUNDLE))
Q4_0_CONTAINER = WeightFormat(
    "q4_0-container", ROWS, COLS, GROUP, BLOCK_BYTES,
    _fields("signed two's complement -8..7", "unused (zeros when we quantize)"),
    "w = q*scale", _ORDER, (_PACK, _SPEC, _KERNEL, _Q4_0))


def _to_blocks(a: np.ndarray, rows: int, cols: int, per_row: int) -> np.ndarray:
    """Per-row data [rows, nbj*per_row] (per_row items for each block column) as
    [block, row, per_row], blocks in row block major order."""
    nbi, nbj = rows // ROWS, cols // COLS
    return a.reshape(nbi, ROWS, nbj, per_row).transpose(0, 2, 1, 3).reshape(-1, ROWS, per_row)


def _from_blocks(a: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """[block, ROWS, n] in block order back to [rows, nbj*n]."""
    nbi, nbj = rows // ROWS, cols // COLS
    n = a.shape[-1]
    return a.reshape(nbi, nbj, ROWS, n).transpose(0, 2, 1, 3).reshape(rows, nbj * n)


def _nibbles_to_qs(nib: np.ndarray) -> np.ndarray:
    """[block, 32 rows, 256 columns] nibbles (0..15) as the qs bytes [block, 2, 256, 8]."""
    n = nib.reshape(-1, ROWS // ROW_GROUP, ROW_GROUP // 2, 2, COLS)   # [b, g, byte, parity, col]
    packed = n[:, :, :, 0, :] | (n[:, :, :, 1, :] << 4)               # [b, g, byte, col]
    return np.ascontiguousarray(packed.transpose(0, 1, 3, 2))


def _qs_to_nibbles(qs: np.ndarray) -> np.ndarray:
    """The qs bytes [block, 2, 256, 8] as nibbles [block, 32 rows, 256 columns]."""
    pairs = np.stack([qs & 0xF, qs >> 4], axis=-1)                    # [b, g, col, byte, parity]
    return pairs.transpose(0, 1, 3, 4, 2).reshape(-1, ROWS, COLS)


@dataclass(frozen=True)
class Q4Container(WeightCodec):
    """One reading of the Q4NX container: `form` is "additive" (w = scale*q + min),
    "subtractive" (w = scale*(q - zero), the legacy bundles) or "q4_0" (w = q*scale, q
    signed, the mins field carried but unused)."""

    format: WeightFormat
    form: str

    @property
    def signed(self) -> bool:
        return self.form == "q4_0"

    def pack(self, parts: QuantParts) -> bytes:
        """The blocks of `parts`: q [rows, K] (uint8 0..15, or int8 -8..7 for Q4_0), scales
        and offsets (the mins field) bf16 [rows, K/32]."""
        rows, cols = check_parts(self.format, parts, torch.int8 if self.signed else torch.uint8,
                                 torch.bfloat16, torch.bfloat16)
        assert parts.offsets is not None
        q = parts.q.numpy()
        low, high = (-8, 7) if self.signed else (0, 15)
        if q.size and (int(q.min()) < low or int(q.max()) > high):
            raise ValueError(f"{self.format.name}: q must lie in {low}..{high}, got "
                             f"{int(q.min())}..{int(q.max())}")
        nib = _to_blocks(q.view(np.uint8) & 0xF, rows, cols, COLS)
        scales = _to_blocks(bf16_bits(parts.scales), rows, cols, GROUPS).transpose(0, 2, 1)
        mins = _to_blocks(bf16_bits(parts.offsets), rows, cols, GROUPS).transpose(0, 2, 1)
        nb = nib.shape[0]
        blocks = np.concatenate([
            np.ascontiguousarray(scales).view(np.uint8).reshape(nb, -1),
            np.ascontiguousarray(mins).view(np.uint8).reshape(nb, -1),
            _nibbles_to_qs(nib).reshape(nb, -1)], axis=1)
        return blocks.tobytes()

    def unpack(self, data: bytes, shape: tuple[int, int]) -> QuantParts:
        """The q, scales and mins field of the blocks in `data`, a (rows, K) matrix."""
        rows, cols = self.format.check_shape(shape)
        blocks = self.format.check_bytes(data, shape).reshape(-1, BLOCK_BYTES)
        half = 2 * GROUPS * ROWS

        def per_row(raw: np.ndarray) -> torch.Tensor:
            bits = np.ascontiguousarray(raw).view(np.uint16).reshape(-1, GROUPS, ROWS)
            return bf16_from_bits(_from_blocks(bits.transpose(0, 2, 1), rows, cols))

        nib = _from_blocks(_qs_to_nibbles(blocks[:, 2 * half:].reshape(-1, 2, COLS, 8)),
                           rows, cols)
        if self.signed:                          # two's complement nibble: (u ^ 8) - 8
            nib = (nib ^ np.uint8(8)).view(np.int8) - np.int8(8)
        q = owned(nib)
        return QuantParts(q, per_row(blocks[:, :half]), per_row(blocks[:, half:2 * half]))

    def dequantize(self, data: bytes, shape: tuple[int, int]) -> torch.Tensor:
        """The float32 weights, by this form's formula (in float32, products exact)."""
        return self.dequantize_parts(self.unpack(data, shape))

    def dequantize_parts(self, parts: QuantParts) -> torch.Tensor:
        """The float32 weights of `parts`, by this form's formula."""
        assert parts.offsets is not None
        rows, cols = parts.shape
        w = parts.q.to(torch.float32).reshape(rows, cols // GROUP, GROUP)   # a fresh tensor
        scale = parts.scales.to(torch.float32)[..., None]
        if self.form == "q4_0":
            return w.mul_(scale).reshape(rows, cols)
        offset = parts.offsets.to(torch.float32)[..., None]
        if self.form == "additive":
            return w.mul_(scale).add_(offset).reshape(rows, cols)
        return w.sub_(offset).mul_(scale).reshape(rows, cols)

    def quantize(self, weights: torch.Tensor) -> bytes:
        """Upstream's quantizer for this form: `_requant_q4k` (additive) or `requant_q4_0`
        (Q4_0), vectorized; see the module docstring. The legacy form has none."""
        return self.pack(self.quantize_parts(weights))

    def quantize_parts(self, weights: torch.Tensor) -> QuantParts:
        """`quantize`, stopping before the bytes."""
        w = as_float32(weights, self.format.name)
        rows, cols = self.format.check_shape((w.shape[0], w.shape[1]))
        groups = w.reshape(rows, cols // GROUP, GROUP)
        if self.form == "additive":
            low = groups.amin(dim=2)
            scale = (groups.amax(dim=2) - low) / 15.0
            scale = torch.where(scale <= 0, torch.ones_like(scale), scale)
            q = (groups - low[..., None]).div_(scale[..., None]).round_().clamp_(0, 15)
            return QuantParts(q.to(torch.uint8).reshape(rows, cols), scale.to(torch.bfloat16),
                              low.to(torch.bfloat16))
        if self.form == "q4_0":
            amax = groups.abs().amax(dim=2)
            scale = torch.where(amax <= 0, torch.ones_like(amax), amax / 8.0)
            q = (groups / scale[..., None]).round_().clamp_(-8, 7)
            return QuantParts(q.to(torch.int8).reshape(rows, cols), scale.to(torch.bfloat16),
                              torch.zeros_like(scale, dtype=torch.bfloat16))
        raise ValueError(f"{self.format.name}: upstream only reads this legacy form, it has no "
                         f"quantizer for it; quantize into q4nx (additive) instead")


Q4NX_CODEC = Q4Container(Q4NX, "additive")
Q4NX_LEGACY_CODEC = Q4Container(Q4NX_LEGACY, "subtractive")
Q4_0_CODEC = Q4Container(Q4_0_CONTAINER, "q4_0")

#: A bundle tensor's safetensors header dtype -> the codec that reads it (`Q4nxModel`,
#: llms/llama32_1b_q4nx/llama32_1b_q4nx_weights.py): "I8" is the current additive
#: encoding, shape [n_blocks, 5120]; "Q4NX" the legacy subtractive one, shape [M, K].
BUNDLE_HEADER_DTYPES = {"I8": Q4NX_CODEC, "Q4NX": Q4NX_LEGACY_CODEC}


def codec_for_header(dtype: str) -> Q4Container:
    """The codec of a FastFlowLM bundle tensor whose safetensors header says `dtype`."""
    try:
        return BUNDLE_HEADER_DTYPES[dtype]
    except KeyError:
        raise ValueError(f"header dtype {dtype!r} is not a Q4NX bundle encoding; expected one "
                         f"of {', '.join(BUNDLE_HEADER_DTYPES)}") from None
