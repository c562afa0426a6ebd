"""npu_deploy.kernels.emulation.numerics: bf16 storage, bfp16ebs8 blocks, the BFP16 GEMM and the
FP32 GEMV.

Exact cases are worked by hand (in the comments) or by slow reference code written straight
from the format's description; fidelity is checked against the hardware's figures at the four
Llama-3.2-1B projection shapes, with 64 rows (mean_rel_L1 depends on K, N and the inputs, not M).
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from npu_deploy.kernels.emulation.numerics import (
    BFP16EBS8,
    GEMM_MEAN_REL_L1_BAND,
    GEMV_MEAN_REL_L1_MAX,
    BFPFormat,
    _gemv_fp32acc_fast,
    _gemv_fp32acc_torch,
    fp32_reference,
    gemm_bf16_native,
    gemm_bfp16,
    gemm_operands,
    gemv_fp32acc,
    gemv_operands,
    to_bf16,
    to_bfp16,
)
from npu_deploy.metrics.comparison import compare

LLAMA_32_1B_PROJECTIONS = [(2048, 2048), (2048, 512), (2048, 8192), (8192, 2048)]  # K, N
ROWS = 64
SATURATE = BFPFormat(overflow="saturate")
FLOOR = BFPFormat(rounding="floor")


def f32(values: list[float]) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float32)


def bf16_values(t: torch.Tensor) -> list[float]:
    return t.to(torch.float32).tolist()


# --- to_bf16 ------------------------------------------------------------------------------------

def test_to_bf16_rounds_to_nearest_with_ties_to_even():
    # bf16 keeps 7 fraction bits: near 1 its ulp is 2^-7, and 2^-8 is half of one.
    x = f32([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1 + 2**-8 + 2**-20, 1 + 2**-9])
    out = to_bf16(x)
    assert out.dtype == torch.bfloat16
    assert bf16_values(out) == [1.0, 1 + 2**-6, -1.0, 1 + 2**-7, 1.0]


def test_to_bf16_keeps_inf_and_nan_and_overflows_to_inf():
    out = bf16_values(to_bf16(f32([math.inf, -math.inf, math.nan, 3.4e38, -3.4e38, 3.3895e38])))
    assert out[:2] == [math.inf, -math.inf] and math.isnan(out[2])
    assert out[3:5] == [math.inf, -math.inf]  # beyond bf16's largest finite value + half an ulp
    assert out[5] == 3.3895313892515355e38  # bf16's largest finite value


def test_to_bf16_rounds_float64_once():
    # 1 + 2^-8 + 2^-40 is just above a tie: the nearest bf16 is 1 + 2^-7. Rounding to float32
    # first would land on the tie (1 + 2^-8) and then go to even, 1.0.
    x = torch.tensor([1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40), 1 + 2**-8, 2.0**-130, 1e39],
                     dtype=torch.float64)
    assert bf16_values(to_bf16(x)) == [1 + 2**-7, -(1 + 2**-7), 1.0, 2.0**-130, math.inf]


def test_to_bf16_returns_bf16_input_unchanged():
    x = to_bf16(f32([1.5, -2.25]))
    assert to_bf16(x) is x


def test_to_bf16_floor_rounds_toward_minus_infinity():
    # near 1 the bf16 ulp is 2^-7: anything short of the next value goes down, for a negative
    # value that is away from zero; exact values, ties included, stay
    x = f32([1 + 2**-8, 1 + 2**-7 - 2**-23, -(1 + 2**-8), -(1 + 2**-7), 2.0**-140, -(2.0**-140),
             0.0, -0.0])
    out = to_bf16(x, "floor")
    assert out.dtype == torch.bfloat16
    assert bf16_values(out) == [1.0, 1.0, -(1 + 2**-7), -(1 + 2**-7), 0.0, -(2.0**-133), 0.0,
                                -0.0]
    assert [math.copysign(1, v) for v in bf16_values(out)[-2:]] == [1, -1]
    assert bf16_values(to_bf16(x)) != bf16_values(out)  # not the nearest-even cast


def test_to_bf16_floor_keeps_inf_and_nan_and_overflows_down():
    nan_low_bits = torch.tensor([0x7F800001], dtype=torch.int32).view(torch.float32)
    x = torch.cat([f32([math.inf, -math.inf, 3.4e38, -3.4e38]), nan_low_bits])
    out = bf16_values(to_bf16(x, "floor"))
    assert out[:2] == [math.inf, -math.inf]
    assert out[2:4] == [3.3895313892515355e38, -math.inf]  # largest finite below; -inf below
    assert math.isnan(out[4])  # its 16 high bits alone would read as inf
    with pytest.raises(TypeError, match="float32"):
        to_bf16(torch.ones(2, dtype=torch.float64), "floor")
    with pytest.raises(ValueError, match="rounding"):
        to_bf16(f32([1.0]), "up")  # type: ignore[arg-type]


# --- to_bfp16: hand-worked blocks -----------------------------------------------------------------

def test_small_integers_are_exact_against_the_block_max():
    # max 8 = 2^3: E = 130, LSB = 2^(130 - 133) = 1/8, so every integer up to 8 is exact.
    x = f32([1, 2, 3, 4, 5, 6, 7, 8])
    assert torch.equal(to_bfp16(x), x)


def test_mantissas_round_to_nearest_even_against_the_block_lsb():
    # max 1.0: E = 127, LSB = 2^-6. In LSBs: 64, 32.5, 33.5, -32.5, 0.75, 0.5, -0.75, 1.5.
    x = f32([1.0, 32.5 / 64, 33.5 / 64, -32.5 / 64, 0.75 / 64, 0.5 / 64, -0.75 / 64, 1.5 / 64])
    lsbs = [64, 32, 34, -32, 1, 0, -1, 2]
    assert to_bfp16(x).tolist() == [q / 64 for q in lsbs]


def test_floor_rounding_truncates_toward_minus_infinity():
    # the core's default rounding mode: the same block, floored (two's complement truncation)
    x = f32([1.0, 32.5 / 64, 33.5 / 64, -32.5 / 64, 0.75 / 64, 0.5 / 64, -0.75 / 64, 1.5 / 64])
    lsbs = [64, 32, 33, -33, 0, 0, -1, 1]
    assert to_bfp16(x, fmt=FLOOR).tolist() == [q / 64 for q in lsbs]


def test_one_large_value_wipes_out_the_small_ones():
    # max 1024 = 2^10: E = 137, LSB = 2^4 = 16. 3, 7 and 8 (0.5 LSB, a tie) go to 0; 24 is 1.5
    # LSB -> 2 LSB = 32; 1023 is 63.94 LSB -> 64 LSB = 1024.
    x = f32([1024, 3, -3, 7, 8, 24, -24, 1023])
    out = to_bfp16(x)
    assert out.tolist() == [1024, 0, 0, 0, 0, 32, -32, 1024]
    assert not torch.signbit(out[1:5]).any()  # no negative zero: -3 became +0


def test_zero_blocks_stay_zero_without_a_sign():
    out = to_bfp16(f32([0.0] * 8 + [-0.0] * 8))
    assert torch.equal(out, torch.zeros(16)) and not torch.signbit(out).any()


def test_negative_values_use_the_two_complement_range():
    # -255/128 is -127.5 LSB at 2^-6 -> -128 (even), which fits: E stays, 3/256 keeps 1 LSB.
    x = f32([-255 / 128, 3 / 256, -1.0, -0.5, 0, 0, 0, 0])
    assert to_bfp16(x).tolist() == [-2.0, 1 / 64, -1.0, -0.5, 0, 0, 0, 0]


def test_a_mantissa_rounding_to_plus_128_carries_into_the_exponent():
    # +255/128 is +127.5 LSB -> +128, which does not fit: E goes up by one (LSB 2^-5) and the
    # block is requantized, so 3/256 (0.375 LSB) is lost. amd/IRON's packer saturates instead.
    x = f32([255 / 128, 3 / 256, 0.5, -0.25, 0, 0, 0, 0])
    assert to_bfp16(x).tolist() == [2.0, 0, 0.5, -0.25, 0, 0, 0, 0]
    assert to_bfp16(x, fmt=SATURATE).tolist() == [127 / 64, 1 / 64, 0.5, -0.25, 0, 0, 0, 0]


def test_blocks_run_along_the_given_dim():
    x = torch.zeros(8, 8)
    x[0, 0], x[1, 0] = 1024.0, 3.0
    down = to_bfp16(x, dim=0)  # column 0 is one block: 3 shares 1024's exponent and is lost
    across = to_bfp16(x, dim=1)  # row 1 is its own block: 3 is exact
    assert down[1, 0].item() == 0.0 and across[1, 0].item() == 3.0
    assert torch.equal(down, to_bfp16(x.t().contiguous(), dim=-1).t())


def test_a_short_last_block_is_padded_with_zeros():
    assert to_bfp16(f32([1024, 3, 24])).tolist() == [1024, 0, 32]
    assert to_bfp16(f32([1.0] * 9 + [3.0])).tolist() == [1.0] * 8 + [1.0, 3.0]


def test_subnormals_keep_their_exponent_field_or_flush():
    x = f32([2.0**-130, 0, 0, 0, 0, 0, 0, 0])  # fp32 subnormal: exponent field 0, LSB 2^-133
    assert to_bfp16(x)[0].item() == 2.0**-130
    assert to_bfp16(x, fmt=BFPFormat(subnormals="flush"))[0].item() == 0.0


def test_inf_and_nan_pass_through_and_take_the_block_exponent():
    out = to_bfp16(f32([math.inf, 1.0, -2.0, 0, math.nan, 1.0, 0, 0, 1.0, 0, 0, 0, 0, 0, 0, 0]))
    assert out[0].item() == math.inf and math.isnan(out[4].item())
    assert out[1:4].tolist() == [0, 0, 0]  # against a 2^122 LSB
    assert out[8].item() == 1.0  # the next block is untouched


def test_bfp_format_rejects_unknown_choices():
    with pytest.raises(ValueError, match="rounding"):
        BFPFormat(rounding="ceil")  # type: ignore[arg-type]


# --- to_bfp16 against a reference written from the format's description ---------------------

def exponent_field(v: float) -> int:
    return (struct.unpack("<I", struct.pack("<f", v))[0] >> 23) & 0xFF


def reference_block(values: list[float], fmt: BFPFormat = BFP16EBS8) -> list[float]:
    """One block by hand: E = largest fp32 exponent field, LSB = 2^(E - 133), round, carry."""
    def quantize(lsb: float) -> list[int]:
        if fmt.rounding == "nearest_even":
            return [round(v / lsb) for v in values]  # Python rounds half to even
        return [math.floor(v / lsb) for v in values]

    lsb = 2.0 ** (max(exponent_field(v) for v in values) - 133)
    q = quantize(lsb)
    if max(q) == 128:
        if fmt.overflow == "carry":
            lsb *= 2
            q = quantize(lsb)
        else:
            q = [min(m, 127) for m in q]
    assert all(-128 <= m <= 127 for m in q)
    # +-128 LSB of bf16's top binade is +-2^128: a bfp16ebs8 value float32 holds as +-inf
    return [m * lsb if abs(m * lsb) < 2.0**128 else math.copysign(math.inf, m) for m in q]


def reference_to_bfp16(rows: list[list[float]], fmt: BFPFormat = BFP16EBS8) -> list[list[float]]:
    out = []
    for row in rows:
        padded = row + [0.0] * (-len(row) % 8)
        blocks = [reference_block(padded[i:i + 8], fmt) for i in range(0, len(padded), 8)]
        out.append([v for block in blocks for v in block][: len(row)])
    return out


finite_bf16_bits = st.integers(0, 0xFFFF).filter(lambda b: (b >> 7) & 0xFF != 0xFF)


@settings(max_examples=200, deadline=None)
@given(bits=st.lists(finite_bf16_bits, min_size=8, max_size=8),
       fmt=st.sampled_from([BFP16EBS8, SATURATE, FLOOR, BFPFormat(rounding="floor",
                                                                   overflow="saturate")]))
def test_any_finite_bf16_block_matches_the_reference(bits, fmt):
    # any bit pattern but inf/NaN: subnormals and negative zero too
    x = torch.from_numpy(np.array(bits, dtype=np.uint16).view(np.int16)).view(torch.bfloat16)
    values = bf16_values(x)
    assert to_bfp16(x, fmt=fmt).tolist() == reference_block(values, fmt)


# --- gemm_bfp16 against a slow reference --------------------------------------------------------

def reference_gemm(a: torch.Tensor, b: torch.Tensor, tile_k: int,
                   bf16_partials: bool = False) -> torch.Tensor:
    """Straight from the datapath's description: quantize A's rows and B's columns, sum each K
    tile exactly, round the tile sum to fp32, add the tiles in K order in fp32; with
    `bf16_partials`, round the sum so far to bf16 after each tile."""
    aq = reference_to_bfp16(a.to(torch.float32).tolist())
    bq = reference_to_bfp16(b.to(torch.float32).t().tolist())
    k = a.shape[1]
    out = np.zeros((a.shape[0], b.shape[1]), dtype=np.float32)
    for i, row in enumerate(aq):
        for j, col in enumerate(bq):
            acc = np.float32(0.0)
            for k0 in range(0, k, tile_k):
                terms = [row[t] * col[t] for t in range(k0, min(k, k0 + tile_k))]  # exact
                tile_sum = math.fsum(terms)
                assert Fraction(tile_sum) == sum(map(Fraction, terms))  # a double holds it
                acc = np.float32(acc + np.float32(tile_sum))
                if bf16_partials:
                    acc = np.float32(to_bf16(torch.tensor([acc])).item())
            out[i, j] = acc
    return torch.from_numpy(out)


def wide_range_bf16(*shape: int, seed: int) -> torch.Tensor:
    """bf16 values over 2^-8..2^8, so sums in fp32 round."""
    gen = torch.Generator().manual_seed(seed)
    scale = torch.exp2(torch.randint(-8, 9, shape, generator=gen).to(torch.float32))
    return to_bf16(torch.randn(*shape, generator=gen) * scale)


def blocky_bf16(rows: int, k: int, seed: int) -> torch.Tensor:
    """[rows, K] bf16 whose blocks of 8 along K each get a scale in 2^-10..2^10: the sum of a
    K tile needs more than fp32's 24 bits, so where the tiles end changes the result."""
    gen = torch.Generator().manual_seed(seed)
    scale = torch.exp2(torch.randint(-10, 11, (rows, -(-k // 8)), generator=gen).to(torch.float32))
    return to_bf16(torch.randn(rows, k, generator=gen) * scale.repeat_interleave(8, dim=1)[:, :k])


GEMM_CASES = [(5, 40, 3), (3, 20, 4), (4, 96, 4)]  # M, K, N: K tiles that end short, padding


def gemm_case(m: int, k: int, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    return blocky_bf16(m, k, seed=m * k), blocky_bf16(n, k, seed=k * n + 1).t()


@pytest.mark.parametrize("m,k,n", GEMM_CASES)
@pytest.mark.parametrize("tile_k", [8, 16, 32])
def test_gemm_equals_the_reference_bit_for_bit(m, k, n, tile_k):
    a, b = gemm_case(m, k, n)
    want = reference_gemm(a, b, tile_k)
    got = gemm_bfp16(a, b, tile_k=tile_k, out_dtype=torch.float32)
    assert torch.equal(got, want)
    assert torch.equal(gemm_bfp16(a, b, tile_k=tile_k), to_bf16(want))  # one final cast


@pytest.mark.parametrize("m,k,n", GEMM_CASES)
@pytest.mark.parametrize("tile_k", [8, 32])
def test_bf16_partials_round_the_sum_after_every_k_tile(m, k, n, tile_k):
    # the direct method's bf16 C tile: the same tiles, and a bf16 round trip after each
    a, b = gemm_case(m, k, n)
    want = reference_gemm(a, b, tile_k, bf16_partials=True)
    got = gemm_bfp16(a, b, tile_k=tile_k, out_dtype=torch.float32, bf16_partials=True)
    assert torch.equal(got, want)
    assert torch.equal(gemm_bfp16(a, b, tile_k=tile_k, bf16_partials=True), to_bf16(want))
    assert not torch.equal(got, reference_gemm(a, b, tile_k))  # the rounding shows


def test_bf16_partials_fast_path_rounds_the_same_tiles():
    # BLAS per K tile: the same tiles and roundings, another FP32 order within a tile (on
    # these inputs no bit changes); the native bf16 datapath takes the same accumulation
    a, b = gemm_operands(48, 320, 40, seed=9)
    for tile_k in (32, 64):
        exact = gemm_bfp16(a, b, tile_k=tile_k, bf16_partials=True)
        assert torch.equal(gemm_bfp16(a, b, tile_k=tile_k, bf16_partials=True,
                                      exact_tiles=False), exact)
        assert not torch.equal(exact, gemm_bfp16(a, b, tile_k=tile_k))
    native = gemm_bf16_native(a, b, tile_k=32, bf16_partials=True, out_dtype=torch.float32)
    assert torch.equal(native, to_bf16(native).float())
    assert torch.equal(native, gemm_bf16_native(a, b, tile_k=32, bf16_partials=True,
                                                out_dtype=torch.float32, exact_tiles=False))


def test_the_cast_rounding_applies_to_the_final_sum_only():
    a, b = gemm_operands(40, 96, 24, seed=5)
    fp32 = gemm_bfp16(a, b, out_dtype=torch.float32)
    floor = gemm_bfp16(a, b, cast="floor")
    assert torch.equal(floor, to_bf16(fp32, "floor"))
    assert not torch.equal(floor, gemm_bfp16(a, b))
    assert torch.equal(gemm_bfp16(a, b, out_dtype=torch.float32, cast="floor"), fp32)
    buf = torch.empty(40, 24, dtype=torch.bfloat16)
    assert torch.equal(gemm_bfp16(a, b, cast="floor", exact_tiles=False, out=buf), floor)
    assert torch.equal(gemm_bf16_native(a, b, cast="floor"),
                       to_bf16(gemm_bf16_native(a, b, out_dtype=torch.float32), "floor"))


def test_the_reference_cases_exercise_the_k_tiling():
    # otherwise the bit-exact test above could not tell one tile_k from another
    for m, k, n in (GEMM_CASES[0], GEMM_CASES[2]):
        a, b = gemm_case(m, k, n)
        by_8, by_32 = (gemm_bfp16(a, b, tile_k=t, out_dtype=torch.float32) for t in (8, 32))
        assert not torch.equal(by_8, by_32)


def k_ordered_operands(blocks: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """A [1, 8 * len(blocks)] whose block i holds blocks[i] then zeros, B a column of the same:
    block i contributes blocks[i]^2 to C[0, 0]."""
    a = torch.zeros(1, 8 * len(blocks))
    for i, v in enumerate(blocks):
        a[0, 8 * i] = v
    return to_bf16(a), to_bf16(a.t())


def test_k_tiles_are_added_in_order_in_fp32():
    # Tile sums 2^24, 1, 1: fp32 has 24 bits, so 2^24 + 1 is a tie and goes back to 2^24 (even)
    # each time. One tile over all of K sums exactly: 2^24 + 2. Small tiles first: 2, then
    # 2^24 + 2.
    a, b = k_ordered_operands([4096.0, 1.0, 1.0])
    for tile_k, want in ((8, 2.0**24), (16, 2.0**24), (24, 2.0**24 + 2)):
        got = gemm_bfp16(a, b, tile_k=tile_k, out_dtype=torch.float32)
        assert got.item() == want == reference_gemm(a, b, tile_k).item()
    a, b = k_ordered_operands([1.0, 1.0, 4096.0])
    assert gemm_bfp16(a, b, tile_k=8, out_dtype=torch.float32).item() == 2.0**24 + 2


def test_gemm_keeps_leading_dims_and_checks_its_arguments():
    a, b = wide_range_bf16(2, 3, 16, seed=3), wide_range_bf16(16, 5, seed=4)
    out = gemm_bfp16(a, b)
    assert out.shape == (2, 3, 5) and out.dtype == torch.bfloat16
    assert torch.equal(out.reshape(6, 5), gemm_bfp16(a.reshape(6, 16), b))
    with pytest.raises(TypeError, match="to_bf16"):
        gemm_bfp16(a.float(), b)
    with pytest.raises(ValueError, match="tile_k"):
        gemm_bfp16(a, b, tile_k=12)
    with pytest.raises(ValueError, match="K"):
        gemm_bfp16(a, b[:8])


# --- gemv_fp32acc -------------------------------------------------------------------------------

def reference_gemv(w: torch.Tensor, x: torch.Tensor, lanes: int) -> torch.Tensor:
    """Lane j adds w[m, k] * x[k] for k = j, j + lanes, ... in fp32; then pairwise halving."""
    w32, x32 = w.to(torch.float32).numpy(), x.to(torch.float32).numpy()
    out = np.zeros(w32.shape[0], dtype=np.float32)
    for m in range(w32.shape[0]):
        acc = [np.float32(0.0)] * lanes
        for k in range(w32.shape[1]):
            acc[k % lanes] = np.float32(acc[k % lanes] + w32[m, k] * x32[k])  # exact product
        while len(acc) > 1:
            half = len(acc) // 2
            acc = [np.float32(acc[j] + acc[j + half]) for j in range(half)]
        out[m] = acc[0]
    return torch.from_numpy(out)


@pytest.mark.parametrize("lanes", [64, 4])
def test_gemv_equals_the_lane_reference_bit_for_bit(lanes):
    w, x = wide_range_bf16(3, 200, seed=5), wide_range_bf16(200, seed=6)
    want = reference_gemv(w, x, lanes)
    assert torch.equal(gemv_fp32acc(w, x, lanes=lanes, out_dtype=torch.float32), want)
    assert torch.equal(gemv_fp32acc(w, x, lanes=lanes), to_bf16(want))
    other = reference_gemv(w, x, 64 if lanes == 4 else 4)
    assert not torch.equal(want, other)  # the lane structure shows in these sums


@pytest.mark.parametrize("lanes", [64, 32, 4])
@pytest.mark.parametrize("m,k", [(97, 576), (130, 200), (64, 1536), (8, 45)])
def test_the_compiled_gemv_gives_the_torch_definitions_bits(m, k, lanes):
    """The compiled GEMV (issue 37: decode was spent in the torch one) against the torch
    definition it replaced, bit for bit: wide-range values, signed zeros, a K that is not a
    multiple of the lanes (its +0.0 padding), infinities and NaNs, a column slice of W.
    A NaN is a NaN in both, at the same outputs; which NaN's payload an add passes on IEEE
    leaves to the implementation (torch's own vector loops do not fix it either), so the
    payloads are not compared."""
    w, x = wide_range_bf16(m, k + 7, seed=m + k), wide_range_bf16(k, seed=lanes)
    w = w[:, 3:3 + k]                            # rows with a stride: a slice, as mv_bf16 takes
    w[0], x[1] = -0.0, -0.0
    w[1, :5] = torch.tensor([float("inf"), float("-inf"), float("nan"), 0.0, -0.0])
    w[2, 7] = float("nan")
    if m > 64:
        w[70, 0] = float("inf")                  # a row of the second work item
    want = _gemv_fp32acc_torch(w, x, lanes)
    nan = want.isnan()
    assert 0 < int(nan.sum()) < m
    for got in (_gemv_fp32acc_fast(w, x, lanes),
                gemv_fp32acc(w, x, lanes=lanes, out_dtype=torch.float32)):
        assert torch.equal(got.isnan(), nan)
        assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))
    assert (want == 0).any() and (want.view(torch.int32) == 0).any()     # +0.0 kept as +0.0


@pytest.mark.parametrize("m,k", [(2048, 2048), (512, 2048), (16384, 2048)])
@pytest.mark.slow         # 8 s in all on 2 busy cores: out of the fast core
def test_gemv_error_is_at_the_fp32_accumulation_floor(m, k):
    w, x = gemv_operands(m, k, seed=m)
    ref = fp32_reference(w, x)
    # as the hardware figure is measured: bf16 output against the fp32 reference cast to bf16
    assert compare(to_bf16(ref), gemv_fp32acc(w, x)).mean_rel_l1 <= GEMV_MEAN_REL_L1_MAX
    assert compare(ref, gemv_fp32acc(w, x, out_dtype=torch.float32)).mean_rel_l1 \
        <= GEMV_MEAN_REL_L1_MAX


# --- GEMM fidelity against the hardware figures ----------------------------------------------

@pytest.mark.parametrize("k,n", LLAMA_32_1B_PROJECTIONS)
@pytest.mark.slow         # 27 s in all on 2 busy cores: out of the fast core
def test_gemm_error_lands_in_the_hardware_band(k, n):
    lo, hi = GEMM_MEAN_REL_L1_BAND
    a, b = gemm_operands(ROWS, k, n, seed=k + n)
    ref = fp32_reference(a, b)
    fp32_out = gemm_bfp16(a, b, out_dtype=torch.float32)
    assert lo <= compare(ref, fp32_out).mean_rel_l1 <= hi
    assert lo <= compare(to_bf16(ref), to_bf16(fp32_out)).mean_rel_l1 <= hi  # the bf16 kernel
    # An emulator that only rounds to bf16 is several times too good: below the band.
    assert compare(ref, to_bf16(ref)).mean_rel_l1 < lo / 3


def test_floor_rounding_lands_above_the_band():
    # the rounding mode is what the band pins down: floor is biased, and too far off
    a, b = gemm_operands(ROWS, 2048, 512, seed=7)
    error = compare(fp32_reference(a, b), gemm_bfp16(a, b, out_dtype=torch.float32, fmt=FLOOR))
    assert error.mean_rel_l1 > GEMM_MEAN_REL_L1_BAND[1]


# --- the compiled quantizer ------------------------------------------------------------------

def _blocks(seed: int, n: int = 8192) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    spread = torch.logspace(-44, 37, 8)
    return [torch.randn(n, 8, generator=g),
            torch.randn(n, 8, generator=g) * spread[torch.randperm(8, generator=g)],
            torch.randn(n, 8, generator=g) * 1e-40,                       # subnormal blocks
            (torch.rand(n, 8, generator=g) * 255.99).floor() * 2.0**-10,  # carries (nearest)
            torch.randn(n, 8, generator=g).to(torch.bfloat16).float()]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_quantizer_is_bit_identical_to_the_torch_one(seed):
    from npu_deploy.kernels.emulation.numerics import (
        _quantize_bfp16ebs8_fast,
        _quantize_blocks_torch,
    )

    for x in _blocks(seed):
        want = _quantize_blocks_torch(x.clone(), BFP16EBS8)
        got = _quantize_bfp16ebs8_fast(x.clone())
        assert got is not None
        assert torch.equal(got.view(torch.int32), want.view(torch.int32))


def test_compiled_quantizer_leaves_inf_and_nan_to_the_torch_path():
    from npu_deploy.kernels.emulation.numerics import _quantize_bfp16ebs8_fast, to_bfp16

    x = torch.randn(4096, 8)
    x[100, 3] = float("inf")
    x[7, 0] = float("nan")
    assert _quantize_bfp16ebs8_fast(x.clone()) is None
    q = to_bfp16(x)                       # the public path still answers, through torch
    assert torch.isinf(q[100, 3]) and torch.isnan(q[7, 0])


def test_gemm_writes_into_the_output_buffer_it_is_given():
    a, b = gemm_operands(40, 96, 24, seed=4)
    for dtype in (torch.bfloat16, torch.float32):
        for exact in (True, False):
            want = gemm_bfp16(a, b, out_dtype=dtype, exact_tiles=exact)
            buf = torch.full((40, 24), float("nan"), dtype=dtype)
            got = gemm_bfp16(a, b, out_dtype=dtype, exact_tiles=exact, out=buf)
            assert got is buf and torch.equal(buf, want)
    with pytest.raises(ValueError, match="out must be a contiguous"):
        gemm_bfp16(a, b, out=torch.empty(40, 25, dtype=torch.bfloat16))


@pytest.mark.parametrize("shape", [(1, 576), (7, 64), (3, 5, 128), (16,)])
def test_the_compiled_rmsnorm_lane_sums_give_the_torch_definitions_bits(shape):
    """RMSNorm's lane sums (kernels/families/rmsnorm.py), compiled against the torch loop
    they replaced, bit for bit: wide-range values whose sums round, a square that
    overflows, a NaN, a row and a head layout."""
    from npu_deploy.kernels.families.rmsnorm import lane_sums, lane_sums_torch

    xf = wide_range_bf16(*shape, seed=sum(shape)).float()
    flat = xf.view(-1)
    flat[0], flat[-1] = float("nan"), 3e38
    width = shape[-1]
    want = lane_sums_torch(xf, width, 16)
    got = lane_sums(xf, width, 16)
    assert got.shape == want.shape
    assert torch.equal(got.isnan(), want.isnan()) and bool(got.isinf().any())
    keep = ~want.isnan()
    assert torch.equal(got[keep].view(torch.int32), want[keep].view(torch.int32))
