"""npu_deploy.kernels.emulation.bf16_blas: the fast GEMM's bf16 matmul path, against the FP32
path (the same products, another FP32 summation order) and the exact sum."""

from __future__ import annotations

import pytest
import torch

from npu_deploy.kernels.emulation.bf16_blas import (
    _BF16_GEMM_EXPONENTS,
    _BF16_GEMM_MAX_K,
    GemmB,
    _quantize_bf16_rows,
    block_exponents,
    exact_in_bf16_matmul,
    gemm_bf16_blas,
    gemm_bfp16_blas,
)
from npu_deploy.kernels.emulation.numerics import (
    BFP16EBS8,
    _quantize_blocks_torch,
    gemm_operands,
    quantize_gemm_b,
    to_bf16,
    to_bfp16,
)


def _blocks(seed: int, n: int = 8192) -> list[torch.Tensor]:
    """Blocks of 8 (rows) of every kind the quantizer meets: plain, spread over the whole
    exponent range, all-carry (nearest-even rounds 255 LSBs up), and bf16 values."""
    g = torch.Generator().manual_seed(seed)
    spread = torch.logspace(-44, 37, 8)
    return [torch.randn(n, 8, generator=g),
            torch.randn(n, 8, generator=g) * spread[torch.randperm(8, generator=g)],
            (torch.rand(n, 8, generator=g) * 255.99).floor() * 2.0**-10,
            torch.randn(n, 8, generator=g).to(torch.bfloat16).float()]


