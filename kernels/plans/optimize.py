"""Improve a plan one transform at a time, keeping a step only when the performance model
says it is faster: the loop phases 4 and 5 run, with modeled times."""

from __future__ import annotations

from dataclasses import dataclass

from ..definition.hardware import XDNA2, Hardware
from ..definition.specs import Prefill
from ..performance.model import PerfParams, Profile, estimate
from .plan import DispatchPlan
from .transforms import TRANSFORMS, IllegalTransform

# The order a first deployment tries them in: layouts before merges (a host transpose stops
# a merge), the LM head and attention placement before the buffers are assigned and before
# the merge that would otherwise swallow their launches.
PREFILL_ORDER = ("align_layouts", "last_token_lm_head", "reuse_buffers", "merge_dispatches")
DECODE_ORDER = ("reuse_buffers", "decode_attention_on_cpu", "merge_dispatches")


@dataclass(frozen=True)
class Attempt:
    """One transform tried: the modeled time before and after, and whether it was kept."""

    transform: str
    skill: str
    before_s: float
    after_s: float | None
    kept: bool
    reason: str

    @property
    def speedup(self) -> float | None:
        return None if self.after_s is None else self.before_s / self.after_s


@dataclass(frozen=True)
class Optimized:
    plan: DispatchPlan
    profile: Profile
    attempts: tuple[Attempt, ...]


def optimize(plan: DispatchPlan, hw: Hardware = XDNA2, params: PerfParams | None = None,
             order: tuple[str, ...] | None = None) -> Optimized:
    """Try each transform of `order` once; keep it when the modeled time goes down."""
    order = order or (PREFILL_ORDER if isinstance(plan.mode, Prefill) else DECODE_ORDER)
    profile = estimate(plan, hw, params)
    attempts = []
    for name in order:
        t = TRANSFORMS[name]
        try:
            candidate = t.apply(plan)
        except IllegalTransform as e:
            attempts.append(Attempt(name, t.skill, profile.total_s, None, False, str(e)))
            continue
        after = estimate(candidate, hw, params)
        kept = after.total_s < profile.total_s
        reason = "faster" if kept else "not faster: kept the plan before it"
        attempts.append(Attempt(name, t.skill, profile.total_s, after.total_s, kept, reason))
        if kept:
            plan, profile = candidate, after
    return Optimized(plan, profile, tuple(attempts))
