"""ModelArgs: the shape and features of a decoder-only model, read explicitly from config.json.

Every field that changes the forward pass is read by name, and every field we
do not understand is refused: a silent default is how an oracle ends up
wrong in a way no gate notices. The architecture check lives here too.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from npu_deploy.models.errors import BadConfig, ModelCorrupt, UnsupportedModel
from npu_deploy.models.quantization import QuantizedWeights

#: model_type -> what the adapter is called in messages.
SUPPORTED = {
    "llama": "Llama / SmolLM2",
    "qwen2": "Qwen2 / Qwen2.5 (QKV bias)",
    "qwen3": "Qwen3 (per-head QK RMSNorm)",
}

SUPPORTED_ROPE = ("default", "linear", "llama3")

#: Fields that do not change the FP32 forward pass of a single sequence.
_INERT = {
    "_name_or_path", "_model_name_or_path", "architectures", "attention_dropout",
    "chunk_size_feed_forward", "dtype", "torch_dtype", "id2label", "label2id",
    "initializer_range", "output_attentions", "output_hidden_states", "problem_type",
    "return_dict", "transformers_version", "use_cache", "bos_token_id", "eos_token_id",
    "pad_token_id", "unk_token_id", "tokenizer_class", "is_llama_config",
    "transformers.js_config", "max_window_layers", "tie_encoder_decoder", "prefix",
    "task_specific_params", "finetuning_task", "tf_legacy_loss", "use_bfloat16",
    "torchscript", "pruned_heads", "add_cross_attention", "cross_attention_hidden_size",
    "is_decoder", "decoder_start_token_id", "sep_token_id", "model_name",
}

#: Fields that name a feature no adapter covers: (field, is it in use?, feature name).
_REFUSED = [
    ("num_experts", lambda v: bool(v), "mixture-of-experts"),
    ("num_local_experts", lambda v: bool(v), "mixture-of-experts"),
    ("n_routed_experts", lambda v: bool(v), "mixture-of-experts"),
    ("num_experts_per_tok", lambda v: bool(v), "mixture-of-experts"),
    ("moe_intermediate_size", lambda v: bool(v), "mixture-of-experts"),
    ("kv_lora_rank", lambda v: v is not None, "multi-head latent attention"),
    ("q_lora_rank", lambda v: v is not None, "multi-head latent attention"),
    ("is_encoder_decoder", lambda v: bool(v), "encoder-decoder"),
    ("use_sliding_window", lambda v: bool(v), "sliding-window attention"),
    ("rope_interleaved", lambda v: bool(v), "interleaved RoPE"),
    ("quantization_config", lambda v: v is not None,
     "a quantized checkpoint (give a bf16 or fp32 one, or a GGUF file)"),
]

#: Fields read below. Anything else in config.json is refused by name.
_READ = {
    "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "rms_norm_eps",
    "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor",
    "tie_word_embeddings", "attention_bias", "mlp_bias", "hidden_act",
    "max_position_embeddings", "sliding_window", "layer_types", "pretraining_tp",
}


@dataclass(frozen=True)
class RopeScaling:
    """How inverse frequencies are rescaled for long context (HF's `rope_type`)."""

    kind: str = "default"                       # default | linear | llama3
    factor: float = 1.0
    low_freq_factor: float = 1.0                # llama3 only
    high_freq_factor: float = 1.0               # llama3 only
    original_max_position: int = 0              # llama3 only


@dataclass(frozen=True)
class ModelArgs:
    """Everything the FP32 reference needs to know about a model."""

    arch: str                       # a key of SUPPORTED
    n_layers: int
    hidden: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    norm_eps: float
    rope_theta: float
    rope_scaling: RopeScaling = field(default_factory=RopeScaling)
    tie_embeddings: bool = False
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    max_positions: int = 2048
    #: a quantized deployment's weights (a catalog entry's), or None: every weight bf16
    weights: QuantizedWeights | None = None

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def group(self) -> int:
        """Query heads per KV head: 1 is MHA, more is GQA."""
        return self.n_heads // self.n_kv_heads

    def n_params(self) -> int:
        h, f = self.hidden, self.ffn
        per_layer = (h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h + 3 * h * f + 2 * h)
        per_layer += (self.q_dim + 2 * self.kv_dim) if self.qkv_bias else 0
        per_layer += 2 * self.head_dim if self.qk_norm else 0
        head = 0 if self.tie_embeddings else self.vocab * h
        return self.n_layers * per_layer + self.vocab * h + head + h

    def features(self) -> list[str]:
        out = ["GQA" if self.group > 1 else "MHA"]
        if self.qkv_bias:
            out.append("QKV bias")
        if self.qk_norm:
            out.append("QK norm")
        if self.q_dim != self.hidden:
            out.append(f"q_dim {self.q_dim}")
        if self.tie_embeddings:
            out.append("tied embeddings")
        if self.rope_scaling.kind != "default":
            out.append(f"rope {self.rope_scaling.kind}")
        return out

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def read_config(path: Path) -> dict[str, Any]:
    """config.json as a dict, with errors that name the file."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise BadConfig(f"{path} does not exist: a model directory needs config.json, "
                        "*.safetensors and tokenizer files") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ModelCorrupt(f"{path} is not valid JSON ({e}); re-download or re-convert "
                           "the model") from None
    if not isinstance(raw, dict):
        raise ModelCorrupt(f"{path} holds a JSON {type(raw).__name__}, not an object")
    return raw


def model_args(config: dict[str, Any], where: str = "config.json") -> ModelArgs:
    """Check the architecture and read every field of `config` that matters."""
    model_type = config.get("model_type")
    for name, in_use, feature in _REFUSED:
        if name in config and in_use(config[name]):
            raise UnsupportedModel(f"{where}: {feature} ({name}={config[name]!r}) is not "
                                   f"supported; supported: {_supported()}")
    if model_type not in SUPPORTED:
        raise UnsupportedModel(f"{where}: architecture {model_type!r} is not supported; "
                               f"supported: {_supported()}")
    unknown = sorted(set(config) - _READ - _INERT - {n for n, _, _ in _REFUSED})
    if unknown:
        raise BadConfig(f"{where}: unknown field{'s' if len(unknown) > 1 else ''} "
                        f"{', '.join(unknown)} for {model_type}; npu-deploy reads every field "
                        "that can change the forward pass and will not guess what these do")

    def need(name: str, kind: type = int) -> Any:
        if name not in config or config[name] is None:
            raise BadConfig(f"{where}: missing {name}")
        value = config[name]
        if kind is int and (isinstance(value, bool) or not isinstance(value, int) or value <= 0):
            raise BadConfig(f"{where}: {name} must be a positive integer, got {value!r}")
        if kind is float and (isinstance(value, bool) or not isinstance(value, int | float)
                              or not math.isfinite(value) or value <= 0):
            raise BadConfig(f"{where}: {name} must be a positive number, got {value!r}")
        return value

    def flag(name: str, default: bool) -> bool:
        value = config.get(name, default)
        if not isinstance(value, bool):
            raise BadConfig(f"{where}: {name} must be true or false, got {value!r}")
        return value

    hidden, n_heads = need("hidden_size"), need("num_attention_heads")
    n_kv = config.get("num_key_value_heads") or n_heads
    if not isinstance(n_kv, int) or n_kv <= 0:
        raise BadConfig(f"{where}: num_key_value_heads must be a positive integer, got {n_kv!r}")
    if n_heads % n_kv:
        raise BadConfig(f"{where}: num_attention_heads={n_heads} is not a multiple of "
                        f"num_key_value_heads={n_kv}")
    head_dim = config.get("head_dim")
    if head_dim is None and model_type == "qwen3":
        # transformers' Qwen3Config would fill in 128 whatever the hidden size: say so.
        raise BadConfig(f"{where}: missing head_dim (transformers would assume 128 for qwen3); "
                        "add it to config.json")
    if head_dim is None:
        if hidden % n_heads:
            raise BadConfig(f"{where}: hidden_size={hidden} is not divisible by "
                            f"num_attention_heads={n_heads} and no head_dim is given")
        head_dim = hidden // n_heads
    elif not isinstance(head_dim, int) or head_dim <= 0 or head_dim % 2:
        raise BadConfig(f"{where}: head_dim must be a positive even integer, got {head_dim!r}")
    if config.get("hidden_act", "silu") != "silu":
        raise UnsupportedModel(f"{where}: hidden_act={config['hidden_act']!r} is not supported; "
                               "supported: silu (SiLU-gated FFNs)")
    if config.get("pretraining_tp", 1) != 1:
        raise UnsupportedModel(f"{where}: pretraining_tp={config['pretraining_tp']} (sliced "
                               "projections) is not supported; supported: 1")
    if model_type == "llama" and config.get("sliding_window") is not None:
        raise UnsupportedModel(f"{where}: sliding-window attention (sliding_window="
                               f"{config['sliding_window']}) is not supported; supported: full "
                               "causal attention")
    layer_types = config.get("layer_types")
    if layer_types is not None and any(t != "full_attention" for t in layer_types):
        kinds = sorted({t for t in layer_types if t != "full_attention"})
        raise UnsupportedModel(f"{where}: layer types {', '.join(kinds)} (sliding-window "
                               "attention) are not supported; supported: full_attention")
    theta, scaling = _rope(config, where)
    qkv_bias = model_type == "qwen2" or flag("attention_bias", False)
    return ModelArgs(
        arch=model_type,
        n_layers=need("num_hidden_layers"),
        hidden=hidden,
        n_heads=n_heads,
        n_kv_heads=n_kv,
        head_dim=head_dim,
        ffn=need("intermediate_size"),
        vocab=need("vocab_size"),
        norm_eps=float(need("rms_norm_eps", float)),
        rope_theta=theta,
        rope_scaling=scaling,
        tie_embeddings=flag("tie_word_embeddings", False),
        qkv_bias=qkv_bias,
        # Llama's attention_bias covers the O projection too; Qwen2 biases only Q, K, V.
        o_bias=model_type != "qwen2" and flag("attention_bias", False),
        mlp_bias=flag("mlp_bias", False),
        qk_norm=model_type == "qwen3",
        max_positions=need("max_position_embeddings"),
    )


def _rope(config: dict[str, Any], where: str) -> tuple[float, RopeScaling]:
    """(theta, scaling) from either `rope_parameters` (transformers 5) or the older
    `rope_theta` + `rope_scaling` pair."""
    params = dict(config.get("rope_parameters") or {})
    if config.get("rope_scaling"):
        params = {**config["rope_scaling"], **params}
    theta = params.get("rope_theta", config.get("rope_theta"))
    if theta is None:
        raise BadConfig(f"{where}: missing rope_theta (in rope_parameters or at the top level)")
    if isinstance(theta, bool) or not isinstance(theta, int | float) or theta <= 0:
        raise BadConfig(f"{where}: rope_theta must be a positive number, got {theta!r}")
    partial = params.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
    if partial != 1.0:
        raise UnsupportedModel(f"{where}: partial rotary embeddings (partial_rotary_factor="
                               f"{partial}) are not supported; supported: 1.0")
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in SUPPORTED_ROPE:
        raise UnsupportedModel(f"{where}: rope scaling {kind!r} is not supported; supported: "
                               f"{', '.join(SUPPORTED_ROPE)}")
    known = {"rope_theta", "rope_type", "type", "factor", "low_freq_factor", "high_freq_factor",
             "original_max_position_embeddings", "partial_rotary_factor"}
    extra = sorted(set(params) - known)
    if extra:
        raise BadConfig(f"{where}: unknown rope field{'s' if len(extra) > 1 else ''} "
                        f"{', '.join(extra)}")
    if kind == "default":
        return float(theta), RopeScaling()
    factor = params.get("factor")
    if not isinstance(factor, int | float) or factor <= 0:
        raise BadConfig(f"{where}: rope scaling {kind!r} needs a positive factor, got {factor!r}")
    if kind == "linear":
        return float(theta), RopeScaling("linear", float(factor))
    try:
        return float(theta), RopeScaling(
            "llama3", float(factor), float(params["low_freq_factor"]),
            float(params["high_freq_factor"]), int(params["original_max_position_embeddings"]))
    except KeyError as e:
        raise BadConfig(f"{where}: llama3 rope scaling needs {e.args[0]}") from None


def _supported() -> str:
    return "; ".join(f"{k} ({v})" for k, v in SUPPORTED.items())
