"""Architecture adapters: from a Hugging Face state dict to the reference's weights.

Llama/SmolLM2, Qwen2.5, Qwen3, Gemma 3 and Phi-3 share Hugging Face's parameter
names; they differ in which tensors exist (QKV bias, per-head Q/K norm, a tied LM
head, Gemma's norms after each sublayer) and in how some are stored (Phi-3 fuses
Q, K, V into one projection and gate and up into another; Gemma's norms hold w in
x * (1 + w), so 1 is added here, once, and every later stage sees a plain RMSNorm
weight). An adapter says which, takes exactly those, and refuses a checkpoint that
has more or fewer: a weight the reference would silently ignore is a wrong oracle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from npu_deploy.models.config import ModelArgs
from npu_deploy.models.errors import BadConfig


@dataclass(frozen=True)
class LayerWeights:
    attn_norm: torch.Tensor                 # [hidden]
    wq: torch.Tensor                        # [q_dim, hidden]
    wk: torch.Tensor                        # [kv_dim, hidden]
    wv: torch.Tensor                        # [kv_dim, hidden]
    wo: torch.Tensor                        # [hidden, q_dim]
    ffn_norm: torch.Tensor                  # [hidden]
    w_gate: torch.Tensor                    # [ffn, hidden]
    w_up: torch.Tensor                      # [ffn, hidden]
    w_down: torch.Tensor                    # [hidden, ffn]
    bq: torch.Tensor | None = None          # Qwen2: [q_dim]
    bk: torch.Tensor | None = None
    bv: torch.Tensor | None = None
    bo: torch.Tensor | None = None          # Llama with attention_bias
    b_gate: torch.Tensor | None = None      # Llama with mlp_bias
    b_up: torch.Tensor | None = None
    b_down: torch.Tensor | None = None
    q_norm: torch.Tensor | None = None      # Qwen3, Gemma 3: [head_dim], shared by all heads
    k_norm: torch.Tensor | None = None
    post_attn_norm: torch.Tensor | None = None  # Gemma 3: the attention output's, before +
    post_ffn_norm: torch.Tensor | None = None   # Gemma 3: the FFN output's, before +


@dataclass(frozen=True)
class Weights:
    embed: torch.Tensor                     # [vocab, hidden]
    layers: tuple[LayerWeights, ...]
    final_norm: torch.Tensor                # [hidden]
    lm_head: torch.Tensor                   # [vocab, hidden]; the embedding itself when tied
    #: a 4-bit deployment's blocks, by the plans' names (`L{i}.q_proj`): what its decode
    #: kernels read; the tensors above are what they stand for (models.quantized_checkpoint)
    packed: Mapping[str, Any] | None = None


def layer_names(args: ModelArgs, i: int) -> dict[str, str]:
    """Our name -> the Hugging Face parameter name, for the tensors this model has."""
    p = f"model.layers.{i}."
    names = {
        "attn_norm": p + "input_layernorm.weight",
        **({"post_attn_norm": p + "post_attention_layernorm.weight",
            "ffn_norm": p + "pre_feedforward_layernorm.weight",
            "post_ffn_norm": p + "post_feedforward_layernorm.weight"}
           if args.sandwich_norms else {"ffn_norm": p + "post_attention_layernorm.weight"}),
        "wq": p + "self_attn.q_proj.weight",
        "wk": p + "self_attn.k_proj.weight",
        "wv": p + "self_attn.v_proj.weight",
        "wo": p + "self_attn.o_proj.weight",
        "w_gate": p + "mlp.gate_proj.weight",
        "w_up": p + "mlp.up_proj.weight",
        "w_down": p + "mlp.down_proj.weight",
    }
    if args.qkv_bias:
        names |= {"bq": p + "self_attn.q_proj.bias", "bk": p + "self_attn.k_proj.bias",
                  "bv": p + "self_attn.v_proj.bias"}
    if args.o_bias:
        names["bo"] = p + "self_attn.o_proj.bias"
    if args.mlp_bias:
        names |= {"b_gate": p + "mlp.gate_proj.bias", "b_up": p + "mlp.up_proj.bias",
                  "b_down": p + "mlp.down_proj.bias"}
    if args.qk_norm:
        names |= {"q_norm": p + "self_attn.q_norm.weight", "k_norm": p + "self_attn.k_norm.weight"}
    return names


def expected_shapes(args: ModelArgs) -> dict[str, tuple[int, ...]]:
    h, q, kv, f, hd = args.hidden, args.q_dim, args.kv_dim, args.ffn, args.head_dim
    return {"attn_norm": (h,), "ffn_norm": (h,), "post_attn_norm": (h,), "post_ffn_norm": (h,),
            "wq": (q, h), "wk": (kv, h), "wv": (kv, h),
            "wo": (h, q), "w_gate": (f, h), "w_up": (f, h), "w_down": (h, f), "bq": (q,),
            "bk": (kv,), "bv": (kv,), "bo": (h,), "b_gate": (f,), "b_up": (f,), "b_down": (h,),
            "q_norm": (hd,), "k_norm": (hd,)}


def weights_from_state_dict(args: ModelArgs, state: Mapping[str, torch.Tensor],
                            where: str = "the checkpoint") -> Weights:
    """Take every tensor the architecture uses, as FP32, and check nothing is left over."""
    if args.arch == "gemma3":
        state = _language_model(state)
    if args.arch == "phi3":
        state = _unfused(args, state, where)
    used: set[str] = set()

    def take(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        if name not in state:
            raise BadConfig(f"{where} has no tensor {name}, which the {args.arch} adapter "
                            "needs for this config")
        t = state[name]
        if tuple(t.shape) != shape:
            raise BadConfig(f"{where}: {name} has shape {tuple(t.shape)} but config.json "
                            f"implies {shape}")
        used.add(name)
        t = t.detach().to(torch.float32)
        # Gemma's RMSNorm scales by (1 + w), in FP32 as transformers' Gemma3RMSNorm does.
        return 1.0 + t if args.sandwich_norms and name.endswith("norm.weight") else t

    shapes = expected_shapes(args)
    layers = tuple(
        LayerWeights(**{ours: take(theirs, shapes[ours])
                        for ours, theirs in layer_names(args, i).items()})
        for i in range(args.n_layers))
    embed = take("model.embed_tokens.weight", (args.vocab, args.hidden))
    final_norm = take("model.norm.weight", (args.hidden,))
    if args.tie_embeddings:
        lm_head = embed
        used.add("lm_head.weight")    # HF exposes the tied tensor under both names
    else:
        lm_head = take("lm_head.weight", (args.vocab, args.hidden))
    left = sorted(n for n in set(state) - used if not n.endswith("rotary_emb.inv_freq"))
    if left:
        more = f" and {len(left) - 3} more" if len(left) > 3 else ""
        raise BadConfig(f"{where} has tensors the {args.arch} adapter does not use: "
                        f"{', '.join(left[:3])}{more}; the config does not describe this "
                        "checkpoint")
    return Weights(embed, layers, final_norm, lm_head)


#: Where Gemma 3's multimodal checkpoints keep the language model: transformers 5 saves
#: `model.language_model.*`, earlier versions (the Hub's 4B) `language_model.model.*`.
_GEMMA3_TEXT_PREFIXES = ("model.language_model.", "language_model.model.")
#: ... and its vision half, which a text deployment does not run.
_GEMMA3_VISION_PREFIXES = ("model.vision_tower.", "model.multi_modal_projector.",
                           "vision_tower.", "multi_modal_projector.")


def _language_model(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A multimodal Gemma 3 state dict's text model under the text model's names; the
    vision tower and projector are dropped by name, every other tensor kept (so one the
    adapter does not use is still refused)."""
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if name.startswith(_GEMMA3_VISION_PREFIXES):
            continue
        for prefix in _GEMMA3_TEXT_PREFIXES:
            if name.startswith(prefix):
                name = "model." + name[len(prefix):]
                break
        if name == "language_model.lm_head.weight":
            name = "lm_head.weight"
        out[name] = t
    return out


