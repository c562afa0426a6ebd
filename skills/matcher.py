"""The matcher: which debug skills a failure calls for, ranked by their triggers.

A failure's `Symptoms` (the failed gate's checks, error texts, facts about the model and
plan) fire a skill's triggers (`triggers.yaml` beside its SKILL.md); `match` ranks the skills
whose triggers fired, and `SkillMatcher` is the conductor's debug matcher built on it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from npu_deploy.events.payloads import RETRY_AS_IS, DebugDirection
from npu_deploy.skills.catalog import Catalog, Skill, Trigger, load_catalog, overlay_dir


@dataclass(frozen=True)
class Symptoms:
    """What is known about a failure: the failed gate's checks, error texts, and context
    facts about the model and plan (head_dim, phase, dispatches, ...)."""

    checks: tuple[dict[str, Any], ...] = ()
    errors: tuple[str, ...] = ()
    context: dict[str, Any] = field(default_factory=dict)


def _fires(t: Trigger, s: Symptoms) -> bool:
    if t.kind == "error_text":
        rx = re.compile(t.pattern or "", re.IGNORECASE)
        return any(rx.search(text) for text in s.errors)
    if t.kind == "gate_metric":
        for c in s.checks:
            if c.get("metric") != t.metric:
                continue
            if t.subject and not re.search(t.subject, str(c.get("subject", "")), re.IGNORECASE):
                continue
            value = float(c["value"])
            if (t.below is not None and value >= t.below) or \
                    (t.above is not None and value <= t.above):
                continue
            # isolated: no other subject fails (its own other metrics may)
            if t.isolated and any(not o.get("passed", True) for o in s.checks
                                  if o.get("subject") != c.get("subject")
                                  and o.get("gating", True)):
                continue
            return True
        return False
    fact = s.context.get(t.key or "")
    if fact is None:
        return False
    if t.equals is not None:
        return bool(fact == t.equals)
    return ((t.at_least is None or float(fact) >= t.at_least)
            and (t.at_most is None or float(fact) <= t.at_most))


def match(catalog: Catalog, symptoms: Symptoms, kind: str = "debug"
          ) -> list[tuple[Skill, float, list[str]]]:
    """Skills of `kind` whose triggers fire, best first: (skill, score, fired trigger ids).
    A context trigger only adds to a skill that something else already matched."""
    ranked = []
    for skill in catalog.of_kind(kind):
        fired = [t for t in skill.triggers if _fires(t, symptoms)]
        strong = [t for t in fired if t.kind != "context"]
        if not strong:
            continue
        score = sum(t.weight for t in fired)
        ranked.append((skill, score, [t.id for t in fired]))
    ranked.sort(key=lambda r: (-r[1], r[0].name))
    return ranked


class SkillMatcher:
    """The conductor's DebugMatcher: debug skills ranked by their triggers."""

    def __init__(self, catalog: Catalog | None = None,
                 context: dict[str, Any] | None = None) -> None:
        self._catalog = catalog
        self.context = dict(context or {})

    @property
    def catalog(self) -> Catalog:
        if self._catalog is None:
            self._catalog = load_catalog()
        return self._catalog

    def propose(self, run: Any, gate: dict[str, Any]) -> list[DebugDirection]:
        conductor = getattr(run, "conductor", None)
        if self._catalog is None and conductor is not None:
            # the store's own approved lessons count for its runs
            self._catalog = load_catalog(overlay=overlay_dir(conductor.store.path))
        failing = [c for c in gate.get("checks", []) if not c.get("passed", True)]
        errors = tuple(f"{c.get('subject')} {c.get('metric')} {c.get('message', '')}"
                       for c in failing) + tuple(gate.get("errors", ()))
        symptoms = Symptoms(tuple(gate.get("checks", [])), errors,
                            {**self.context, "phase": getattr(run, "phase", None)})
        directions = [DebugDirection(direction_id=skill.name, skill=skill.name,
                                     title=skill.description.split(". ")[0][:120],
                                     rationale="triggers: " + ", ".join(ids),
                                     score=round(score, 3))
                      for skill, score, ids in match(self.catalog, symptoms)]
        return directions or [RETRY_AS_IS]
