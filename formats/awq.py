"""int4-AWQ: the 4-bit format of upstream's int4 GEMV and GEMM (`matvec_int4_bf16_packed`,
`matmul_int4_bf16_packed` in mv_int4_bf16.cc), `w = (q - zero)*scale` with groups of 128
along K, and the AutoAWQ checkpoint tensors it is repacked from.

Every fact below is upstream's, at mlir-air e972f2942d41 (2026-08-22):

- **A block is one kernel-call tile of `m_tile` output rows x `k_chunk` K columns, three
  slabs back to back: Q = m_tile*k_chunk/2 bytes, the rows one after the other, byte i of a
  row = column 2i in its low nibble and column 2i+1 in its high one; S = bf16
  [k_chunk/group][m_tile]; Z = uint8 [k_chunk/group][m_tile] (a uint4 zero a byte)**:
  `pack_inputs` and its header comment in
  programming_examples/matrix_vector_multiplication/int4_awq/matvec_int4_packed.py; the
  kernel's comment and its reads `a_z[g * m + row]` in mv_int4_bf16.cc (same directory).
- **The GEMV's tile is 8 rows x 2048 columns** (`build_module(..., GS=128, M_TILE=8,
  K_CHUNK=2048, ...)` there; `repack_for_gemv` in
  programming_examples/llms/llama32_1b_int4/awq_repacker.py), **the prefill GEMM's 16 x
  128** (`awq_pack_for_npu(..., n_tile=16, k_chunk=128)` in llms/llama32_1b_int4/awq_pack.py,
  `pack_inputs` of programming_examples/matrix_multiplication/int4_awq/matmul_int4_packed.py,
  its W_q [N, K/2] output-major, the same three slabs).
- **Tiles in (row tile, K chunk) order**: `pack_inputs`' loops (launch, core, row tile,
  K chunk) visit row tiles in increasing order for any core count, so the order is row tile
  major whatever N_CORES and M_PER_LAUNCH are (`[N_div, K_div]` for the GEMM).
- **`w = (q - zero)*scale`**: `cpu_reference` of matvec_int4_packed.py, `awq_dequant_layer`
  in awq_pack.py, the kernel comment of mv_int4_bf16.cc.
- **AutoAWQ's tensors** (`from_autoawq`): qweight int32 [K, N/8] and qzeros int32
  [K/128, N/8], 8 nibbles an int32 along N, the nibble at bits 4i holding column
  8*block + [0, 2, 4, 6, 1, 3, 5, 7][i]; scales fp16 [K/128, N], cast to bf16 on repack
  (lossy, as upstream does): `AWQ_PACK_ORDER`, `unpack_awq_int32`, `repack_hf_awq_linear`
  in awq_repacker.py.
- **Quantizer**: `fake_quantize_awq_int4` of awq_pack.py: per-group min/max, scale =
  (max - min)/15 (a zero scale replaced by 1e-7), zero = clip(round(-min/scale), 0, 15),
  q = clip(round(w/scale + zero), 0, 15), in float32; the scale stored as bf16.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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

_DIR = "programming_examples/matrix_vector_multiplication/int4_awq/"
_GEMV_PACK = air(_DIR + "matvec_int4_packed.py", "pack_inputs")
_KERNEL = air(_DIR + "mv_int4_bf16.cc", "matvec_int4_bf16_packed")
_GEMM_PACK = air("programming_examples/matrix_multiplication/int4_awq/matmul_int4_packed.py",
                 "pack_inputs")
_REPACK = air("programming_examples/llms/llama32_1b_int4/awq_repacker.py",
              "repack_hf_awq_linear")
_QUANT = air("programming_examples/llms/llama32_1b_int4/awq_pack.py", "fake_quantize_awq_int4")

#: AutoAWQ's order of the 8 columns packed into one int32 (awq_repacker.py AWQ_PACK_ORDER).
AWQ_PACK_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)


def _format(name: str, group: int, m_tile: int, k_chunk: int) -> WeightFormat:
    """The int4-AWQ format of one tile shape."""
    gpc = k_chunk // group
    q_bytes, s_bytes = m_tile * k_chunk // 2, 2 * gpc * m_tile
    fields = (
        BlockField("q", "u4 pairs", (m_tile, k_chunk // 2), 0, q_bytes,
                   "[row][byte]; byte i holds column 2i in its low nibble, 2i+1 in its high"),
        BlockField("scales", "bf16", (gpc, m_tile), q_bytes, s_bytes, "[group of 128 K][row]"),
        BlockField("zeros", "u8", (gpc, m_tile), q_bytes + s_bytes, gpc * m_tile,
                   "[group][row], a uint4 zero point a byte"),
    )
    return WeightFormat(name, m_tile, k_chunk, group, q_bytes + s_bytes + gpc * m_tile, fields,
                        "w = (q - zero)*scale",
                        "row tile major: tile (i, j) covers rows m_tile*i.., columns k_chunk*j..",
                        (_GEMV_PACK, _KERNEL, _GEMM_PACK, _REPACK, _QUANT))


@dataclass(frozen=True)
class AwqInt4Codec(WeightCodec):
    """int4-AWQ tiles of `m_tile` rows x `k_chunk` columns, groups of `group` along K."""

    name: str = "awq-int4"
    group: int = 128
    m_tile: int = 8
    k_chunk: int = 2048
    format: WeightFormat = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.k_chunk % self.group or self.k_chunk % 2:
            raise ValueError(f"{self.name}: k_chunk={self.k_chunk} must be an even multiple of "
                             f"the group ({self.group})")
        object.__setattr__(self, "format",
                           _format(self.name, self.group, self.m_tile, self.k_chunk))

    def _tiles(self, a: np.ndarray, rows: int, per_tile_cols: int) -> np.ndarray:
        """[rows, nbj*per_tile_cols] as [tile, m_tile, per_tile_cols], row tile major."""
        nbi, nbj = rows // self.m_tile, a.shape[1] // per_tile_cols
        return (a.reshape(nbi, self.m_tile, nbj, per_tile_cols).transpose(0, 2, 1, 3)
                .reshape(nbi * nbj, self.m_tile, per_tile_cols))

    def _untile(self, a: np.ndarray, rows: int) -> np.ndarray:
        """[tile, m_tile, n] back to [rows, nbj*n]."""
        nbi = rows // self.m_tile
        nbj, n = a.shape[0] // nbi, a.shape[2]
        return a.reshape(nbi, nbj, self.m_tile, n).transpose(0, 2, 1, 3).reshape(rows, nbj * n)

    def pack(self, parts: QuantParts) -> bytes:
        """The tiles of `parts`: q uint8 [rows, K] (0..15), scales bf16 and zeros uint8
        [rows, K/group]."""
        rows, cols = check_parts(self.format, parts, torch.uint8, torch.bfloat16, torch.uint8)
        assert parts.offsets is not None
        q, zeros = parts.q.numpy(), parts.offsets.numpy()
        if q.size and (int(q.max()) > 15 or int(zeros.max()) > 15):
            raise ValueError(f"{self.name}: q and zeros must lie in 0..15, got up to "
                             f"{int(q.max())} and {int(zeros.max())}")
        gpc = self.k_chunk // self.group
        qb = self._tiles(q[:, 0::2] | (q[:, 1::2] << 4), rows, self.k_chunk // 2)
        sb = self._tiles(bf16_bits(parts.scales), rows, gpc).transpose(0, 2, 1)
        zb = self._tiles(zeros, rows, gpc).transpose(0, 2, 1)
        nb = qb.shape[0]
        return np.concatenate([qb.reshape(nb, -1),
                               np.ascontiguousarray(sb).view(np.uint8).reshape(nb, -1),
                               np.ascontiguousarray(zb).reshape(nb, -1)], axis=1).tobytes()

    def unpack(self, data: bytes, shape: tuple[int, int]) -> QuantParts:
        """The q, scales and zeros of the tiles in `data`, a (rows, K) matrix."""
        rows, cols = self.format.check_shape(shape)
        fmt = self.format
        tiles = fmt.check_bytes(data, shape).reshape(-1, fmt.bytes_per_block)
        qf, sf, zf = fmt.fields
        gpc = self.k_chunk // self.group
        qb = self._untile(tiles[:, :qf.nbytes].reshape(-1, self.m_tile, self.k_chunk // 2), rows)
        q = np.stack([qb & 0xF, qb >> 4], axis=-1).reshape(rows, cols)
        s_bits = np.ascontiguousarray(tiles[:, sf.offset:zf.offset]).view(np.uint16)
        scales = self._untile(s_bits.reshape(-1, gpc, self.m_tile).transpose(0, 2, 1), rows)
        zeros = self._untile(tiles[:, zf.offset:].reshape(-1, gpc, self.m_tile)
                             .transpose(0, 2, 1), rows)
        return QuantParts(owned(q), bf16_from_bits(scales), owned(zeros))

    def dequantize(self, data: bytes, shape: tuple[int, int]) -> torch.Tensor:
        """The float32 weights, (q - zero)*scale (exact in float32)."""
        return self.dequantize_parts(self.unpack(data, shape))

    def dequantize_parts(self, parts: QuantParts) -> torch.Tensor:
        """The float32 weights of `parts`, (q - zero)*scale."""
        assert parts.offsets is not None
        rows, cols = parts.shape
        w = parts.q.to(torch.float32).reshape(rows, cols // self.group, self.group)
        w.sub_(parts.offsets.to(torch.float32)[..., None])
        return w.mul_(parts.scales.to(torch.float32)[..., None]).reshape(rows, cols)

    def quantize(self, weights: torch.Tensor) -> bytes:
        """Upstream's `fake_quantize_awq_int4`, vectorized (module docstring)."""
        return self.pack(self.quantize_parts(weights))

    def quantize_parts(self, weights: torch.Tensor) -> QuantParts:
        """`quantize`, stopping before the bytes."""
        w = as_float32(weights, self.name)
        rows, cols = self.format.check_shape((w.shape[0], w.shape[1]))
        groups = w.reshape(rows, cols // self.group, self.group)
        low = groups.amin(dim=2)
        scale = (groups.amax(dim=2) - low) / 15.0
        scale = torch.where(scale == 0, torch.full_like(scale, 1e-7), scale)
        zero = torch.round(-low / scale).clamp(0, 15)
        q = (groups / scale[..., None]).add_(zero[..., None]).round_().clamp_(0, 15)
        return QuantParts(q.to(torch.uint8).reshape(rows, cols), scale.to(torch.bfloat16),
                          zero.to(torch.uint8))


def _awq_nibbles(packed: torch.Tensor | np.ndarray, what: str) -> np.ndarray:
    """AutoAWQ int32 [outer, N/8] as uint8 nibbles [outer, N], columns in natural order."""
    a = np.asarray(packed)
    if a.dtype not in (np.int32, np.uint32) or a.ndim != 2:
        raise ValueError(f"AutoAWQ {what} must be a 2-D int32 tensor, got {a.dtype} "
                         f"{list(a.shape)}")
    shifts = (np.arange(8, dtype=np.uint32) * 4)
    nib = ((a.view(np.uint32)[..., None] >> shifts) & 0xF).astype(np.uint8)
    return nib[..., np.argsort(AWQ_PACK_ORDER)].reshape(a.shape[0], a.shape[1] * 8)


def from_autoawq(qweight: torch.Tensor | np.ndarray, qzeros: torch.Tensor | np.ndarray,
                 scales: torch.Tensor | np.ndarray, group: int = 128) -> QuantParts:
    """An AutoAWQ linear's qweight [K, N/8], qzeros [K/group, N/8] (int32) and scales
    [K/group, N] as our parts [N rows, K]: nibbles and zeros exact, scales rounded to bf16
    (upstream's `repack_hf_awq_linear`, awq_repacker.py)."""
    q_kn = _awq_nibbles(qweight, "qweight")
    z_gn = _awq_nibbles(qzeros, "qzeros")
    k, n = q_kn.shape
    s = torch.as_tensor(scales)
    if k % group or z_gn.shape != (k // group, n) or tuple(s.shape) != (k // group, n):
        raise ValueError(f"AutoAWQ tensors disagree: qweight gives K={k}, N={n}, group {group} "
                         f"wants qzeros [{k // group}, {n // 8}] and scales [{k // group}, {n}], "
                         f"got {list(z_gn.shape)} (unpacked) and {list(s.shape)}")
    return QuantParts(owned(q_kn.T),
                      s.to(torch.float32).T.contiguous().to(torch.bfloat16),
                      owned(z_gn.T))


#: The decode GEMV's tile (matvec_int4_packed.build_module's defaults).
AWQ_INT4_CODEC = AwqInt4Codec()
AWQ_INT4 = AWQ_INT4_CODEC.format
#: The prefill GEMM's tile (awq_pack.awq_pack_for_npu's defaults).
AWQ_INT4_GEMM_CODEC = AwqInt4Codec("awq-int4-gemm", 128, 16, 128)
