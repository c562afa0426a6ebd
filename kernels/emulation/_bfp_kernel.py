"""The compiled loops behind `numerics` (numba, cached on disk): the bfp16ebs8 quantizer (from
float32, and from bf16 to bf16), the attention softmax with P's block conversion, the GEMV.
Each has a torch twin in `numerics` that it is tested against bit for bit; no fast-math flag
is used, so every float operation is the IEEE one written here, in the order written here.
Where a loop is arranged for the compiler to vectorize it, its docstring says why it still
computes the same values.

Rows and blocks are spread over numba's threads. They are independent, so no result depends
on the number of threads.

numba keys its on-disk cache (__pycache__/_bfp_kernel.*.nbi) by this file's name and stamp,
not by the module's import name, and a cached entry imports the module it was compiled in
by that name. When the package moves (it did: `kernels` became `npu_deploy.kernels`), this
file must change too, or a checkout's old cache would import a module that no longer
exists.
"""

from __future__ import annotations

import numba
import numpy as np

_F32_BIAS = 127
_F32_MANT = 23


def scale_tables(lsb_offset: int) -> np.ndarray:
    """float32 [4, 256]: for a block exponent field E, the LSB 2^(E-127-lsb_offset), its
    inverse, and the same two after a carry (E+1). An LSB that is not a normal float32, or an
    inverse that overflows, is 0: those blocks take the float64 path."""
    t = np.zeros((4, 256), dtype=np.float32)
    for e in range(255):
        for row, x in ((0, e - _F32_BIAS - lsb_offset), (2, e + 1 - _F32_BIAS - lsb_offset)):
            if -126 <= x <= 126:
                t[row, e] = np.float32(2.0 ** x)
                t[row + 1, e] = np.float32(2.0 ** -x)
    return t


@numba.njit(cache=True, nogil=True, inline="always")
def _quantize_block(x: np.ndarray, bits: np.ndarray, out: np.ndarray, i: int,
                    tables: np.ndarray, lsb_offset: int, top: np.float32) -> bool:
    """Row i of x (float32 [nblocks, block]) as one block, into row i of `out` (not `x`);
    `bits` is x viewed as int32, `top` = 2^(lsb_offset+1), the mantissa that does not fit.
    False, with nothing written, if the block holds an inf or a NaN."""
    block = x.shape[1]
    emax = 0
    for j in range(block):
        emax = max(emax, (bits[i, j] & 0x7FFFFFFF) >> _F32_MANT)
    if emax == 0xFF:
        return False
    inv = tables[1, emax]
    if inv == 0:                         # the LSB is subnormal in float32: float64 here
        _block_float64(x[i], out[i], emax, lsb_offset, top)
        return True
    carry = False
    for j in range(block):
        q = np.rint(x[i, j] * inv)       # exact scaling by a power of two, nearest-even
        carry |= q == top
        out[i, j] = q
    if carry:                            # +top does not fit: the exponent goes up by one
        inv, lsb = tables[3, emax], tables[2, emax]
        for j in range(block):
            out[i, j] = (np.rint(x[i, j] * inv) + np.float32(0.0)) * lsb
    else:
        lsb = tables[0, emax]
        for j in range(block):
            out[i, j] = (out[i, j] + np.float32(0.0)) * lsb   # -0.0 -> +0.0, then scale
    return True


@numba.njit(cache=True, nogil=True)
def _block_float64(x: np.ndarray, out: np.ndarray, emax: int, lsb_offset: int,
                   top: np.float32) -> None:
    lsb = np.float64(2.0) ** (emax - _F32_BIAS - lsb_offset)
    carry = False
    for j in range(x.shape[0]):
        carry |= np.rint(np.float64(x[j]) / lsb) == top
    if carry:
        lsb *= 2.0
    for j in range(x.shape[0]):
        out[j] = np.float32((np.rint(np.float64(x[j]) / lsb) + 0.0) * lsb)


