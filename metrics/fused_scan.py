"""The fused scan of `compare` (comparison.py): one numba kernel per block that reads each
element pair once and keeps every sum, maximum and count in registers, run over whole blocks
by a few worker threads and merged in order into the same running state (`_Scan`) as the
torch scan, which takes every block the kernel skips (a NaN, an infinity)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import pairwise
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np
from llvmlite import ir  # numba's own code generator: the intrinsics below emit its IR
from numba import njit, types
from numba.extending import intrinsic

if TYPE_CHECKING:
    from .comparison import ArrayLike, _Scan

# Within a chunk, co-moments come from the raw sums only when that loses at most 4 bits:
# sum(x^2) / M2 = 1 + mean^2/var <= 16. Otherwise the chunk is centred first (two-pass).
_RAW_MOMENTS_MAX_CONDITION = 16.0


# --- the fused scan ----------------------------------------------------------------------
#
# One pass of one loop per block reads each element pair once and keeps every sum, maximum
# and count in registers; LLVM vectorizes it (8 float64 lanes with AVX-512), so it runs at
# memory bandwidth. Measured on a 100M-element float32 pair, 2-core AMD EPYC (Zen 5): 25 ms
# on one thread (32 GB/s of input), vs ~260 ms for the torch scan's ~13 float64 ops a chunk.
#
# Fast-math, but only reassociation (for vectorized sums), contraction (FMA), reciprocals
# and signed zeros: no 'nnan'/'ninf', so a NaN or an infinity reaches the sums as IEEE says
# and the finiteness check that sends such a block to the torch scan cannot be folded away.
_FASTMATH = {"reassoc", "contract", "arcp", "nsz"}
# Sums are taken over spans of 1024 elements, then added up: a vector lane adds at most 128
# terms before its sum is folded in, and a 2**18-element block adds 256 span sums. One flat
# loop would add up to 32768 terms per lane, losing up to ~1e-12 relative (and a constant
# input's mean by more than the 64 ulps the pearson check allows). Measured cost: ~4%.
_SUM_SPAN = 1024
_MOMENTS = 6  # acc[:6] = n, mean_r, mean_c, m2_r, m2_c, c_rc (the layout _merge_moments uses)
# The rest of a fused worker's accumulator (one float64 array, indices exact below 2**53).
_ABS_D, _ABS_R, _MAX_D, _OUTSIDE, _WORST, _WORST_AT = range(_MOMENTS, _MOMENTS + 6)


def _new_acc(worst: float) -> np.ndarray[Any, np.dtype[np.float64]]:
    """An empty accumulator whose worst element must beat `worst` (the record so far)."""
    acc = np.zeros(_MOMENTS + 6)
    acc[_WORST], acc[_WORST_AT] = worst, -1  # -1: none found yet
    return acc


# numba intrinsics: each function below types a call inside a kernel and emits its LLVM IR;
# the names they are bound to carry the signature kernels call them with.

def _as_float64_ir(typingctx: Any, x: Any) -> Any:
    """One element as float64, exactly: float32 and float64 as they are, int16 as the bits
    of an IEEE half and uint16 as the bits of a bfloat16 (numba has no 16-bit floats)."""
    if not (isinstance(x, types.Float) or x in (types.int16, types.uint16)):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        (value,) = args
        if x == types.int16:
            return builder.fpext(builder.bitcast(value, ir.HalfType()), ir.DoubleType())
        if x == types.uint16:  # bfloat16 is the top half of a float32
            word = builder.shl(builder.zext(value, ir.IntType(32)), ir.IntType(32)(16))
            return builder.fpext(builder.bitcast(word, ir.FloatType()), ir.DoubleType())
        return context.cast(builder, value, x, types.float64)

    return types.float64(x), codegen


def _max_not_nan_ir(typingctx: Any, a: Any, b: Any) -> Any:
    """max(a, b) of two float64s that are not NaN, as the fcmp + select with 'nnan nsz'
    flags that LLVM vectorizes as a max reduction. numba emits a select without flags, which
    keeps the whole loop scalar (7x slower). A NaN makes the result poison: it is only used
    for blocks whose sums proved every element finite."""
    if not (a == types.float64 and b == types.float64):
        return None

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        x, y = args
        flags = ("nnan", "nsz")
        return builder.select(builder.fcmp_ordered(">", x, y, flags=flags), x, y, flags=flags)

    return types.float64(types.float64, types.float64), codegen


_as_float64 = cast(Callable[[Any], float], intrinsic(_as_float64_ir))
_max_not_nan = cast(Callable[[float, float], float], intrinsic(_max_not_nan_ir))


@njit(inline="always")
def _span(start: int, size: int) -> Any:
    """Indices start .. min(size, start + _SUM_SPAN) - 1, unsigned: numba wraps negative
    signed indices, and that select turns the loop's loads into gathers (8x slower)."""
    return range(np.uint64(start), np.uint64(min(size, start + _SUM_SPAN)))


