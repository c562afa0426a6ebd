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
    "gemma3_text": "Gemma 3 text (sandwich norms, QK norm, GELU-tanh, sliding/global layers)",
    "gemma3": "Gemma 3 (its text_config; the vision tower is not deployed)",
    "phi3": "Phi-3 / Phi-4-mini (fused QKV and gate-up, partial rotary, LongRoPE)",
}

SUPPORTED_ROPE = ("default", "linear", "llama3", "longrope")

#: Gemma 3's names for its two layer kinds (transformers' `layer_types`).
SLIDING, FULL = "sliding_attention", "full_attention"

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
    "resid_pdrop", "embd_pdrop", "auto_map", "_sliding_window_pattern",
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
    ("attn_logit_softcapping", lambda v: v is not None, "attention logit soft-capping"),
    ("final_logit_softcapping", lambda v: v is not None, "final logit soft-capping"),
    ("use_bidirectional_attention", lambda v: bool(v), "bidirectional attention"),
    ("lm_head_bias", lambda v: bool(v), "an LM-head bias"),
    # Phi-4-mini's config.json carries these two for its remote code at 1; transformers'
    # Phi3 (the implementation the oracle is checked against) never reads them.
    ("interpolate_factor", lambda v: v != 1, "interpolate_factor other than 1"),
    ("full_attn_mod", lambda v: v != 1, "full_attn_mod other than 1"),
]

#: Fields read below. Anything else in config.json is refused by name.
_READ = {
    "model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "intermediate_size", "vocab_size", "rms_norm_eps",
    "rope_theta", "rope_scaling", "rope_parameters", "partial_rotary_factor",
    "tie_word_embeddings", "attention_bias", "mlp_bias", "hidden_act",
    "max_position_embeddings", "sliding_window", "layer_types", "pretraining_tp",
    "hidden_activation", "query_pre_attn_scalar", "rope_local_base_freq",
    "sliding_window_pattern", "original_max_position_embeddings",
}


