"""The baseline dispatch plan: what a plan is made of (`DispatchPlan`, `Dispatch`, `Launch`,
`HostStep`, `Binding`) lives in kernels.plans.steps and is re-exported here; this module
builds the plan a first deployment starts from.

`baseline_plan` runs the way the IRON baseline does: one dispatch per kernel, every buffer
written and read back on each call, weights re-uploaded, the LM head over the whole sequence.
`kernels.plans.transforms` improves it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any, Literal

from npu_deploy.models.config import ModelArgs

from ..definition.checker import check
from ..definition.family import Layout
from ..definition.hardware import XDNA2, Hardware
from ..definition.registry import family
from ..definition.rules import blocking
from ..definition.selection import select
from ..definition.specs import SPECS, Decode, KernelUse, Mode, Prefill, Shape, unplannable
from ..emulation.kernel_fields import DEVICE_COLUMNS, decode_kernel
from ..families.proj_qmm import QMM_ROUNDINGS
from .steps import (
    HOST_OPS,
    KINDS,
    Binding,
    Dispatch,
    DispatchPlan,
    HostStep,
    Kind,
    Launch,
    Step,
    config_key,
    on_host,
)

# --- the baseline --------------------------------------------------------------------------

#: the GEMV kernel of the LM head by the dtype of the logits it writes: upstream's mv.o GEMV
#: (bf16), or its family's FP32-output counterpart (ours)
LM_HEAD_OUT = {"bf16": "gemv", "f32": family("gemv").fp32_out or "gemv"}
LogitsDtype = Literal["bf16", "f32"]
#: FlashAttention's matmul datapath: upstream's BFP16-emulated build, or the native bf16 MMA
#: (ours, unmeasured: kernels.families.flash_attention)
ATTENTION_DATAPATHS = ("bfp16", "bf16")
AttentionDatapath = Literal["bfp16", "bf16"]


def _frozen(d: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(d.items()))


class PlanBuilder:
    """Emits one dispatch per kernel, every activation an input/output synced each call,
    every weight re-uploaded (`input`)."""

    def __init__(self, args: ModelArgs, hw: Hardware,
                 configs: Mapping[str, dict[str, Any]] | None = None,
                 gemm_datapath: str | None = None, lm_head_out: LogitsDtype = "bf16",
                 attention_datapath: AttentionDatapath = "bfp16",
                 qmm_rounding: str = "floor") -> None:
        if lm_head_out not in LM_HEAD_OUT:
            raise ValueError(f"lm_head_out must be one of {tuple(LM_HEAD_OUT)}, got "
                             f"{lm_head_out!r}")
        if attention_datapath not in ATTENTION_DATAPATHS:
            raise ValueError(f"attention_datapath must be one of {ATTENTION_DATAPATHS}, got "
                             f"{attention_datapath!r}")
        self.args, self.hw = args, hw
        self.lm_head_out = lm_head_out
        self.attention_datapath = attention_datapath
        self.steps: list[Step] = []
        self._configs: dict[Any, dict[str, Any]] = {}
        self.chosen = dict(configs or {})       # config_key -> a configuration chosen earlier
        self.gemm_datapath = gemm_datapath
        #: the configuration a quantized model's format fixes for its kernel (proj_qmm's codec)
        self.fixed: dict[str, tuple[tuple[str, Any], ...]] = {}
        if qmm_rounding not in QMM_ROUNDINGS:
            raise ValueError(f"qmm_rounding must be one of {QMM_ROUNDINGS}, got "
                             f"{qmm_rounding!r}")
        if args.weights is not None:
            kernel, fixed = decode_kernel(args.weights.format)
            if "rounding" in SPECS[kernel].tunables:    # a 4-bit kernel's rounding build
                fixed = {**fixed, "rounding": qmm_rounding}
            self.fixed[kernel] = tuple(sorted(fixed.items()))

    def config(self, kernel: str, shape: Shape) -> dict[str, Any]:
        use = KernelUse(kernel, SPECS[kernel], shape, fixed=self.fixed.get(kernel, ()))
        if use.key not in self._configs:
            chosen = self.chosen.get(config_key(kernel, shape))
            config = dict(chosen) if chosen is not None else select(use, self.hw).config
            if "eps" in config:                 # compiled into the norm kernels
                config = {**config, "eps": self.args.norm_eps}
            if "datapath" in SPECS[kernel].tunables:
                config = self._datapath(kernel, config)
            self._configs[use.key] = config
        return self._configs[use.key]

    def _datapath(self, kernel: str, config: dict[str, Any]) -> dict[str, Any]:
        """The configuration with the plan's datapath for its family: the GEMM datapath where
        one is set, the attention datapath where it is not upstream's (BFP16) build."""
        chosen: str | None = self.gemm_datapath
        if family(kernel).attention_datapath:
            chosen = None if self.attention_datapath == "bfp16" else self.attention_datapath
        return {**config, "datapath": chosen} if chosen else config

    def launch(self, kernel: str, role: str, layer: int | None, shape: Shape,
               config_extra: dict[str, Any] | None = None, **operands: str | Binding) -> None:
        spec = SPECS[kernel]
        config = {**self.config(kernel, shape), **(config_extra or {})}
        bindings = []
        for op in spec.operands(shape):
            bound = operands[op.name]
            if isinstance(bound, Binding):
                bindings.append(replace(bound, operand=op.name))
                continue
            kind: Kind = "output" if op.role == "output" else "input"
            bindings.append(Binding(op.name, bound, kind))
        name = role if layer is None else f"L{layer}.{role}"
        ln = Launch(kernel, role, layer, _frozen(shape), _frozen(config), tuple(bindings))
        refused = self.refused(ln)
        if refused:
            self.steps.append(on_host(ln, f"{config_key(kernel, shape)} does not fit "
                                          f"{self.hw.name}: {refused}"))
        else:
            self.steps.append(Dispatch(name, (ln,)))

    def refused(self, ln: Launch) -> str:
        """Why a launch with a host counterpart cannot run on the NPU at its configuration
        (the checker's blocking findings), or "": such a launch falls back to the host
        rather than emit a program that overflows a tile. A launch without one keeps its
        findings for selection to report (`kernels` exits 1 on them)."""
        if family(ln.kernel).host_alternative is None:
            return ""
        found = blocking(check(ln.spec, ln.shape_dict, ln.config_dict, self.hw))
        return "; ".join(f.message for f in found)

    def host(self, op: str, role: str, layer: int | None, shape: Shape,
             bindings: dict[str, tuple[str, Kind] | Binding], **params: Any) -> None:
        bs = tuple(b if isinstance(b, Binding) else Binding(name, b[0], b[1])
                   for name, b in bindings.items())
        self.steps.append(HostStep(op, role, layer, _frozen(shape), bs, _frozen(params)))


