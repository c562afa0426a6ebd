"""Debug directions after a failed gate: the catalog's and the agent's own."""

from __future__ import annotations

from typing import Any

from npu_deploy.events.payloads import RETRY_AS_IS, DebugDirection
from npu_deploy.skills.matcher import SkillMatcher


class AgentDirections(SkillMatcher):
    """The catalog's debug skills for a failed gate, and the directions the agent proposed
    during the attempt (propose_debug_directions), best first."""

    def propose(self, run: Any, gate: dict[str, Any]) -> list[DebugDirection]:
        catalog = [d for d in super().propose(run, gate) if d != RETRY_AS_IS]
        own: list[DebugDirection] = []
        c = run.conductor
        for e in c.store.events(c.run_id, phase=run.phase, types=("tool.completed",)):
            if e.attempt == run.attempt and e.payload["tool"] == "propose_debug_directions" \
                    and e.payload["ok"]:
                own = [DebugDirection(**d) for d in e.payload["result"]["directions"]]
        ranked = sorted(catalog + own, key=lambda d: -d.score)
        return ranked or super().propose(run, gate)
