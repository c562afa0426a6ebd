"""Kernel specs: what each NPU2 kernel (and each host op a plan may keep) reads, writes,
computes and lets us tune, as functions of the model and the mode.

A `KernelUse` is one kernel at one shape in one role ("q_proj", "attn_norm"...);
`model_kernels(args, mode)` lists every use a model needs for a prefill at
sequence L or a decode step at position p.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from npu_deploy.models.config import ModelArgs

BF16, FP32 = 2, 4          # bytes per element


@dataclass(frozen=True)
class Prefill:
    seq: int

    def __str__(self) -> str:
        return f"prefill L={self.seq}"


@dataclass(frozen=True)
class Decode:
    pos: int

    def __str__(self) -> str:
        return f"decode p={self.pos}"


Mode = Prefill | Decode


@dataclass(frozen=True)
class Operand:
    name: str
    dims: tuple[int, ...]
    elem_bytes: int
    role: str                   # input | weight | output | table

    @property
    def nbytes(self) -> int:
        n = self.elem_bytes
        for d in self.dims:
            n *= d
        return n


Shape = dict[str, int]


@dataclass(frozen=True)
class KernelSpec:
    name: str
    where: str                                   # "npu" or "cpu"
    summary: str
    dims: tuple[str, ...]                        # the shape's named dims
    operands: Callable[[Shape], list[Operand]]
    flops: Callable[[Shape], float]
    tunables: dict[str, Any] = field(default_factory=dict)   # name -> default

    def bytes_moved(self, shape: Shape) -> int:
        return sum(o.nbytes for o in self.operands(shape))


def _gemm_operands(out_bytes: int) -> Callable[[Shape], list[Operand]]:
    return lambda s: [Operand("a", (s["M"], s["K"]), BF16, "input"),
                      Operand("b", (s["K"], s["N"]), BF16, "weight"),
                      Operand("c", (s["M"], s["N"]), out_bytes, "output")]


def _rows(*names: str, out: str = "y", weight: str | None = None, table: bool = False
          ) -> Callable[[Shape], list[Operand]]:
    def ops(s: Shape) -> list[Operand]:
        shape = (s["rows"], s["width"])
        out_ops = [Operand(n, shape, BF16, "input") for n in names]
        if weight:
            out_ops.append(Operand(weight, (s["width"],), BF16, "weight"))
        if table:
            out_ops += [Operand("cos", (s["seq"], s["width"]), BF16, "table"),
                        Operand("sin", (s["seq"], s["width"]), BF16, "table")]
        return [*out_ops, Operand(out, shape, BF16, "output")]
    return ops


def _attention_operands(s: Shape) -> list[Operand]:
    lq, lk, d = s["Lq"], s["Lk"], s["head_dim"]
    return [Operand("q", (s["heads"], lq, d), BF16, "input"),
            Operand("k", (s["kv_heads"], lk, d), BF16, "input"),
            Operand("v", (s["kv_heads"], lk, d), BF16, "input"),
            Operand("o", (s["heads"], lq, d), BF16, "output")]


def _attention_flops(s: Shape) -> float:
    # QK^T and PV, each 2*Lq*Lk*d per head; causal prefill (Lq == Lk) does about half.
    full = 4.0 * s["heads"] * s["Lq"] * s["Lk"] * s["head_dim"]
    return full / 2 if s["Lq"] == s["Lk"] else full


SPECS: dict[str, KernelSpec] = {s.name: s for s in [
    KernelSpec("gemm_bf16", "npu", "GEMM, bf16 in, FP32 accumulate, one cast to bf16 out",
               ("M", "K", "N"), _gemm_operands(BF16), lambda s: 2.0 * s["M"] * s["K"] * s["N"],
               {"tile_m": 64, "tile_k_l2": 256, "tile_k_l1": 32, "tile_n": 128, "herd_m": 4,
                "herd_n": 8, "datapath": "bfp16"}),
    KernelSpec("gemm_fp32", "npu", "GEMM, bf16 in, FP32 accumulate and FP32 out",
               ("M", "K", "N"), _gemm_operands(FP32), lambda s: 2.0 * s["M"] * s["K"] * s["N"],
               {"tile_m": 64, "tile_k_l2": 256, "tile_k_l1": 32, "tile_n": 128, "herd_m": 4,
                "herd_n": 8, "datapath": "bfp16"}),
    KernelSpec("gemv", "npu", "GEMV y = W x, FP32 vector accumulate (decode, LM head parts)",
               ("M", "K"),
               lambda s: [Operand("w", (s["M"], s["K"]), BF16, "weight"),
                          Operand("x", (s["K"],), BF16, "input"),
                          Operand("y", (s["M"],), BF16, "output")],
               lambda s: 2.0 * s["M"] * s["K"],
               {"tile_m": 16, "tile_k": 512, "herd_m": 8, "partitions": 1}),
    KernelSpec("rmsnorm", "npu", "weighted RMSNorm over each row", ("rows", "width"),
               _rows("x", weight="weight"), lambda s: 4.0 * s["rows"] * s["width"],
               {"herd_m": 8, "tile_rows": 2, "eps": 1e-5}),
    KernelSpec("rope", "npu", "RoPE, half-split, from a cos/sin table", ("rows", "width", "seq"),
               _rows("x", table=True), lambda s: 3.0 * s["rows"] * s["width"],
               {"herd_m": 8, "tile_rows": 4}),
    KernelSpec("flash_attention", "npu", "causal FlashAttention, GQA or MHA",
               ("heads", "kv_heads", "Lq", "Lk", "head_dim"), _attention_operands,
               _attention_flops,
               {"q_tile": 256, "k_tile": 64, "q_tiles": 4, "cascade": 4, "heads_per_unroll": 2,
                "dv_tile": 64, "layout": "seq-first"}),
    KernelSpec("silu_mul", "npu", "SiLU(gate) x up, element-wise", ("rows", "width"),
               _rows("gate", "up"), lambda s: 5.0 * s["rows"] * s["width"],
               {"herd_m": 8, "tile": 2048}),
    KernelSpec("add", "npu", "element-wise add (residuals)", ("rows", "width"),
               _rows("a", "b"), lambda s: 1.0 * s["rows"] * s["width"],
               {"herd_m": 8, "tile": 2048}),
    KernelSpec("bias_add", "npu", "QKV bias add (Qwen2)", ("rows", "width"),
               _rows("x", weight="bias"), lambda s: 1.0 * s["rows"] * s["width"],
               {"herd_m": 8, "tile": 2048}),
    KernelSpec("qk_norm", "npu", "per-head RMSNorm of Q or K (Qwen3)", ("rows", "width"),
               _rows("x", weight="weight"), lambda s: 4.0 * s["rows"] * s["width"],
               {"herd_m": 8, "tile_rows": 4, "eps": 1e-6}),
    KernelSpec("embedding", "cpu", "token embedding lookup on the host", ("rows", "width"),
               lambda s: [Operand("table", (s["vocab"], s["width"]), BF16, "weight"),
                          Operand("y", (s["rows"], s["width"]), BF16, "output")],
               lambda s: 0.0),
    KernelSpec("npu_decode_attention", "npu", "one query against the KV cache, on the NPU",
               ("heads", "kv_heads", "Lq", "Lk", "head_dim"), _attention_operands,
               _attention_flops, {"k_tile": 64, "herd_n": 8}),
    KernelSpec("decode_attention", "cpu", "one query against the KV cache, on the host",
               ("heads", "kv_heads", "Lq", "Lk", "head_dim"), _attention_operands,
               _attention_flops),
]}


@dataclass(frozen=True)
class KernelUse:
    """One kernel at one shape, for one role in the model."""

    role: str
    spec: KernelSpec
    shape: Shape
    per_layer: bool = True

    @property
    def key(self) -> tuple[str, tuple[tuple[str, int], ...]]:
        return self.spec.name, tuple(sorted(self.shape.items()))

    def shape_text(self) -> str:
        return "x".join(str(self.shape[d]) for d in self.spec.dims)


def model_kernels(args: ModelArgs, mode: Mode) -> list[KernelUse]:
    """Every kernel use of one prefill or decode step, in execution order."""
    h, q, kv, f, hd = args.hidden, args.q_dim, args.kv_dim, args.ffn, args.head_dim
    S = SPECS
    uses: list[KernelUse] = []

    def use(role: str, name: str, per_layer: bool = True, **shape: int) -> None:
        uses.append(KernelUse(role, S[name], shape, per_layer))

    if isinstance(mode, Prefill):
        L = mode.seq
        use("embed", "embedding", False, rows=L, width=h, vocab=args.vocab)
        use("attn_norm", "rmsnorm", rows=L, width=h)
        for role, n in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            use(role, "gemm_bf16", M=L, K=h, N=n)
        if args.qkv_bias:
            use("qkv_bias", "bias_add", rows=L, width=q + 2 * kv)
        if args.qk_norm:
            use("q_norm", "qk_norm", rows=L * args.n_heads, width=hd)
            use("k_norm", "qk_norm", rows=L * args.n_kv_heads, width=hd)
        use("rope_q", "rope", rows=L * args.n_heads, width=hd, seq=L)
        use("rope_k", "rope", rows=L * args.n_kv_heads, width=hd, seq=L)
        use("attention", "flash_attention", heads=args.n_heads, kv_heads=args.n_kv_heads,
            Lq=L, Lk=L, head_dim=hd)
        use("o_proj", "gemm_bf16", M=L, K=q, N=h)
        use("attn_residual", "add", rows=L, width=h)
        use("ffn_norm", "rmsnorm", rows=L, width=h)
        use("gate_proj", "gemm_bf16", M=L, K=h, N=f)
        use("up_proj", "gemm_bf16", M=L, K=h, N=f)
        use("silu_mul", "silu_mul", rows=L, width=f)
        use("down_proj", "gemm_bf16", M=L, K=f, N=h)
        use("ffn_residual", "add", rows=L, width=h)
        use("final_norm", "rmsnorm", False, rows=L, width=h)
        use("lm_head", "gemm_bf16", False, M=L, K=h, N=args.vocab)
    else:
        p = mode.pos
        use("embed", "embedding", False, rows=1, width=h, vocab=args.vocab)
        use("attn_norm", "rmsnorm", rows=1, width=h)
        for role, n in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            use(role, "gemv", M=n, K=h)
        if args.qkv_bias:
            use("qkv_bias", "bias_add", rows=1, width=q + 2 * kv)
        if args.qk_norm:
            use("q_norm", "qk_norm", rows=args.n_heads, width=hd)
            use("k_norm", "qk_norm", rows=args.n_kv_heads, width=hd)
        use("rope_q", "rope", rows=args.n_heads, width=hd, seq=1)
        use("rope_k", "rope", rows=args.n_kv_heads, width=hd, seq=1)
        use("attention", "decode_attention", heads=args.n_heads, kv_heads=args.n_kv_heads,
            Lq=1, Lk=p + 1, head_dim=hd)
        use("o_proj", "gemv", M=h, K=q)
        use("attn_residual", "add", rows=1, width=h)
        use("ffn_norm", "rmsnorm", rows=1, width=h)
        use("gate_proj", "gemv", M=f, K=h)
        use("up_proj", "gemv", M=f, K=h)
        use("silu_mul", "silu_mul", rows=1, width=f)
        use("down_proj", "gemv", M=h, K=f)
        use("ffn_residual", "add", rows=1, width=h)
        use("final_norm", "rmsnorm", False, rows=1, width=h)
        use("lm_head", "gemv", False, M=args.vocab, K=h)
    return uses


def unique_kernels(uses: list[KernelUse]) -> list[tuple[KernelUse, list[str]]]:
    """Each distinct (kernel, shape) once, with the roles that share it."""
    seen: dict[Any, tuple[KernelUse, list[str]]] = {}
    for u in uses:
        seen.setdefault(u.key, (u, []))[1].append(u.role)
    return list(seen.values())
