"""Phases 4 and 5's gate: the phase-3 check still passes, and the mode's plan is strictly
faster than the same recipe without this mode's transforms (modeled on the emulator backend,
measured on the NPU on the xrt backend)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from npu_deploy.events.phases import phase
from npu_deploy.kernels.definition.specs import Prefill
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import Toolbox, spread_text
from npu_deploy.pipeline.workspace import Workspace

from .common import _Gate, check, verdict
from .model import model_checks


def speed_check(ws: Workspace, recipe: Recipe, mode: Any) -> dict[str, Any]:
    """The deployed plan against the same recipe without this mode's transforms: modeled,
    faster; measured, its slowest run faster than the bare plan's fastest."""
    bare = (replace(recipe, prefill_transforms=()) if isinstance(mode, Prefill)
            else replace(recipe, decode_transforms=()))
    model, args = ws.settings.model, ws.loaded.args
    base = ws.time(bare.plan(model, args, mode, ws.hw))
    own = ws.time(recipe.plan(model, args, mode, ws.hw))
    name = "prefill" if isinstance(mode, Prefill) else "decode"
    subject = f"{name} plan ({', '.join(recipe.transforms(mode)) or 'no transform'})"
    metric, message = f"{name}_modeled_s", ""
    if own.runs:
        metric = f"{name}_measured_slowest_s"
        message = (f"slowest of {len(own.runs)} runs against the fastest of the plan "
                   f"without transforms ({spread_text(own, base)})")
    return check(subject, metric, own.slowest_s, base.fastest_s, "<", message=message)


class SpeedGate(_Gate):
    """Phases 4 and 5: the phase-3 check still passes, and the mode's plan is faster."""

    def __init__(self, phase: int, decode: bool) -> None:
        self.phase, self.decode = phase, decode

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        recipe = ws.recipe()
        checks, _ = model_checks(ws, recipe, tb.answers())
        s = ws.settings
        checks.append(speed_check(ws, recipe, s.decode if self.decode else s.prefill))
        return verdict(phase(self.phase).gate, checks)
