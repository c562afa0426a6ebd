"""What 4-bit weights cost, measured against the checkpoint they were made from.

A quantized deployment has two references. The FP32 model of its de-quantized weights is
the one it must match: every gate holds it to that one, as to any oracle. The FP32 model of
the source checkpoint (before quantization) is the second: the distance between the two is
what quantization itself costs, which no deployment can win back. Phase 0 records it beside
its verdict, never deciding it (the phase table's `lens_quant_*`), so a reader sees both: a
PASS that matches the de-quantized model, and how far that model is from the original.

Per layer: each block's output on the long canonical prompt (cosine and relative L2, the
two models run on the same tokens). On tokens: each canonical prompt's greedy run, the
leading tokens both models choose alike and whether the first answer token is the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from npu_deploy.events import progress
from npu_deploy.metrics.comparison import compare
from npu_deploy.models.adapters import Weights, weights_from_state_dict
from npu_deploy.models.files import read_safetensors
from npu_deploy.models.quantized_checkpoint import INFO_FILE

from .prompts import Prompt
from .reference import Reference, golden_name


@dataclass(frozen=True)
class LayerCost:
    layer: int
    cosine: float
    rel_l2: float


@dataclass(frozen=True)
class PromptCost:
    prompt: str
    tokens_agreed: int           # leading greedy tokens the two models choose alike
    steps: int
    first_token_same: bool
    source_text: str             # the source checkpoint's answer
    quantized_text: str          # the de-quantized model's


@dataclass(frozen=True)
class QuantizationCost:
    """The source checkpoint against its de-quantized weights."""

    base: str                    # what the source is, in the directory's words
    layers: list[LayerCost]
    prompts: list[PromptCost]
    weight_rel_rms: float        # the projections' rounding, pooled over every matrix

    def to_json(self) -> dict[str, Any]:
        return {"base": self.base, "weight_rel_rms": self.weight_rel_rms,
                "layers": [vars(c) for c in self.layers],
                "prompts": [vars(p) for p in self.prompts]}


def source_weights(loaded: Any) -> tuple[Weights, dict[str, Any]] | None:
    """The source checkpoint's weights of a quantized model (None for any other), read
    from the directory its `quantization.json` names, and that record."""
    info_path = Path(loaded.source.directory) / INFO_FILE
    if not info_path.is_file():
        return None
    info = json.loads(info_path.read_text())
    base = Path(info["base_directory"])
    args = replace(loaded.args, weights=None)
    return weights_from_state_dict(args, read_safetensors(base), str(base)), info


def quantization_cost(loaded: Any, prompts: list[Prompt], steps: int) -> QuantizationCost | None:
    """The cost of `loaded`'s 4-bit weights (None: not a quantized model)."""
    found = source_weights(loaded)
    if found is None:
        return None
    weights, info = found
    source, quantized = Reference(loaded.args, weights), Reference(loaded.args, loaded.weights)
    long = prompts[-1].token_ids(loaded.tokenizer)
    with torch.inference_mode():
        a, b = source.capture(long), quantized.capture(long)
    layers = []
    for i in range(loaded.args.n_layers):
        name = golden_name(i, "ffn_residual")
        c = compare(a[name], b[name])
        layers.append(LayerCost(i, c.cosine, c.rel_l2))
    costs = []
    for p in prompts:
        ids = p.token_ids(loaded.tokenizer)
        want, _ = source.generate(ids, steps)
        got, _ = quantized.generate(ids, steps)
        agreed = next((i for i, (x, y) in enumerate(zip(want, got, strict=True)) if x != y),
                      steps)
        costs.append(PromptCost(p.name, agreed, steps,
                                want[0] == got[0], loaded.tokenizer.decode(want),
                                loaded.tokenizer.decode(got)))
        progress.advance("prompt")
    errors = info.get("errors", {}).values()
    pooled = (sum(e["rel_rms"] ** 2 for e in errors) / max(1, len(errors))) ** 0.5
    return QuantizationCost(info["base"], layers, costs, pooled)


__all__ = ["LayerCost", "PromptCost", "QuantizationCost", "quantization_cost",
           "source_weights"]
