"""The emulator backend: each NPU2 kernel run on the CPU with the NPU's numerics, and the
FP32 reference each one is validated against.

Numerics (see kernels/numerics.py for the sources): every tensor between kernels is
bf16; GEMMs and the two matmuls of attention go through the bfp16ebs8 datapath with
FP32 accumulation over K tiles; GEMV accumulates in FP32 lanes. Norms, RoPE,
softmax and SiLU read bf16, compute in FP32 and write bf16 once, which is how the
mlir-air kernels of these ops are written (an FP32 accumulator or vector, one
cast on the way out). Every time this backend reports is modeled, never measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from npu_deploy.oracle import reference as ref_ops

from .numerics import (
    BFP16EBS8,
    DEFAULT_TILE_K,
    _quantize_last_dim,
    fp32_reference,
    gemm_bf16_native,
    gemm_bfp16,
    gemv_fp32acc,
    quantize_gemm_b,
    softmax_bfp16,
    to_bf16,
)
from .specs import KernelSpec, Shape

Tensors = dict[str, torch.Tensor]
# (shape, config, inputs[, outputs]) -> results. A kernel may write a result straight into the
# output buffer it is given and return that buffer; the backend copies the others.
Kernel = Callable[..., Tensors]


def _f32(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.float32)


def _bf16_out(value: torch.Tensor, out: Tensors | None, name: str) -> torch.Tensor:
    """`value` (FP32) cast once to bf16: into the kernel's output buffer when there is one."""
    dest = None if out is None else out.get(name)
    if dest is None or dest.dtype != torch.bfloat16:
        return to_bf16(value)
    return dest.copy_(value.reshape(dest.shape))  # the same nearest-even cast as to_bf16


# --- emulated kernels (bf16 in, bf16 out unless the kernel says fp32) ----------------------

# Static weights converted to the block format once, as a deployment writes them once.
# Keyed by the tensor's storage and version, and holding the tensor so the key stays unique.
_STATIC_B: dict[tuple[int, int, tuple[int, ...]], tuple[torch.Tensor, torch.Tensor]] = {}
_STATIC_B_MAX = 1024


def _static_b(b: torch.Tensor) -> torch.Tensor:
    key = (b.data_ptr(), b._version, tuple(b.shape))
    hit = _STATIC_B.get(key)
    if hit is None:
        if len(_STATIC_B) >= _STATIC_B_MAX:
            _STATIC_B.clear()
        hit = _STATIC_B[key] = (b, quantize_gemm_b(b))
    return hit[1]


def _gemm(out_dtype: torch.dtype) -> Kernel:
    def run(s: Shape, c: dict, x: Tensors, out: Tensors | None = None) -> Tensors:
        head_first = _layout(c, "c", "seq-first") == "head-first"
        span_n = int(c["tile_n"]) * int(c["herd_n"])
        if c.get("datapath", "bfp16") == "bf16":
            cm = gemm_bf16_native(x["a"], x["b"], tile_k=int(c["tile_k_l1"]),
                                  out_dtype=out_dtype,
                                  exact_tiles=bool(c.get("exact_tiles", True)))
        else:
            b_q = _static_b(x["b"]) if c.get("static_b") else None
            dest = None if out is None else out["c"]
            if dest is not None and (head_first or not dest.is_contiguous()
                                     or dest.dtype != out_dtype or s["N"] % span_n):
                dest = None
            cm = gemm_bfp16(x["a"], x["b"], tile_k=int(c["tile_k_l1"]), out_dtype=out_dtype,
                            exact_tiles=bool(c.get("exact_tiles", True)), b_quantized=b_q,
                            out=None if dest is None else dest.view(*x["a"].shape[:-1], -1))
        if s["N"] % span_n:
            cm = _misplaced_columns(cm, span_n)
        # A head-first C is written by the output DMA as [N / head_dim, M, head_dim].
        return {"c": _head_first(cm, int(c["head_dim"])) if head_first else cm}
    return run


