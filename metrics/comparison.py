"""Comparison metrics used by every numerical gate, computed in one streaming float64 pass.

`compare(ref, cand)` reads a reference/candidate pair (torch tensors or numpy arrays of any
real dtype, bfloat16 included) block by block, `chunk_elems` elements at a time, and
converts every element to float64 before any arithmetic. Positions are all leading dims
flattened; the last dim is the feature dim. Two scans fold blocks into the same state and
agree to ~1e-13 relative (the tests hold them to 1e-12):

* the fused scan takes the common case, float64, float32, float16 and bfloat16 rows
  contiguous in CPU memory: one numba loop per block reads each element pair once and keeps
  every sum, maximum and count in registers, at memory bandwidth (~10x the torch scan).
  `threads` workers scan runs of blocks, merged in a fixed order (fused_scan.py). The first
  call compiles the kernel (~1.5 s per pair of input dtypes), which numba caches on disk
  (__pycache__) for later processes.
* the torch scan takes every other input, and each block the fused scan cannot take exactly
  (one holding a NaN, an infinity or an overflow): the block is converted into float64
  buffers allocated once and every sum is a torch op on them.

Extra memory, whatever the size of the inputs: about 33 bytes x `chunk_elems` for the torch
scan's buffers (8.7 MB by default, touched only when it runs), 8 bytes per position for the
per-position cosines the percentiles need, and ~100 bytes for each position in flight (up to
max(65536, chunk_elems / dim) + 4096 of them: 7 MB, or 26 MB when rows are one element long).

Conventions, chosen so that a gate never divides by zero:

* cosine of two zero vectors is 1.0, of one zero vector and a non-zero one 0.0;
* pearson is nan when either input is constant (zero variance: undefined);
* rel_l2, mean_rel_l1: 0.0 if the candidate equals an all-zero reference, inf if it differs;
* sqnr_db is inf when the candidate equals the reference, -inf when only the reference is zero;
* non-finite elements propagate (IEEE) into every summary metric, which then reads nan or
  inf; `n_nonfinite_ref` / `n_nonfinite_cand` say why. An element is within tolerance when
  both values are finite and |cand - ref| <= atol + rtol*|ref| (np.isclose's rule), or both
  are the same infinity; a NaN is never within and is the worst element (excess +inf).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any, TypeAlias

import numpy as np
import torch

from .fused_scan import (
    _MOMENTS,
    _RAW_MOMENTS_MAX_CONDITION,
    _block_bounds,
    _block_count,
    _merge_moments,
    _round_rows,
    _scan_fused,
    _workers,
)

ArrayLike: TypeAlias = "torch.Tensor | np.ndarray[Any, Any]"
JSONScalar: TypeAlias = "int | float | str | bool | None"

# torch.testing.assert_close's tolerances for bfloat16: XDNA 2 kernels compute in bf16.
# Pass tighter ones (e.g. rtol=1.3e-6, its float32 default) when comparing fp32 work.
DEFAULT_RTOL = 1.6e-2
DEFAULT_ATOL = 1e-5
# 2**18 elements: the torch scan's float64 buffers (4 x 2 MiB) stay in the 32 MiB L3 of the
# 2-core development machine, and each torch op is long enough that its dispatch cost is
# small. Measured on 100M-element pairs, rows of 151936 and of 4096: 2**17 was 5-15%
# slower, 2**19 20-25% slower. The fused scan hardly cares: 2**15 to 2**18 within 5%.
DEFAULT_CHUNK_ELEMS = 1 << 18

# One thread: both scans are memory-bound. On the idle 2-core machine a second thread made
# the fused scan of a 100M-element float32 pair only 1.2x faster (24 -> 20 ms), and 1.4-1.7x
# slower with one competing busy process. The torch scan: 1.3-1.5x faster idle, 3x slower
# with a busy process and 16-100x slower while other test suites ran (every torch op ends
# in an OpenMP barrier that waits for whichever thread the scheduler has parked).
DEFAULT_THREADS = 1

_EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class Comparison:
    """Every metric of one reference/candidate pair (see the module docstring for edge cases)."""

    shape: tuple[int, ...]
    numel: int
    positions: int
    max_abs: float
    mean_abs: float
    rel_l2: float
    mean_rel_l1: float
    pearson: float
    cosine: float
    cosine_pos_min: float
    cosine_pos_p5: float
    cosine_pos_median: float
    sqnr_db: float
    atol: float
    rtol: float
    within_frac: float
    n_outside: int
    worst_index: int
    worst_ref: float
    worst_cand: float
    worst_excess: float  # |cand - ref| - (atol + rtol*|ref|) at worst_index; > 0 means outside
    n_nonfinite_ref: int
    n_nonfinite_cand: int

    def as_dict(self) -> dict[str, JSONScalar | list[int]]:
        """Plain ints and floats, with nan/inf as the strings "nan", "inf", "-inf" (JSON-safe)."""
        out: dict[str, JSONScalar | list[int]] = {}
        for key, value in asdict(self).items():
            if key == "shape":
                out[key] = list(value)
            elif isinstance(value, float):
                out[key] = _json_float(value)
            else:
                out[key] = value
        return out


def compare(ref: ArrayLike, cand: ArrayLike, *, atol: float = DEFAULT_ATOL,
            rtol: float = DEFAULT_RTOL, chunk_elems: int = DEFAULT_CHUNK_ELEMS,
            threads: int = DEFAULT_THREADS, fused: bool = True) -> Comparison:
    """Compare `cand` against `ref` (same shape) in one streaming float64 pass.

    `threads`: workers of the fused scan, and torch's intra-op thread count during the torch
    scan (restored afterwards). `fused=False` sends every block through the torch scan, the
    reference the fused kernel is tested against."""
    ref_a, cand_a = _as_array(ref), _as_array(cand)
    shape = tuple(int(s) for s in ref_a.shape)
    if tuple(cand_a.shape) != shape:
        raise ValueError(f"compare: shapes differ: ref {shape} vs cand {tuple(cand_a.shape)}")
    numel = math.prod(shape)
    if numel == 0:
        raise ValueError(f"compare: empty input: ref {shape} vs cand {tuple(cand_a.shape)}")
    if chunk_elems < 1:
        raise ValueError(f"compare: chunk_elems must be >= 1, got {chunk_elems}")
    if threads < 1:
        raise ValueError(f"compare: threads must be >= 1, got {threads}")
    if not (atol >= 0 and rtol >= 0):
        raise ValueError(f"compare: atol and rtol must be >= 0, got atol={atol} rtol={rtol}")
    dim = shape[-1] if shape else 1
    # Python floats and ints: the kernel is compiled (and cached) per argument type.
    scan = _Scan(numel // dim, dim, float(atol), float(rtol), min(int(chunk_elems), numel))
    pos0 = 0
    with _torch_threads(threads), _workers(threads) as workers:
        for ref_rows, cand_rows in _row_views(ref_a, cand_a, dim):
            bits = _fused_views(ref_rows, cand_rows) if fused else None
            if bits is None:
                for ref_blk, cand_blk, row, col in _blocks(ref_rows, cand_rows, scan.chunk):
                    scan.add(ref_blk, cand_blk, pos0 + row, col)
            else:
                _scan_fused(scan, ref_rows, cand_rows, *bits, pos0, workers)
            pos0 += ref_rows.shape[0]
    return scan.result(shape, ref_a, cand_a)


# --- streaming scan --------------------------------------------------------------------


class _Moments:
    """Running count, means and centred co-moments of ref and cand, merged with Chan et
    al.'s parallel formulas (`_merge_moments`, which the fused kernel uses too)."""

    def __init__(self) -> None:
        self.state = np.zeros(_MOMENTS)  # n, mean_r, mean_c, m2_r, m2_c, c_rc

    def merge(self, n: float, mean_r: float, mean_c: float, m2_r: float, m2_c: float,
              c_rc: float) -> None:
        _merge_moments(self.state, float(n), mean_r, mean_c, m2_r, m2_c, c_rc)

    def pearson(self, identical: bool) -> float:
        n, mean_r, mean_c, m2_r, m2_c, c_rc = self.state.tolist()
        # A spread under 64 ulps of the mean is what centring a constant leaves behind:
        # count it as zero variance, so a constant input gives nan, not rounding noise.
        floor = n * (64 * _EPS) ** 2
        if m2_r <= floor * mean_r**2 or m2_c <= floor * mean_c**2:
            return math.nan
        if identical:
            return 1.0
        return float(_cosine(np.array(m2_r), np.array(m2_c), np.array(c_rc)))


