"""The attention softmax of the emulator: FP32, with P handed to the PV matmul as bf16
(`softmax_bf16`, the definition) or converted to bfp16ebs8 (`softmax_bfp16`, one compiled
pass, bit for bit the definition's values in the block format; `softmax_bfp16_bf16`, the
same values as bf16 for a bf16 matmul, with the range that matmul needs to know). See
`numerics` for the formats."""

from __future__ import annotations

import numpy as np
import torch

from .numerics import _bfp16ebs8_tables, to_bf16, to_bfp16


def softmax_bf16(scores: torch.Tensor, valid: torch.Tensor, scale: float) -> torch.Tensor:
    """The attention probabilities of each row of `scores` (float32 [R, C]) over its first
    valid[r] keys (zeros past them), as bf16: t = scores * scale (scale rounded to FP32) minus
    the row max, exp(t) in FP32 (`exp_fp32`), the sum in SOFTMAX_LANES lanes, e / sum, one cast
    to bf16.

    The definition; `softmax_bfp16` computes the same values, converted to the block format,
    in one compiled pass (tested bit for bit)."""
    rows, cols = scores.shape
    if rows and int(valid.min()) < 1:
        raise ValueError("softmax_bf16: every row needs at least one valid key")
    masked = torch.arange(cols)[None, :] >= valid[:, None]
    t = (scores.to(torch.float32) * float(np.float32(scale))).masked_fill(masked, float("-inf"))
    from ._bfp_kernel import SOFTMAX_LANES as lanes

    e = exp_fp32(t - t.amax(dim=-1, keepdim=True))
    e_pad = torch.nn.functional.pad(e, (0, -cols % lanes)).view(rows, -1, lanes)
    acc = torch.zeros(rows, lanes)
    for k in range(e_pad.shape[1]):
        acc += e_pad[:, k]      # adding +0.0 past the valid keys changes no sum
    while acc.shape[1] > 1:
        half = acc.shape[1] // 2
        acc = acc[:, :half] + acc[:, half:]
    return to_bf16(e / acc)


def exp_fp32(x: torch.Tensor) -> torch.Tensor:
    """exp of float32 x <= 0 as the emulated softmax computes it (see
    kernels/emulation/_bfp_kernel.py: float64 range reduction and a degree-9 polynomial, one
    rounding to float32, within one ulp of the correctly rounded value). Not libm's or torch's exp,
    whose last bit depends on the vector width and on where a tensor's tail falls."""
    from ._bfp_kernel import EXP_MIN_ARG, EXP_TAYLOR, LN2_HI, LN2_LO, LOG2E

    xd = x.to(torch.float64).clamp(min=EXP_MIN_ARG)
    k = torch.round(xd * LOG2E)
    r = (xd - k * LN2_HI) - k * LN2_LO
    p = torch.full_like(r, EXP_TAYLOR[0])
    for c in EXP_TAYLOR[1:]:
        p = p * r + c
    pow2 = ((k.to(torch.int64) + 1023) << 52).view(torch.float64)
    return (p * pow2).to(torch.float32)


def softmax_bfp16(scores: torch.Tensor, valid: torch.Tensor, scale: float, *,
                  in_place: bool = False) -> torch.Tensor:
    """`to_bfp16(softmax_bf16(scores, valid, scale))` along the keys (float32 out), bit for
    bit, in one compiled pass over each row that vectorizes (`_bfp_kernel.softmax_bfp16ebs8`):
    P as the PV matmul reads it. `in_place`: written over `scores` (contiguous), which the
    caller no longer needs."""
    from ._bfp_kernel import softmax_bfp16ebs8

    if scores.dtype != torch.float32 or scores.dim() != 2:
        raise ValueError("softmax_bfp16: scores must be a float32 [R, C] tensor")
    if scores.shape[0] and int(valid.min()) < 1:
        raise ValueError("softmax_bfp16: every row needs at least one valid key")
    if in_place and not scores.is_contiguous():
        raise ValueError("softmax_bfp16: in_place needs contiguous scores")
    scores = scores.contiguous()
    valid = valid.to(torch.int64).clamp(max=scores.shape[1]).contiguous()
    out = scores if in_place else torch.empty_like(scores)
    bad = torch.zeros(scores.shape[0], dtype=torch.bool)
    softmax_bfp16ebs8(scores.numpy(), valid.numpy(), np.float32(scale), out.numpy(),
                      _bfp16ebs8_tables(), bad.numpy(), _NO_BITS,
                      np.empty(scores.shape[0], dtype=np.int32))
    if bool(bad.any()):     # a score that is not finite: the definition, which propagates it
        out[bad] = to_bfp16(softmax_bf16(scores[bad], valid[bad], scale))
    return out


_NO_BITS = np.empty((0, 0), dtype=np.uint16)


def softmax_bfp16_bf16(scores: torch.Tensor, valid: torch.Tensor, scale: float,
                       out: torch.Tensor | None = None) -> tuple[torch.Tensor, int]:
    """`softmax_bfp16`'s values as bf16 (each one is a bf16 number, so exactly), written to
    `out` (bf16 [R, C], contiguous) if given, and the smallest exponent field E of a nonzero
    block's largest value over all rows (256 if there is none; 0 if a row was not finite):
    every nonzero value is a multiple of 2^(E - 133), its block's LSB or a larger one."""
    from ._bfp_kernel import softmax_bfp16ebs8

    if scores.dtype != torch.float32 or scores.dim() != 2:
        raise ValueError("softmax_bfp16_bf16: scores must be a float32 [R, C] tensor")
    if scores.shape[0] and int(valid.min()) < 1:
        raise ValueError("softmax_bfp16_bf16: every row needs at least one valid key")
    if out is None:
        out = torch.empty(scores.shape, dtype=torch.bfloat16)
    elif out.shape != scores.shape or out.dtype != torch.bfloat16 or not out.is_contiguous():
        raise ValueError("softmax_bfp16_bf16: out must be a contiguous bf16 tensor shaped "
                         "like scores")
    scores = scores.contiguous()
    valid = valid.to(torch.int64).clamp(max=scores.shape[1]).contiguous()
    bad = torch.zeros(scores.shape[0], dtype=torch.bool)
    low = torch.empty(scores.shape[0], dtype=torch.int32)
    softmax_bfp16ebs8(scores.numpy(), valid.numpy(), np.float32(scale), scores.numpy(),
                      _bfp16ebs8_tables(), bad.numpy(), out.view(torch.int16).numpy()
                      .view(np.uint16), low.numpy())
    if bool(bad.any()):     # a score that is not finite: the definition, which propagates it
        out[bad] = to_bfp16(softmax_bf16(scores[bad], valid[bad], scale)).to(torch.bfloat16)
    return out, int(low.min()) if low.numel() else 256
