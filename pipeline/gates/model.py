"""Phase 3's gate: the whole model against the FP32 oracle, by the token-set check on every
canonical prompt (npu_deploy.metrics.tokens' rule on the stored greedy runs); the per-layer
cosines are recorded as a lens."""

from __future__ import annotations

from typing import Any

from npu_deploy.events.phases import phase
from npu_deploy.pipeline.check_reuse import gate_runs
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import Toolbox, layer_lens
from npu_deploy.pipeline.workspace import Workspace

from .common import _Gate, check, holds, verdict


def model_checks(ws: Workspace, recipe: Recipe, answers: dict[str, Any]
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    runs = gate_runs(ws, recipe, answers)      # reused with proof in a run's own gate
    token_set = f"top{int(phase(3).threshold('top_k'))}_token_set"
    checks = []
    for r in runs:
        checks.append(holds(r["prompt"], token_set, r["passed"]))
        checks.append(check(r["prompt"], "greedy_tokens_agreed", r["agreed"], r["steps"], ">=",
                            gating=False))
    return checks, runs


class ModelGate(_Gate):
    phase = 3

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        recipe = ws.recipe()
        checks, _ = model_checks(ws, recipe, tb.answers())
        lens = layer_lens(ws, recipe, tb.goldens())
        lens_cosine = phase(self.phase).threshold("lens_layer_cosine")
        checks += [check(name, "layer_cosine", value, lens_cosine, ">=", gating=False)
                   for name, value in lens.items()]
        return verdict(phase(self.phase).gate, checks)