def baseline_plan(model: str, args: ModelArgs, mode: Mode, hw: Hardware = XDNA2, *,
                  configs: Mapping[str, dict[str, Any]] | None = None,
                  gemm_datapath: str | None = None,
                  lm_head: Literal["full", "last-token"] = "last-token",
                  lm_head_out: LogitsDtype = "bf16",
                  attention_datapath: AttentionDatapath = "bfp16",
                  qmm_rounding: str = "floor") -> DispatchPlan:
    """The plan a first deployment starts from (see the module docstring). `configs`
    (config_key -> configuration) are used where given, the selection elsewhere;
    `gemm_datapath` sets every GEMM's matmul datapath ("bfp16" or "bf16"). A prefill's LM
    head runs on the last position only, as GEMV partitions, as upstream's pipelines run
    it; `lm_head="full"` runs it over every position (a [L, vocab] FP32 GEMM: 1.05 GB of
    logits for Llama-3.2-1B at 2048), for what needs every position's logits.
    `lm_head_out`: the GEMV LM head's logits, bf16 as upstream's mv.cc writes them, or
    "f32" (our own variant without the cast: kernels.families.gemv_fp32).
    `attention_datapath`: the matmuls of every prefill FlashAttention launch, "bfp16" as
    upstream builds attn_npu2.cc, or "bf16" (native 4x8x8; our own build). Decode's
    attention (our own kernel, FP32 scores) has no BFP16 matmul to change. `qmm_rounding`:
    how a 4-bit decode's proj_qmm rounds its bf16 casts, "floor" as upstream builds it (the
    core's reset mode) or "conv_even" (our build: kernels.families.proj_qmm `proj_object`)."""
    gaps = unplannable(args)
    if gaps:
        raise NotImplementedError(f"{', '.join(gaps)} {'have' if len(gaps) > 1 else 'has'} "
                                  "no kernel yet")
    b = PlanBuilder(args, hw, configs, gemm_datapath, lm_head_out, attention_datapath,
                    qmm_rounding)
    if isinstance(mode, Prefill):
        _prefill_steps(b, mode.seq, lm_head)
        return DispatchPlan(model, args, mode, tuple(b.steps), lm_head)
    _decode_steps(b, mode.pos, mode.context)
    return DispatchPlan(model, args, mode, tuple(b.steps), "last-token")  # one token