def _bf16_ulps(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """|x - y| in bf16 ulps (steps between the two bit patterns, across zero too)."""
    def ordered(t: torch.Tensor) -> torch.Tensor:
        i = t.view(torch.int16).to(torch.int32)
        return torch.where(i < 0, -(i & 0x7FFF), i)
    return (ordered(x) - ordered(y)).abs()


def _fp32_path(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """The FP32 BLAS path: the quantized operands in float32, one FP32 matmul, one cast."""

    return to_bf16(to_bfp16(a.float()) @ quantize_gemm_b(b))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_compiled_bf16_quantizer_gives_the_torch_quantizers_values(seed):
    for x in _blocks(seed):
        xb = x.to(torch.bfloat16)
        in_range = (xb.float().abs() >= 2.0 ** -56) & (xb.float().abs() < 2.0 ** 55)
        xb = torch.where(in_range, xb, torch.zeros_like(xb))   # keep every block in range
        xb[::7, 3] = -0.0
        want = _quantize_blocks_torch(xb.float(), BFP16EBS8)
        got = _quantize_bf16_rows(xb.view(-1, 64))
        assert got is not None and got.dtype == torch.bfloat16
        assert torch.equal(got.float().view(-1, 8).view(torch.int32), want.view(torch.int32))


def test_compiled_bf16_quantizer_leaves_other_blocks_to_the_fp32_path():

    for bad in (float("inf"), float("nan"), 1e-30, 2.0 ** 60, 1e-40):
        x = torch.randn(64, 96).to(torch.bfloat16)
        x[5, 17] = bad
        if bad < 1:
            x[5, 16:24] = torch.where(x[5, 16:24] == bad, x[5, 16:24], 0.0)
        assert _quantize_bf16_rows(x) is None, bad
    assert _quantize_bf16_rows(torch.zeros(3, 16, dtype=torch.bfloat16)) is not None


@pytest.mark.parametrize("m,k,n", [(2048, 576, 1536), (2048, 1536, 576), (512, 576, 192),
                                   (40, 96, 24), (3, 8, 5)])
def test_bf16_blas_gemm_is_the_fp32_path_up_to_summation_order(m, k, n):
    """The bf16 matmul (oneDNN) adds the same exact products in FP32 and rounds once: on the
    hardware protocol's operands the result is the FP32 path's, bar a rare last bit where an
    FP32 sum in another order lands across a bf16 rounding boundary."""

    a, b = gemm_operands(m, k, n, seed=m + k + n)
    want = _fp32_path(a, b)
    for b_arg in (b, GemmB(b)):
        got = gemm_bf16_blas(a, b_arg, None)
        assert got is not None and got.dtype == torch.bfloat16
        ulps = _bf16_ulps(got, want)
        assert int(ulps.max()) <= 1 and float((ulps > 0).float().mean()) < 1e-4
    fast = gemm_bfp16_blas(a, b, b_quantized=GemmB(b))
    assert torch.equal(fast, got)


def test_bf16_blas_gemm_accumulates_in_fp32_and_rounds_once():
    """Operands spread over 2^-24..2^24 with cancellation: each FP32 summation order may
    round differently, but the result stays within FP32 accumulation error (k * 2^-24 of
    sum |a||b|, twice for the order) plus half a bf16 ulp of the exact sum -- which bf16
    partial sums, or a second rounding, would not."""

    g = torch.Generator().manual_seed(9)
    m, k, n = 256, 2048, 64

    def spread(*shape):
        return (torch.randn(*shape, generator=g).sign()
                * torch.exp2(torch.rand(*shape, generator=g) * 48 - 24)).to(torch.bfloat16)
    a, b = spread(m, k), spread(k, n)
    got = gemm_bf16_blas(a, GemmB(b), None)
    assert got is not None
    aq, bq = to_bfp16(a.float()).double(), to_bfp16(b.float(), dim=0).double()
    exact = aq @ bq
    bound = 2 * k * 2.0 ** -24 * (aq.abs() @ bq.abs()) + exact.abs() * 2.0 ** -8
    assert bool(((got.double() - exact).abs() <= bound).all())
    # a well-conditioned product: exactly the nearest bf16 of the exact sum, everywhere
    a, b = gemm_operands(256, 2048, 64, seed=3)
    exact = to_bfp16(a.float()).double() @ to_bfp16(b.float(), dim=0).double()
    assert torch.equal(gemm_bf16_blas(a, GemmB(b), None), to_bf16(exact))


def test_gemm_takes_the_fp32_path_outside_the_bf16_range():

    a, b = gemm_operands(64, 96, 32, seed=5)
    tiny = a.clone()
    tiny[3, 8:16] = 1e-30                  # a block whose LSB products would be subnormal
    huge = b.clone()
    huge[40, 7] = 2.0 ** 70
    for x, y in ((tiny, b), (a, huge)):
        assert gemm_bf16_blas(x, GemmB(y), None) is None
        assert GemmB(y).bf16 is None or y is b
        got = gemm_bfp16_blas(x, y, b_quantized=GemmB(y))
        assert torch.equal(got.view(torch.int16), _fp32_path(x, y).view(torch.int16))
    # a K that is not a multiple of the block, and the methods the bf16 matmul cannot do
    a, b = gemm_operands(16, 20, 8, seed=6)
    assert gemm_bf16_blas(a, b, None) is None
    a, b = gemm_operands(64, 96, 32, seed=7)
    floor = gemm_bfp16_blas(a, b, cast="floor")
    assert torch.equal(floor, to_bf16(to_bfp16(a.float()) @ to_bfp16(b.float(), dim=0),
                                      "floor"))


def test_block_exponents_read_each_blocks_largest_value():
    v = torch.zeros(2, 20)                       # blocks of 8 along the rows, the last short
    v[0, 3], v[0, 9] = 1.0, -2.0 ** -40          # fields 127 and 87
    v[1, 17] = 3.0 * 2.0 ** 20                   # field 148, in the short block
    v[1, 8:16] = 2.0 ** -100                     # field 27
    v[1, 0] = 2.0 ** -100 * 0.5                  # a block's only value: field 26
    assert block_exponents(v) == (26, 148)
    assert block_exponents(torch.zeros(3, 16)) == (256, 0)


def test_exact_in_bf16_matmul_is_the_gemms_range_at_its_edges():
    """Two operands in the GEMM's fixed range are accepted up to its K; one LSB product
    below 2^-124, a subnormal value or a sum that may reach 2^127 is refused."""
    lo, hi = _BF16_GEMM_EXPONENTS
    assert exact_in_bf16_matmul(lo, hi, lo, hi, _BF16_GEMM_MAX_K - 1)
    assert not exact_in_bf16_matmul(lo, hi, lo, hi, _BF16_GEMM_MAX_K + 1)
    assert not exact_in_bf16_matmul(lo - 1, hi, lo, hi, 64)     # LSB product 2^-125
    assert exact_in_bf16_matmul(lo - 20, 127, lo + 20, hi, 64)  # 2^-124 either way
    assert not exact_in_bf16_matmul(7, 127, 200, 200, 64)       # a subnormal value
    assert not exact_in_bf16_matmul(100, 200, 100, 200, 64)     # 2^148 * 2^6 overflows
    assert exact_in_bf16_matmul(256, 0, 3, 250, 4096)           # a zero operand
