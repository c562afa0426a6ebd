"""The matcher: which debug skills a failure calls for, ranked by their triggers.

A failure's `Symptoms` (the failed gate's checks, error texts, facts about the model and
plan) fire a skill's triggers (`triggers.yaml` beside its SKILL.md); `match` ranks the skills
whose triggers fired, and `SkillMatcher` is the conductor's debug matcher built on it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from npu_deploy.events.payloads import CHANGE_ONLY, RETRY_AS_IS, DebugDirection, RetryChange
from npu_deploy.skills.catalog import Catalog, Skill, Trigger, load_catalog, overlay_dir


@dataclass(frozen=True)
class Symptoms:
    """What is known about a failure: the failed gate's checks, error texts, and context
    facts about the model and plan (head_dim, phase, dispatches, ...)."""

    checks: tuple[dict[str, Any], ...] = ()
    errors: tuple[str, ...] = ()
    context: dict[str, Any] = field(default_factory=dict)


def _fires(t: Trigger, s: Symptoms) -> bool:
    return _why_fired(t, s) is not None


def _why_fired(t: Trigger, s: Symptoms) -> str | None:
    """What made trigger `t` fire on `s`, in words (the rule and the fact that met it);
    None when it does not fire."""
    if t.kind == "error_text":
        rx = re.compile(t.pattern or "", re.IGNORECASE)
        hit = next((text for text in s.errors if rx.search(text)), None)
        return None if hit is None else f"the text {t.pattern!r} appears in: {hit.strip()}"
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
            bound = (f"below {t.below:g}" if t.below is not None else
                     f"above {t.above:g}" if t.above is not None else "any value")
            where = f" of a subject matching {t.subject!r}" if t.subject else ""
            alone = ", while no other subject fails" if t.isolated else ""
            return f"{t.metric}{where} {bound}{alone}: {c.get('subject')} at {value:.6g}"
        return None
    fact = s.context.get(t.key or "")
    if fact is None:
        return None
    if t.equals is not None:
        return f"{t.key} is {t.equals}" if fact == t.equals else None
    if (t.at_least is None or float(fact) >= t.at_least) and \
            (t.at_most is None or float(fact) <= t.at_most):
        return f"{t.key} {fact} within [{t.at_least}, {t.at_most}]"
    return None


def explain(skill: Skill, symptoms: Symptoms) -> list[str]:
    """Why `skill` matched `symptoms`: each trigger that fired, in words, with its id."""
    return [f"{why} (trigger {t.id})" for t in skill.triggers
            if (why := _why_fired(t, symptoms)) is not None]


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


#: A direction's title is its skill's first clause, in whole words, in at most this many
#: characters.
TITLE_CHARS = 120
_CLAUSE = re.compile(r" \(|, |; | — ")


def title_of(description: str) -> str:
    """A skill's description as a direction's title: its first sentence up to the first
    clause after the opening words ("Diagnoses a GEMM whose output is silently wrong"), and
    never cut inside a word; a title still too long ends in an ellipsis at a space."""
    first = description.split(". ")[0].rstrip(".")
    for m in _CLAUSE.finditer(first):
        if m.start() >= 30:
            first = first[:m.start()]
            break
    return whole_words(first)


def whole_words(text: str, limit: int = TITLE_CHARS) -> str:
    """`text` in at most `limit` characters, cut at a space and ending in " …" if it was
    cut: never inside a word."""
    if len(text) <= limit:
        return text
    cut = text[:limit - 2]
    if " " in cut:
        cut = cut.rsplit(" ", 1)[0].rstrip(",;:")
    return cut + " …"


class SkillMatcher:
    """The conductor's DebugMatcher: debug skills ranked by their triggers, each with the
    triggers that fired in words. With `changes` (what a retry can change after the failed
    checks: `pipeline.retry_changes.retry_change`), the failure counts as deterministic: every
    direction carries the change its retry makes, and with nothing left to change the
    conductor's policy stops for a person instead of retrying."""

    def __init__(self, catalog: Catalog | None = None,
                 context: dict[str, Any] | None = None,
                 changes: Callable[[Any, list[dict[str, Any]]], RetryChange | None] | None
                 = None) -> None:
        self._catalog = catalog
        self.context = dict(context or {})
        self.changes = changes

    def deterministic(self, run: Any) -> bool:
        """Whether a failure of `run` repeats unchanged: on the emulator it does; a gate on
        figures measured on the NPU can differ on a second measurement (a re-measure is a
        retry that changes something), so it is not deterministic there."""
        ws = getattr(getattr(run, "conductor", None), "workspace", None)
        measured = bool(getattr(getattr(ws, "settings", None), "measured", False))
        return self.changes is not None and not measured

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
        change = self.changes(run, [c for c in failing if c.get("gating", True)]) \
            if self.changes is not None else None
        directions = [DebugDirection(direction_id=skill.name, skill=skill.name,
                                     title=title_of(skill.description),
                                     rationale="triggers: " + ", ".join(ids),
                                     score=round(score, 3),
                                     evidence=explain(skill, symptoms), change=change)
                      for skill, score, ids in match(self.catalog, symptoms)]
        if change is not None and not directions:
            directions = [DebugDirection(
                direction_id=CHANGE_ONLY, skill="none",
                title="retry with what the failed attempt ran changed",
                rationale="no debug skill matched this failure, and the same attempt would "
                "fail the same way: the retry changes what it ran",
                score=0.0, change=change)]
        return directions or [RETRY_AS_IS]