def _misplaced_columns(c: torch.Tensor, span_n: int) -> torch.Tensor:
    """What a GEMM whose N is not a multiple of tile_n x herd_n writes. NPU_FACTS: the output
    is silently corrupt (cosine ~0.02). The mechanism is our reading, not a measurement: the
    output DMA walks C as if its rows were N rounded up to the tile span, so row r lands
    r x (padding) elements early and every row after the first is shifted."""
    rows, n = c.reshape(-1, c.shape[-1]).shape
    padded = -(-n // span_n) * span_n
    wide = torch.zeros(rows, padded, dtype=c.dtype)
    wide[:, :n] = c.reshape(rows, n)
    return wide.reshape(-1)[:rows * n].reshape(c.shape).contiguous()


def _layout(c: dict, operand: str, default: str) -> str:
    """How the tensor bound to `operand` is stored: a plan passes its bindings' layouts as
    config["layouts"]; alone, an operand has the layout of its dims in the spec."""
    return str(c.get("layouts", {}).get(operand, default))


def _head_first(t: torch.Tensor, head_dim: int) -> torch.Tensor:
    """[L, heads * head_dim] -> [heads, L, head_dim]."""
    rows = t.shape[0]
    return t.reshape(rows, -1, head_dim).transpose(0, 1).contiguous()


def _as_head_first(t: torch.Tensor, heads: int, seq: int, d: int, layout: str) -> torch.Tensor:
    """A [heads, seq, d] view of an operand stored in `layout`."""
    if layout == "seq-first":
        return t.reshape(seq, heads, d).transpose(0, 1)
    return t.reshape(heads, seq, d)


def _gemv(s: Shape, c: dict, x: Tensors, out: Tensors | None = None) -> Tensors:
    return {"y": gemv_fp32acc(x["w"], x["x"])}


def _rmsnorm(s: Shape, c: dict, x: Tensors, out: Tensors | None = None) -> Tensors:
    return {"y": _bf16_out(ref_ops.rms_norm(_f32(x["x"]), _f32(x["weight"]), float(c["eps"])),
                           out, "y")}


def _rope(s: Shape, c: dict, x: Tensors, out: Tensors | None = None) -> Tensors:
    seq, width = s["seq"], s["width"]
    cos, sin = _f32(x["cos"]), _f32(x["sin"])
    if _layout(c, "x", "head-first") == "seq-first":
        rows = _f32(x["x"]).view(seq, -1, width)       # [seq, heads, width]
        cos, sin = cos[:, None], sin[:, None]
    else:
        rows = _f32(x["x"]).view(-1, seq, width)       # [heads, seq, width]
    y = ref_ops.apply_rope(rows, cos, sin)
    return {"y": _bf16_out(y.reshape(-1, width), out, "y")}


def _attention(s: Shape, c: dict, x: Tensors, out: Tensors | None = None) -> Tensors:
    """Causal attention, all heads at once: S = QK^T and O = PV through the BFP16 datapath
    (exactly what `gemm_bfp16` computes per head: blocks along the K dim, exact K-tile sums
    rounded to FP32 and added in order), the softmax of S / sqrt(head_dim) in FP32 with P
    handed on as bf16 (`softmax_bf16`; computed fused with P's block conversion). K tiles of
    PV that lie wholly past a row block's causal limit hold zeros and are skipped."""
    fmt, tk = BFP16EBS8, DEFAULT_TILE_K
    h, hkv, lq, lk, d = s["heads"], s["kv_heads"], s["Lq"], s["Lk"], s["head_dim"]
    group, start = h // hkv, lk - lq
    # exact: FP64 K-tile sums, as gemm_bfp16 does; otherwise one FP32 BLAS call per product.
    exact = bool(c.get("exact_tiles", True))
    dtype = torch.float64 if exact else torch.float32
    q = _as_head_first(_f32(x["q"]), h, lq, d, _layout(c, "q", "head-first"))
    k = _as_head_first(_f32(x["k"]), hkv, lk, d, _layout(c, "k", "head-first"))
    v = _as_head_first(_f32(x["v"]), hkv, lk, d, _layout(c, "v", "head-first"))
    qq = _quantize_last_dim(q.reshape(-1, d), fmt).view(h, lq, d).to(dtype)
    kq = _quantize_last_dim(k.reshape(-1, d), fmt).view(hkv, lk, d)
    kq = kq.repeat_interleave(group, dim=0).to(dtype)
    vq = _quantize_last_dim(v.transpose(1, 2).reshape(-1, lk), fmt)
    vq = vq.view(hkv, d, lk).transpose(1, 2).repeat_interleave(group, dim=0).to(dtype)
    o = torch.empty(h, lq, d, dtype=torch.bfloat16)
    rows = max(1, (1 << 22) // max(h * lk, 1))          # bounds the FP64 scratch to ~32 MiB
    for r0 in range(0, lq, rows):
        r1 = min(lq, r0 + rows)
        # Keys past the block's last position are masked: their probabilities are exact
        # zeros, which form whole zero blocks and K tiles (upto is a multiple of tk), so
        # they are left out of both products.
        upto = min(lk, -(-(start + r1) // tk) * tk)
        if not exact:
            scores = torch.bmm(qq[:, r0:r1], kq[:, :upto].transpose(1, 2))
        else:
            scores = torch.zeros(h, r1 - r0, upto)
            for d0 in range(0, d, tk):
                scores += torch.bmm(qq[:, r0:r1, d0:d0 + tk],
                                    kq[:, :upto, d0:d0 + tk].transpose(1, 2)).float()
        valid = (torch.arange(r0, r1) + start + 1).clamp(max=upto).repeat(h)
        pq = softmax_bfp16(scores.view(-1, upto), valid, 1.0 / math.sqrt(d))
        pq = pq.view(h, r1 - r0, upto).to(dtype)
        if not exact:
            acc = torch.bmm(pq, vq[:, :upto])
        else:
            acc = torch.zeros(h, r1 - r0, d)
            for k0 in range(0, upto, tk):
                acc += torch.bmm(pq[:, :, k0:k0 + tk], vq[:, k0:k0 + tk]).float()
        o[:, r0:r1] = to_bf16(acc)
    if _layout(c, "o", "head-first") == "seq-first":
        return {"o": o.transpose(0, 1).reshape(lq, h * d)}
    return {"o": o}


def _silu_mul(s: Shape, c: dict, x: Tensors, out: Tensors | None = None) -> Tensors:
    return {"y": _bf16_out(ref_ops.silu_mul(_f32(x["gate"]), _f32(x["up"])), out, "y")}


def _add(s: Shape, c: dict, x: Tensors, out: Tensors | None = None) -> Tensors:
    return {"y": _bf16_out(_f32(x["a"]) + _f32(x["b"]), out, "y")}


def _bias_add(s: Shape, c: dict, x: Tensors, out: Tensors | None = None) -> Tensors:
    xs, bias = _f32(x["x"]), _f32(x["bias"])
    if _layout(c, "x", "seq-first") == "head-first":     # stored [heads, L, head_dim]
        hd = int(c["head_dim"])
        y = xs.reshape(-1, s["rows"], hd) + bias.view(-1, 1, hd)
        return {"y": _bf16_out(y.reshape(s["rows"], s["width"]), out, "y")}
    return {"y": _bf16_out(xs + bias, out, "y")}


EMULATED: dict[str, Kernel] = {
    "gemm_bf16": _gemm(torch.bfloat16), "gemm_fp32": _gemm(torch.float32), "gemv": _gemv,
    "rmsnorm": _rmsnorm, "qk_norm": _rmsnorm, "rope": _rope,
    "flash_attention": _attention, "decode_attention": _attention,
    "npu_decode_attention": _attention, "silu_mul": _silu_mul, "add": _add,
    "bias_add": _bias_add,
}


# --- the FP32 reference of each kernel (same bf16 inputs, FP32 all the way) ----------------

def _ref_attention(s: Shape, c: dict, x: Tensors) -> Tensors:
    out = ref_ops.attention(_f32(x["q"]), _f32(x["k"]), _f32(x["v"]), start=s["Lk"] - s["Lq"])
    return {"o": out}


def _ref_rope(s: Shape, c: dict, x: Tensors) -> Tensors:
    rows = _f32(x["x"]).view(-1, s["seq"], s["width"])
    return {"y": ref_ops.apply_rope(rows, _f32(x["cos"]), _f32(x["sin"])).reshape(-1, s["width"])}


def _ref_norm(s: Shape, c: dict, x: Tensors) -> Tensors:
    return {"y": ref_ops.rms_norm(_f32(x["x"]), _f32(x["weight"]), float(c["eps"]))}


REFERENCE: dict[str, Callable[[Shape, dict, Tensors], Tensors]] = {
    "gemm_bf16": lambda s, c, x: {"c": fp32_reference(x["a"], x["b"])},
    "gemm_fp32": lambda s, c, x: {"c": fp32_reference(x["a"], x["b"])},
    "gemv": lambda s, c, x: {"y": _f32(x["w"]) @ _f32(x["x"])},
    "rmsnorm": _ref_norm, "qk_norm": _ref_norm, "rope": _ref_rope,
    "flash_attention": _ref_attention, "decode_attention": _ref_attention,
    "npu_decode_attention": _ref_attention,
    "silu_mul": lambda s, c, x: {"y": F.silu(_f32(x["gate"])) * _f32(x["up"])},
    "add": lambda s, c, x: {"y": _f32(x["a"]) + _f32(x["b"])},
    "bias_add": lambda s, c, x: {"y": _f32(x["x"]) + _f32(x["bias"])},
}


class EmulatorBackend:
    """Runs kernels on the CPU with the NPU's numerics. Its times are modeled elsewhere
    (the performance model); it reports none itself."""

    name = "emulator"
    source = "modeled"

    def run(self, spec: KernelSpec, shape: Shape, config: dict, inputs: Tensors,
            outputs: Tensors) -> None:
        """Write the kernel's results into `outputs` (preallocated, as on the device)."""
        kernel = EMULATED.get(spec.name)
        if kernel is None:
            raise KeyError(f"the emulator has no kernel {spec.name!r}")
        for name, value in kernel(shape, {**spec.tunables, **config}, inputs, outputs).items():
            if value.data_ptr() != outputs[name].data_ptr():
                outputs[name].copy_(value.reshape(outputs[name].shape))