@njit(nogil=True, cache=True)
def _block_bounds(b: int, rows: int, dim: int, chunk: int) -> tuple[int, int, int, int]:
    """Rows r0:r1 and columns c0:c1 of block b when a [rows, dim] pair is scanned in blocks
    of at most `chunk` elements: whole rows where one fits, else near-equal segments of a
    single row (both scans use these blocks)."""
    if dim <= chunk:
        step = chunk // dim
        return b * step, min(rows, (b + 1) * step), 0, dim
    n_seg = -(-dim // chunk)
    row, k = divmod(b, n_seg)
    return row, row + 1, k * dim // n_seg, (k + 1) * dim // n_seg


def _block_count(rows: int, dim: int, chunk: int) -> int:
    return -(-rows // (chunk // dim)) if dim <= chunk else rows * -(-dim // chunk)


def _round_rows(chunk: int, dim: int) -> int:
    """Rows in one round of the fused scan: whole blocks, 65536 rows or one block if more.
    Each round costs a thread hand-off and ~100 bytes per row (its per-row sums)."""
    step = max(1, chunk // dim)  # rows per block
    return step * max(1, (1 << 16) // step)


@njit(nogil=True, cache=True)
def _merge_moments(state: Any, n: float, mean_r: float, mean_c: float, m2_r: float,
                   m2_c: float, c_rc: float) -> None:
    """Fold the moments of n more pairs into state[:6] = n, means, centred co-moments (Chan,
    Golub & LeVeque's pairwise update)."""
    if n == 0:
        return
    total = state[0] + n
    dr, dc = mean_r - state[1], mean_c - state[2]
    weight = state[0] * n / total
    state[3] += m2_r + dr * dr * weight
    state[4] += m2_c + dc * dc * weight
    state[5] += c_rc + dr * dc * weight
    state[1] += dr * n / total
    state[2] += dc * n / total
    state[0] = total


@njit(fastmath=_FASTMATH, nogil=True, cache=True)
def _centred_moments(ref: Any, cand: Any, r0: int, r1: int, c0: int, c1: int, mean_r: float,
                     mean_c: float) -> tuple[float, float, float, float, float]:
    """A block's means and co-moments from values centred at the given means, by the
    corrected two-pass algorithm (Chan, Golub & LeVeque 1983): the sums of the centred values
    take out what rounding left in the means (a second pass, over a block still in cache)."""
    n = (r1 - r0) * (c1 - c0)
    s_r = s_c = m2_r = m2_c = c_rc = 0.0
    for i in range(r0, r1):
        x, y = ref[i, c0:c1], cand[i, c0:c1]
        for s in range(0, x.size, _SUM_SPAN):
            t_r = t_c = t_rr = t_cc = t_rc = 0.0
            for j in _span(s, x.size):
                r = _as_float64(x[j]) - mean_r
                c = _as_float64(y[j]) - mean_c
                t_r += r
                t_c += c
                t_rr += r * r
                t_cc += c * c
                t_rc += r * c
            s_r += t_r
            s_c += t_c
            m2_r += t_rr
            m2_c += t_cc
            c_rc += t_rc
    return (mean_r + s_r / n, mean_c + s_c / n, m2_r - s_r * s_r / n, m2_c - s_c * s_c / n,
            c_rc - s_r * s_c / n)


@njit(fastmath=_FASTMATH, nogil=True, cache=True)
def _first_worst(ref: Any, cand: Any, r0: int, r1: int, c0: int, c1: int,
                 rtol: float) -> tuple[float, int]:
    """A block's largest |d| - rtol*|r| and the flat index of its first occurrence."""
    worst, at = -np.inf, -1
    for i in range(r0, r1):
        x, y = ref[i, c0:c1], cand[i, c0:c1]
        for j in range(x.size):
            r = _as_float64(x[j])
            excess = abs(_as_float64(y[j]) - r) - rtol * abs(r)
            if excess > worst:
                worst, at = excess, i * ref.shape[1] + c0 + j
    return worst, at


@njit(fastmath=_FASTMATH, nogil=True, cache=True)
def _fused_blocks(ref: Any, cand: Any, b0: int, b1: int, chunk: int, atol: float, rtol: float,
                  acc: Any, row_sums: Any, row_base: int, skipped: Any) -> tuple[int, int]:
    """Scan blocks b0..b1-1 (see _block_bounds) of a [rows, dim] pair into `acc` and
    `row_sums` (4 x rows from row_base: ref^2, cand^2, (cand-ref)^2, ref*cand summed per
    row). A block whose sums of squares are not finite (a NaN, an infinity, an overflow) is
    left out and listed in `skipped`, for the torch scan. Returns (the next block, how many
    were skipped): it stops early when `skipped` is full."""
    rows, dim = ref.shape
    whole_rows = dim <= chunk
    n_skipped = 0
    for b in range(b0, b1):
        r0, r1, c0, c1 = _block_bounds(b, rows, dim, chunk)
        s_r = s_c = rr = cc = dd = rc = abs_d = abs_r = outside = max_d = 0.0
        max_excess = -np.inf
        row_rr = row_cc = row_dd = row_rc = 0.0
        for i in range(r0, r1):
            x, y = ref[i, c0:c1], cand[i, c0:c1]
            row_rr = row_cc = row_dd = row_rc = 0.0
            for s in range(0, x.size, _SUM_SPAN):
                t_r = t_c = t_rr = t_cc = t_dd = t_rc = t_abs_d = t_abs_r = 0.0
                for j in _span(s, x.size):
                    r = _as_float64(x[j])
                    c = _as_float64(y[j])
                    d = c - r
                    ad, ar = abs(d), abs(r)
                    excess = ad - rtol * ar  # atol is subtracted once, from the worst
                    t_r += r
                    t_c += c
                    t_rr += r * r
                    t_cc += c * c
                    t_dd += d * d
                    t_rc += r * c
                    t_abs_d += ad
                    t_abs_r += ar
                    max_d = _max_not_nan(max_d, ad)
                    max_excess = _max_not_nan(max_excess, excess)
                    outside += 1.0 if excess > atol else 0.0
                s_r, s_c, abs_d, abs_r = s_r + t_r, s_c + t_c, abs_d + t_abs_d, abs_r + t_abs_r
                row_rr, row_cc = row_rr + t_rr, row_cc + t_cc
                row_dd, row_rc = row_dd + t_dd, row_rc + t_rc
            rr, cc, dd, rc = rr + row_rr, cc + row_cc, dd + row_dd, rc + row_rc
            if whole_rows:  # this block holds all of row i
                k = i - row_base
                row_sums[0, k], row_sums[1, k] = row_rr, row_cc
                row_sums[2, k], row_sums[3, k] = row_dd, row_rc
        # A finite sum of squares proves every term finite, the torch scan's rule.
        if not (math.isfinite(rr) and math.isfinite(cc) and math.isfinite(dd)):
            if whole_rows:
                row_sums[:, r0 - row_base:r1 - row_base] = 0.0
            skipped[n_skipped] = b
            n_skipped += 1
            if n_skipped == skipped.size:
                return b + 1, n_skipped
            continue
        if not whole_rows:  # a segment of row r0
            k = r0 - row_base
            row_sums[0, k] += row_rr
            row_sums[1, k] += row_cc
            row_sums[2, k] += row_dd
            row_sums[3, k] += row_rc
        n = (r1 - r0) * (c1 - c0)
        mean_r, mean_c = s_r / n, s_c / n
        m2_r, m2_c, c_rc = rr - s_r * mean_r, cc - s_c * mean_c, rc - s_r * mean_c
        limit = _RAW_MOMENTS_MAX_CONDITION
        if not (m2_r * limit > rr and m2_c * limit > cc):  # as _Scan._add_moments
            mean_r, mean_c, m2_r, m2_c, c_rc = _centred_moments(ref, cand, r0, r1, c0, c1,
                                                                mean_r, mean_c)
        _merge_moments(acc, n, mean_r, mean_c, m2_r, m2_c, c_rc)
        acc[_ABS_D] += abs_d
        acc[_ABS_R] += abs_r
        acc[_MAX_D] = max(acc[_MAX_D], max_d)
        acc[_OUTSIDE] += outside
        if max_excess > acc[_WORST]:  # blocks arrive in order: the first worst stays
            acc[_WORST], acc[_WORST_AT] = _first_worst(ref, cand, r0, r1, c0, c1, rtol)
    return b1, n_skipped


@dataclass
class _FusedRun:
    """What one worker's run of blocks left for the merge."""

    acc: np.ndarray[Any, np.dtype[np.float64]]
    first_row: int
    row_sums: np.ndarray[Any, np.dtype[np.float64]]
    skipped: list[int]


def _fused_run(ref: np.ndarray[Any, Any], cand: np.ndarray[Any, Any], b0: int, b1: int,
               chunk: int, atol: float, rtol: float, worst: float) -> _FusedRun:
    rows, dim = ref.shape
    first_row = _block_bounds(b0, rows, dim, chunk)[0]
    last_row = _block_bounds(b1 - 1, rows, dim, chunk)[1]
    run = _FusedRun(_new_acc(worst), first_row, np.zeros((4, last_row - first_row)), [])
    skipped = np.empty(min(b1 - b0, 256), dtype=np.int64)
    b = b0
    while b < b1:
        b, n = _fused_blocks(ref, cand, b, b1, chunk, atol, rtol, run.acc, run.row_sums,
                             first_row, skipped)
        run.skipped += skipped[:n].tolist()
    return run


def _scan_fused(scan: _Scan, ref: ArrayLike, cand: ArrayLike, ref_bits: np.ndarray[Any, Any],
                cand_bits: np.ndarray[Any, Any], pos0: int, workers: _Workers) -> None:
    """Scan one [rows, dim] pair with the fused kernel (ref_bits, cand_bits: what it reads)
    in rounds of whole blocks (see _round_rows); each round is split into one run of blocks
    per worker and merged in order, so the answer does not depend on timing. Blocks the
    kernel skipped then go through the torch scan."""
    rows, dim = ref_bits.shape
    chunk = scan.chunk
    round_rows = _round_rows(chunk, dim)
    for p in range(0, rows, round_rows):
        q = min(rows, p + round_rows)
        n_blocks = _block_count(q - p, dim, chunk)
        n_runs = min(workers.count, n_blocks)
        edges = [k * n_blocks // n_runs for k in range(n_runs + 1)]
        # Each run must beat the record so far, which earlier (lower-index) elements set:
        # its first block then pays for the scalar argmax pass only if it holds a new worst.
        runs = workers.run([
            partial(_fused_run, ref_bits[p:q], cand_bits[p:q], b0, b1, chunk, scan.atol,
                    scan.rtol, scan.worst_excess0) for b0, b1 in pairwise(edges)])
        sums = np.zeros((4, q - p))
        for run in runs:
            scan.add_fused(run.acc, (pos0 + p) * dim)
            sums[:, run.first_row:run.first_row + run.row_sums.shape[1]] += run.row_sums
        scan.cosines.add(pos0 + p, sums)
        for b in (b for run in runs for b in run.skipped):
            r0, r1, c0, c1 = _block_bounds(b, q - p, dim, chunk)
            scan.add(ref[p + r0:p + r1, c0:c1], cand[p + r0:p + r1, c0:c1], pos0 + p + r0, c0)


_T = TypeVar("_T")


class _Workers:
    """Runs a list of jobs, the first on the calling thread and the others on a pool of
    `count - 1` threads (the kernel releases the GIL); results come back in list order."""

    def __init__(self, count: int, pool: Executor | None) -> None:
        self.count, self.pool = count, pool

    def run(self, jobs: list[Callable[[], _T]]) -> list[_T]:
        if self.pool is None:
            return [job() for job in jobs]
        rest = [self.pool.submit(job) for job in jobs[1:]]
        first = jobs[0]()
        return [first] + [future.result() for future in rest]


@contextmanager
def _workers(threads: int) -> Iterator[_Workers]:
    if threads == 1:
        yield _Workers(1, None)
        return
    with ThreadPoolExecutor(threads - 1, thread_name_prefix="compare") as pool:
        yield _Workers(threads, pool)
