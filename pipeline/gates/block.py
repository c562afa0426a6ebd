"""Phase 2's gate: layer 0 alone on the backend against the oracle's golden tensors: cosine
over the whole output, and a per-position minimum that loosens with head_dim."""

from __future__ import annotations

import math
from typing import Any

from npu_deploy.events.phases import phase
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import Toolbox, block_metrics
from npu_deploy.pipeline.workspace import Workspace

from .common import _Gate, check, verdict


def position_cosine(head_dim: int) -> float:
    """Phase 2's per-position minimum. Each attention score sums head_dim products, so the
    error of a position grows with head_dim: the table's minimum at head_dim 64 (SmolLM2,
    Llama-3.2-1B), lower by its step per doubling, never stricter than at 64."""
    table = phase(2)
    at_64 = table.threshold("position_cosine")
    return min(at_64, at_64 - table.threshold("position_cosine_per_doubling")
               * math.log2(head_dim / 64))


def block_checks(ws: Workspace, recipe: Recipe, goldens: Any) -> list[dict[str, Any]]:
    return checks_of_block(block_metrics(ws, recipe, goldens), ws.loaded.args.head_dim)


def checks_of_block(metrics: dict[str, dict[str, float]], hd: int) -> list[dict[str, Any]]:
    """Phase 2's checks of layer 0's tensors against the oracle's (`block_comparison`)."""
    out = metrics["L0.ffn_residual"]
    subject = "L0 block output"
    table = phase(2)
    cosine = table.threshold("cosine")
    checks = [check(subject, "cosine", out["cosine"], cosine, ">="),
              check(subject, "cosine_pos_min", out["cosine_pos_min"], position_cosine(hd), ">="),
              check(subject, "rel_l2", out["rel_l2"], table.threshold("lens_rel_l2"), "<=",
                    gating=False),
              check(subject, "max_abs", out["max_abs"], table.threshold("lens_max_abs"), "<=",
                    gating=False),
              check(subject, "pearson", out["pearson"], cosine, ">=", gating=False)]
    checks += [check(name, "cosine", m["cosine"], cosine, ">=", gating=False)
               for name, m in metrics.items() if name != "L0.ffn_residual"]
    return checks


class BlockGate(_Gate):
    phase = 2

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        return verdict(phase(self.phase).gate, block_checks(ws, ws.recipe(), tb.goldens()))
