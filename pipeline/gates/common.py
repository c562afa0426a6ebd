"""What every gate shares: one check against its threshold, a verdict over the checks, and
the gate as a recorded step of its phase (the harness runs it, never the agent)."""

from __future__ import annotations

import math
from typing import Any

from npu_deploy.events.payloads import GateEvaluated, comparison_holds
from npu_deploy.pipeline.check_reuse import recording
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import Toolbox
from npu_deploy.pipeline.workspace import Workspace, workspace_of


def check(subject: str, metric: str, value: float, threshold: float, comparison: str,
          gating: bool = True, message: str = "") -> dict[str, Any]:
    finite = math.isfinite(float(value))
    # A NaN or an infinity never passes; the log (JSON) records it as -1.
    value = float(value) if finite else -1.0
    holds = finite and comparison_holds(value, comparison, threshold)
    return {"subject": subject, "metric": metric, "value": value, "threshold": float(threshold),
            "comparison": comparison, "passed": bool(holds), "gating": gating,
            **({"message": message} if message else {})}


def holds(subject: str, metric: str, ok: bool, message: str = "") -> dict[str, Any]:
    """A yes/no check (recorded as 1 or 0 against 1), always gating."""
    return check(subject, metric, 1 if ok else 0, 1, ">=", message=message)


def verdict(gate: str, checks: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    passed = all(c["passed"] for c in checks if c["gating"])
    return {"gate": gate, "passed": passed, "checks": checks, **extra}


def plan_s(ws: Workspace, recipe: Recipe, mode: Any) -> float:
    """The recipe's `mode` plan's time: modeled on the emulator, measured on the NPU."""
    return ws.time(recipe.plan(ws.settings.model, ws.loaded.args, mode, ws.hw)).total_s


def time_word(ws: Workspace) -> str:
    return "measured" if ws.settings.measured else "modeled"


class _Gate:
    phase: int = -1

    def evaluate(self, run: Any) -> GateEvaluated:
        """The gate, computed as a recorded step of the phase (its result is the verdict's
        JSON object, kept as the gate computed it) and returned as its payload."""
        ws = workspace_of(run)

        def compute() -> dict[str, Any]:
            # a token-set check the gate reuses says so: its proof goes in the step's result
            with recording() as proofs:
                result = self.compute(ws, Toolbox(run))
            return {**result, "check_proofs": proofs} if proofs else result
        result = run.step(f"gate{self.phase}", {"phase": self.phase}, compute, backend=True)
        return GateEvaluated.from_dict({k: v for k, v in result.items()
                                        if k != "check_proofs"})

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        raise NotImplementedError