def _partial(args: ModelArgs) -> dict[str, Any] | None:
    """A RoPE launch's config addition for a partial rotary: the dims it rotates
    (kernels/families/rope.py: rope_partial); None when it rotates whole heads."""
    return {"rope_dim": args.rope_dim} if args.rope_dim != args.head_dim else None


def _attention(args: ModelArgs, layer: int) -> dict[str, Any]:
    """An attention launch's config addition: the layer's sliding window (Gemma 3's local
    layers) and a softmax scale other than 1/sqrt(head_dim) (query_pre_attn_scalar), which
    the kernels' checkers hold to what their builds take (kernels/families/
    flash_attention.py, decode_attention.py); {} for plain causal attention."""
    extra: dict[str, Any] = {}
    if args.window(layer) is not None:
        extra["window"] = args.window(layer)
    if args.attn_scalar is not None:
        extra["scale"] = args.attn_scale
    return extra


def lut_name(args: ModelArgs, layer: int) -> str:
    """The RoPE table a layer's rope launches read: Gemma 3's sliding layers have their own
    theta (local 1e4; the global layers 1e6 with linear x8), so their own table,
    "rope.local.lut"; every other layer reads "rope.lut". Upstream's Gemma 3 prefill makes
    the same choice of host LUT per layer (programming_examples/llms/gemma3_4b_q4nx/
    README.md, "RoPE theta switches with them", e972f29)."""
    dual = args.local_rope_theta is not None and args.window(layer) is not None
    return "rope.local.lut" if dual else "rope.lut"


def _post_norm(b: PlanBuilder, layer: int, role: str, rows: Shape, out: str) -> str:
    """Gemma 3's norm of a sublayer's output before the residual add (`role`
    post_attn_norm or post_ffn_norm): an rmsnorm launch on `out`, whose result the add
    takes; `out` itself for a model without them. Upstream runs it as a weighted_rms_norm
    slice in the O and Down tails (programming_examples/llms/gemma3_4b_q4nx/README.md,
    e972f29); the (1 + w) is folded into the weight at load (models/adapters.py)."""
    if not b.args.sandwich_norms:
        return out
    b.launch("rmsnorm", role, layer, rows, x=out, weight=_w(layer, role), y=out + "n")
    return out + "n"


def glu_kernel(args: ModelArgs) -> str:
    """The gated FFN's activation kernel (and role): silu_mul, or gelu_mul for Gemma 3's
    GELU-tanh (upstream's gelu_and_mul_bf16, kernels/families/silu_mul.py)."""
    return "gelu_mul" if args.activation == "gelu_tanh" else "silu_mul"


def _embed_scale(args: ModelArgs) -> dict[str, float]:
    """The embedding lookup's parameter: Gemma 3's scale sqrt(hidden), which the host's
    lookup multiplies in bf16 (kernels/families/embedding.py); none for other models."""
    return {"scale": args.embed_scale} if args.embed_scale != 1.0 else {}


def _w(layer: int | None, name: str) -> str:
    return f"w.{name}" if layer is None else f"w.L{layer}.{name}"


