"""The arithmetic of upstream's two 4-bit GEMV micro-kernels, emulated on the CPU bit for bit:
the fused de-quantizing GEMV of the Q4NX decode (`proj_qmm_*`) and the int4-AWQ GEMV
(`matvec_int4_bf16_packed`). Both take the weight's fields already unpacked (4-bit codes as
uint8 [M, K], bf16 scales and mins or zero points per group as [M, K / group]); which byte
layout a bundle stores them in is formats/' business.

proj_qmm (Xilinx/mlir-air e972f29, programming_examples/fused_decode/kernels/proj_qmm.cc and
q4_k.h `_qmm_q4k_bf16`), per output row and per group g of 32 columns:

* p_g = the 32 products q * x summed one after the other into an FP32 accumulator (an exact
  product: a 4-bit code times a bf16 has at most 12 significant bits), then cast to bf16
  (`temp_acc.to_vector<bf16>()`);
* r_g = the column sum of x over the group (`aie::reduce_add` of 32 bf16, proj_qmm_acc256's
  `b_col_reduce_add`), summed in FP32 by pairwise halving and cast to bf16: computed once per
  group and shared by every row (the "column-sum trick": the min term is min * sum(x));
* y_acc += p_g * scale_g, then y_acc += min_g * r_g, both into the FP32 accumulator that
  stays in L1 across all column blocks (proj_qmm_zero / proj_qmm_acc256 / proj_qmm_flush);
* the output is y_acc cast to bf16 once (`copy_float_to_bf16`).

Neither proj_qmm.cc nor q4_k.h sets the core's rounding register (no `set_rounding` in
fused_decode/), so every bf16 cast rounds toward -inf, the core's default (the project's
source [S7] in kernels.emulation.numerics). Q4_0 (`-DQ4_0`, the Qwen2.5-3B build): the code
is a signed nibble, sign-corrected as (u ^ 8) - 8, and there is no min term.

matvec_int4_bf16_packed (programming_examples/matrix_vector_multiplication/int4_awq/
mv_int4_bf16.cc `matvec_int4_bf16_impl`, group 128): it sets conv_even (nearest, ties to
even). Per row, 32 FP32 lanes; per group, lane l adds (q - zero) * x over the group's
columns l, l + 32, l + 64, l + 96 in order into a per-group accumulator, casts it to bf16, and
adds that times the group's bf16 scale into the row's lanes; at the end of the call the 32
lanes are summed by pairwise halving and added to the bf16 output c: c = bf16(c + s). A K
longer than the object's DIM_K (k_chunk) is several calls, so the row's partial sums are
rounded to bf16 once per k_chunk.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .numerics import Rounding, gemm_bfp16, to_bf16

#: Q4NX's group along K and the block of one proj_qmm_acc256 call (model_spec.h's
#: Q4NX_GROUP_SIZE, Q4NX_ROW_BLOCK_SIZE and Q4NX_COL_BLOCK_SIZE in every models/*.h)
Q4NX_GROUP, Q4NX_ROWS, Q4NX_COLS = 32, 32, 256
#: the int4-AWQ group (mv_int4_bf16.cc's DIM_GS default) and the lanes of its accumulator
AWQ_GROUP, AWQ_LANES = 128, 32
#: what a core does to a bf16 cast when the kernel leaves the rounding register alone
PROJ_QMM_ROUNDING: Rounding = "floor"


@dataclass(frozen=True)
class QuantFields:
    """A 4-bit weight's fields as the kernels read them: codes [M, K] (uint8, 0..15: a Q4_0
    code is the two's-complement nibble), scales [M, K / group] bf16, and offsets [M, K /
    group]: Q4NX's additive mins (bf16), AWQ's zero points (uint8), None for Q4_0.

    The seam to formats/: a format's `unpack` gives these three arrays; `of` takes them
    in any integer or float dtype and checks their shapes."""

    q: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor | None
    group: int

    @classmethod
    def of(cls, q: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor | None,
           group: int) -> QuantFields:
        m, k = q.shape
        if k % group:
            raise ValueError(f"K={k} is not a multiple of the group {group}")
        want = (m, k // group)
        for name, t in (("scale", scale), ("offset", offset)):
            if t is not None and tuple(t.shape) != want:
                raise ValueError(f"{name} is {tuple(t.shape)}, need {want} (rows, K / group)")
        if int(q.min()) < 0 or int(q.max()) > 15:
            raise ValueError("codes must be 4-bit values 0..15 (a signed code as its nibble)")
        if offset is not None and offset.is_floating_point():
            offset = to_bf16(offset.float())
        return cls(q.to(torch.uint8), to_bf16(scale.float()), offset, group)

    def dequantized(self, signed: bool = False, subtract: bool = False) -> torch.Tensor:
        """The weight in float64, exactly: scale * q + min (Q4NX), scale * q (Q4_0, the signed
        code) or scale * (q - zero) (AWQ, `subtract`)."""
        q = self.q.to(torch.float64)
        if signed:
            q = torch.where(q >= 8, q - 16, q)
        s = self.scale.to(torch.float64).repeat_interleave(self.group, dim=1)
        if self.offset is None:
            return s * q
        o = self.offset.to(torch.float64).repeat_interleave(self.group, dim=1)
        return s * (q - o) if subtract else s * q + o


def _sequential(terms: torch.Tensor) -> torch.Tensor:
    """The last dim added term by term into FP32, as a chain of MACs does (one rounding each)."""
    acc = terms[..., 0].clone()
    for i in range(1, terms.shape[-1]):
        acc += terms[..., i]
    return acc


def _halving(lanes: torch.Tensor) -> torch.Tensor:
    """`aie::reduce_add` of FP32 lanes (last dim): pairwise halving, each add rounded to FP32."""
    while lanes.shape[-1] > 1:
        half = lanes.shape[-1] // 2
        lanes = lanes[..., :half] + lanes[..., half:]
    return lanes[..., 0]


def column_sums(x: torch.Tensor, rounding: Rounding = PROJ_QMM_ROUNDING) -> torch.Tensor:
    """proj_qmm's b_col_reduce_add: the sum of x over each group of 32 (halving in FP32), cast
    to bf16; one per group, shared by all rows."""
    return to_bf16(_halving(x.float().view(-1, Q4NX_GROUP)), rounding)


def proj_qmm_acc(w: QuantFields, x: torch.Tensor, *, signed: bool = False,
                 rounding: Rounding = PROJ_QMM_ROUNDING) -> torch.Tensor:
    """proj_qmm's FP32 accumulator y_acc [M] after every column block of K: per group the bf16
    partial dot product times the scale, then (Q4NX) the min times the bf16 column sum."""
    if x.dtype != torch.bfloat16 or x.shape != (w.q.shape[1],):
        raise ValueError(f"x must be bf16 [{w.q.shape[1]}], got {x.dtype} {tuple(x.shape)}")
    m, k = w.q.shape
    groups = k // Q4NX_GROUP
    q = w.q.to(torch.float32)
    if signed:
        q = torch.where(q >= 8, q - 16, q)          # (u ^ 8) - 8: the nibble's two's complement
    xg = x.float().view(groups, Q4NX_GROUP)
    partial = to_bf16(_sequential(q.view(m, groups, Q4NX_GROUP) * xg), rounding).float()
    scaled = partial * w.scale.float()              # bf16 x bf16: exact in FP32
    if signed or w.offset is None:
        return _sequential(scaled)
    mins = w.offset.float() * column_sums(x, rounding).float()
    return _sequential(torch.stack((scaled, mins), dim=2).view(m, 2 * groups))


def proj_qmm(w: QuantFields, x: torch.Tensor, *, signed: bool = False,
             rounding: Rounding = PROJ_QMM_ROUNDING) -> torch.Tensor:
    """y = W x as proj_qmm computes it: the FP32 accumulator flushed to bf16 once."""
    return to_bf16(proj_qmm_acc(w, x, signed=signed, rounding=rounding), rounding)


def matvec_int4(w: QuantFields, x: torch.Tensor, *, k_chunk: int,
                rounding: Rounding = "nearest_even") -> torch.Tensor:
    """y = W x as matvec_int4_bf16_packed computes it, called once per k_chunk of K into a
    bf16 y (the first call's c is zero, as zero_vectorized_bf16 or the _store variant leaves
    it)."""
    m, k = w.q.shape
    gs = w.group
    if w.offset is None or x.dtype != torch.bfloat16 or x.shape != (k,):
        raise ValueError("matvec_int4 needs zero points and a bf16 x of K elements")
    if k % k_chunk or k_chunk % gs or gs % AWQ_LANES:
        raise ValueError(f"K={k}, k_chunk={k_chunk}, group={gs}: need K % k_chunk == 0, "
                         f"k_chunk % group == 0 and group % {AWQ_LANES} == 0")
    groups = k // gs
    wq = w.q.to(torch.float32) - w.offset.to(torch.float32).repeat_interleave(gs, dim=1)
    prod = (wq * x.float()).view(m, groups, gs // AWQ_LANES, AWQ_LANES)
    per_group = to_bf16(_sequential(prod.transpose(2, 3)), rounding).float()   # [m, g, lane]
    scaled = per_group * w.scale.float().unsqueeze(2)
    per_call = groups * k_chunk // k
    y = torch.zeros(m, dtype=torch.bfloat16)
    for c in range(k // k_chunk):
        lanes = _sequential(scaled[:, c * per_call:(c + 1) * per_call].transpose(1, 2))
        y = to_bf16(y.float() + _halving(lanes), rounding)
    return y


def reference(w: QuantFields, x: torch.Tensor, *, signed: bool = False,
              subtract: bool = False) -> torch.Tensor:
    """The FP32 reference of the de-quantized weights: W (exact, float64) times x, as FP32."""
    return (w.dequantized(signed, subtract) @ x.to(torch.float64)).to(torch.float32)


#: bf16's relative step: a cast toward -inf loses less than one unit in the last of its 8
#: significant bits (2^-7 of the value), a nearest cast half that
BF16_STEP = 2.0 ** -7
FP32_UNIT = 2.0 ** -24


def proj_qmm_bound(w: QuantFields, x: torch.Tensor, *, signed: bool = False) -> torch.Tensor:
    """How far proj_qmm's bf16 output may lie from the FP32 reference, per row, derived from
    its arithmetic (the module docstring), with T = sum_g |scale_g| sum_c |q x| + |min_g| sum_c
    |x|: each group's partial dot product and column sum are cast to bf16 toward -inf (an
    error under 2^-7 of each, so under 2^-7 T in all), their FP32 sums add at most
    (32 + 2 K/32) 2^-24 T, and the output's cast toward -inf under 2^-7 of |y| (the reference
    plus those errors). A 1% margin covers the second-order terms."""
    m, k = w.q.shape
    q = w.q.to(torch.float64)
    if signed:
        q = torch.where(q >= 8, q - 16, q)
    ax = x.to(torch.float64).abs()
    groups = k // Q4NX_GROUP
    dots = (q.abs() * ax).view(m, groups, Q4NX_GROUP).sum(-1)
    t = (w.scale.to(torch.float64).abs() * dots).sum(-1)
    if not signed and w.offset is not None:
        t += (w.offset.to(torch.float64).abs() * ax.view(groups, Q4NX_GROUP).sum(-1)).sum(-1)
    fp32 = (Q4NX_GROUP + 2 * groups) * FP32_UNIT * t
    inner = BF16_STEP * t + fp32
    ref = reference(w, x, signed=signed).to(torch.float64).abs()
    return (1.01 * (inner + BF16_STEP * (ref + inner))).to(torch.float32)


def matvec_int4_bound(w: QuantFields, x: torch.Tensor, *, k_chunk: int) -> torch.Tensor:
    """The same for matvec_int4_bf16_packed (nearest casts: half a step each), with T = sum_g
    |scale_g| sum_c |(q - zero) x|: each lane's group partial cast to bf16 (2^-8 T in all),
    FP32 sums of at most gs/32 + K/gs + 5 terms per output, and one cast of the running
    output per k_chunk call: under 2^-8 of |c| <= T between calls, of |y| at the end."""
    m, k = w.q.shape
    assert w.offset is not None
    wq = (w.q.to(torch.float64) - w.offset.to(torch.float64).repeat_interleave(w.group, 1))
    dots = (wq.abs() * x.to(torch.float64).abs()).view(m, k // w.group, w.group).sum(-1)
    t = (w.scale.to(torch.float64).abs() * dots).sum(-1)
    inner = (BF16_STEP / 2 + (w.group // AWQ_LANES + k // w.group + 5) * FP32_UNIT) * t
    ref = reference(w, x, subtract=True).to(torch.float64).abs()
    between = (k // k_chunk - 1) * BF16_STEP / 2 * (t + inner)   # |c| <= T before the end
    return (1.01 * (inner + between + BF16_STEP / 2 * (ref + inner + between))
            ).to(torch.float32)


def matmul_int4(w: QuantFields, a: torch.Tensor) -> torch.Tensor:
    """C = A W^T as mv_int4_bf16.cc's `matmul_int4_bf16_packed_f32` computes it (the int4-AWQ
    GEMM of upstream's int4 prefill, built with AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16 by
    llama32_1b_int4_prefill.py): A [rows, K] bf16, W [N, K] output-major. Per group of 128
    along K the unscaled (q - zero) (exact) times A on the BFP16 MMA, each 8-deep MMA rounded
    to FP32 (`gemm_bfp16` at tile_k 8), the group's sum cast to bf16 (conv_even), times the
    bf16 scale and added into an FP32 C kept across every K chunk; C cast to bf16 once at the
    end (`f32_to_bf16_mn`)."""
    n, k = w.q.shape
    gs = w.group
    if w.offset is None or a.dtype != torch.bfloat16 or a.shape[-1] != k:
        raise ValueError(f"matmul_int4 needs zero points and a bf16 A of K={k} columns")
    unscaled = (w.q.to(torch.float32) - w.offset.to(torch.float32).repeat_interleave(gs, dim=1))
    wt = unscaled.t().to(torch.bfloat16)                        # [K, N], integers: exact
    c = torch.zeros(a.shape[0], n, dtype=torch.float32)
    for g in range(k // gs):
        cols = slice(g * gs, (g + 1) * gs)
        part = gemm_bfp16(a[:, cols].contiguous(), wt[cols].contiguous(), tile_k=8,
                          out_dtype=torch.float32)
        c += to_bf16(part).float() * w.scale[:, g].float()
    return to_bf16(c)
