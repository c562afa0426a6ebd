"""Phase 1's gate: every (kernel, shape) with its stored configuration, on the backend with
the gate's own inputs: every element within atol + rtol |ref|, and no blocking finding of the
hardware checker."""

from __future__ import annotations

from typing import Any

from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import (
    Toolbox,
    kernel_uses_cached,
    run_kernel,
    validation_summary,
)
from npu_deploy.pipeline.workspace import Workspace

from .common import _Gate, check, verdict

KERNEL_SEED = 1              # the gate's inputs differ from the agent's (seed 0)


def kernel_checks(ws: Workspace, recipe: Recipe) -> list[dict[str, Any]]:
    checks = []
    for key, use in sorted(kernel_uses_cached(ws).items()):
        subject = f"{key} ({', '.join(use['roles'])})"
        config = recipe.configs.get(key)
        if config is None:
            checks.append(check(subject, "configured", 0, 1, ">="))
            continue
        summary = validation_summary(run_kernel(ws, key, config, KERNEL_SEED))
        blocking = [f for f in summary["findings"] if f.startswith(("[error]", "[corrupt]"))]
        checks.append(check(subject, "blocking_findings", len(blocking), 0, "<=",
                            message="; ".join(blocking)))
        for out in summary["outputs"].values():
            checks += [check(subject, "within_frac", out["within_frac"], 1.0, ">="),
                       check(subject, "cosine", out["cosine"], 0.999, ">=", gating=False),
                       check(subject, "max_abs", out["max_abs"], 1.0, "<=", gating=False),
                       check(subject, "pearson", out["pearson"], 0.999, ">=", gating=False)]
    return checks


class KernelGate(_Gate):
    phase = 1

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        return verdict("phase1.kernels", kernel_checks(ws, ws.recipe()))