@dataclass(frozen=True)
class RopeScaling:
    """How inverse frequencies are rescaled for long context (HF's `rope_type`)."""

    kind: str = "default"                       # default | linear | llama3 | longrope
    factor: float = 1.0
    low_freq_factor: float = 1.0                # llama3 only
    high_freq_factor: float = 1.0               # llama3 only
    original_max_position: int = 0              # llama3 and longrope
    short_factor: tuple[float, ...] = ()        # longrope: per frequency, up to the original
    long_factor: tuple[float, ...] = ()         # longrope: past original_max_position
    attention_factor: float = 1.0               # longrope: cos and sin are multiplied by it


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
    activation: str = "silu"                # silu | gelu_tanh: the gated FFN's activation
    sandwich_norms: bool = False            # Gemma 3: each sublayer's output normed before +
    attn_scalar: float | None = None        # softmax scale 1/sqrt(this); None: head_dim
    embed_scale: float = 1.0                # Gemma: the embedding is multiplied by sqrt(hidden)
    sliding_window: int | None = None       # keys within this many positions, on sliding layers
    layer_types: tuple[str, ...] = ()       # per layer SLIDING or FULL; () is all FULL
    local_rope_theta: float | None = None   # sliding layers' theta (Gemma 3), default rope
    rotary_dim: int | None = None           # dims each head rotates (partial rotary); None: all
    #: a quantized deployment's weights (a catalog entry's), or None: every weight bf16
    weights: QuantizedWeights | None = None

    @property
    def q_dim(self) -> int:
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.n_kv_heads * self.head_dim

    @property
    def rope_dim(self) -> int:
        """The leading dims of each head that RoPE rotates; the rest pass through."""
        return self.rotary_dim or self.head_dim

    @property
    def attn_scale(self) -> float:
        """The softmax scale: 1/sqrt(query_pre_attn_scalar) for Gemma, 1/sqrt(head_dim) else."""
        return float((self.attn_scalar or self.head_dim) ** -0.5)

    def window(self, layer: int) -> int | None:
        """The sliding window of `layer`'s attention, None when it attends to all before."""
        if self.layer_types and self.layer_types[layer] == SLIDING:
            return self.sliding_window
        return None

    def rope_of(self, layer: int) -> tuple[float, RopeScaling]:
        """(theta, scaling) of `layer`'s RoPE: Gemma 3's sliding layers use their own theta
        without scaling, every other layer the model's."""
        if self.local_rope_theta is not None and self.window(layer) is not None:
            return self.local_rope_theta, RopeScaling()
        return self.rope_theta, self.rope_scaling

    @property
    def group(self) -> int:
        """Query heads per KV head: 1 is MHA, more is GQA."""
        return self.n_heads // self.n_kv_heads

    def n_params(self) -> int:
        h, f = self.hidden, self.ffn
        per_layer = (h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h + 3 * h * f + 2 * h)
        per_layer += (self.q_dim + 2 * self.kv_dim) if self.qkv_bias else 0
        per_layer += 2 * self.head_dim if self.qk_norm else 0
        per_layer += 2 * h if self.sandwich_norms else 0
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
        if self.sandwich_norms:
            out.append("sandwich norms")
        if self.activation != "silu":
            out.append(self.activation.replace("_", "-"))
        if self.sliding_window is not None:
            local = sum(t == SLIDING for t in self.layer_types)
            out.append(f"window {self.sliding_window} on {local}/{self.n_layers} layers")
        if self.local_rope_theta is not None:
            out.append(f"local rope theta {self.local_rope_theta:g}")
        if self.rope_dim != self.head_dim:
            out.append(f"partial rotary {self.rope_dim}/{self.head_dim}")
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
    if config.get("model_type") == "gemma3":
        config = _gemma3_text_config(config, where)
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
    activation = _activation(config, model_type, where)
    if config.get("pretraining_tp", 1) != 1:
        raise UnsupportedModel(f"{where}: pretraining_tp={config['pretraining_tp']} (sliced "
                               "projections) is not supported; supported: 1")
    n_layers, max_positions = need("num_hidden_layers"), need("max_position_embeddings")
    window, layer_types = _attention_layers(config, model_type, n_layers, max_positions, where)
    gemma = model_type in ("gemma3", "gemma3_text")
    if gemma:
        theta, scaling, local_theta = _gemma_rope(config, where)
    else:
        theta, scaling = _rope(config, where)
        local_theta = None
    rotary_dim = _rotary_dim(config, model_type, head_dim, scaling, where)
    qkv_bias = model_type == "qwen2" or flag("attention_bias", False)
    return ModelArgs(
        arch=model_type,
        n_layers=n_layers,
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
        qk_norm=model_type == "qwen3" or gemma,
        max_positions=max_positions,
        activation=activation,
        sandwich_norms=gemma,
        attn_scalar=float(need("query_pre_attn_scalar", float)) if gemma else None,
        # transformers multiplies by sqrt(hidden) cast to the weights' dtype: in FP32 (the
        # oracle's and the phase-0 gate's precision) that is sqrt(hidden) itself.
        embed_scale=math.sqrt(hidden) if gemma else 1.0,
        sliding_window=window,
        layer_types=layer_types,
        local_rope_theta=local_theta,
        rotary_dim=rotary_dim,
    )


def _activation(config: dict[str, Any], model_type: str, where: str) -> str:
    """The FFN gate's activation: SiLU, or GELU with the tanh approximation (Gemma's
    `hidden_activation`, the field transformers' Gemma 3 reads; the others' `hidden_act`)."""
    name = "hidden_activation" if model_type in ("gemma3", "gemma3_text") else "hidden_act"
    value = config.get(name, "silu")
    known = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}
    if value not in known:
        raise UnsupportedModel(f"{where}: {name}={value!r} is not supported; supported: "
                               "silu (SiLU-gated FFNs), gelu_pytorch_tanh (GELU-tanh-gated)")
    return known[value]


