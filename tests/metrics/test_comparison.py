"""metrics.comparison: every metric against the obvious float64 numpy computation, the fused
scan against the torch scan, the edge cases a gate relies on, and the memory bound of the
streaming pass (the top-k check: test_tokens.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from benchmark_runs import benchmark, run_benchmark
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from npu_deploy.metrics import comparison as metrics
from npu_deploy.metrics.comparison import Comparison, compare

naive = benchmark("metrics_bench").naive_metrics  # the naive numpy computation
FLOAT_FIELDS = ("max_abs", "mean_abs", "rel_l2", "mean_rel_l1", "pearson", "cosine",
                "cosine_pos_min", "cosine_pos_p5", "cosine_pos_median", "sqnr_db",
                "within_frac", "worst_ref", "worst_cand", "worst_excess")
INT_FIELDS = ("numel", "positions", "n_outside", "worst_index", "n_nonfinite_ref",
              "n_nonfinite_cand")


def assert_matches(got: Comparison, want: dict[str, float], rel: float = 1e-12) -> None:
    for key, value in want.items():
        assert getattr(got, key) == pytest.approx(value, rel=rel, abs=rel), key


def assert_same(got: Comparison, want: Comparison, rel: float = 1e-12) -> None:
    """Counts and the worst element exactly; sums to ~1e-12, as the scans add in different
    orders (abs too: sqnr_db and pearson can be ~0)."""
    assert got.shape == want.shape
    for key in INT_FIELDS:
        assert getattr(got, key) == getattr(want, key), key
    for key in FLOAT_FIELDS:
        assert getattr(got, key) == pytest.approx(getattr(want, key), rel=rel, abs=rel,
                                                  nan_ok=True), key


def pair(shape: tuple[int, ...], seed: int = 0, noise: float = 1e-2,
         offset: float = 0.3) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    rng = np.random.default_rng(seed)
    ref = (rng.standard_normal(shape) + offset).astype(np.float32)
    cand = (ref + noise * rng.standard_normal(shape)).astype(np.float32)
    return ref, cand


# --- against the naive float64 computation -----------------------------------------------

@pytest.mark.parametrize("shape", [(1,), (7,), (1000,), (5, 13), (64, 300), (3, 4, 11),
                                   (2, 3, 5, 7)])
@pytest.mark.parametrize("chunk_elems", [1, 7, 64, 1 << 18])
def test_every_metric_matches_naive_float64(shape, chunk_elems):
    """Small chunks split rows across blocks (a row longer than the chunk is summed in
    segments); large ones hold many whole rows."""
    ref, cand = pair(shape, seed=len(shape) * 100 + chunk_elems)
    got = compare(ref, cand, atol=1e-3, rtol=1e-2, chunk_elems=chunk_elems)
    if math.prod(shape) > 1:   # one element: pearson is undefined, naive warns
        assert_matches(got, naive(ref, cand, 1e-3, 1e-2))
    assert (got.shape, got.numel) == (shape, math.prod(shape))
    assert got.positions == math.prod(shape[:-1])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_low_and_high_precision_torch_inputs_are_compared_at_their_exact_values(dtype):
    ref = torch.randn(33, 130).to(dtype)
    cand = (ref.double() + 0.05 * torch.randn(33, 130)).to(dtype)
    got = compare(ref, cand, atol=1e-2, rtol=1e-2, chunk_elems=500)
    assert_matches(got, naive(ref.double().numpy(), cand.double().numpy(), 1e-2, 1e-2))


def test_threads_leave_the_answer_and_torch_setting_unchanged():
    ref, cand = pair((40, 3000))
    before = torch.get_num_threads()
    one, two = compare(ref, cand), compare(ref, cand, threads=2)
    assert torch.get_num_threads() == before
    for key in FLOAT_FIELDS:
        assert getattr(two, key) == pytest.approx(getattr(one, key), rel=1e-12), key


def test_pearson_stays_accurate_when_the_mean_dwarfs_the_spread():
    """Raw sums of squares would lose ~8 of 16 digits here; centred chunks lose none."""
    rng = np.random.default_rng(7)
    ref = 1e6 + rng.standard_normal(50_000)
    cand = ref + 0.1 * rng.standard_normal(50_000)
    want = np.corrcoef(ref, cand)[0, 1]
    for chunk in (1000, 4096, 1 << 18):
        for fused in (True, False):
            got = compare(ref, cand, chunk_elems=chunk, fused=fused, threads=2).pearson
            assert got == pytest.approx(want, rel=1e-12), (chunk, fused)


def test_non_contiguous_inputs_give_the_same_result_as_contiguous_copies():
    base = torch.randn(6, 5, 40)
    ref = base.permute(1, 0, 2)                       # cannot be viewed as [30, 40]
    cand = (base + 0.01 * torch.randn(6, 5, 40)).permute(1, 0, 2)
    flipped = np.ascontiguousarray(cand.numpy())[::-1, :, ::-1]   # negative strides
    want = compare(ref.contiguous(), cand.contiguous(), chunk_elems=64)
    assert_same(compare(ref, cand, chunk_elems=64), want)
    got = compare(np.ascontiguousarray(ref.numpy())[::-1, :, ::-1], flipped, chunk_elems=64)
    assert got.max_abs == want.max_abs
    assert got.rel_l2 == pytest.approx(want.rel_l2, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 9), dim=st.integers(1, 70), chunk=st.integers(1, 700),
       seed=st.integers(0, 2**32 - 1))
def test_any_chunk_size_gives_the_one_chunk_answer(rows, dim, chunk, seed):
    ref, cand = pair((rows, dim), seed=seed, noise=0.1)
    one = compare(ref, cand, chunk_elems=rows * dim)
    many = compare(ref, cand, chunk_elems=chunk)
    for key in FLOAT_FIELDS:
        a, b = getattr(many, key), getattr(one, key)
        assert a == pytest.approx(b, rel=1e-12, abs=1e-12, nan_ok=True), key
    assert (many.n_outside, many.worst_index) == (one.n_outside, one.worst_index)


# --- the fused scan against the torch scan -----------------------------------------------

@pytest.fixture
def torch_blocks(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int, int]]:
    """(position, column, rows, width) of each block the torch scan folds in: with
    fused=True it gets only the blocks the fused kernel cannot read or cannot take exactly."""
    blocks: list[tuple[int, int, int, int]] = []
    add = metrics._Scan.add

    def counted(self: Any, ref_blk: Any, cand_blk: Any, pos: int, col: int) -> None:
        blocks.append((pos, col, *ref_blk.shape))
        add(self, ref_blk, cand_blk, pos, col)

    monkeypatch.setattr(metrics._Scan, "add", counted)
    return blocks


AS_DTYPE = {
    "np.float32": lambda a: a.astype(np.float32),
    "np.float64": lambda a: a.astype(np.float64),
    "np.float16": lambda a: a.astype(np.float16),
    "torch.float32": lambda a: torch.from_numpy(a.astype(np.float32)),
    "torch.float16": lambda a: torch.from_numpy(a).half(),
    "torch.bfloat16": lambda a: torch.from_numpy(a).bfloat16(),
}
DTYPE_PAIRS = [("np.float32", "np.float32"), ("np.float64", "np.float64"),
               ("np.float16", "np.float16"), ("torch.float16", "torch.float16"),
               ("torch.bfloat16", "torch.bfloat16"), ("torch.float32", "torch.bfloat16"),
               ("np.float64", "np.float32")]


@pytest.mark.parametrize(("ref_dtype", "cand_dtype"), DTYPE_PAIRS)
@pytest.mark.parametrize("shape", [(1,), (7,), (1000,), (5, 13), (64, 300), (3, 4, 11),
                                   (2, 3, 5, 7), (3, 5000)])
def test_the_fused_scan_takes_float_inputs_and_agrees_with_the_torch_scan(
        ref_dtype, cand_dtype, shape, torch_blocks):
    """Chunks of 1, 7, 64 and 1000 split rows into segments (a row longer than the chunk);
    2**18 holds many rows; two and three workers split the blocks, mid-row too."""
    rng = np.random.default_rng(len(shape) * 1000 + shape[-1])
    base = rng.standard_normal(shape) + 0.3
    ref = AS_DTYPE[ref_dtype](base)
    cand = AS_DTYPE[cand_dtype](base + 0.02 * rng.standard_normal(shape))
    for chunk in (1, 7, 64, 1000, 1 << 18):
        if math.prod(shape) // chunk > 2000:   # the torch scan's reference gets slow
            continue
        want = compare(ref, cand, atol=1e-3, rtol=1e-2, chunk_elems=chunk, fused=False)
        assert torch_blocks
        for threads in (1, 2, 3):
            torch_blocks.clear()
            got = compare(ref, cand, atol=1e-3, rtol=1e-2, chunk_elems=chunk, threads=threads)
            assert torch_blocks == [], (chunk, threads)
            assert_same(got, want)


# The fixture's list is cleared in each example: sharing it across examples is fine.
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.integers(1, 6), dim=st.integers(1, 300), chunk=st.integers(1, 500),
       threads=st.integers(1, 3), seed=st.integers(0, 2**32 - 1),
       bad=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.sampled_from(
           ["nan ref", "nan cand", "inf ref", "-inf cand", "same inf", "opposite inf"])),
           min_size=1, max_size=4))
def test_only_blocks_holding_non_finite_values_leave_the_fused_scan(rows, dim, chunk, threads,
                                                                      seed, bad, torch_blocks):
    ref, cand = pair((rows, dim), seed=seed, noise=0.1)
    for where, what in bad:
        i, j = divmod(int(where * rows * dim), dim)
        if what in ("nan ref", "inf ref"):
            ref[i, j] = np.nan if what == "nan ref" else np.inf
        elif what in ("nan cand", "-inf cand"):
            cand[i, j] = np.nan if what == "nan cand" else -np.inf
        else:
            ref[i, j], cand[i, j] = np.inf, np.inf if what == "same inf" else -np.inf
    want = compare(ref, cand, chunk_elems=chunk, fused=False)
    torch_blocks.clear()
    got = compare(ref, cand, chunk_elems=chunk, threads=threads)
    assert_same(got, want)
    assert 1 <= len(torch_blocks) <= len(bad)
    finite = np.isfinite(ref) & np.isfinite(cand)
    for pos, col, n_rows, width in torch_blocks:
        assert not finite[pos:pos + n_rows, col:col + width].all()


def test_ints_and_non_contiguous_inputs_take_the_torch_scan(torch_blocks):
    ints = np.arange(600).reshape(20, 30)
    compare(ints, ints + 1)
    assert torch_blocks
    torch_blocks.clear()
    ref = torch.randn(6, 5, 40).permute(1, 0, 2)   # rows 200 elements apart
    compare(ref, ref + 1)
    assert torch_blocks


@pytest.mark.parametrize("threads", [1, 2, 3])
@pytest.mark.parametrize("chunk", [64, 1000, 1 << 18])
def test_the_first_of_equal_worst_elements_is_the_worst(chunk, threads):
    """Also when its block holds a non-finite value, and so reaches the torch scan after
    the fused scan has seen the later ones."""
    ref, cand = np.zeros((2, 4000), dtype=np.float32), np.zeros((2, 4000), dtype=np.float32)
    cand[0, [100, 1500, 3900]] = cand[1, [5, 3000]] = 1.0
    for fused in (True, False):
        assert compare(ref, cand, chunk_elems=chunk, threads=threads, fused=fused
                       ).worst_index == 100
    ref[0, 90] = cand[0, 90] = np.inf               # the same infinity twice: within
    got = compare(ref, cand, chunk_elems=chunk, threads=threads)
    assert (got.worst_index, got.n_outside, got.n_nonfinite_ref) == (100, 5, 1)


# --- hand-computed cases and edge cases --------------------------------------------------

def test_a_hand_computed_case():
    got = compare(np.array([1.0, 2, 3, 4]), np.array([1.0, 2, 3, 5]), atol=0.5, rtol=0.1)
    assert (got.max_abs, got.mean_abs) == (1.0, 0.25)
    assert got.rel_l2 == pytest.approx(1 / math.sqrt(30))
    assert got.mean_rel_l1 == pytest.approx(0.1)
    assert got.cosine == pytest.approx(34 / math.sqrt(30 * 39))
    assert got.sqnr_db == pytest.approx(10 * math.log10(30))
    assert got.pearson == pytest.approx(6.5 / math.sqrt(5 * 8.75))
    # Only the last element is outside: |5 - 4| = 1 > 0.5 + 0.1*4, by 0.1.
    assert (got.within_frac, got.n_outside, got.worst_index) == (0.75, 1, 3)
    assert (got.worst_ref, got.worst_cand) == (4.0, 5.0)
    assert got.worst_excess == pytest.approx(0.1)


def test_per_position_cosines_use_the_last_dim_as_features():
    ref = np.array([[1.0, 0], [0, 1], [1, 1]])
    cand = np.array([[1.0, 0], [1, 0], [2, 2]])     # cosines 1, 0, 1
    got = compare(ref, cand)
    assert (got.positions, got.cosine_pos_min) == (3, 0.0)
    assert got.cosine_pos_median == pytest.approx(1.0, abs=1e-15)
    assert got.cosine_pos_p5 == pytest.approx(0.1)   # linear interpolation, as np.percentile


def test_identical_inputs_are_exactly_perfect():
    ref, _ = pair((37, 129))
    got = compare(ref, ref.copy(), chunk_elems=1000)
    assert (got.max_abs, got.mean_abs, got.rel_l2, got.mean_rel_l1) == (0, 0, 0, 0)
    assert (got.cosine, got.cosine_pos_min, got.pearson) == (1.0, 1.0, 1.0)
    assert got.sqnr_db == math.inf
    assert (got.within_frac, got.n_outside) == (1.0, 0)
    assert json.loads(json.dumps(got.as_dict(), allow_nan=False))["sqnr_db"] == "inf"
    for fused in (True, False):   # |d| = 0 <= 0 + 0*|ref|: within, the boundary included
        exact = compare(ref, ref.copy(), atol=0, rtol=0, fused=fused)
        assert (exact.n_outside, exact.worst_excess) == (0, 0.0)


def test_zero_vectors_follow_the_documented_conventions():
    ref = np.array([[0.0, 0, 0], [0, 0, 0], [1, 2, 3]])
    cand = np.array([[0.0, 0, 0], [1, 0, 0], [1, 2, 3]])
    got = compare(ref, cand)
    assert got.cosine_pos_min == 0.0                  # a zero vector against a non-zero one
    assert got.cosine_pos_median == 1.0               # two zero vectors, identical rows
    zeros = compare(np.zeros(5), np.zeros(5))
    assert (zeros.cosine, zeros.rel_l2, zeros.mean_rel_l1, zeros.sqnr_db) == (1, 0, 0, math.inf)
    assert math.isnan(zeros.pearson)                  # constant input: undefined
    constant = np.full(100_003, 0.1)                  # its float64 mean is not exactly 0.1
    assert math.isnan(compare(constant, constant + np.arange(100_003.0)).pearson)
    only_ref_zero = compare(np.zeros(5), np.ones(5))
    assert (only_ref_zero.cosine, only_ref_zero.rel_l2, only_ref_zero.sqnr_db) == (
        0.0, math.inf, -math.inf)


def test_nan_and_inf_in_the_candidate_are_counted_and_fail():
    ref, cand = pair((4, 50), noise=1e-6)
    cand[1, 7], cand[2, 3] = np.nan, np.inf
    ref[3, 0] = cand[3, 0] = -np.inf                  # the same infinity twice is within
    got = compare(ref, cand, atol=1e-3, rtol=1e-3, chunk_elems=64)
    assert (got.n_nonfinite_ref, got.n_nonfinite_cand) == (1, 3)
    assert (got.n_outside, got.within_frac) == (2, 198 / 200)
    assert (got.worst_index, got.worst_excess) == (57, math.inf)    # the NaN, first worst
    assert math.isnan(got.worst_cand)
    assert math.isnan(got.max_abs) and math.isnan(got.pearson)
    blob = got.as_dict()
    assert blob["max_abs"] == "nan" and blob["worst_excess"] == "inf"
    json.dumps(blob, allow_nan=False)


def test_an_infinite_candidate_gives_infinite_errors_not_an_exception():
    got = compare(np.ones(3), np.array([1.0, 1.0, np.inf]))
    assert (got.sqnr_db, got.rel_l2, got.max_abs) == (-math.inf, math.inf, math.inf)
    assert (got.n_outside, got.worst_index, got.n_nonfinite_cand) == (1, 2, 1)


def test_shape_mismatch_and_empty_input_are_one_line_errors():
    with pytest.raises(ValueError, match=r"\(2, 3\).*\(3, 2\)") as err:
        compare(np.zeros((2, 3)), np.zeros((3, 2)))
    assert "\n" not in str(err.value)
    with pytest.raises(ValueError, match="empty"):
        compare(np.zeros((0, 4)), np.zeros((0, 4)))
    with pytest.raises(ValueError, match="threads"):
        compare(np.zeros(4), np.zeros(4), threads=0)


def test_as_dict_is_plain_json():
    got = compare(*pair((3, 10)))
    blob = got.as_dict()
    assert blob["shape"] == [3, 10]
    assert set(blob) == set(Comparison.__dataclass_fields__)
    assert json.loads(json.dumps(blob, allow_nan=False)) == blob


# --- memory and the benchmark script -----------------------------------------------------

@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc")
def test_a_512_mb_pair_needs_under_64_mb_of_extra_memory():
    """Peak RSS of a child process (the benchmark's probe): catches any full-size temporary,
    numpy's or torch's; a float64 copy of one 4096 x 16384 float32 input adds 537 MB."""
    result = run_benchmark("metrics_bench", "--memory-child", "--elems", str(4096 * 16384),
                           "--dim", "16384", timeout=120)
    assert result.returncode == 0, result.stderr
    extra = int(result.stdout.split()[-1])
    assert extra < 64e6, f"compare used {extra / 1e6:.1f} MB extra"


@pytest.mark.slow
def test_the_benchmark_script_runs_and_prints_its_targets():
    result = run_benchmark("metrics_bench", "--elems", "300000", "--dim", "1000", "--repeats",
                           "1", timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "measured on the CPU of this machine" in out
    for target in ("of memcpy bandwidth", "x naive numpy", "extra memory <= 64 MB"):
        assert any(line.startswith(("PASS", "MISS")) and target in line
                   for line in out.splitlines()), (target, out)
