"""A whole-model prefill on a backend: every op of the reference block run as the kernel a
first deployment would dispatch, with bf16 tensors between kernels.

This is the baseline plan's data flow (one kernel per op, the LM head over every
row). Weights are converted to bf16 once, as a deployment writes them once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from oracle.adapters import LayerWeights, Weights
from oracle.config import ModelArgs
from oracle.reference import rope_table

from .hardware import XDNA2, Hardware
from .numerics import to_bf16
from .selection import select
from .specs import SPECS, KernelUse, Shape


@dataclass(frozen=True)
class _Layer:
    attn_norm: torch.Tensor
    wq: torch.Tensor                # [K, N] bf16: GEMM B operands
    wk: torch.Tensor
    wv: torch.Tensor
    wo: torch.Tensor
    ffn_norm: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor
    qkv_bias: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None


def _layer(args: ModelArgs, w: LayerWeights) -> _Layer:
    """A layer's weights as the device holds them: bf16, GEMM weights as [K, N]."""
    def b_operand(t: torch.Tensor) -> torch.Tensor:
        return to_bf16(t.t().contiguous())

    bias = None
    if args.qkv_bias and w.bq is not None and w.bk is not None and w.bv is not None:
        bias = to_bf16(torch.cat((w.bq, w.bk, w.bv)))
    return _Layer(
        attn_norm=to_bf16(w.attn_norm), wq=b_operand(w.wq), wk=b_operand(w.wk),
        wv=b_operand(w.wv), wo=b_operand(w.wo), ffn_norm=to_bf16(w.ffn_norm),
        w_gate=b_operand(w.w_gate), w_up=b_operand(w.w_up), w_down=b_operand(w.w_down),
        qkv_bias=bias, q_norm=None if w.q_norm is None else to_bf16(w.q_norm),
        k_norm=None if w.k_norm is None else to_bf16(w.k_norm))


class EmulatedModel:
    """Prefill of a model on `backend`, each kernel with the configuration selected for it."""

    def __init__(self, args: ModelArgs, weights: Weights, backend: Any,
                 hw: Hardware = XDNA2, *, exact_tiles: bool = False) -> None:
        if args.o_bias or args.mlp_bias:
            raise NotImplementedError("O-projection and MLP biases have no kernel yet")
        self.args, self.backend, self.hw = args, backend, hw
        # Whole-model runs let BLAS order the FP32 sums (see numerics.gemm_bfp16).
        self.exact_tiles = exact_tiles
        self.embed = to_bf16(weights.embed)
        self.final_norm = to_bf16(weights.final_norm)
        self.lm_head = to_bf16(weights.lm_head.t().contiguous())
        self.layers = [_layer(args, w) for w in weights.layers]
        self._configs: dict[tuple[Any, ...], dict[str, Any]] = {}

    def _config(self, use: KernelUse) -> dict[str, Any]:
        if use.key not in self._configs:
            config = select(use, self.hw).config
            if "eps" in config:     # compiled into the norm kernels: the model's own epsilon
                config = {**config, "eps": self.args.norm_eps}
            if use.spec.name.startswith("gemm") or use.spec.name == "flash_attention":
                config = {**config, "exact_tiles": self.exact_tiles}
            if use.spec.name.startswith("gemm"):
                config = {**config, "static_b": True}    # every B here is a weight
            self._configs[use.key] = config
        return self._configs[use.key]

    def _run(self, kernel: str, shape: Shape, **inputs: torch.Tensor) -> torch.Tensor:
        spec = SPECS[kernel]
        use = KernelUse(kernel, spec, shape)
        (out_op,) = [o for o in spec.operands(shape) if o.role == "output"]
        out = torch.empty(out_op.dims, dtype=torch.float32 if out_op.elem_bytes == 4
                          else torch.bfloat16)
        self.backend.run(spec, shape, self._config(use), inputs, {out_op.name: out})
        return out

    @torch.inference_mode()
    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [L, vocab] (FP32 out of the LM head GEMM) of a prefill of `tokens`."""
        a = self.args
        L, h, hd = int(tokens.shape[0]), a.hidden, a.head_dim
        cos, sin = (to_bf16(t) for t in rope_table(a, torch.arange(L)))
        x = self.embed[tokens]                                   # host: embedding lookup
        rows = {"rows": L, "width": h}
        for w in self.layers:
            n = self._run("rmsnorm", rows, x=x, weight=w.attn_norm)
            q = self._run("gemm_bf16", {"M": L, "K": h, "N": a.q_dim}, a=n, b=w.wq)
            k = self._run("gemm_bf16", {"M": L, "K": h, "N": a.kv_dim}, a=n, b=w.wk)
            v = self._run("gemm_bf16", {"M": L, "K": h, "N": a.kv_dim}, a=n, b=w.wv)
            if w.qkv_bias is not None:
                qkv = self._run("bias_add", {"rows": L, "width": a.q_dim + 2 * a.kv_dim},
                                x=torch.cat((q, k, v), dim=1), bias=w.qkv_bias)
                q, k, v = qkv.split((a.q_dim, a.kv_dim, a.kv_dim), dim=1)
            # Head-first layout for RoPE and attention: [heads, L, head_dim] (a host transpose
            # in this baseline; layout alignment removes it in a later plan).
            qh = q.reshape(L, a.n_heads, hd).transpose(0, 1).contiguous()
            kh = k.reshape(L, a.n_kv_heads, hd).transpose(0, 1).contiguous()
            vh = v.reshape(L, a.n_kv_heads, hd).transpose(0, 1).contiguous()
            if w.q_norm is not None and w.k_norm is not None:
                qh = self._run("qk_norm", {"rows": a.n_heads * L, "width": hd},
                               x=qh.reshape(-1, hd), weight=w.q_norm).view_as(qh)
                kh = self._run("qk_norm", {"rows": a.n_kv_heads * L, "width": hd},
                               x=kh.reshape(-1, hd), weight=w.k_norm).view_as(kh)
            qh = self._run("rope", {"rows": a.n_heads * L, "width": hd, "seq": L},
                           x=qh.reshape(-1, hd), cos=cos, sin=sin).view_as(qh)
            kh = self._run("rope", {"rows": a.n_kv_heads * L, "width": hd, "seq": L},
                           x=kh.reshape(-1, hd), cos=cos, sin=sin).view_as(kh)
            o = self._run("flash_attention", {"heads": a.n_heads, "kv_heads": a.n_kv_heads,
                                              "Lq": L, "Lk": L, "head_dim": hd}, q=qh, k=kh, v=vh)
            o = o.transpose(0, 1).reshape(L, a.q_dim)
            o = self._run("gemm_bf16", {"M": L, "K": a.q_dim, "N": h}, a=o, b=w.wo)
            x = self._run("add", rows, a=x, b=o)
            n = self._run("rmsnorm", rows, x=x, weight=w.ffn_norm)
            gate = self._run("gemm_bf16", {"M": L, "K": h, "N": a.ffn}, a=n, b=w.w_gate)
            up = self._run("gemm_bf16", {"M": L, "K": h, "N": a.ffn}, a=n, b=w.w_up)
            act = self._run("silu_mul", {"rows": L, "width": a.ffn}, gate=gate, up=up)
            down = self._run("gemm_bf16", {"M": L, "K": a.ffn, "N": h}, a=act, b=w.w_down)
            x = self._run("add", rows, a=x, b=down)
        n = self._run("rmsnorm", rows, x=x, weight=self.final_norm)
        return self._run("gemm_fp32", {"M": L, "K": h, "N": a.vocab}, a=n, b=self.lm_head)
