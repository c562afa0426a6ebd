"""Phase 1's gate: every (kernel, shape) with its stored configuration, on the backend with
the gate's own inputs: every element within atol + rtol |ref|, and no blocking finding of the
hardware checker."""

from __future__ import annotations

from typing import Any

from npu_deploy.events.phases import phase
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import (
    Toolbox,
    kernel_uses_cached,
    run_kernel,
    validation_summary,
)
from npu_deploy.pipeline.workspace import Workspace

from .common import _Gate, check, holds, verdict

KERNEL_SEED = 1              # the gate's inputs differ from the agent's (seed 0)


def kernel_checks(ws: Workspace, recipe: Recipe) -> list[dict[str, Any]]:
    checks = []
    for key, use in sorted(kernel_uses_cached(ws).items()):
        subject = f"{key} ({', '.join(use['roles'])})"
        config = recipe.configs.get(key)
        if config is None:
            checks.append(holds(subject, "configured", False))
            continue
        summary = validation_summary(run_kernel(ws, key, config, KERNEL_SEED))
        checks += checks_of_kernel(subject, summary)
    return checks


def checks_of_kernel(subject: str, summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Phase 1's checks of one kernel's validation (`validation_summary`): no blocking
    finding of the checker, every element within tolerance."""
    table = phase(1)
    blocking = [f for f in summary["findings"] if f.startswith(("[error]", "[corrupt]"))]
    checks = [check(subject, "blocking_findings", len(blocking),
                    table.threshold("blocking_findings"), "<=", message="; ".join(blocking))]
    for name, out in summary["outputs"].items():
        # the elements outside, for a proposal's evidence: "2 elements" reads as a near miss
        outside = (f"{name}: {out['n_outside']:.0f} elements outside atol {summary['atol']:g}"
                   f" + rtol {summary['rtol']:g} |ref|" if out["n_outside"] else "")
        checks += [check(subject, "within_frac", out["within_frac"],
                         table.threshold("within_frac"), ">=", message=outside),
                   check(subject, "cosine", out["cosine"], table.threshold("lens_cosine"),
                         ">=", gating=False),
                   check(subject, "max_abs", out["max_abs"],
                         table.threshold("lens_max_abs"), "<=", gating=False),
                   check(subject, "pearson", out["pearson"],
                         table.threshold("lens_pearson"), ">=", gating=False)]
    return checks


class KernelGate(_Gate):
    phase = 1

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        return verdict(phase(self.phase).gate, kernel_checks(ws, ws.recipe()))