class _PositionCosines:
    """Per-position sums for a sliding window of positions, each turned into one cosine when
    the scan has moved past it: 8 bytes per position in all. The torch scan adds the rows
    of one block at a time, the fused scan those of a round (see _round_rows)."""

    def __init__(self, positions: int, rows_per_add: int) -> None:
        self.cos = np.empty(positions)
        self.cap = min(positions, rows_per_add + 4096)  # a flush every 4096 rows at least
        self.window = np.zeros((4, self.cap))  # ref^2, cand^2, (cand-ref)^2, ref*cand
        self.start = 0  # the position in window column 0
        self.flushed: list[np.ndarray[Any, np.dtype[np.float64]]] = []  # sums of done rows

    def add(self, pos: int, sums: np.ndarray[Any, np.dtype[np.float64]]) -> None:
        """Add (4, n) sums to positions pos..pos+n-1 (a segment of one row: n = 1)."""
        n = sums.shape[1]
        if pos + n > self.start + self.cap:
            self._flush(pos)
        with np.errstate(invalid="ignore"):  # inf + -inf: a nan is the answer, not a warning
            self.window[:, pos - self.start:pos - self.start + n] += sums

    def _flush(self, upto: int) -> None:
        n = upto - self.start
        done = self.window[:, :n]
        rr, cc, dd, rc = done
        self.cos[self.start:upto] = _cosine(rr, cc, rc, equal=dd == 0)
        with np.errstate(invalid="ignore"):
            self.flushed.append(done.sum(axis=1))
        self.window[:, :self.cap - n] = self.window[:, n:].copy()
        self.window[:, self.cap - n:] = 0
        self.start = upto

    def finish(self) -> tuple[np.ndarray[Any, np.dtype[np.float64]], list[float]]:
        """All cosines, and the whole-tensor sums (ref^2, cand^2, (cand-ref)^2, ref*cand)."""
        self._flush(self.cos.size)
        return self.cos, [math.fsum(column) for column in zip(*self.flushed, strict=True)]