def _prefill_steps(b: PlanBuilder, L: int,
                   lm_head: Literal["full", "last-token"] = "last-token") -> None:
    a = b.args
    h, hd, q, kv = a.hidden, a.head_dim, a.q_dim, a.kv_dim
    rows = {"rows": L, "width": h}
    hf: Layout = "head-first"
    pre_bias = "0" if a.qkv_bias else ""     # projections write here, the bias add reads it
    b.host("embedding", "embed", None, {"rows": L, "width": h, "vocab": a.vocab},
           {"tokens": ("tokens", "input"), "table": (_w(None, "embed"), "static"),
            "y": ("x.0", "output")}, **_embed_scale(a))
    for i in range(a.n_layers):
        x, t = f"x.{i}", f"L{i}."
        b.launch("rmsnorm", "attn_norm", i, rows, x=x, weight=_w(i, "attn_norm"), y=t + "n1")
        for role, n, out in (("q_proj", q, "q"), ("k_proj", kv, "k"), ("v_proj", kv, "v")):
            b.launch("gemm_bf16", role, i, {"M": L, "K": h, "N": n}, a=t + "n1",
                     b=_w(i, role), c=t + out + pre_bias)
        if a.qkv_bias:
            for name, n in (("q", q), ("k", kv), ("v", kv)):
                b.launch("bias_add", f"{name}_bias", i, {"rows": L, "width": n},
                         x=t + name + "0", bias=_w(i, f"{name}_bias"), y=t + name)
        # Head-first for RoPE and attention: host transposes in the baseline.
        for name, heads in (("q", a.n_heads), ("k", a.n_kv_heads), ("v", a.n_kv_heads)):
            b.host("transpose", f"{name}_to_head_first", i,
                   {"rows": L, "heads": heads, "head_dim": hd},
                   {"x": (t + name, "input"),
                    "y": Binding("y", t + name + "h", "output", hf)}, to=hf)
        if a.qk_norm:
            for name, heads in (("q", a.n_heads), ("k", a.n_kv_heads)):
                b.launch("qk_norm", f"{name}_norm", i, {"rows": heads * L, "width": hd},
                         x=Binding("x", t + name + "h", "input", hf),
                         weight=_w(i, f"{name}_norm"),
                         y=Binding("y", t + name + "hn", "output", hf))
        src = "hn" if a.qk_norm else "h"
        for name, heads in (("q", a.n_heads), ("k", a.n_kv_heads)):
            b.launch("rope", f"rope_{name}", i, {"rows": heads * L, "width": hd, "seq": L},
                     _partial(a),
                     x=Binding("x", t + name + src, "input", hf),
                     lut=lut_name(a, i),
                     y=Binding("y", t + name + "r", "output", hf))
        b.launch("flash_attention", "attention", i,
                 {"heads": a.n_heads, "kv_heads": a.n_kv_heads, "Lq": L, "Lk": L, "head_dim": hd},
                 # the head-first program, as its operands are here
                 {"layout": hf, **_attention(a, i)},
                 q=Binding("q", t + "qr", "input", hf), k=Binding("k", t + "kr", "input", hf),
                 v=Binding("v", t + "vh", "input", hf), o=Binding("o", t + "oh", "output", hf))
        b.host("transpose", "o_to_seq_first", i, {"rows": L, "heads": a.n_heads, "head_dim": hd},
               {"x": Binding("x", t + "oh", "input", hf), "y": (t + "o", "output")},
               to="seq-first")
        b.launch("gemm_bf16", "o_proj", i, {"M": L, "K": q, "N": h}, a=t + "o",
                 b=_w(i, "o_proj"), c=t + "attn")
        b.launch("add", "attn_residual", i, rows, a=x,
                 b=_post_norm(b, i, "post_attn_norm", rows, t + "attn"), y=t + "h1")
        b.launch("rmsnorm", "ffn_norm", i, rows, x=t + "h1", weight=_w(i, "ffn_norm"),
                 y=t + "n2")
        for role in ("gate_proj", "up_proj"):
            b.launch("gemm_bf16", role, i, {"M": L, "K": h, "N": a.ffn}, a=t + "n2",
                     b=_w(i, role), c=t + role[:-5])
        glu = glu_kernel(a)
        b.launch(glu, glu, i, {"rows": L, "width": a.ffn}, gate=t + "gate",
                 up=t + "up", y=t + "act")
        b.launch("gemm_bf16", "down_proj", i, {"M": L, "K": a.ffn, "N": h}, a=t + "act",
                 b=_w(i, "down_proj"), c=t + "ffn")
        b.launch("add", "ffn_residual", i, rows, a=t + "h1",
                 b=_post_norm(b, i, "post_ffn_norm", rows, t + "ffn"), y=f"x.{i + 1}")
        # The layer's K and V go to the host for decode (after the layer's dispatches, so
        # that they can merge).
        b.host("kv_store", "kv_store", i, {"kv_heads": a.n_kv_heads, "Lk": L, "head_dim": hd},
               {"k": Binding("k", t + "kr", "input", hf), "v": Binding("v", t + "vh", "input", hf),
                "k_cache": Binding("k_cache", t + "k_cache", "output", hf),
                "v_cache": Binding("v_cache", t + "v_cache", "output", hf)})
    x = f"x.{a.n_layers}"
    if lm_head == "full":
        b.launch("rmsnorm", "final_norm", None, rows, x=x, weight=_w(None, "final_norm"),
                 y="xn")
        b.launch("gemm_fp32", "lm_head", None, {"M": L, "K": h, "N": a.vocab}, a="xn",
                 b=_w(None, "lm_head"), c="logits")
        return
    # the next token needs the last position's logits only: its final norm on the host
    # (one row), the LM head as GEMV partitions (programming_examples/llms/llama32_1b/
    # docs/profile.md: `lm_head_gemv`, 8 partitions, once per prefill)
    last_token_head(b, x, _w(None, "final_norm"))