def _attention_layers(config: dict[str, Any], model_type: str, n_layers: int,
                      max_positions: int, where: str) -> tuple[int | None, tuple[str, ...]]:
    """(sliding window, per-layer kinds). Gemma 3 alternates sliding and full layers (its
    `layer_types`, else every `sliding_window_pattern`-th layer full, 6 as transformers
    assumes); Phi-3 windows every layer when its window can bind at all."""
    window = config.get("sliding_window")
    layer_types = config.get("layer_types")
    if model_type in ("gemma3", "gemma3_text"):
        if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
            raise BadConfig(f"{where}: sliding_window must be a positive integer, got "
                            f"{window!r}")
        if layer_types is None:
            pattern = config.get("sliding_window_pattern", 6)
            layer_types = [SLIDING if (i + 1) % pattern else FULL for i in range(n_layers)]
        if len(layer_types) != n_layers or set(layer_types) - {SLIDING, FULL}:
            raise BadConfig(f"{where}: layer_types must list {n_layers} of {SLIDING!r} or "
                            f"{FULL!r}, got {layer_types!r}")
        return window, tuple(layer_types)
    if model_type == "phi3" and window is not None:
        if window >= max_positions:     # no position is ever that far back: no window
            return None, ()
        return window, (SLIDING,) * n_layers
    if model_type == "llama" and window is not None:
        raise UnsupportedModel(f"{where}: sliding-window attention (sliding_window="
                               f"{window}) is not supported; supported: full causal attention")
    if layer_types is not None and any(t != FULL for t in layer_types):
        kinds = sorted({t for t in layer_types if t != FULL})
        raise UnsupportedModel(f"{where}: layer types {', '.join(kinds)} (sliding-window "
                               f"attention) are not supported for {model_type}; supported: "
                               f"{FULL} (and Gemma 3's {SLIDING})")
    return None, ()


def _gemma_rope(config: dict[str, Any], where: str) -> tuple[float, RopeScaling, float]:
    """(global theta, global scaling, local theta) of Gemma 3: transformers 5 writes one
    `rope_parameters` entry per layer kind; older configs have `rope_theta`, `rope_scaling`
    and `rope_local_base_freq` at the top level."""
    params = config.get("rope_parameters") or {}
    if FULL in params:
        extra = sorted(set(params) - {FULL, SLIDING})
        if extra:
            raise BadConfig(f"{where}: unknown rope_parameters entries {', '.join(extra)}")
        theta, scaling = _rope({"rope_parameters": params[FULL]}, where)
        local, local_scaling = _rope({"rope_parameters": params.get(SLIDING) or {}}, where)
    else:
        theta, scaling = _rope(config, where)
        local_theta = config.get("rope_local_base_freq")
        local, local_scaling = _rope({"rope_theta": local_theta}, where)
    if local_scaling.kind != "default":
        raise UnsupportedModel(f"{where}: rope scaling {local_scaling.kind!r} on the sliding "
                               "layers is not supported; supported: default")
    return theta, scaling, local