@numba.njit(cache=True, nogil=True, parallel=True)
def quantize_bfp16ebs8(x: np.ndarray, out: np.ndarray, tables: np.ndarray,
                       lsb_offset: int) -> bool:
    """Blocks are the rows of `x` (float32 [nblocks, block]). Each block shares the largest
    exponent field E; values become rint(x / 2^(E-127-lsb_offset)) LSBs (ties to even), and a
    block whose mantissa reaches +2^(lsb_offset+1) moves E up by one and is quantized again.
    Returns False, with `out` unfinished, when a block holds an inf or a NaN.

    Scaling by a power of two is exact in float32 (a result too small to be normal is far
    below half an LSB and rounds to zero either way), so the loop stays in float32."""
    bits = x.view(np.int32)
    nblocks = x.shape[0]
    top = np.float32(2.0 ** (lsb_offset + 1))
    bad = np.zeros(nblocks, dtype=np.bool_)
    for i in numba.prange(nblocks):
        bad[i] = not _quantize_block(x, bits, out, i, tables, lsb_offset, top)
    return not bad.any()


# Blocks per work item of `quantize_bf16_bfp16ebs8`: its float32 scratch is allocated once per
# item.
_BLOCKS_PER_ITEM = 512


@numba.njit(cache=True, nogil=True, parallel=True)
def quantize_bf16_bfp16ebs8(x_bits: np.ndarray, out_bits: np.ndarray, tables: np.ndarray,
                            lsb_offset: int, e_lo: int, e_hi: int) -> int:
    """`quantize_bfp16ebs8` on bf16 blocks, given and returned as their bit patterns (uint16
    [nblocks, block]): each block widened to float32 (exact), quantized by `_quantize_block`,
    the same float32 values written back as bf16 (exact: a block value has at most 8
    significant bits and, in range, is a normal number). Returns 2 when a block holds an inf
    or a NaN, else 1 when a block that is not all zeros has its exponent field outside
    [e_lo, e_hi] (`out_bits` is then unfinished: such a block's values need not be normal
    bf16 numbers), else 0."""
    nblocks, block = x_bits.shape
    top = np.float32(2.0 ** (lsb_offset + 1))
    items = (nblocks + _BLOCKS_PER_ITEM - 1) // _BLOCKS_PER_ITEM
    status = np.zeros(items, dtype=np.int64)
    for item in numba.prange(items):
        b0 = item * _BLOCKS_PER_ITEM
        b1 = min(nblocks, b0 + _BLOCKS_PER_ITEM)
        x = np.empty((b1 - b0, block), dtype=np.float32)
        q = np.empty((b1 - b0, block), dtype=np.float32)
        xb, qb = x.view(np.uint32), q.view(np.uint32)
        bits = x.view(np.int32)
        for i in range(b1 - b0):
            mag = np.int64(0)
            for j in range(block):
                xb[i, j] = np.uint32(x_bits[b0 + i, j]) << np.uint32(16)
                m = np.int64(x_bits[b0 + i, j] & 0x7FFF)
                if m > mag:
                    mag = m
            emax = mag >> 7
            if emax == 0xFF:
                status[item] = 2
                break
            if mag != 0 and not e_lo <= emax <= e_hi:
                status[item] = max(status[item], 1)
                continue
            _quantize_block(x, bits, q, i, tables, lsb_offset, top)
            for j in range(block):
                out_bits[b0 + i, j] = np.uint16(qb[i, j] >> np.uint32(16))
    return status.max() if items else 0


# --- the attention softmax -------------------------------------------------------------------

# exp(x) for x <= 0, in float64 and rounded once to float32: x = k ln2 + r with |r| <= ln2/2
# (Cody-Waite: ln2 in a high and a low part), e^r by its Taylor polynomial of degree 9
# (truncation error below 1e-11 relative), times 2^k built from its bits. Against the
# correctly rounded float32 exp it is off by one ulp at most (measured: 7e-6 of the values).
LOG2E = 1.4426950408889634
LN2_HI = 0.6931471803691238
LN2_LO = 1.9082149292705877e-10
EXP_TAYLOR = (1 / 362880, 1 / 40320, 1 / 5040, 1 / 720, 1 / 120, 1 / 24, 1 / 6, 0.5, 1.0, 1.0)
EXP_MIN_ARG = -110.0    # exp(-110) is below half the smallest float32 subnormal: rounds to 0