def last_token_head(b: PlanBuilder, x: str, norm_weight: str) -> None:
    """The final norm of `x`'s last row on the host, then the LM head as GEMV partitions
    over the vocabulary: the logits of the next token only."""
    b.steps.append(HostStep("final_norm_last_row", "final_norm", None,
                            (("rows", 1), ("width", b.args.hidden)),
                            (Binding("x", x, "input"), Binding("weight", norm_weight, "static"),
                             Binding("y", "xn", "output"))))
    lm_head_gemv(b, "xn", rows_total=b.args.vocab)


def _decode_steps(b: PlanBuilder, p: int, context: int | None = None) -> None:
    a = b.args
    h, hd, q, kv = a.hidden, a.head_dim, a.q_dim, a.kv_dim
    rows = {"rows": 1, "width": h}
    hf: Layout = "head-first"
    pre_bias = "0" if a.qkv_bias else ""
    b.host("embedding", "embed", None, {"rows": 1, "width": h, "vocab": a.vocab},
           {"tokens": ("tokens", "input"), "table": (_w(None, "embed"), "static"),
            "y": ("x.0", "output")}, **_embed_scale(a))
    for i in range(a.n_layers):
        x, t = f"x.{i}", f"L{i}."
        b.launch("rmsnorm", "attn_norm", i, rows, x=x, weight=_w(i, "attn_norm"), y=t + "n1")
        for role, n, out in (("q_proj", q, "q"), ("k_proj", kv, "k"), ("v_proj", kv, "v")):
            decode_projection(b, role, i, n, h, x=t + "n1", y=t + out + pre_bias)
        if a.qkv_bias:
            for name, n in (("q", q), ("k", kv), ("v", kv)):
                b.launch("bias_add", f"{name}_bias", i, {"rows": 1, "width": n},
                         x=t + name + "0", bias=_w(i, f"{name}_bias"), y=t + name)
        src = ""
        if a.qk_norm:
            for name, heads in (("q", a.n_heads), ("k", a.n_kv_heads)):
                b.launch("qk_norm", f"{name}_norm", i, {"rows": heads, "width": hd},
                         x=t + name, weight=_w(i, f"{name}_norm"), y=t + name + "n")
            src = "n"
        for name, heads in (("q", a.n_heads), ("k", a.n_kv_heads)):
            b.launch("rope", f"rope_{name}", i, {"rows": heads, "width": hd, "seq": 1},
                     _partial(a), x=t + name + src, lut=lut_name(a, i), y=t + name + "r")
        b.host("kv_append", "kv_append", i, {"kv_heads": a.n_kv_heads, "head_dim": hd},
               {"k": (t + "kr", "input"), "v": (t + "v", "input"),
                "k_cache": Binding("k_cache", t + "k_cache", "output", hf),
                "v_cache": Binding("v_cache", t + "v_cache", "output", hf)}, pos=p)
        shape = {"heads": a.n_heads, "kv_heads": a.n_kv_heads, "Lq": 1, "Lk": p + 1,
                 "head_dim": hd}
        b.launch("npu_decode_attention", "attention", i, shape,
                 {**(decode_window(b, shape, context) or {}), **_attention(a, i)},
                 q=t + "qr",
                 k=Binding("k", t + "k_cache", "input", hf),
                 v=Binding("v", t + "v_cache", "input", hf), o=t + "o")
        decode_projection(b, "o_proj", i, h, q, x=t + "o", y=t + "attn")
        b.launch("add", "attn_residual", i, rows, a=x,
                 b=_post_norm(b, i, "post_attn_norm", rows, t + "attn"), y=t + "h1")
        b.launch("rmsnorm", "ffn_norm", i, rows, x=t + "h1", weight=_w(i, "ffn_norm"),
                 y=t + "n2")
        for role in ("gate_proj", "up_proj"):
            decode_projection(b, role, i, a.ffn, h, x=t + "n2", y=t + role[:-5])
        glu = glu_kernel(a)
        b.launch(glu, glu, i, {"rows": 1, "width": a.ffn}, gate=t + "gate",
                 up=t + "up", y=t + "act")
        decode_projection(b, "down_proj", i, h, a.ffn, x=t + "act", y=t + "ffn")
        b.launch("add", "ffn_residual", i, rows, a=t + "h1",
                 b=_post_norm(b, i, "post_ffn_norm", rows, t + "ffn"), y=f"x.{i + 1}")
    x = f"x.{a.n_layers}"
    b.launch("rmsnorm", "final_norm", None, rows, x=x, weight=_w(None, "final_norm"), y="xn")
    lm_head_gemv(b, "xn", rows_total=a.vocab, quantized=True)