def _unfused(args: ModelArgs, state: Mapping[str, torch.Tensor],
             where: str) -> dict[str, torch.Tensor]:
    """Phi-3's fused projections split into the separate ones the reference uses:
    qkv_proj's rows are [q; k; v] and gate_up_proj's [gate; up], the order transformers'
    Phi3Attention slices and Phi3MLP chunks them in."""
    out = dict(state)
    splits = {"self_attn.qkv_proj.weight": (("self_attn.q_proj.weight", args.q_dim),
                                            ("self_attn.k_proj.weight", args.kv_dim),
                                            ("self_attn.v_proj.weight", args.kv_dim)),
              "mlp.gate_up_proj.weight": (("mlp.gate_proj.weight", args.ffn),
                                          ("mlp.up_proj.weight", args.ffn))}
    for i in range(args.n_layers):
        p = f"model.layers.{i}."
        for fused, parts in splits.items():
            if p + fused not in out:
                continue            # take() names whichever part is missing
            t = out.pop(p + fused)
            rows = sum(n for _, n in parts)
            if tuple(t.shape) != (rows, args.hidden):
                raise BadConfig(f"{where}: {p + fused} has shape {tuple(t.shape)} but "
                                f"config.json implies {(rows, args.hidden)}")
            for (name, _), piece in zip(parts, t.split([n for _, n in parts]), strict=True):
                out[p + name] = piece
    return out
