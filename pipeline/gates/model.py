"""Phase 3's gate: the whole model against the FP32 oracle, on every canonical prompt, by
two rules (the phase table's row, events/phases.py, and docs/design.md#phase-3-full-model):

* the token-set check (npu_deploy.metrics.tokens' rule on the stored greedy runs): at the
  first divergence each side's token is among the other's top 5;
* the bf16 bar (oracle/bf16.py, recorded by phase 0): the deployment keeps, summed over the
  canonical prompts, at least as many of the oracle's leading greedy tokens as Hugging
  Face's own bf16 run of the model keeps, and on every prompt where that bf16 run answers
  with the oracle's first token, the deployment does too.

The per-layer cosines are recorded as a lens. Phases 4, 5 and 6 re-use `model_checks`.
"""

from __future__ import annotations

from typing import Any

from npu_deploy.events.phases import phase
from npu_deploy.oracle.bf16 import Bf16Run, against_bar
from npu_deploy.pipeline.check_reuse import gate_runs
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import Toolbox, layer_lens, stored_bf16
from npu_deploy.pipeline.workspace import Workspace

from .common import _Gate, check, holds, verdict

#: The subject of the summed check: every canonical prompt together.
ALL_PROMPTS = "canonical prompts"
#: The metrics of the bf16 bar's checks.
SUMMED = "greedy_tokens_agreed_vs_bf16"
FIRST_TOKEN = "first_token_vs_bf16"


def model_checks(ws: Workspace, recipe: Recipe, answers: dict[str, Any],
                 bf16: dict[str, Bf16Run] | None = None
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The phase-3 checks of `recipe` deployed, against the oracle's greedy runs
    (`answers`) and the bf16 reference (`bf16`; by default the one the run's phase 0
    recorded, `stored_bf16`, which a run recorded before then does not have), and the runs
    they were computed from."""
    if bf16 is None:
        bf16 = stored_bf16(ws)
    runs = gate_runs(ws, recipe, answers)      # reused with proof in a run's own gate
    token_set = f"top{int(phase(3).threshold('top_k'))}_token_set"
    checks = []
    for r in runs:
        checks.append(holds(r["prompt"], token_set, r["passed"]))
        bar = bf16.get(r["prompt"]) if bf16 is not None else None
        checks.append(check(r["prompt"], "greedy_tokens_agreed", r["agreed"], r["steps"], ">=",
                            gating=False, message=agreed_words(r, bar)))
    return checks + bf16_checks(runs, bf16), runs


def agreed_words(run: dict[str, Any], bar: Bf16Run | None) -> str:
    """The per-prompt lens's message: the deployment's figure beside the bf16 reference's."""
    ours = _first_difference(run["agreed"], run["steps"]) + (
        " (a tie bf16 cannot represent)" if run.get("tie") else "")
    if bar is None:
        return f"deployed: {ours}; no bf16 reference recorded for this prompt"
    return (f"deployed: {ours}; Hugging Face in bf16: "
            f"{_first_difference(bar.agreed, bar.steps)}")


def _first_difference(agreed: int, steps: int) -> str:
    if agreed >= steps:
        return f"all {steps} greedy tokens of the FP32 oracle"
    return f"{agreed} of {steps} greedy tokens of the FP32 oracle, differs at token {agreed}"


def bf16_checks(runs: list[dict[str, Any]], bf16: dict[str, Bf16Run] | None
                ) -> list[dict[str, Any]]:
    """The bf16 bar's gating checks of the deployed runs (`token_checks`' results,
    `against_bar`'s rule), each with the deployment's figure as its value and the bf16
    reference's as its threshold: the summed agreement, and per prompt its first token (1
    kept, 0 not) against the bf16 reference's. Without a bar (a run recorded before phase 0
    kept one) a lens says so and nothing is gated on it."""
    if bf16 is None:
        return [check(ALL_PROMPTS, "bf16_reference_recorded", 0, 1, ">=", gating=False,
                      message="this run's phase 0 recorded no bf16 reference (it predates "
                      "it): the deployment is not held to the bf16 bar; run phase 0 again "
                      "to record one")]
    try:
        bar = against_bar({r["prompt"]: (r["agreed"], r["steps"]) for r in runs}, bf16,
                          (r["prompt"] for r in runs if r.get("tie")))
    except KeyError as e:
        return [holds(ALL_PROMPTS, "bf16_reference_recorded", False, message=e.args[0])]
    margin = f" less the phase table's margin of {bar.margin}" if bar.margin else ""
    checks = [check(ALL_PROMPTS, SUMMED, bar.ours, bar.bar, ">=", message=(
        f"over {len(runs)} prompts the deployment's greedy runs share {bar.ours} of "
        f"{bar.steps} tokens with the FP32 oracle's before they differ" + (
            f" ({', '.join(bar.ties)} counted at Hugging Face's figure: the deployment parts "
            "there at a later token whose two candidates the oracle ranks less than one bf16 "
            "step apart, a tie rounding alone decides)" if bar.ties else "") +
        f"; Hugging Face's own run of the model in bf16 shares {bar.theirs}{margin}" + (
            "" if bar.summed_holds else ": the deployment falls behind the bf16 reference")))]
    for r in runs:
        kept, bar_kept = bar.first_tokens[r["prompt"]]
        if not bar_kept:
            words = ("Hugging Face in bf16 does not keep the FP32 oracle's first token either "
                     "(a near tie): not held to it")
        elif kept:
            words = ("the deployment answers with the FP32 oracle's first token, as Hugging "
                     "Face in bf16 does")
        else:
            words = (f"the deployment's first token {r['ours_token']!r} is not the FP32 "
                     f"oracle's {r['theirs_token']!r}, which Hugging Face in bf16 keeps: a "
                     "different answer")
        checks.append(check(r["prompt"], FIRST_TOKEN, int(kept), int(bar_kept), ">=",
                            message=words))
    return checks


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
