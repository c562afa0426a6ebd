"""The bf16 BLAS path of the emulator's fast GEMM (`numerics.gemm_bfp16` with `exact_tiles`
off and a bf16 output cast to nearest even): bfp16ebs8 operands, every one of them a bf16
number, multiplied by torch's bf16 matmul -- on a CPU with AVX512-BF16, oneDNN, which adds
the exact products in FP32 and rounds C to bf16 once, to nearest even (tested against the
FP32 path: the same arithmetic in another summation order, which the fast path leaves to
BLAS anyway) -- ~3x faster than an FP32 matmul and a cast."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import torch

from .numerics import (
    _F32_EXPONENT_BIAS,
    BFP16EBS8,
    DEFAULT_TILE_K,
    Rounding,
    _bfp16ebs8_tables,
    _check_gemm,
    gemm_bfp16,
    quantize_gemm_b,
)


def gemm_bfp16_blas(a: torch.Tensor, b: torch.Tensor, *, tile_k: int = DEFAULT_TILE_K,
                    out_dtype: torch.dtype = torch.bfloat16, bf16_partials: bool = False,
                    cast: Rounding = "nearest_even", b_quantized: GemmB | None = None,
                    out: torch.Tensor | None = None) -> torch.Tensor:
    """`gemm_bfp16(..., exact_tiles=False)` (the same arguments; `b_quantized` a `GemmB`): a
    bf16 output cast to nearest even without bf16 partials from `gemm_bf16_blas` where that
    applies, anything else from `gemm_bfp16`."""
    _check_gemm("gemm_bfp16", a, b, tile_k, BFP16EBS8.block, out_dtype)
    shape = (*a.shape[:-1], b.shape[1])
    if out is not None and (tuple(out.shape) != shape or out.dtype != out_dtype
                            or not out.is_contiguous()):
        raise ValueError(f"gemm_bfp16: out must be a contiguous {out_dtype} tensor of shape "
                         f"{shape}, got {out.dtype} {tuple(out.shape)}")
    if out_dtype == torch.bfloat16 and not bf16_partials and cast == "nearest_even":
        fast = gemm_bf16_blas(a, b if b_quantized is None else b_quantized, out)
        if fast is not None:
            return fast.view(shape) if out is None else out
    return gemm_bfp16(a, b, tile_k=tile_k, out_dtype=out_dtype, exact_tiles=False,
                      bf16_partials=bf16_partials, cast=cast, out=out,
                      b_quantized=None if b_quantized is None else b_quantized.values)


class GemmB:
    """A static B [K, N] (bf16) converted to bfp16ebs8 once, as a deployment writes a weight
    once: `values` (float32, `quantize_gemm_b`) and, made on first use, `bf16` (the same
    values as bf16 for `gemm_bf16_blas`; None when one is outside its range)."""

    def __init__(self, b: torch.Tensor) -> None:
        self.values = quantize_gemm_b(b)
        self._bf16: tuple[torch.Tensor | None] | None = None

    @property
    def bf16(self) -> torch.Tensor | None:
        if self._bf16 is None:
            self._bf16 = (_bf16_gemm_operand(self.values),)
        return self._bf16[0]


def _bf16_gemm_operand(v: torch.Tensor) -> torch.Tensor | None:
    """bfp16ebs8 values (float32) as bf16, in the same layout (exact: each is a bf16 number),
    or None when a nonzero one is outside [_BF16_GEMM_MIN, _BF16_GEMM_MAX] (a sufficient
    condition for its block to lie within `_BF16_GEMM_EXPONENTS`)."""
    mag = v.abs()
    if not bool(((mag == 0) | ((mag >= _BF16_GEMM_MIN) & (mag <= _BF16_GEMM_MAX))).all()):
        return None
    return v.to(torch.bfloat16)     # preserve_format: a transposed view stays transposed


# The range of block exponent fields (of the block's largest magnitude, before a carry) for
# which `gemm_bf16_blas` hands a block to the bf16 matmul. oneDNN's bf16 dot product
# (AVX512-BF16 vdpbf16ps) treats subnormal inputs as zero and flushes subnormal results, which
# the FP32 accumulator of the emulated MMA does not. Within this range that never happens:
# a nonzero value is a multiple of its LSB 2^(E-133) >= 2^-62 and at most 2^(E-126) <= 2^56
# in magnitude, so every product is a multiple of 2^-124 and at most 2^112, and so is every
# FP32 partial sum of fewer than 2^15 of them (rounding a multiple of 2^-124 to FP32 gives
# one): zero or a normal number, never an overflow. Real weights and activations sit far
# inside it; a block outside it sends the call to the FP32 path.
_BF16_GEMM_EXPONENTS = (71, 182)
_BF16_GEMM_MIN = 2.0 ** (_BF16_GEMM_EXPONENTS[0] - _F32_EXPONENT_BIAS)   # 2^-56
_BF16_GEMM_MAX = 2.0 ** (_BF16_GEMM_EXPONENTS[1] + 1 - _F32_EXPONENT_BIAS)   # 2^56
_BF16_GEMM_MAX_K = 1 << 15


def _quantize_bf16_rows(a: torch.Tensor, exponents: tuple[int, int] = _BF16_GEMM_EXPONENTS
                        ) -> torch.Tensor | None:
    """bf16 A [rows, K] (K a multiple of 8) converted to bfp16ebs8 along K in one compiled
    pass, returned as bf16 (the same values as `_quantize_last_dim`); None when a block holds
    an inf or a NaN or lies outside `exponents` (at least 8: an LSB that is a normal float32,
    so that every value is a bf16 number; `_BF16_GEMM_EXPONENTS` by default)."""
    from ._bfp_kernel import quantize_bf16_bfp16ebs8

    block = BFP16EBS8.block
    src = a.contiguous().view(torch.int16).view(-1, block)
    out = torch.empty(a.shape, dtype=torch.bfloat16)
    status = quantize_bf16_bfp16ebs8(src.numpy().view(np.uint16),
                                     out.view(torch.int16).view(-1, block).numpy()
                                     .view(np.uint16), _bfp16ebs8_tables(),
                                     BFP16EBS8.lsb_offset, max(exponents[0], 8), exponents[1])
    return out if status == 0 else None


def gemm_bf16_blas(a: torch.Tensor, b: torch.Tensor | GemmB,
                    out: torch.Tensor | None) -> torch.Tensor | None:
    """`numerics.gemm_bfp16`'s BLAS-ordered C for a bf16 output (nearest-even cast), as [rows, N]: A
    and B converted to bfp16ebs8 and handed to a bf16 matmul, which (oneDNN on a CPU with
    AVX512-BF16; tested against the FP32 path) multiplies them exactly, adds the products in
    FP32 and rounds C to bf16 once, to nearest even. None when an operand is out of the range
    where that holds (`_BF16_GEMM_EXPONENTS`), or K is not a multiple of the block."""
    k, n = (b.values if isinstance(b, GemmB) else b).shape
    if k % BFP16EBS8.block or k >= _BF16_GEMM_MAX_K:
        return None
    shared = _SHARED_A.get()
    a_q = _quantize_bf16_rows(a.reshape(-1, k)) if shared is None \
        else shared.convert(a.reshape(-1, k))
    if a_q is None:
        return None
    if isinstance(b, GemmB):
        b_q = b.bf16
    elif b.dtype == torch.bfloat16:
        b_q = _quantize_bf16_rows(b.t())
        b_q = None if b_q is None else b_q.t()
    else:       # a quantize_gemm_b result (float32)
        b_q = _bf16_gemm_operand(b)
    if b_q is None:
        return None
    if out is None:
        return torch.mm(a_q, b_q)
    return torch.mm(a_q, b_q, out=out.view(-1, n))


def block_exponents(v: torch.Tensor) -> tuple[int, int]:
    """The smallest and the largest exponent field E of a nonzero block's largest magnitude,
    over the bfp16ebs8 blocks of `v` (float32 [..., K], blocked along the last dim, as
    `to_bfp16` leaves them); (256, 0) when every block is zero. A block's nonzero values are
    multiples of its LSB 2^(E - 133) and at most 2^(E - 126) in magnitude."""
    block = BFP16EBS8.block
    mag = torch.nn.functional.pad(v.abs(), (0, -v.shape[-1] % block))
    top = mag.reshape(-1, block).amax(dim=1)
    fields = (top[top > 0].view(torch.int32) >> 23)
    if not fields.numel():
        return 256, 0
    return int(fields.min()), int(fields.max())


def exact_in_bf16_matmul(low_a: int, high_a: int, low_b: int, high_b: int, k: int) -> bool:
    """Whether a bf16 matmul (oneDNN's vdpbf16ps: subnormal inputs read as zero, subnormal
    results flushed) of bfp16ebs8 operands A and B with these block exponent ranges
    (`block_exponents`) along a K of k adds the exact products in FP32 as the FP32 path does:
    every nonzero value is a normal float (E >= 8), every product a multiple of 2^-124
    (LSBs 2^(low_a - 133) * 2^(low_b - 133)), so every partial sum is zero or normal, and no
    sum of k products reaches 2^127 (products at most 2^(high_a + high_b - 252)). The GEMM's
    fixed range `_BF16_GEMM_EXPONENTS` is the case of two equal ranges."""
    if low_a == 256 or low_b == 256:          # a zero operand: every sum is +-0 either way
        return True
    return (min(low_a, low_b) >= 8 and low_a + low_b >= 142
            and high_a + high_b + max(k - 1, 1).bit_length() <= 379)


class SharedA:
    """A operands converted by `gemm_bf16_blas`, kept for the next GEMMs that read the same
    activation (a layer's Q, K and V projections read one, its gate and up another). An entry
    is keyed by the tensor's storage, offset, shape, strides and dtype and holds the tensor,
    so its memory is not reused while it is kept. Nothing tells it that a tensor was written
    in place (inference tensors keep no version, and a compiled kernel writes through a
    numpy view), so whoever runs kernels calls `forget` with every tensor they write: the
    emulator backend does, for every output of every kernel."""

    _MAX = 4

    def __init__(self) -> None:
        self._kept: dict[tuple, tuple[torch.Tensor, torch.Tensor | None]] = {}

    def convert(self, a: torch.Tensor) -> torch.Tensor | None:
        key = (a.untyped_storage().data_ptr(), a.storage_offset(), tuple(a.shape), a.stride(),
               a.dtype)
        hit = self._kept.get(key)
        if hit is None:
            if len(self._kept) >= self._MAX:
                del self._kept[next(iter(self._kept))]
            hit = self._kept[key] = (a, _quantize_bf16_rows(a))
        return hit[1]

    def forget(self, written: torch.Tensor) -> None:
        """Drop what was converted from `written`'s storage."""
        ptr = written.untyped_storage().data_ptr()
        for key in [k for k in self._kept if k[0] == ptr]:
            del self._kept[key]


_SHARED_A: contextvars.ContextVar[SharedA | None] = contextvars.ContextVar("shared_a",
                                                                            default=None)


@contextmanager
def sharing_a(shared: SharedA) -> Iterator[SharedA]:
    """GEMMs run inside take their converted A operands from `shared`."""
    token = _SHARED_A.set(shared)
    try:
        yield shared
    finally:
        _SHARED_A.reset(token)