class _Scan:
    """The running state of one compare() call, which both scans fold their blocks into, and
    the torch scan's reusable float64 chunk buffers."""

    def __init__(self, positions: int, dim: int, atol: float, rtol: float, chunk: int) -> None:
        self.positions, self.dim, self.atol, self.rtol = positions, dim, atol, rtol
        self.chunk = chunk
        rows_per_block = max(1, chunk // dim)
        # Rows of buf: ref, cand, cand - ref. tmp holds per-row products and centred values.
        # Pages are only touched (and counted in RSS) when the torch scan runs.
        self.buf = torch.empty(3, chunk, dtype=torch.float64)
        self.buf_np = self.buf.numpy()
        self.tmp = torch.empty(chunk, dtype=torch.float64)
        self.mask = np.empty(chunk, dtype=bool)
        self.stats = torch.empty(10, dtype=torch.float64)
        self.row_sums = torch.empty(4, rows_per_block, dtype=torch.float64)
        self.cosines = _PositionCosines(positions, _round_rows(chunk, dim))
        self.moments = _Moments()
        self.finite = True
        self.abs_d: list[float] = []
        self.abs_r: list[float] = []
        self.max_abs = -math.inf
        self.worst_excess0 = -math.inf  # |d| - rtol*|r|; atol is subtracted at the end
        self.worst_index = positions * dim  # none yet: every block offers its worst element
        self.n_outside = 0
        self.nonfinite_ref = 0
        self.nonfinite_cand = 0

    def add(self, ref_blk: ArrayLike, cand_blk: ArrayLike, pos: int, col: int) -> None:
        """Fold in one block with torch ops: positions pos.. (n_rows of them), columns
        col..col+width."""
        n_rows, width = ref_blk.shape
        n = n_rows * width
        r, c, d = (self.buf[i, :n] for i in range(3))
        _load(r, ref_blk)
        _load(c, cand_blk)
        torch.sub(c, r, out=d)
        # Per row: ref^2, cand^2, (cand-ref)^2 as squared norms (one fused pass over the
        # three rows of buf, ~2x faster than multiply-then-sum), and ref*cand.
        sums = self.row_sums[:, :n_rows]
        torch.linalg.vector_norm(self.buf[:, :n].view(3, n_rows, width), dim=-1, out=sums[:3])
        sums[:3].square_()
        if n_rows == 1:
            torch.dot(r, c, out=sums[3, 0])
        else:
            tmp = self.tmp[:n].view(n_rows, width)
            torch.sum(torch.mul(r.view(n_rows, width), c.view(n_rows, width), out=tmp), -1,
                      out=sums[3])
        self.cosines.add(pos, sums.numpy())
        st = self.stats
        torch.sum(sums, -1, out=st[:4])
        torch.sum(self.buf[:2, :n], -1, out=st[4:6])
        rr, cc, dd, rc, s_r, s_c = st[:6].tolist()
        # A finite sum of squares proves every term finite; only then the fast path is exact.
        if not all(math.isfinite(v) for v in (rr, cc, dd)):
            self._add_nonfinite(r, c, d, pos, col, width)
            return
        self._add_moments(n, r, c, rr, rc, cc, s_r, s_c)
        rd = self.buf[0::2, :n]  # ref and cand - ref
        rd.abs_()
        torch.sum(rd, -1, out=st[6:8])
        torch.sub(d, r, alpha=self.rtol, out=r)  # r <- excess0 = |d| - rtol*|r|
        torch.amax(rd, -1, out=st[8:10])
        abs_r, abs_d, excess_max, d_max = st[6:10].tolist()
        self.abs_r.append(abs_r)
        self.abs_d.append(abs_d)
        self.max_abs = _nan_max(self.max_abs, d_max)
        self._add_tolerance(self.buf_np[0, :n], excess_max, pos, col, width)

    def add_fused(self, acc: np.ndarray[Any, np.dtype[np.float64]], flat0: int) -> None:
        """Fold in one fused worker's accumulator (see _new_acc); its worst element's index
        counts from flat index flat0."""
        self.moments.merge(*acc[:_MOMENTS].tolist())
        abs_d, abs_r, max_d, outside, worst, worst_at = acc[_MOMENTS:].tolist()
        self.abs_d.append(abs_d)
        self.abs_r.append(abs_r)
        self.max_abs = _nan_max(self.max_abs, max_d)
        self.n_outside += int(outside)
        if worst_at >= 0:
            self._offer_worst(worst, flat0 + int(worst_at))

    def _add_moments(self, n: int, r: torch.Tensor, c: torch.Tensor, rr: float, rc: float,
                     cc: float, s_r: float, s_c: float) -> None:
        mean_r, mean_c = s_r / n, s_c / n
        m2_r, m2_c, c_rc = rr - s_r * mean_r, cc - s_c * mean_c, rc - s_r * mean_c
        limit = _RAW_MOMENTS_MAX_CONDITION
        if not (m2_r * limit > rr and m2_c * limit > cc):
            # Ill-conditioned (|mean| >> std, or constant): centre the chunk, then sum.
            centred_r = torch.sub(r, mean_r, out=self.tmp[:n])
            c.sub_(mean_c)  # cand is not needed again in this block
            m2_r = float(torch.dot(centred_r, centred_r))
            m2_c = float(torch.dot(c, c))
            c_rc = float(torch.dot(centred_r, c))
        self.moments.merge(n, mean_r, mean_c, m2_r, m2_c, c_rc)

    def _add_tolerance(self, excess0: np.ndarray[Any, np.dtype[np.float64]], excess_max: float,
                       pos: int, col: int, width: int) -> None:
        # numpy here: its SIMD argmax and compare-and-count beat torch's ~4x on a chunk.
        # argmax only when this block can beat the record: O(log blocks) times on typical
        # data. A tie goes to the earlier element, and a block's first element is its
        # earliest: blocks skipped by the fused scan arrive after later ones.
        if excess_max > self.worst_excess0 or (
                excess_max == self.worst_excess0
                and self._flat(0, pos, col, width) < self.worst_index):
            self._offer_worst(excess_max, self._flat(int(np.argmax(excess0)), pos, col, width))
        if excess_max > self.atol:
            outside = np.greater(excess0, self.atol, out=self.mask[:excess0.size])
            self.n_outside += int(np.count_nonzero(outside))

    def _offer_worst(self, excess0: float, index: int) -> None:
        if excess0 > self.worst_excess0 or (excess0 == self.worst_excess0
                                            and index < self.worst_index):
            self.worst_excess0, self.worst_index = excess0, index

    def _add_nonfinite(self, r: torch.Tensor, c: torch.Tensor, d: torch.Tensor, pos: int,
                       col: int, width: int) -> None:
        """The exact, slower path for a block holding a NaN or an infinity (or an overflow)."""
        self.finite = False
        finite_r, finite_c = torch.isfinite(r), torch.isfinite(c)
        self.nonfinite_ref += int((~finite_r).sum())
        self.nonfinite_cand += int((~finite_c).sum())
        abs_d, abs_r = d.abs(), r.abs()
        self.abs_r.append(float(abs_r.sum()))
        self.abs_d.append(float(abs_d.sum()))
        self.max_abs = _nan_max(self.max_abs, float(abs_d.max()))
        # Outside both finite values, only the same infinity twice is within (as np.isclose).
        same_infinity = torch.full_like(r, math.inf).masked_fill_(r == c, -math.inf)
        excess0 = torch.where(finite_r & finite_c, abs_d - self.rtol * abs_r, same_infinity)
        self._add_tolerance(excess0.numpy(), float(excess0.max()), pos, col, width)

    def _flat(self, j: int, pos: int, col: int, width: int) -> int:
        return (pos + j // width) * self.dim + col + j % width

    def result(self, shape: tuple[int, ...], ref: ArrayLike, cand: ArrayLike) -> Comparison:
        numel = self.positions * self.dim
        cos_pos, (rr, cc, dd, rc) = self.cosines.finish()
        abs_d, abs_r = math.fsum(self.abs_d), math.fsum(self.abs_r)
        worst = np.unravel_index(self.worst_index, shape) if shape else ()
        return Comparison(
            shape=shape, numel=numel, positions=self.positions,
            max_abs=self.max_abs, mean_abs=abs_d / numel,
            rel_l2=_ratio(math.sqrt(dd), math.sqrt(rr)), mean_rel_l1=_ratio(abs_d, abs_r),
            pearson=self.moments.pearson(identical=dd == 0) if self.finite else math.nan,
            cosine=float(_cosine(np.array(rr), np.array(cc), np.array(rc), equal=dd == 0)),
            cosine_pos_min=float(np.min(cos_pos)),
            # overwrite_input: partition cos_pos in place rather than copy it.
            cosine_pos_p5=float(np.percentile(cos_pos, 5, overwrite_input=True)),
            cosine_pos_median=float(np.median(cos_pos, overwrite_input=True)),
            sqnr_db=_sqnr_db(rr, dd),
            atol=self.atol, rtol=self.rtol,
            within_frac=(numel - self.n_outside) / numel, n_outside=self.n_outside,
            worst_index=self.worst_index,
            worst_ref=float(ref[worst]), worst_cand=float(cand[worst]),
            worst_excess=self.worst_excess0 - self.atol,
            n_nonfinite_ref=self.nonfinite_ref, n_nonfinite_cand=self.nonfinite_cand,
        )


# --- walking the inputs ----------------------------------------------------------------


def _as_array(x: Any) -> ArrayLike:
    """A torch view of the input when one exists without copying; else the numpy array."""
    if isinstance(x, torch.Tensor):
        t = x.detach()
        if t.is_complex():
            raise ValueError(f"compare: complex input is not supported (dtype {t.dtype})")
        return t
    a = np.asarray(x)
    if a.dtype.kind not in "biuf":
        raise ValueError(f"compare: needs real numbers, got dtype {a.dtype}")
    try:
        with warnings.catch_warnings():  # read-only arrays are fine: nothing is written
            warnings.simplefilter("ignore", UserWarning)
            return torch.from_numpy(a)
    except (TypeError, ValueError):  # negative strides, foreign byte order, float128 ...
        return a


def _view_2d(x: ArrayLike, dim: int) -> ArrayLike | None:
    """x as [positions, dim] without copying, or None when its strides forbid it."""
    if isinstance(x, torch.Tensor):
        try:
            return x.view(-1, dim)
        except RuntimeError:
            return None
    try:
        return np.reshape(x, (-1, dim), copy=False)
    except ValueError:
        return None


def _row_views(ref: ArrayLike, cand: ArrayLike,
               dim: int) -> Iterator[tuple[ArrayLike, ArrayLike]]:
    """[positions, dim] views covering both inputs in C order; a pair whose strides cannot be
    flattened is split along its first dim (1-D and 2-D inputs always flatten)."""
    ref_2d, cand_2d = _view_2d(ref, dim), _view_2d(cand, dim)
    if ref_2d is not None and cand_2d is not None:
        yield ref_2d, cand_2d
        return
    for i in range(ref.shape[0]):
        yield from _row_views(ref[i], cand[i], dim)


def _fused_views(ref: ArrayLike, cand: ArrayLike) -> tuple[np.ndarray[Any, Any],
                                                           np.ndarray[Any, Any]] | None:
    """What the fused kernel reads for a [rows, dim] pair, or None when it cannot take it."""
    ref_bits, cand_bits = _fused_view(ref), _fused_view(cand)
    if ref_bits is None or cand_bits is None:
        return None
    return ref_bits, cand_bits


def _fused_view(x: ArrayLike) -> np.ndarray[Any, Any] | None:
    """A C-ordered float64 or float32 CPU array as it is, float16 and bfloat16 as their bits
    (int16 and uint16, see _as_float64); None for any other input."""
    if isinstance(x, torch.Tensor):
        if x.device.type != "cpu" or not x.is_contiguous():
            return None
        if x.dtype in (torch.float16, torch.bfloat16):
            bits = x.view(torch.int16).numpy()
            return bits if x.dtype == torch.float16 else bits.view(np.uint16)
        return x.numpy() if x.dtype in (torch.float32, torch.float64) else None
    if not (x.flags.c_contiguous and x.dtype.isnative):
        return None
    if x.dtype == np.float16:
        return x.view(np.int16)
    return x if x.dtype in (np.float32, np.float64) else None


def _blocks(ref: ArrayLike, cand: ArrayLike,
            chunk: int) -> Iterator[tuple[ArrayLike, ArrayLike, int, int]]:
    """(ref block, cand block, first row, first column) for each block (see _block_bounds)."""
    rows, dim = ref.shape
    for b in range(_block_count(rows, dim, chunk)):
        r0, r1, c0, c1 = _block_bounds(b, rows, dim, chunk)
        yield ref[r0:r1, c0:c1], cand[r0:r1, c0:c1], r0, c0


@contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _load(dst: torch.Tensor, block: ArrayLike) -> None:
    """Convert a block to float64 into dst (contiguous, same number of elements)."""
    if isinstance(block, torch.Tensor):
        dst.view(block.shape).copy_(block)
    else:
        dst.view(block.shape).copy_(torch.from_numpy(np.ascontiguousarray(block, np.float64)))


# --- scalar formulas -------------------------------------------------------------------


def _cosine(rr: np.ndarray[Any, Any], cc: np.ndarray[Any, Any], rc: np.ndarray[Any, Any],
            equal: np.ndarray[Any, Any] | bool = False) -> np.ndarray[Any, Any]:
    """Cosines from sums of ref^2, cand^2 and ref*cand: 0.0 against a zero vector, exactly
    1.0 where `equal` (cand == ref: two zero vectors too), nan where a sum is not finite."""
    with np.errstate(all="ignore"):
        # One rounding in sqrt(rr*cc); the split form only serves products that overflow.
        denom = np.sqrt(rr * cc)
        denom = np.where(np.isinf(denom), np.sqrt(rr) * np.sqrt(cc), denom)
        cos = np.clip(rc / denom, -1.0, 1.0)
        cos = np.where(equal, 1.0, np.where((rr == 0) | (cc == 0), 0.0, cos))
        return np.where(np.isfinite(rr) & np.isfinite(cc), cos, np.nan)


def _nan_max(a: float, b: float) -> float:
    return math.nan if math.isnan(a) or math.isnan(b) else max(a, b)


def _ratio(num: float, den: float) -> float:
    if den == 0:
        return 0.0 if num == 0 else math.inf if num > 0 else math.nan
    return num / den


def _sqnr_db(signal: float, noise: float) -> float:
    if noise == 0:
        return math.inf if signal >= 0 else math.nan
    if signal == 0:
        return -math.inf
    ratio = signal / noise
    return 10.0 * math.log10(ratio) if ratio > 0 else -math.inf  # 0: an infinite noise


def _json_float(x: float) -> float | str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x
