"""The FP32 reference, decomposed op by op, read top to bottom like the paper.

One sequence (batch 1, the NPU deployment's case). Activations are
[seq, features]; attention works head-first, [heads, seq, head_dim]. Every op
is a short function a later phase can compare a kernel against, and every
intermediate can be captured under its (layer, op) name.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from npu_deploy.events import progress
from npu_deploy.models.adapters import LayerWeights, Weights
from npu_deploy.models.config import ModelArgs, RopeScaling

#: The ops of one block, in order, as they are captured.
BLOCK_OPS = ("attn_norm", "q", "k", "v", "q_norm", "k_norm", "q_rope", "k_rope", "attn",
             "o", "post_attn_norm", "attn_residual", "ffn_norm", "gate", "up", "silu_mul",
             "gelu_mul", "down", "post_ffn_norm", "ffn_residual")


def block_ops(args: ModelArgs) -> tuple[str, ...]:
    """The ops of BLOCK_OPS a block of this model captures: Qwen3's and Gemma's QK norms,
    Gemma's post-sublayer norms, and the FFN's activation (SiLU or GELU-tanh)."""
    skip = set() if args.qk_norm else {"q_norm", "k_norm"}
    skip |= set() if args.sandwich_norms else {"post_attn_norm", "post_ffn_norm"}
    skip.add("silu_mul" if args.activation == "gelu_tanh" else "gelu_mul")
    return tuple(op for op in BLOCK_OPS if op not in skip)


#: Ops outside the blocks (layer -1 before them, layer n_layers after them).
MODEL_OPS = ("embed", "final_norm", "logits")

Capture = Callable[[int, str, torch.Tensor], None]


def _no_capture(layer: int, op: str, t: torch.Tensor) -> None:
    return None


# --- the ops -------------------------------------------------------------------------

def embedding(tokens: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return table[tokens]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x^2) + eps) * weight, over the last dim."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def linear(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None = None) -> torch.Tensor:
    """x @ w.T (+ b): w is [out, in], as checkpoints store it."""
    return F.linear(x, w, b)


def rope_inv_freq(head_dim: int, theta: float, scaling: RopeScaling,
                  seq_len: int = 0) -> torch.Tensor:
    """Inverse frequencies (float64) of the half-split rotation of `head_dim` dims, with the
    config's scaling. LongRoPE divides each by its short factor, or by its long one when
    the sequence reaches past original_max_position (`seq_len` positions, counted from 0:
    transformers' rule, one table for a whole forward call)."""
    inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    if scaling.kind == "longrope":
        long = seq_len > scaling.original_max_position
        inv = inv / torch.tensor(scaling.long_factor if long else scaling.short_factor,
                                 dtype=torch.float64)
    elif scaling.kind == "linear":
        inv = inv / scaling.factor
    elif scaling.kind == "llama3":
        # Llama 3.1's long-context rule: keep high frequencies, divide low ones by
        # `factor`, and blend linearly in between (by wavelength).
        wavelen = 2 * math.pi / inv
        low_wavelen = scaling.original_max_position / scaling.low_freq_factor
        high_wavelen = scaling.original_max_position / scaling.high_freq_factor
        smooth = ((scaling.original_max_position / wavelen - scaling.low_freq_factor)
                  / (scaling.high_freq_factor - scaling.low_freq_factor))
        blended = (1 - smooth) * inv / scaling.factor + smooth * inv
        inv = torch.where(wavelen > low_wavelen, inv / scaling.factor,
                          torch.where(wavelen < high_wavelen, inv, blended))
    return inv


def rope_table(args: ModelArgs, positions: torch.Tensor, layer: int = 0,
               seq_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of `layer`, each [seq, rope_dim] in FP32: the table a RoPE kernel is
    given (rope_dim is head_dim unless the rotary is partial; Gemma 3's sliding layers
    have their own theta). `seq_len`: the sequence LongRoPE picks its factors by (the
    positions' own unless given: a padded prefill's is its prompt's)."""
    theta, scaling = args.rope_of(layer)
    return rope_cos_sin(args.rope_dim, theta, scaling, positions, seq_len)


def rope_cos_sin(head_dim: int, theta: float, scaling: RopeScaling, positions: torch.Tensor,
                 seq_len: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`rope_table` from the three numbers it depends on. Angles are formed in float64: in
    FP32 the angle at position 2000 is already off by ~1e-4 rad, and the table should be
    the truth, not one more rounding."""
    if seq_len is None:
        seq_len = int(positions.max()) + 1 if len(positions) else 0
    inv = rope_inv_freq(head_dim, theta, scaling, seq_len)
    angles = positions.to(torch.float64)[:, None] * inv[None, :]
    angles = torch.cat((angles, angles), dim=-1)
    # LongRoPE's attention factor multiplies both (1.0 for every other scaling).
    cos, sin = angles.cos() * scaling.attention_factor, angles.sin() * scaling.attention_factor
    return cos.to(torch.float32), sin.to(torch.float32)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Half-split rotation of the leading cos.shape[-1] dims of each head (all of them but
    for a partial rotary): the first half of those pairs with the second half, and the
    dims past them pass through unchanged."""
    dim = cos.shape[-1]
    x_rot, x_pass = x[..., :dim], x[..., dim:]
    half = dim // 2
    rotated = torch.cat((-x_rot[..., half:], x_rot[..., :half]), dim=-1)
    return torch.cat((x_rot * cos + rotated * sin, x_pass), dim=-1)


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[seq, heads * head_dim] -> [heads, seq, head_dim]."""
    seq = x.shape[0]
    return x.view(seq, n_heads, -1).transpose(0, 1)


def merge_heads(x: torch.Tensor) -> torch.Tensor:
    """[heads, seq, head_dim] -> [seq, heads * head_dim]."""
    return x.transpose(0, 1).reshape(x.shape[1], -1)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, start: int = 0,
              scale: float | None = None, window: int | None = None) -> torch.Tensor:
    """Causal attention, GQA or MHA. q: [Hq, Lq, D] at positions start..start+Lq-1;
    k, v: [Hkv, Lk, D] at positions 0..Lk-1. Each KV head serves Hq / Hkv query heads.
    Scores are scaled by `scale` (1/sqrt(D) unless given). With a sliding `window`, a
    query sees the `window` positions ending at its own (transformers' rule: q - k <
    window)."""
    group = q.shape[0] // k.shape[0]
    k = k.repeat_interleave(group, dim=0)
    v = v.repeat_interleave(group, dim=0)
    scores = q @ k.transpose(-1, -2)
    scores = scores / math.sqrt(q.shape[-1]) if scale is None else scores * scale
    q_pos = torch.arange(start, start + q.shape[1])[:, None]
    k_pos = torch.arange(k.shape[1])[None, :]
    hidden = k_pos > q_pos
    if window is not None:
        hidden |= q_pos - k_pos >= window
    scores = scores.masked_fill(hidden, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def silu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return F.silu(gate) * up


def gelu_mul(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """Gemma's gated FFN: GELU with the tanh approximation (transformers'
    gelu_pytorch_tanh) of the gate, times up."""
    return F.gelu(gate, approximate="tanh") * up


# --- a block and the model -----------------------------------------------------------

@dataclass
class KVCache:
    """Per layer, the rotated keys and the values seen so far: [Hkv, len, head_dim]."""

    k: list[torch.Tensor] = field(default_factory=list)
    v: list[torch.Tensor] = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.k[0].shape[1] if self.k else 0


def block(args: ModelArgs, w: LayerWeights, x: torch.Tensor, cos: torch.Tensor,
          sin: torch.Tensor, cache: KVCache, layer: int, start: int,
          capture: Capture = _no_capture) -> torch.Tensor:
    """One transformer block over x [seq, hidden] at positions start onwards; the
    layer's cache holds positions 0..start-1 and gains this block's keys and values."""
    def keep(op: str, t: torch.Tensor) -> torch.Tensor:
        capture(layer, op, t)
        return t

    h = keep("attn_norm", rms_norm(x, w.attn_norm, args.norm_eps))
    q = split_heads(keep("q", linear(h, w.wq, w.bq)), args.n_heads)
    k = split_heads(keep("k", linear(h, w.wk, w.bk)), args.n_kv_heads)
    v = split_heads(keep("v", linear(h, w.wv, w.bv)), args.n_kv_heads)
    if args.qk_norm:   # Qwen3: RMSNorm over each head's vector, before RoPE
        assert w.q_norm is not None and w.k_norm is not None
        q = keep("q_norm", rms_norm(q, w.q_norm, args.norm_eps))
        k = keep("k_norm", rms_norm(k, w.k_norm, args.norm_eps))
    q = keep("q_rope", apply_rope(q, cos, sin))
    k = keep("k_rope", apply_rope(k, cos, sin))
    if layer < len(cache.k):
        cache.k[layer] = torch.cat((cache.k[layer], k), dim=1)
        cache.v[layer] = torch.cat((cache.v[layer], v), dim=1)
    else:
        cache.k.append(k)
        cache.v.append(v)
    # 1/sqrt(head_dim) unless the config says otherwise (Gemma's query_pre_attn_scalar)
    scale = args.attn_scale if args.attn_scalar is not None else None
    a = keep("attn", merge_heads(attention(q, cache.k[layer], cache.v[layer], start, scale,
                                           args.window(layer))))
    o = keep("o", linear(a, w.wo, w.bo))
    if w.post_attn_norm is not None:    # Gemma 3: the sublayer's output normed before +
        o = keep("post_attn_norm", rms_norm(o, w.post_attn_norm, args.norm_eps))
    x = keep("attn_residual", x + o)
    h = keep("ffn_norm", rms_norm(x, w.ffn_norm, args.norm_eps))
    gate = keep("gate", linear(h, w.w_gate, w.b_gate))
    up = keep("up", linear(h, w.w_up, w.b_up))
    act = (keep("gelu_mul", gelu_mul(gate, up)) if args.activation == "gelu_tanh"
           else keep("silu_mul", silu_mul(gate, up)))
    down = keep("down", linear(act, w.w_down, w.b_down))
    if w.post_ffn_norm is not None:
        down = keep("post_ffn_norm", rms_norm(down, w.post_ffn_norm, args.norm_eps))
    return keep("ffn_residual", x + down)


class Reference:
    """The whole model: prefill, KV-cache decode, greedy generation, capture."""

    def __init__(self, args: ModelArgs, weights: Weights) -> None:
        self.args = args
        self.weights = weights

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, cache: KVCache,
                capture: Capture = _no_capture) -> torch.Tensor:
        """Logits [seq, vocab] for `tokens` [seq] following what `cache` holds."""
        args, w = self.args, self.weights
        start = cache.length
        positions = torch.arange(start, start + tokens.shape[0])
        if positions[-1] >= args.max_positions:
            raise ValueError(f"position {int(positions[-1])} is past the model's "
                             f"max_position_embeddings={args.max_positions}")
        first = {args.rope_of(i): i for i in reversed(range(args.n_layers))}
        tables = {key: rope_table(args, positions, i) for key, i in first.items()}
        x = embedding(tokens, w.embed)
        if args.embed_scale != 1.0:     # Gemma: the embedding times sqrt(hidden)
            x = x * args.embed_scale
        capture(-1, "embed", x)
        for i, lw in enumerate(w.layers):
            cos, sin = tables[args.rope_of(i)]
            x = block(args, lw, x, cos, sin, cache, i, start, capture)
        x = rms_norm(x, w.final_norm, args.norm_eps)
        capture(args.n_layers, "final_norm", x)
        logits = linear(x, w.lm_head)
        capture(args.n_layers, "logits", logits)
        return logits

    def prefill(self, tokens: torch.Tensor, capture: Capture = _no_capture
                ) -> tuple[torch.Tensor, KVCache]:
        cache = KVCache()
        return self.forward(tokens, cache, capture), cache

    def decode(self, token: int, cache: KVCache) -> torch.Tensor:
        """Logits [vocab] of one new token at position cache.length."""
        return self.forward(torch.tensor([token]), cache)[0]

    def generate(self, prompt: torch.Tensor, steps: int) -> tuple[list[int], torch.Tensor]:
        """Greedy tokens, and the logits [steps, vocab] each was chosen from.
        End-of-sequence does not stop it: gates compare a fixed number of steps.

        A pure function of the weights, the prompt and the steps, so a run computed before
        for the same ones (the same weight tensors, unmodified) is returned again: phase 0
        and the evaluator each need every prompt's run twice (the answers, and the gate's
        comparison with Hugging Face's). The progress still advances token by token."""
        key = (id(self.weights), _versions(self.weights), tuple(prompt.tolist()), steps)
        if _GREEDY.get("weights") is not self.weights:
            _GREEDY.clear()                     # the latest weights' runs only
            _GREEDY["weights"] = self.weights
        if key not in _GREEDY:
            _GREEDY[key] = self._generate(prompt, steps)
        else:
            for _ in range(steps):
                progress.advance("token")
        tokens, chosen_from = _GREEDY[key]
        return list(tokens), chosen_from.clone()

    def _generate(self, prompt: torch.Tensor, steps: int) -> tuple[list[int], torch.Tensor]:
        logits, cache = self.prefill(prompt)
        last = logits[-1]
        tokens, chosen_from = [], []
        for step in range(steps):
            chosen_from.append(last)
            tokens.append(int(last.argmax()))
            progress.advance("token")
            if step + 1 < steps:
                last = self.decode(tokens[-1], cache)
        return tokens, torch.stack(chosen_from)

    def capture(self, tokens: torch.Tensor) -> dict[str, torch.Tensor]:
        """The golden tensor of every (layer, op) for a prefill of `tokens`, named
        'L{layer:02d}.{op}' ('L-1.embed', 'L{n}.final_norm', 'L{n}.logits')."""
        out: dict[str, torch.Tensor] = {}

        def keep(layer: int, op: str, t: torch.Tensor) -> None:
            out[golden_name(layer, op)] = t.detach().clone().contiguous()

        self.prefill(tokens, keep)
        return out


#: Reference.generate's runs of the latest weights: "weights" -> them, and (their id, their
#: tensors' versions, prompt, steps) -> (tokens, logits)
_GREEDY: dict[Any, Any] = {}


def _versions(weights: Weights) -> tuple[int, ...]:
    """The in-place modification counters of every weight tensor: a run computed before a
    tensor changed is not reused after."""
    out = [t._version for t in (weights.embed, weights.final_norm, weights.lm_head)]
    for layer in weights.layers:
        out += [t._version for t in vars(layer).values() if isinstance(t, torch.Tensor)]
    return tuple(out)


def golden_name(layer: int, op: str) -> str:
    return f"L{layer:02d}.{op}" if layer >= 0 else f"L{layer}.{op}"