@numba.njit(cache=True, nogil=True)
def exp_row(x: np.ndarray, out: np.ndarray, bits: np.ndarray, poly: np.ndarray) -> None:
    """out[j] = exp(x[j]) for float32 x <= 0 (or -inf), as described above. `bits` (int64)
    and `poly` (float64) are scratch at least as long as x. `out` may be `x`."""
    n = x.shape[0]
    for j in range(n):
        xd = max(np.float64(x[j]), EXP_MIN_ARG)
        k = np.rint(xd * LOG2E)
        r = (xd - k * LN2_HI) - k * LN2_LO
        p = EXP_TAYLOR[0]
        for c in EXP_TAYLOR[1:]:
            p = p * r + c
        poly[j] = p
        bits[j] = (np.int64(k) + 1023) << 52          # 2^k, k in [-159, 0]
    pow2 = bits[:n].view(np.float64)
    for j in range(n):
        out[j] = np.float32(poly[j] * pow2[j])


# The softmax's row sum runs in this many FP32 lanes (lane j takes every LANES-th key, in order),
# then the lanes are added by pairwise halving: a vector reduction, as the NPU kernels do theirs.
SOFTMAX_LANES = 16
# Rows per work item: the scratch rows are allocated once per item.
_ROWS_PER_ITEM = 32


@numba.njit(cache=True, nogil=True)
def _softmax_row(s: np.ndarray, scale: np.float32, tables: np.ndarray, e: np.ndarray,
                 exp_bits: np.ndarray, exp_poly: np.ndarray, p: np.ndarray, q: np.ndarray,
                 inv_b: np.ndarray, lsb_b: np.ndarray, mx: np.ndarray,
                 lanes: np.ndarray) -> bool:
    """One row of `softmax_bfp16ebs8`: s (float32 [n], the valid keys) -> q[:nb * 8]
    (nb = ceil(n / 8) blocks; the rest of the row is zeros) and mx[1], the smallest exponent
    field of a nonzero block's largest value (256 when every block is zero); the other arrays
    are scratch. False when a score times the scale is not finite. A function of its own, so
    that the compiler vectorizes its loops (numba's parallel loop does not)."""
    n = s.shape[0]
    ebits = e.view(np.int32)
    for j in range(n):
        e[j] = s[j] * scale
    key = np.int32(-0x7FFFFFFF - 1)
    expo = np.int32(0)
    for j in range(n):
        b = ebits[j]
        c = np.int32(b ^ ((b >> np.int32(31)) & np.int32(0x7FFFFFFF)))
        key = c if c > key else key
        x = np.int32(b & np.int32(0x7F800000))
        expo = x if x > expo else expo
    if expo == np.int32(0x7F800000):     # an inf or a NaN
        return False
    mx[0] = np.int32(key ^ ((key >> np.int32(31)) & np.int32(0x7FFFFFFF)))
    m = mx.view(np.float32)[0]
    for j in range(n):
        e[j] = e[j] - m
    exp_row(e[:n], e[:n], exp_bits, exp_poly)
    lanes[:] = 0.0
    full = n // SOFTMAX_LANES * SOFTMAX_LANES
    for j0 in range(0, full, SOFTMAX_LANES):
        for lane in range(SOFTMAX_LANES):
            lanes[lane] += e[j0 + lane]
    for j in range(full, n):
        lanes[j - full] += e[j]
    width = SOFTMAX_LANES
    while width > 1:
        width //= 2
        for j in range(width):
            lanes[j] = lanes[j] + lanes[j + width]
    total = lanes[0]
    nb = (n + 7) // 8
    pbits = p.view(np.uint32)
    for j in range(n):
        p[j] = e[j] / total
    for j in range(n):                 # float32 -> bf16, nearest-even (finite values)
        b = pbits[j]
        pbits[j] = (b + np.uint32(0x7FFF) + ((b >> np.uint32(16)) & np.uint32(1))) \
            & np.uint32(0xFFFF0000)
    for j in range(n, nb * 8):
        p[j] = 0.0
    small = False
    low = np.uint32(256)
    for i in range(nb):
        j0 = i * 8
        mb = pbits[j0]
        for j in range(1, 8):
            mb = max(mb, pbits[j0 + j])
        ex = mb >> np.uint32(23)
        if mb != 0:
            low = min(low, ex)
        if ex < 8:       # the LSB is not a normal float32: `_quantize_block` below
            small |= mb != 0
            inv_b[i], lsb_b[i] = 0.0, 0.0
        elif (mb >> np.uint32(16)) & np.uint32(0x7F) == np.uint32(0x7F):   # a carry
            inv_b[i], lsb_b[i] = tables[3, ex], tables[2, ex]
        else:
            inv_b[i], lsb_b[i] = tables[1, ex], tables[0, ex]
    for i in range(nb):
        inv, lsb = inv_b[i], lsb_b[i]
        for j in range(8):
            q[i * 8 + j] = (np.rint(p[i * 8 + j] * inv) + np.float32(0.0)) * lsb
    mx[1] = np.int32(low)
    if small:
        p2, q2 = p[:nb * 8].reshape(nb, 8), q[:nb * 8].reshape(nb, 8)
        b2 = p2.view(np.int32)
        for i in range(nb):
            if inv_b[i] == 0.0:
                _quantize_block(p2, b2, q2, i, tables, 6, np.float32(128.0))
    return True


