"""Kernel specs and what a model needs of them: every kernel use of a prefill at sequence L
or a decode step at position p.

A `KernelSpec` (what a kernel reads, writes, computes and lets us tune) is declared by its
family in `kernels/families/`; `SPECS` is the registry's. A `KernelUse` is one kernel at one
shape in one role ("q_proj", "attn_norm"...); `model_kernels(args, mode)` lists every use a
model needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from npu_deploy.models.config import ModelArgs

from ..emulation.kernel_fields import decode_kernel
from .family import BF16, FP32, KernelSpec, Operand, Shape
from .registry import SPECS


@dataclass(frozen=True)
class Prefill:
    seq: int

    def __str__(self) -> str:
        return f"prefill L={self.seq}"


@dataclass(frozen=True)
class Decode:
    """One decode step at position `pos` (the cache holds `pos` positions; this token makes
    pos + 1). `context`: the most positions the deployment's decode programs are built for
    (its KV window, upstream's ATTN_MAXL in programming_examples/fused_decode/README.md), so
    that every step up to it runs one build; None builds the step for its own length."""

    pos: int
    context: int | None = None

    def __post_init__(self) -> None:
        if self.context is not None and self.pos + 1 > self.context:
            raise ValueError(f"decode position {self.pos} needs {self.pos + 1} cache "
                             f"positions, past the context of {self.context} its programs "
                             "are built for; give a larger context")

    def __str__(self) -> str:
        return f"decode p={self.pos}" + (f" of {self.context}" if self.context else "")


Mode = Prefill | Decode

#: A prompt runs as the prefill of its length rounded up to a multiple of this, padded after
#: its last token (kernels.plans.plan_runner). At such a length every prefill launch's rows
#: fill its tiles: no unaligned tail takes shim descriptors of its own, which would split the
#: optimizer's merges into more programs than a process keeps loaded, and prompts of nearby
#: lengths share one build. Upstream pads every prompt to the one length it compiles
#: (seq_len 2048 in programming_examples/llms/llama32_1b/llama32_1b_inference.py).
PROMPT_ALIGN = 128


def prompt_prefill(tokens: int) -> Prefill:
    """The prefill a prompt of `tokens` runs as (see PROMPT_ALIGN)."""
    if tokens < 1:
        raise ValueError(f"a prompt of {tokens} tokens: a prefill needs at least one")
    return Prefill(-(-tokens // PROMPT_ALIGN) * PROMPT_ALIGN)


def run_decode(prompt: int, steps: int) -> Decode:
    """The decode step a generation of `steps` tokens after a prompt of `prompt` runs (the
    first; every later one runs the same programs, built for the whole context)."""
    return Decode(prompt, prompt + max(steps, 1))


@dataclass(frozen=True)
class KernelUse:
    """One kernel at one shape, for one role in the model."""

    role: str
    spec: KernelSpec
    shape: Shape
    per_layer: bool = True
    #: configuration the model fixes rather than selection chooses (a quantized weight's
    #: format: proj_qmm's `codec`), as sorted (key, value) pairs
    fixed: tuple[tuple[str, Any], ...] = ()

    @property
    def key(self) -> tuple[str, tuple[tuple[str, int], ...]]:
        return self.spec.name, tuple(sorted(self.shape.items()))

    def shape_text(self) -> str:
        return "x".join(str(self.shape[d]) for d in self.spec.dims)


def unplannable(args: ModelArgs) -> list[str]:
    """What a model needs that no kernel of the NPU path does yet, in words; [] when a plan
    can be built. Gemma 3's additions are in the FP32 oracle (oracle/reference.py), checked
    against transformers; in the kernels are its sliding window (FlashAttention's
    apply_window_mask), its per-layer RoPE tables, its post-sublayer norms (rmsnorm) and its
    GELU-tanh GLU (gelu_mul). (Phi-3's are all in: partial rotary is rope_partial, LongRoPE
    is in the host's cos/sin table.)"""
    needs = {
        "an O-projection bias": args.o_bias,
        "MLP biases": args.mlp_bias,
        "an attention scale other than 1/sqrt(head_dim)": args.attn_scale != args.head_dim ** -0.5,
    }
    return [what for what, needed in needs.items() if needed]


def model_kernels(args: ModelArgs, mode: Mode) -> list[KernelUse]:
    """Every kernel use of one prefill or decode step, in execution order: the model's
    recipe, role by role. A model needing what no kernel does yet (`unplannable`) raises
    NotImplementedError rather than list a recipe that would leave it out."""
    gaps = unplannable(args)
    if gaps:
        raise NotImplementedError(f"{', '.join(gaps)} {'have' if len(gaps) > 1 else 'has'} "
                                  "no kernel yet")
    h, q, kv, f, hd = args.hidden, args.q_dim, args.kv_dim, args.ffn, args.head_dim
    S = SPECS
    uses: list[KernelUse] = []

    def use(role: str, name: str, per_layer: bool = True, **shape: int) -> None:
        uses.append(KernelUse(role, S[name], shape, per_layer, fixed.get(name, ())))

    fixed: dict[str, tuple[tuple[str, Any], ...]] = {}
    if args.weights is not None:
        kernel, config = decode_kernel(args.weights.format)
        fixed[kernel] = tuple(sorted(config.items()))

    glu = "gelu_mul" if args.activation == "gelu_tanh" else "silu_mul"

    def post(role: str, rows: int) -> None:
        """Gemma 3's norm of a sublayer's output, before its residual add."""
        if args.sandwich_norms:
            use(role, "rmsnorm", rows=rows, width=h)

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
        post("post_attn_norm", L)
        use("attn_residual", "add", rows=L, width=h)
        use("ffn_norm", "rmsnorm", rows=L, width=h)
        use("gate_proj", "gemm_bf16", M=L, K=h, N=f)
        use("up_proj", "gemm_bf16", M=L, K=h, N=f)
        use(glu, glu, rows=L, width=f)
        use("down_proj", "gemm_bf16", M=L, K=f, N=h)
        post("post_ffn_norm", L)
        use("ffn_residual", "add", rows=L, width=h)
        use("final_norm", "rmsnorm", False, rows=L, width=h)
        use("lm_head", "gemm_bf16", False, M=L, K=h, N=args.vocab)
    else:
        p = mode.pos
        proj, head = decode_projection_kernels(args)
        use("embed", "embedding", False, rows=1, width=h, vocab=args.vocab)
        use("attn_norm", "rmsnorm", rows=1, width=h)
        for role, n in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
            use(role, proj, M=n, K=h)
        if args.qkv_bias:
            use("qkv_bias", "bias_add", rows=1, width=q + 2 * kv)
        if args.qk_norm:
            use("q_norm", "qk_norm", rows=args.n_heads, width=hd)
            use("k_norm", "qk_norm", rows=args.n_kv_heads, width=hd)
        use("rope_q", "rope", rows=args.n_heads, width=hd, seq=1)
        use("rope_k", "rope", rows=args.n_kv_heads, width=hd, seq=1)
        use("attention", "decode_attention", heads=args.n_heads, kv_heads=args.n_kv_heads,
            Lq=1, Lk=p + 1, head_dim=hd)
        use("o_proj", proj, M=h, K=q)
        post("post_attn_norm", 1)
        use("attn_residual", "add", rows=1, width=h)
        use("ffn_norm", "rmsnorm", rows=1, width=h)
        use("gate_proj", proj, M=f, K=h)
        use("up_proj", proj, M=f, K=h)
        use(glu, glu, rows=1, width=f)
        use("down_proj", proj, M=h, K=f)
        post("post_ffn_norm", 1)
        use("ffn_residual", "add", rows=1, width=h)
        use("final_norm", "rmsnorm", False, rows=1, width=h)
        use("lm_head", head, False, M=args.vocab, K=h)
    return uses


def decode_projection_kernels(args: ModelArgs) -> tuple[str, str]:
    """The kernels of a decode's projections and of its LM head: the bf16 GEMV, or for a
    quantized deployment (`args.weights`) its format's 4-bit kernel, on the LM head too
    where that is quantized. Prefill keeps the bf16 GEMMs on weights de-quantized on the host,
    as upstream does (models.quantization)."""
    if args.weights is None:
        return "gemv", "gemv"
    kernel = decode_kernel(args.weights.format)[0]
    return kernel, kernel if args.weights.lm_head_quantized else "gemv"


def unique_kernels(uses: list[KernelUse]) -> list[tuple[KernelUse, list[str]]]:
    """Each distinct (kernel, shape) once, with the roles that share it."""
    seen: dict[Any, tuple[KernelUse, list[str]]] = {}
    for u in uses:
        seen.setdefault(u.key, (u, []))[1].append(u.role)
    return list(seen.values())


__all__ = ["BF16", "FP32", "PROMPT_ALIGN", "SPECS", "Decode", "KernelSpec", "KernelUse", "Mode",
           "Operand", "Prefill", "Shape", "model_kernels", "prompt_prefill", "run_decode",
           "unique_kernels"]
