"""The compiled loop behind `numerics._quantize_bfp16ebs8_fast` (numba, cached on disk)."""

from __future__ import annotations

from typing import Any

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, parallel=True)
def quantize_bfp16ebs8(x: np.ndarray, out: np.ndarray, lsb_offset: int) -> bool:
    """Blocks are the rows of `x` (float32 [nblocks, block]). Each block shares the largest
    exponent field E; values become rint(x / 2^(E-127-lsb_offset)) LSBs (ties to even), a
    block whose mantissa reaches +128 moves E up by one and is quantized again. Returns
    False, with `out` unfinished, when a block holds an inf or a NaN. Blocks are spread
    over numba's threads (independent, so the result does not depend on their number).

    Scaling by a power of two is exact in float32 (a result too small to be normal is far
    below half an LSB and rounds to zero either way), so the loop stays in float32."""
    bits = x.view(np.int32)
    nblocks, block = x.shape
    top = np.float32(2.0 ** (lsb_offset + 1))
    bad = np.zeros(nblocks, dtype=np.bool_)
    for i in numba.prange(nblocks):
        emax = 0
        for j in range(block):
            e = (bits[i, j] & 0x7FFFFFFF) >> 23
            emax = max(emax, e)
        if emax == 0xFF:
            bad[i] = True
            continue
        # 2^(E-127-lsb_offset) and its inverse, built from float64 (exact, any E < 255).
        lsb = np.float64(2.0) ** (emax - 127 - lsb_offset)
        if emax - 127 - lsb_offset < -126:
            # The LSB itself is subnormal in float32 (and 1/LSB overflows): float64 here.
            _block_float64(x[i], out[i], lsb, top)
            continue
        inv = np.float32(1.0 / lsb)
        lsb32 = np.float32(lsb)
        carry = False
        for j in range(block):
            q = np.rint(x[i, j] * inv)
            carry |= q == top
            out[i, j] = q
        if carry:
            lsb32 = np.float32(lsb * 2.0)
            inv = np.float32(0.5 / lsb)
            for j in range(block):
                out[i, j] = np.rint(x[i, j] * inv)
        for j in range(block):
            out[i, j] = (out[i, j] + np.float32(0.0)) * lsb32   # -0.0 -> +0.0, then scale
    return not bad.any()


@numba.njit(cache=True, nogil=True)
def _block_float64(x: np.ndarray, out: np.ndarray, lsb: float, top: Any) -> None:
    carry = False
    for j in range(x.shape[0]):
        carry |= np.rint(np.float64(x[j]) / lsb) == top
    if carry:
        lsb *= 2.0
    for j in range(x.shape[0]):
        out[j] = np.float32((np.rint(np.float64(x[j]) / lsb) + 0.0) * lsb)