@numba.njit(cache=True, nogil=True, parallel=True)
def softmax_bfp16ebs8(s: np.ndarray, valid: np.ndarray, scale: np.float32, out: np.ndarray,
                      tables: np.ndarray, bad: np.ndarray, out16: np.ndarray,
                      low: np.ndarray) -> None:
    """Row r of `out` (float32 [R, C]), or of `out16` (uint16 [R, C]: the same values as bf16
    bit patterns, exact since each is a bf16 number) when that has R rows: the softmax of
    s[r] * scale over its first valid[r] keys -- t = s * scale - max, e = exp(t)
    (`exp_row`), the sum in SOFTMAX_LANES FP32 lanes, e / sum -- rounded to bf16
    (nearest-even), converted to bfp16ebs8 (blocks of 8 along the keys, `tables` =
    scale_tables(6)); zeros past valid[r]. `out` may be `s` (a row is read
    into scratch before it is written). A row with a score that times the scale is not
    finite gets bad[r] = True and is left as it is, in `s` and `out` (the caller computes it
    with the torch definition, which propagates the value). low[r] (int32) is the smallest
    exponent field of the largest value of a nonzero block of row r (256 when there is none):
    the row's smallest LSB is 2^(low[r] - 133).

    The IEEE operations of `numerics.softmax_bf16` and `to_bfp16` on every value (tested bit
    for bit), laid out so that the compiler vectorizes them. Where the steps differ, they
    give the same values for other reasons:

    * the row max is taken on integer keys that order like the floats (the bits, magnitude
      negated below zero), which vectorizes; the only value it can pick differently is the
      sign of a zero max, and t = s * scale - max, then exp(t), come out the same for +0 and
      -0 (exp(+-0) = 1);
    * a block's carry is read from its largest value's bits: the probabilities are >= 0
      and bf16, so a block's largest value is the one with the largest bits, and its mantissa
      rounds up to +128 LSBs exactly when all 8 bits of its significand are ones (it is
      sig * 2^(E-134), the LSB 2^(E-133), so the mantissa is rint(sig / 2)); a block whose
      LSB is not a normal float32 (exponent field E < 8) goes through `_quantize_block`."""
    rows, cols = s.shape
    nb_max = (cols + 7) // 8
    items = (rows + _ROWS_PER_ITEM - 1) // _ROWS_PER_ITEM
    for item in numba.prange(items):
        exp_bits = np.empty(cols, dtype=np.int64)
        exp_poly = np.empty(cols, dtype=np.float64)
        e = np.empty(cols, dtype=np.float32)
        p = np.zeros(nb_max * 8, dtype=np.float32)
        q = np.zeros(nb_max * 8, dtype=np.float32)
        inv_b = np.empty(nb_max, dtype=np.float32)
        lsb_b = np.empty(nb_max, dtype=np.float32)
        mx = np.empty(2, dtype=np.int32)
        lanes = np.empty(SOFTMAX_LANES, dtype=np.float32)
        qbits = q.view(np.uint32)
        for r in range(item * _ROWS_PER_ITEM, min(rows, (item + 1) * _ROWS_PER_ITEM)):
            n = valid[r]
            bad[r] = not _softmax_row(s[r, :n], scale, tables, e, exp_bits, exp_poly, p, q,
                                      inv_b, lsb_b, mx, lanes)
            if bad[r]:
                low[r] = 0
                continue
            low[r] = mx[1]
            kept = min((n + 7) // 8 * 8, cols)
            if out16.shape[0] == rows:
                row16 = out16[r]
                for j in range(kept):
                    row16[j] = np.uint16(qbits[j] >> np.uint32(16))
                for j in range(kept, cols):
                    row16[j] = 0
            else:
                for j in range(kept):
                    out[r, j] = q[j]
                for j in range(kept, cols):
                    out[r, j] = 0.0


# Rows of W per work item of the GEMV: its row of float32 values is allocated once per item.
_GEMV_ROWS_PER_ITEM = 64


@numba.njit(cache=True, nogil=True, inline="always")
def _gemv_rows(w_bits: np.ndarray, x: np.ndarray, lanes: int, out: np.ndarray, r0: int,
               r1: int) -> None:
    """Rows r0..r1-1 of `gemv_lanes`."""
    k, kp = w_bits.shape[1], x.shape[0]
    bits = np.zeros(kp, dtype=np.uint32)        # the padding stays +0.0
    row = bits.view(np.float32)
    acc = np.empty(lanes, dtype=np.float32)
    for i in range(r0, r1):
        w_row = w_bits[i]
        for j in range(k):                      # bf16 -> float32: the pattern's high half
            bits[j] = np.uint32(np.uint16(w_row[j])) << np.uint32(16)
        acc[:] = 0.0
        for k0 in range(0, kp, lanes):
            # slices indexed by the loop's own counter: an index numba knows is not negative
            # (an offset sum is checked for wrap-around at every access, which keeps the
            # compiler from vectorizing the lanes: 5x slower)
            w_lanes, x_lanes = row[k0:k0 + lanes], x[k0:k0 + lanes]
            for lane in range(lanes):
                acc[lane] += w_lanes[lane] * x_lanes[lane]
        width = lanes
        while width > 1:
            width //= 2
            for lane in range(width):
                acc[lane] = acc[lane] + acc[lane + width]
        out[i] = acc[0]


@numba.njit(cache=True, nogil=True, parallel=True)
def gemv_lanes(w_bits: np.ndarray, x: np.ndarray, lanes: int, out: np.ndarray) -> None:
    """out[i] (float32) = row i of W times x as `numerics.gemv_fp32acc` defines it: W given
    as its bf16 bit patterns (int16 [M, K]), x as float32 zero-padded to a multiple of
    `lanes`; the products (exact in FP32) of W's row, zero-padded the same way, added in
    order into `lanes` FP32 lanes (lane j takes every lanes-th k), then the lanes summed by
    pairwise halving. The same IEEE operations in the same order as the torch definition,
    which it is tested against bit for bit (the padding's +0.0 products included: they turn
    a lane's -0.0 into +0.0 there too). Work items of rows spread over the threads."""
    m = w_bits.shape[0]
    items = (m + _GEMV_ROWS_PER_ITEM - 1) // _GEMV_ROWS_PER_ITEM
    for item in numba.prange(items):
        _gemv_rows(w_bits, x, lanes, out, item * _GEMV_ROWS_PER_ITEM,
                   min(m, (item + 1) * _GEMV_ROWS_PER_ITEM))


@numba.njit(cache=True, nogil=True)
def gemv_lanes_serial(w_bits: np.ndarray, x: np.ndarray, lanes: int, out: np.ndarray) -> None:
    """`gemv_lanes` on the calling thread: for a small W, where waking the threads costs
    more than the rows (a decode step's projections)."""
    _gemv_rows(w_bits, x, lanes, out, 0, w_bits.shape[0])


# --- RMSNorm's lane sums -----------------------------------------------------------------------

@numba.njit(cache=True, nogil=True)
def lane_sums_of_squares(x: np.ndarray, lanes: int, acc: np.ndarray) -> None:
    """acc[r, l] (float32 [rows, lanes]) = the squares of x[r, l], x[r, lanes + l], ... (x
    float32 [rows, width], width a multiple of `lanes`) added in that order, from +0.0: the
    float32 multiply and add of the torch definition (rmsnorm's emulation), one by one, so
    the same bits. Indexed by the loops' own counters so that the lanes vectorize."""
    rows, width = x.shape
    for r in range(rows):
        x_row, a = x[r], acc[r]
        for lane in range(lanes):
            a[lane] = 0.0
        for j0 in range(0, width, lanes):
            v = x_row[j0:j0 + lanes]
            for lane in range(lanes):
                a[lane] += v[lane] * v[lane]