def _rotary_dim(config: dict[str, Any], model_type: str, head_dim: int,
                scaling: RopeScaling, where: str) -> int | None:
    """How many leading dims of each head RoPE rotates (Phi's partial_rotary_factor, as
    transformers rounds it: int(head_dim * factor)); None when all of them."""
    params = config.get("rope_parameters") or {}
    factor = params.get("partial_rotary_factor", config.get("partial_rotary_factor", 1.0))
    if factor == 1.0:
        dim = head_dim
    elif model_type != "phi3":
        raise UnsupportedModel(f"{where}: partial rotary embeddings (partial_rotary_factor="
                               f"{factor}) are not supported for {model_type}; supported: 1.0 "
                               "(phi3: any)")
    elif not isinstance(factor, int | float) or not 0 < factor < 1:
        raise BadConfig(f"{where}: partial_rotary_factor must be in (0, 1], got {factor!r}")
    else:
        dim = int(head_dim * factor)
    if dim % 2:
        raise BadConfig(f"{where}: partial_rotary_factor={factor} rotates {dim} dims of "
                        f"{head_dim}, an odd number; RoPE rotates pairs")
    if scaling.kind == "longrope":
        for name, table in (("short_factor", scaling.short_factor),
                            ("long_factor", scaling.long_factor)):
            if len(table) != dim // 2:
                raise BadConfig(f"{where}: longrope {name} has {len(table)} entries; the "
                                f"{dim} rotated dims need {dim // 2}")
    return None if dim == head_dim else dim


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
    kind = params.get("rope_type", params.get("type", "default"))
    if kind not in SUPPORTED_ROPE:
        raise UnsupportedModel(f"{where}: rope scaling {kind!r} is not supported; supported: "
                               f"{', '.join(SUPPORTED_ROPE)}")
    known = {"rope_theta", "rope_type", "type", "factor", "low_freq_factor", "high_freq_factor",
             "original_max_position_embeddings", "partial_rotary_factor", "short_factor",
             "long_factor", "attention_factor"}
    extra = sorted(set(params) - known)
    if extra:
        raise BadConfig(f"{where}: unknown rope field{'s' if len(extra) > 1 else ''} "
                        f"{', '.join(extra)}")
    if kind == "default":
        return float(theta), RopeScaling()
    if kind == "longrope":
        return float(theta), _longrope(params, config, where)
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


def _longrope(params: dict[str, Any], config: dict[str, Any], where: str) -> RopeScaling:
    """LongRoPE as transformers' `_compute_longrope_parameters` reads it: per-frequency
    divisors (short up to original_max_position_embeddings, long past it), and cos and sin
    multiplied by sqrt(1 + ln(s) / ln(original)), s = max_position / original unless a factor
    is given. Upstream measured that leaving that multiplier out fails 4 of 8 prompts
    (Xilinx/mlir-air programming_examples/llms/phi4_mini_q4nx/phi4_mini_q4nx_weights.py,
    `longrope_attention_scaling`, e972f29)."""
    original = params.get("original_max_position_embeddings",
                          config.get("original_max_position_embeddings"))
    if not isinstance(original, int) or isinstance(original, bool) or original <= 1:
        raise BadConfig(f"{where}: longrope needs original_max_position_embeddings > 1, got "
                        f"{original!r}")
    tables = {}
    for name in ("short_factor", "long_factor"):
        table = params.get(name)
        if not isinstance(table, list) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) and v > 0 for v in table):
            raise BadConfig(f"{where}: longrope needs {name}, a list of positive numbers")
        tables[name] = tuple(float(v) for v in table)
    factor = params.get("factor") or config.get("max_position_embeddings", original) / original
    attention = params.get("attention_factor")
    if attention is None:
        attention = 1.0 if factor <= 1.0 else math.sqrt(1 + math.log(factor) / math.log(original))
    return RopeScaling("longrope", float(factor), original_max_position=original,
                       short_factor=tables["short_factor"], long_factor=tables["long_factor"],
                       attention_factor=float(attention))


def _gemma3_text_config(config: dict[str, Any], where: str) -> dict[str, Any]:
    """The text model of a multimodal Gemma 3 config (the 4B's config.json): its
    `text_config`, with every field it leaves out filled by transformers' own
    Gemma3TextConfig defaults (what Hugging Face's model, the oracle's check, runs), and
    model_type "gemma3" kept so the adapter reads the language model's tensors."""
    text = config.get("text_config")
    if not isinstance(text, dict):
        raise BadConfig(f"{where}: a gemma3 config needs text_config, the text model's config")
    from transformers import Gemma3TextConfig

    full = Gemma3TextConfig(**text).to_dict()
    for name in ("tie_word_embeddings", "torch_dtype", "dtype"):
        if name in config and name not in text:
            full[name] = config[name]
    return {k: v for k, v in full.items() if k not in _INERT} | {"model_type": "gemma3"}


def _supported() -> str:
    return "; ".join(f"{k} ({v})" for k, v in SUPPORTED.items())
