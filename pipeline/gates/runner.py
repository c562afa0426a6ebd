"""Phase 6's gate: the inference runner end to end: the token-set check through it, its
answer to the chat question recorded, and the report's figures equal to the profiles'."""

from __future__ import annotations

from typing import Any

from npu_deploy.events.phases import phase
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import Toolbox
from npu_deploy.pipeline.workspace import Workspace, read_json

from .common import _Gate, check, holds, plan_s, verdict
from .model import model_checks


def report_check(ws: Workspace, recipe: Recipe, mode: Any, name: str, stated: float,
                 label: str) -> dict[str, Any]:
    """A report's figure against the gate's own: the modeled time computed again, or on the
    NPU the nearest measured profile of that scope recorded in the log (a measurement
    repeated would differ run to run; the report must state one that was recorded)."""
    tolerance = phase(6).threshold("report_rel_diff")
    if not ws.settings.measured:
        own = plan_s(ws, recipe, mode)
        return check(label, "relative_difference", abs(stated - own) / own, tolerance, "<=")
    recorded = [e.payload["total_s"] for e in ws.store.events(ws.run_id,
                                                              types=("profile.recorded",))
                if e.payload["scope"] == name and e.payload["source"] == "measured-npu"]
    nearest = min((abs(stated - r) / r for r in recorded), default=1.0)
    return check(f"{label} against the recorded profiles", "relative_difference", nearest,
                 tolerance, "<=")


class RunnerGate(_Gate):
    """The runner end to end: the token-set check through it, its answer to the chat
    question recorded, and the report's figures equal to the performance model's."""

    phase = 6

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        from npu_deploy.pipeline.inference import Runner

        runner = Runner(ws)
        checks, _ = model_checks(ws, runner.recipe, tb.answers())
        report = ws.latest("report_data", tool="write_report")
        checks.append(holds("report", "written", report is not None))
        if report is not None:
            data = read_json(ws.store, report["report_data"])
            for mode, name in ((ws.settings.prefill, "prefill"), (ws.settings.decode, "decode")):
                checks.append(report_check(ws, runner.recipe, mode, name,
                                           float(data[name]["deployed_s"]), f"report {name}"))
        return verdict(phase(self.phase).gate, checks)
