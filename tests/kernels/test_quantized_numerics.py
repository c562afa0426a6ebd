"""The 4-bit GEMV kernels' emulated arithmetic (kernels.emulation.quantized): bit for bit against
a scalar transcription of upstream's C++ loops, within the derived bound of the FP32 reference
of the de-quantized weights, and on hand-built inputs whose exact answers tell a bf16 partial
sum from an FP32 one and a cast toward -inf from a nearest one."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from npu_deploy.kernels.emulation.numerics import to_bf16
from npu_deploy.kernels.emulation.quantized import (
    QuantFields,
    matmul_int4,
    matvec_int4,
    matvec_int4_bound,
    proj_qmm,
    proj_qmm_bound,
    reference,
)


def _bf16(v: float, floor: bool) -> float:
    """One float32 value cast to bf16 by bit manipulation: toward -inf or nearest-even."""
    b = int(np.array(v, dtype=np.float32).view(np.uint32))
    low, sign = b & 0xFFFF, b >> 31
    b &= 0xFFFF0000
    if floor:
        if sign and low:
            b += 0x10000
    elif low > 0x8000 or (low == 0x8000 and b & 0x10000):
        b += 0x10000
    return float(np.array(b, dtype=np.uint32).view(np.float32))


def _f32(v: float) -> float:
    return float(np.float32(v))


def _halve(vals: list[float]) -> float:
    while len(vals) > 1:
        h = len(vals) // 2
        vals = [_f32(vals[i] + vals[i + h]) for i in range(h)]
    return vals[0]


def scalar_proj_qmm(q, s, mn, x, signed=False):
    """q4_k.h's `_qmm_q4k_bf16` and proj_qmm_acc256, one scalar at a time in C order."""
    m, k = q.shape
    y = []
    for r in range(m):
        acc = 0.0
        for g in range(k // 32):
            xs = [float(x[g * 32 + c]) for c in range(32)]
            temp = 0.0
            for c in range(32):
                code = int(q[r, g * 32 + c])
                if signed:
                    code = (code ^ 8) - 8
                temp = _f32(temp + code * xs[c])
            acc = _f32(acc + _bf16(temp, True) * float(s[r, g]))
            if not signed:
                acc = _f32(acc + float(mn[r, g]) * _bf16(_halve(xs), True))
        y.append(_bf16(acc, True))
    return torch.tensor(y, dtype=torch.float32)


def scalar_matvec_int4(q, s, z, x, k_chunk, gs=128):
    """mv_int4_bf16.cc's `matvec_int4_bf16_impl`, called once per k_chunk, in C order."""
    m, k = q.shape
    y = []
    for r in range(m):
        c = 0.0
        for base in range(0, k, k_chunk):
            lanes = [0.0] * 32
            for g in range(k_chunk // gs):
                col = base + g * gs
                grp = col // gs
                g_acc = [0.0] * 32
                for i in range(gs // 32):
                    for lane in range(32):
                        kk = col + i * 32 + lane
                        wv = int(q[r, kk]) - int(z[r, grp])
                        g_acc[lane] = _f32(g_acc[lane] + wv * float(x[kk]))
                for lane in range(32):
                    lanes[lane] = _f32(lanes[lane] + _bf16(g_acc[lane], False) * float(s[r, grp]))
            c = _bf16(_f32(c + _halve(lanes)), False)
        y.append(c)
    return torch.tensor(y, dtype=torch.float32)


def q4nx_fields(m, k, seed=0, signed=False):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (m, k), generator=gen, dtype=torch.uint8)
    s = torch.rand(m, k // 32, generator=gen) * 0.02 + 0.001
    mn = None if signed else -8 * s * (1 + 0.1 * torch.randn(m, k // 32, generator=gen))
    x = to_bf16(torch.randn(k, generator=gen))
    return QuantFields.of(q, s, mn, 32), x


def awq_fields(m, k, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (m, k), generator=gen, dtype=torch.uint8)
    s = torch.rand(m, k // 128, generator=gen) * 0.02 + 0.001
    z = torch.randint(0, 16, (m, k // 128), generator=gen, dtype=torch.uint8)
    return QuantFields.of(q, s, z, 128), to_bf16(torch.randn(k, generator=gen))


@pytest.mark.parametrize("signed", [False, True])
def test_proj_qmm_is_bit_exact_to_the_kernels_loops(signed):
    w, x = q4nx_fields(8, 512, seed=1, signed=signed)
    got = proj_qmm(w, x, signed=signed).float()
    want = scalar_proj_qmm(w.q, w.scale, w.offset, x, signed)
    assert torch.equal(got, want)


@pytest.mark.parametrize("k_chunk", [256, 512])
def test_matvec_int4_is_bit_exact_to_the_kernels_loops(k_chunk):
    w, x = awq_fields(4, 512, seed=2)
    got = matvec_int4(w, x, k_chunk=k_chunk).float()
    assert torch.equal(got, scalar_matvec_int4(w.q, w.scale, w.offset, x, k_chunk))


@pytest.mark.parametrize("signed", [False, True])
def test_proj_qmm_lies_within_its_derived_bound_of_the_fp32_reference(signed):
    w, x = q4nx_fields(256, 4096, seed=3, signed=signed)
    err = (proj_qmm(w, x, signed=signed).double() - reference(w, x, signed=signed).double()).abs()
    bound = proj_qmm_bound(w, x, signed=signed).double()
    assert bool((err <= bound).all())
    assert float(err.max()) > 0          # the kernel's roundings do show


@pytest.mark.parametrize("k_chunk", [2048, 512])
def test_matvec_int4_lies_within_its_derived_bound_of_the_fp32_reference(k_chunk):
    w, x = awq_fields(256, 2048, seed=4)
    err = (matvec_int4(w, x, k_chunk=k_chunk).double()
           - reference(w, x, subtract=True).double()).abs()
    assert bool((err <= matvec_int4_bound(w, x, k_chunk=k_chunk).double()).all())


def _cancelling(x0: float, x1: float, *, via_min: bool) -> tuple[QuantFields, torch.Tensor]:
    """One row, K = 256: group 0 sums x0 + x1 (through the codes, or through the min's column
    sum), group 1 takes exactly 1 away, so y is the part of group 0's sum below 1."""
    q = torch.zeros(1, 256, dtype=torch.uint8)
    s, mn = torch.zeros(1, 8), torch.zeros(1, 8)
    x = torch.zeros(256)
    x[0], x[1], x[32] = x0, x1, 1.0
    if via_min:
        mn[0, 0] = 1.0
    else:
        q[0, :2], s[0, 0] = 1, 1.0
    q[0, 32], s[0, 1] = 1, -1.0
    return QuantFields.of(q, s, mn, 32), to_bf16(x)


@pytest.mark.parametrize("via_min", [False, True])
def test_proj_qmm_rounds_each_group_to_bf16_toward_minus_infinity(via_min):
    """1 + 3 * 2^-9 is no bf16: the kernel keeps 1 of it and the group's remainder cancels to
    0. An FP32 partial sum would give 3 * 2^-9; a nearest cast 2^-7. (via_min: the same
    through the min term's bf16 column sum.)"""
    w, x = _cancelling(1.0, 3 * 2.0 ** -9, via_min=via_min)
    assert float(reference(w, x)[0]) == 3 * 2.0 ** -9
    assert float(proj_qmm(w, x)[0]) == 0.0
    assert float(proj_qmm(w, x, rounding="nearest_even")[0]) == 2.0 ** -7


def test_matvec_int4_rounds_each_lanes_group_sum_to_nearest_bf16():
    """Lane 0's group sum 1 + 2^-7 + 3 * 2^-9 (columns 0, 32, 64) rounds to 1 + 2^-6 (nearest);
    the next group takes 1 away. FP32 partials would keep 2^-7 + 3 * 2^-9, a cast toward -inf
    would give 2^-7."""
    q = torch.zeros(1, 256, dtype=torch.uint8)
    z = torch.zeros(1, 2, dtype=torch.uint8)
    s = torch.tensor([[1.0, -1.0]])
    x = torch.zeros(256)
    x[0], x[32], x[64], x[128] = 1.0, 2.0 ** -7, 3 * 2.0 ** -9, 1.0
    q[0, [0, 32, 64, 128]] = 1
    w, xb = QuantFields.of(q, s, z, 128), to_bf16(x)
    assert float(reference(w, xb, subtract=True)[0]) == 2.0 ** -7 + 3 * 2.0 ** -9
    assert float(matvec_int4(w, xb, k_chunk=256)[0]) == 2.0 ** -6
    assert float(matvec_int4(w, xb, k_chunk=256, rounding="floor")[0]) == 2.0 ** -7


def test_matvec_int4_rounds_its_output_to_bf16_between_k_chunks():
    """K = 512 in groups of 128: 256, then 2^-7, then -256. One call of K keeps the 2^-7 in
    its FP32 lanes; two calls of 256 round 256 + 2^-7 to 256 in the bf16 output between them
    (bf16's step at 256 is 2)."""
    q = torch.zeros(1, 512, dtype=torch.uint8)
    z = torch.zeros(1, 4, dtype=torch.uint8)
    s = torch.tensor([[1.0, 1.0, -1.0, 1.0]])
    x = torch.zeros(512)
    x[0], x[128], x[256] = 256.0, 2.0 ** -7, 256.0
    q[0, [0, 128, 256]] = 1
    w, xb = QuantFields.of(q, s, z, 128), to_bf16(x)
    assert float(matvec_int4(w, xb, k_chunk=512)[0]) == 2.0 ** -7
    assert float(matvec_int4(w, xb, k_chunk=256)[0]) == 0.0


def test_fields_refuse_codes_outside_four_bits_and_misshapen_scales():
    with pytest.raises(ValueError, match="0..15"):
        QuantFields.of(torch.full((2, 32), 16), torch.ones(2, 1), None, 32)
    with pytest.raises(ValueError, match="rows, K / group"):
        QuantFields.of(torch.zeros(2, 64, dtype=torch.uint8), torch.ones(1, 2), None, 32)


def test_the_int4_gemm_lies_near_the_fp32_reference_and_rounds_each_group_sum_to_bf16():
    """matmul_int4_bf16_packed_f32: the BFP16 MMA's A blocks cost ~2^-7 relative, and each
    group's unscaled sum is cast to bf16 (nearest) before its scale: a group summing to
    1 + 3 * 2^-9 becomes 1 + 2^-7, so the next group's -1 leaves 2^-7 where FP32 sums leave
    3 * 2^-9 and a cast toward -inf 0."""
    w, _ = awq_fields(16, 512, seed=5)
    a = to_bf16(torch.randn(8, 512, generator=torch.Generator().manual_seed(6)))
    ref = (a.double() @ w.dequantized(subtract=True).t()).float()
    got = matmul_int4(w, a).float()
    assert float((got - ref).abs().max()) <= 0.05 * float(ref.abs().max())
    q = torch.zeros(1, 256, dtype=torch.uint8)
    q[0, [0, 8, 128]] = 1
    exact = QuantFields.of(q, torch.tensor([[1.0, -1.0]]),
                           torch.zeros(1, 2, dtype=torch.uint8), 128)
    x = torch.zeros(1, 256)
    x[0, 0], x[0, 8], x[0, 128] = 1.0, 3 * 2.0 ** -9, 1.0       # 8 apart: blocks of their own
    assert float(matmul_int4(exact, to_bf16(x))[0, 0]) == 2.0 ** -7
