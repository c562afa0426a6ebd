"""Debug directions after a failed gate: the catalog's and the agent's own."""

from __future__ import annotations

from typing import Any

from npu_deploy.skills.matcher import SkillMatcher


class AgentDirections(SkillMatcher):
    """The catalog's debug skills for a failed gate, and the directions the agent proposed
    during the attempt (propose_debug_directions), best first."""

    def propose(self, run: Any, gate: dict[str, Any]) -> list[dict[str, Any]]:
        catalog = [d for d in super().propose(run, gate) if d["direction_id"] != "retry"]
        own: list[dict[str, Any]] = []
        c = run.conductor
        for e in c.store.events(c.run_id, phase=run.phase, types=("tool.completed",)):
            if e.attempt == run.attempt and e.payload["tool"] == "propose_debug_directions" \
                    and e.payload["ok"]:
                own = list(e.payload["result"]["directions"])
        ranked = sorted(catalog + own, key=lambda d: -d["score"])
        return ranked or super().propose(run, gate)