def decode_projection(b: PlanBuilder, role: str, layer: int, m: int, k: int, *, x: str,
                      y: str) -> None:
    """One decode projection y = W x of W [m, k]: the bf16 GEMV, or for a quantized model
    (`args.weights`) its format's 4-bit kernel (proj_qmm for Q4NX and Q4_0, gemv_int4 for
    int4-AWQ) reading W's device bytes, at the configuration its format fixes."""
    weights = b.args.weights
    if weights is None:
        b.launch("gemv", role, layer, {"M": m, "K": k}, w=_w(layer, role), x=x, y=y)
        return
    kernel = decode_kernel(weights.format)[0]
    kb = block_k(weights.format, k)
    b.launch(kernel, role, layer, {"M": m, "K": kb}, dict(b.fixed[kernel]), w=_w(layer, role),
             x=x if kb == k else Binding("x", x, "input", width=k), y=y)


def block_k(format: str, k: int) -> int:
    """The K a 4-bit kernel runs a projection of `k` columns at: rounded up to the format's
    whole column blocks (Q4NX's 256: SmolLM2's 576 runs as 768), the weight's padded
    columns zero groups (scale 1, min 0: exactly 0) and x zero past its own `k`, so the
    padding adds nothing to y (models/quantized_checkpoint.py pads the blocks alike)."""
    cols = DEVICE_COLUMNS.get(format, 1)
    return -(-k // cols) * cols


def weights_note(args: ModelArgs) -> str | None:
    """How a quantized model's plans read its weights, in one sentence (None for bf16): the
    decode's projections (and its LM head, where quantized) through the format's 4-bit
    kernel; prefill's bf16 GEMMs on weights de-quantized on the host at load, as upstream's
    4-bit examples prefill (docs/quantized-kernels.md, its section on prefill)."""
    w = args.weights
    if w is None:
        return None
    kernel = decode_kernel(w.format)[0]
    head = "and the LM head " if w.lm_head_quantized else ""
    return (f"4-bit weights ({w.format}, groups of {w.group}): decode runs its projections "
            f"{head}as {kernel} on the packed weights; prefill runs the bf16 GEMMs on weights "
            f"de-quantized to bf16 on the host at load, as upstream does. bf16: "
            f"{', '.join(w.bf16_tensors(args.qkv_bias, args.qk_norm, args.sandwich_norms))}.")


def decode_window(b: PlanBuilder, shape: Shape, context: int | None) -> dict[str, Any] | None:
    """The decode attention's build constant: the `context` positions its program (and
    micro-kernels) are built for, rounded up to its k_tile, so one build serves every step
    up to it and the step's length (Lk) reaches the cores at run time
    (kernels/families/decode_attention.py). None (no context): built for this step's own
    length, as a plan of one position is priced."""
    if context is None:
        return None
    k_tile = int(b.config("npu_decode_attention", shape).get(
        "k_tile", SPECS["npu_decode_attention"].tunables["k_tile"]))
    return {"context": -(-max(context, shape["Lk"]) // k_tile) * k_tile}


# Upstream measures the LM head as GEMV partitions of 16384 x hidden
# (docs/hardware-facts.md#calibration-set); a partition of a multiple of 1024 rows leaves no
# unaligned tail (symptom table: "pad to 1024-aligned").
LM_HEAD_PARTITION_ROWS = 16384
_PARTITION_ALIGN = 1024


def lm_head_gemv(b: PlanBuilder, x: str, rows_total: int, quantized: bool = False) -> None:
    """The LM head as GEMV launches over partitions of the vocabulary, one dispatch each: at
    least as many as the checker needs for the repeat count, and none over the measured
    16384 rows; each but the last a multiple of 1024 rows. The builder's `lm_head_out`
    picks the kernel: bf16 logits (mv.o) or FP32 logits. `quantized` (a decode's): a model
    whose LM head is quantized (`args.weights.lm_head_quantized`) reads it through its
    format's 4-bit kernel instead, over the same partitions."""
    h = b.args.hidden
    weights = b.args.weights
    fixed: dict[str, Any] = {"partitions": 1}
    kb = h
    if quantized and weights is not None and weights.lm_head_quantized:
        kernel = decode_kernel(weights.format)[0]
        fixed = dict(b.fixed[kernel])
        kb, need = block_k(weights.format, h), 1
    else:
        kernel = LM_HEAD_OUT[b.lm_head_out]
        need = int(b.config(kernel, {"M": rows_total, "K": b.args.hidden})["partitions"])
    parts = max(need, math.ceil(rows_total / LM_HEAD_PARTITION_ROWS))
    step = math.ceil(math.ceil(rows_total / parts) / _PARTITION_ALIGN) * _PARTITION_ALIGN
    for k, r0 in enumerate(range(0, rows_total, step)):
        r1 = min(rows_total, r0 + step)
        shape = {"M": r1 - r0, "K": kb}
        b.launch(kernel, f"lm_head.{k}", None, shape, fixed,
                 w=Binding("w", _w(None, "lm_head"), "input", rows=(r0, r1)),
                 x=x if kb == h else Binding("x", x, "input", width=h),
                 y=Binding("y", "logits", "output", rows=(r0, r1)))


__all__ = ["ATTENTION_DATAPATHS", "HOST_OPS", "KINDS", "LM_HEAD_OUT", "AttentionDatapath",
           "Binding", "Decode", "Dispatch", "DispatchPlan",
           "HostStep", "Kind", "Launch", "LogitsDtype", "PlanBuilder", "Prefill", "Step",
           "baseline_plan", "config_key", "unplannable", "weights_note",
           "last_token_head", "lm_head_gemv", "on_host"]
