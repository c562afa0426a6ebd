"""Architecture adapters: from a Hugging Face state dict to the reference's weights.

Llama/SmolLM2, Qwen2.5 and Qwen3 share Hugging Face's parameter names; they
differ in which tensors exist (QKV bias, per-head Q/K norm, a tied LM head).
An adapter says which, takes exactly those, and refuses a checkpoint that has
more or fewer: a weight the reference would silently ignore is a wrong oracle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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
    q_norm: torch.Tensor | None = None      # Qwen3: [head_dim], shared by all heads
    k_norm: torch.Tensor | None = None


@dataclass(frozen=True)
class Weights:
    embed: torch.Tensor                     # [vocab, hidden]
    layers: tuple[LayerWeights, ...]
    final_norm: torch.Tensor                # [hidden]
    lm_head: torch.Tensor                   # [vocab, hidden]; the embedding itself when tied


def layer_names(args: ModelArgs, i: int) -> dict[str, str]:
    """Our name -> the Hugging Face parameter name, for the tensors this model has."""
    p = f"model.layers.{i}."
    names = {
        "attn_norm": p + "input_layernorm.weight",
        "wq": p + "self_attn.q_proj.weight",
        "wk": p + "self_attn.k_proj.weight",
        "wv": p + "self_attn.v_proj.weight",
        "wo": p + "self_attn.o_proj.weight",
        "ffn_norm": p + "post_attention_layernorm.weight",
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
    return {"attn_norm": (h,), "ffn_norm": (h,), "wq": (q, h), "wk": (kv, h), "wv": (kv, h),
            "wo": (h, q), "w_gate": (f, h), "w_up": (f, h), "w_down": (h, f), "bq": (q,),
            "bk": (kv,), "bv": (kv,), "bo": (h,), "b_gate": (f,), "b_up": (f,), "b_down": (h,),
            "q_norm": (hd,), "k_norm": (hd,)}


def weights_from_state_dict(args: ModelArgs, state: Mapping[str, torch.Tensor],
                            where: str = "the checkpoint") -> Weights:
    """Take every tensor the architecture uses, as FP32, and check nothing is left over."""
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
        return t.detach().to(torch.float32)

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
