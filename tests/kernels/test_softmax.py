"""npu_deploy.kernels.emulation.softmax: the attention softmax (FP32, P as bf16) and its
compiled pass with P's block conversion, against the definition bit for bit."""

from __future__ import annotations

import pytest
import torch

from npu_deploy.kernels.emulation.numerics import to_bfp16


def test_exp_is_within_one_ulp_of_the_correctly_rounded_value():
    from npu_deploy.kernels.emulation.softmax import exp_fp32

    x = torch.cat((-torch.rand(200_000, generator=torch.Generator().manual_seed(0)) * 110,
                   torch.tensor([0.0, -1e-30, -87.3, -103.9, -104.5, float("-inf")])))
    got = exp_fp32(x)
    want = torch.exp(x.to(torch.float64)).to(torch.float32)
    ulps = (got.view(torch.int32) - want.view(torch.int32)).abs()
    assert int(ulps.max()) <= 1
    assert float((ulps > 0).float().mean()) < 1e-4
    assert got[-1] == 0 and got[-6] == 1


@pytest.mark.parametrize("rows,cols,spread", [(5, 77, 1.0), (64, 300, 8.0), (700, 2048, 30.0),
                                              (3, 1, 1.0), (17, 1000, 1e4)])
def test_compiled_softmax_is_the_definition_bit_for_bit(rows, cols, spread):
    from npu_deploy.kernels.emulation.softmax import softmax_bf16, softmax_bfp16

    g = torch.Generator().manual_seed(rows)
    scores = torch.randn(rows, cols, generator=g) * spread
    valid = torch.randint(1, cols + 1, (rows,), generator=g)
    want = to_bfp16(softmax_bf16(scores, valid, 0.125).to(torch.float32))
    got = softmax_bfp16(scores.clone(), valid, 0.125)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    past = torch.arange(cols)[None, :] >= valid[:, None]
    assert bool((got[past] == 0).all())
    in_place = scores.clone()
    assert softmax_bfp16(in_place, valid, 0.125, in_place=True) is in_place
    assert torch.equal(in_place.view(torch.int32), want.view(torch.int32))
    _same_as_bf16(scores, valid, want)


def _same_as_bf16(scores, valid, want):
    """`softmax_bfp16_bf16` gives `want` as bf16 bits (the scores untouched), and the
    smallest exponent field of a nonzero block's largest value, as `block_exponents` reads
    it from `want`."""
    from npu_deploy.kernels.emulation.bf16_blas import block_exponents
    from npu_deploy.kernels.emulation.softmax import softmax_bfp16_bf16

    kept = scores.clone()
    got, low = softmax_bfp16_bf16(scores, valid, 0.125)
    assert got.dtype == torch.bfloat16 and torch.equal(scores, kept)
    assert torch.equal(got.float().view(torch.int32), want.view(torch.int32))
    assert low == block_exponents(want)[0]


def test_compiled_softmax_edge_rows_are_the_definition_bit_for_bit():
    """Rows that reach the compiled pass's shortcuts: a zero max of either sign, blocks whose
    largest probability rounds up to +128 LSBs (a carry), probabilities far below the normal
    float32 range (blocks through `_quantize_block`), a single valid key."""
    from npu_deploy.kernels.emulation.softmax import softmax_bf16, softmax_bfp16

    g = torch.Generator().manual_seed(11)
    cols = 96
    rows = [torch.zeros(cols), -torch.zeros(cols),
            torch.cat((-torch.zeros(1), -torch.rand(cols - 1, generator=g) * 40)),
            torch.cat((torch.zeros(1), -700 - torch.rand(cols - 1, generator=g) * 130)),
            torch.cat((torch.zeros(8), -torch.rand(cols - 8, generator=g) * 900))]
    rows.append(torch.randn(cols, generator=g) * 3)
    for _ in range(200):      # sparse rows: some blocks' largest value rounds up (a carry)
        r = torch.randn(cols, generator=g)
        r[torch.randperm(cols, generator=g)[:cols // 2]] -= 1.0e3
        rows.append(r * 8)
    scores = torch.stack(rows)
    valid = torch.full((len(rows),), cols)
    valid[-1] = 1
    valid[-2] = 37
    p = softmax_bf16(scores, valid, 0.125).to(torch.float32)
    want = to_bfp16(p)
    got = softmax_bfp16(scores, valid, 0.125)
    assert torch.equal(got.view(torch.int32), want.view(torch.int32))
    _same_as_bf16(scores, valid, want)
    # the cases are there: a block whose largest P has all 8 significand bits set (its
    # mantissa rounds to +128: a carry), and nonzero blocks below a normal LSB (E < 8)
    top = p.view(len(rows), -1, 8).view(torch.int32).amax(-1)
    assert int((((top >> 16) & 0x7F) == 0x7F).sum()) > 0
    assert int(((top > 0) & ((top >> 23) < 8)).sum()) > 0


def test_softmax_matches_torch_within_bf16_rounding():
    from npu_deploy.kernels.emulation.softmax import softmax_bf16

    g = torch.Generator().manual_seed(3)
    scores = torch.randn(256, 512, generator=g) * 6
    valid = torch.randint(1, 513, (256,), generator=g)
    masked = torch.arange(512)[None, :] >= valid[:, None]
    want = torch.softmax((scores.double() * 0.125).masked_fill(masked, float("-inf")), dim=-1)
    got = softmax_bf16(scores, valid, 0.125).double()
    # bf16 keeps 8 significant bits: half an ulp is 2^-8 relative, plus FP32-level error.
    assert float(((got - want).abs() / want.clamp(min=1e-30)).max()) <= 2**-8 + 1e-6
    assert float((got.sum(-1) - 1).abs().max()) < 0.02


def test_softmax_of_non_finite_scores_propagates_them():
    from npu_deploy.kernels.emulation.softmax import softmax_bf16, softmax_bfp16

    scores = torch.randn(4, 64)
    scores[2, 5] = float("nan")
    scores[3, 7] = float("inf")
    out = softmax_bfp16(scores, torch.full((4,), 64), 0.125)
    assert bool(torch.isnan(out[2]).any()) and bool(torch.isfinite(out[[0, 1]]).all())
    assert not bool(torch.isfinite(out[3]).all())
    want = to_bfp16(softmax_bf16(scores, torch.full((4,), 64), 0.125).to(torch.float32))
    same = lambda x, y: torch.equal(x.view(torch.int32), y.view(torch.int32))  # noqa: E731
    assert same(out, want)      # NaNs included: the same bits
    in_place = scores.clone()
    softmax_bfp16(in_place, torch.full((4,), 64), 0.125, in_place=True)
    assert same(in_place, want)
    from npu_deploy.kernels.emulation.softmax import softmax_bfp16_bf16

    as_bf16, low = softmax_bfp16_bf16(scores, torch.full((4,), 64), 0.125)
    assert low == 0        # a row that is not finite: no bf16 matmul reads it
    assert torch.equal(as_bf16[:2].float().view(torch.int32), want[:2].view(torch.int32))
    assert bool(torch.isnan(as_bf16[2]).any()) and not bool(torch.isfinite(as_bf16[3]).all())
