"""Which decisions a run takes now, from its folded state: what it waits on a person for
(`waiting_on`), and whether a decision is legal (`refusal`: why not, or None).

    approve                 the checkpoint the run waits at (a passed gate)
    redirect INSTRUCTION    that checkpoint, or a phase stopped for a person (a fresh budget)
    pick DIRECTION          one of the debug directions proposed after a failed gate
    approve + override      a failed gate, while its directions wait or after its phase stopped
    pause                   a run that is not paused already
    abort                   any run that has not ended

This is the one home of that rule. The machine's guards (machine/machine.py), the fold of a
recorded decision (state.py, through `answered`), the CLI's `decide` and the TUI's banner,
palette and decision dialog all ask it.

A paused run reads its inbox when it resumes, after its `run.resumed` has set it running
again: what it takes then is what it takes now, except another pause.

No I/O, and nothing from the rest of the project (events/ is the vocabulary).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from .keys import AttemptKey
from .phases import PHASE_NAMES

if TYPE_CHECKING:
    from .state import DeploymentState

#: What a person may decide, as the inbox and `human.decision` name it.
DECISIONS: Final = ("approve", "redirect", "pick", "pause", "abort")
#: The same, with the override of a failed gate (an approve with override=True) as its own.
CHOICES: Final = ("approve", "redirect", "pick", "override", "pause", "abort")


@dataclass(frozen=True, slots=True)
class Waiting:
    """What the current phase waits on a person for: "checkpoint" (a passed gate), "proposal"
    (debug directions after a failed gate), "stopped" (the phase stopped for a person), or
    "none"; with the phase and the id of what waits."""

    kind: str = "none"
    phase: int | None = None
    id: str | None = None


def stopped(state: DeploymentState) -> bool:
    """The current phase stopped for a person (a budget spent, an agent that gave up). Read
    from the phase, not the run's status: a pause overwrites the status, and a stopped run
    that is paused and resumed still waits for that person."""
    k = state.current_phase
    return (k is not None and not state.terminal
            and state.phases[k].status == "exited:needs_human")


def waiting_on(state: DeploymentState) -> Waiting:
    k = state.current_phase
    if k is None or state.terminal:
        return Waiting()
    ph = state.phases[k]
    if stopped(state):
        return Waiting("stopped", k, str(AttemptKey(k, ph.attempts, "stopped")))
    if ph.pending_checkpoint is not None:
        return Waiting("checkpoint", k, ph.pending_checkpoint)
    if ph.pending_proposal is not None:
        return Waiting("proposal", k, ph.pending_proposal)
    return Waiting()


def named_wait(payload: dict[str, Any]) -> str | None:
    """The id of the wait (checkpoint, proposal or stopped phase) a decision names, if it
    names one: a decision that names one is refused once that wait is no longer open, so an
    answer typed for one checkpoint is never applied to the next."""
    return payload.get("checkpoint_id") or payload.get("proposal_id")


def naming(waiting: Waiting) -> dict[str, str]:
    """The fields of a decision that name `waiting` (what `named_wait` reads back)."""
    if waiting.id is None:
        return {}
    return {"proposal_id" if waiting.kind == "proposal" else "checkpoint_id": waiting.id}


def queued(commands: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The first decision about a phase among a run's pending inbox commands: while one
    waits to be recorded, a second would answer what the first already answered."""
    return next((c for c in commands if c["kind"] in ("approve", "redirect", "pick")), None)


def is_override(payload: dict[str, Any]) -> bool:
    return payload["decision"] == "approve" and bool(payload.get("override"))


def answered(state: DeploymentState, payload: dict[str, Any], phase: int | None) -> str:
    """What a decision answers, in the state it is taken in: "run" (pause, abort), or the
    kind of wait of `Waiting` it closes. The fold applies a recorded decision by this."""
    decision = payload["decision"]
    if decision in ("pause", "abort"):
        return "run"
    if is_override(payload):
        return "stopped" if stopped(state) else "proposal"
    if decision == "redirect":
        return "stopped" if stopped(state) and phase is not None else "checkpoint"
    return "checkpoint" if decision == "approve" else "proposal"


def refusal(state: DeploymentState, payload: dict[str, Any], phase: int | None) -> str | None:
    """Why the run cannot take this decision (a `human.decision` payload, for `phase`) now,
    as words that follow "run RUN ": None when it can."""
    decision = payload["decision"]
    if state.terminal:
        return f"is {state.status}; it takes no more decisions"
    if state.status == "new":
        return "has not started"
    if decision == "pause":
        return "is paused already" if state.status == "paused" else None
    if decision == "abort":
        return None
    waiting, answers = waiting_on(state), answered(state, payload, phase)
    k = state.current_phase
    named = named_wait(payload)
    if named is not None and named != waiting.id and answers != "stopped":
        # A racing answer to a wait another answer closed: say so, not what the run is now.
        if waiting.id:
            return f"waits at {waiting.kind} {waiting.id}; {named} is no longer open"
        return (f"waits for no decision now; {named} is no longer open (it was answered, or "
                "its phase moved on)")
    ph = None if k is None else state.phases[k]
    where = ("not started" if ph is None else
             f"phase {k} was answered already: {ph.decision}" if waiting.kind == "none"
             and ph.decision else f"phase {k}: {ph.status}")
    if answers == "stopped" and k is not None and waiting.kind == "stopped" \
            and state.phases[k].decision:
        return (f"has the stop of phase {k} answered already ({state.phases[k].decision}); "
                "it goes on when it is resumed")
    if is_override(payload):
        gate = None if waiting.phase is None else state.phases[waiting.phase].last_gate
        if waiting.kind != answers or gate is None or gate.passed:
            return f"has no failed gate waiting for a person ({where}); nothing to override"
    elif answers == "checkpoint":
        if waiting.kind != "checkpoint":
            return f"is not waiting at a checkpoint ({where}); nothing to {decision}"
    elif answers == "proposal":
        ids = [] if waiting.kind != "proposal" or waiting.phase is None else \
            [d["direction_id"] for d in state.phases[waiting.phase].pending_directions]
        if not ids:
            return "has no debug directions to pick from"
        if payload.get("direction_id") not in ids:
            return (f"has no debug direction {payload.get('direction_id')!r} to pick (phase "
                    f"{waiting.phase} proposed {', '.join(ids) or 'none'})")
    elif waiting.kind != "stopped":
        return f"has no phase stopped for a person ({where})"
    if phase != waiting.phase:
        return f"waits for a decision on phase {waiting.phase}, not phase {phase}"
    named = named_wait(payload)
    if named not in (None, waiting.id):
        return f"waits at {waiting.kind} {waiting.id}; {named} is no longer open"
    if decision == "redirect" and not payload.get("instruction"):
        return "takes a redirect only with an instruction: what the next attempt does differently"
    return None


@dataclass(frozen=True, slots=True)
class OpenDecisions:
    """What a person may decide now (approve: the checkpoint `waiting.id`; redirect: with an
    instruction; pick: one of `pick`; override: the failed gate of `waiting.phase`; pause;
    abort), and why each of the others is refused."""

    waiting: Waiting
    refused: dict[str, str]       # choice -> why not, words that follow "run RUN "
    pick: tuple[str, ...]         # the direction ids a pick chooses among, in proposed order

    @property
    def choices(self) -> tuple[str, ...]:
        """The legal ones among CHOICES, in that order."""
        return tuple(c for c in CHOICES if c not in self.refused)

    def allows(self, choice: str) -> bool:
        if choice not in CHOICES:
            raise ValueError(f"{choice!r} is none of {', '.join(CHOICES)}")
        return choice not in self.refused

    @property
    def decides_a_phase(self) -> bool:
        """Whether a phase waits on a person: approve, redirect, pick or override is open."""
        return any(map(self.allows, ("approve", "redirect", "pick", "override")))


def open_decisions(state: DeploymentState) -> OpenDecisions:
    """Every decision legal now: each asked of `refusal`, for the current phase."""
    k = state.current_phase
    directions = [d["direction_id"] for d in state.phases[k].pending_directions] \
        if k is not None else []
    probes: dict[str, dict[str, Any]] = {
        "approve": {"decision": "approve"},
        "redirect": {"decision": "redirect", "instruction": "an instruction"},
        "pick": {"decision": "pick", "direction_id": directions[0] if directions else None},
        "override": {"decision": "approve", "override": True},
        "pause": {"decision": "pause"}, "abort": {"decision": "abort"}}
    refused = {choice: why for choice, probe in probes.items()
               if (why := refusal(state, probe, k)) is not None}
    pick = () if "pick" in refused else tuple(
        d for d in directions if refusal(state, {"decision": "pick", "direction_id": d}, k)
        is None)
    return OpenDecisions(waiting_on(state), refused, pick)


def waiting_text(state: DeploymentState) -> str | None:
    """What the run waits on a person for, in words; None when it waits for nobody."""
    waiting = waiting_on(state)
    if waiting.kind == "none" or waiting.phase is None:
        return None
    k = waiting.phase
    ph, where = state.phases[k], f"phase {k} ({PHASE_NAMES[k]})"
    return {"stopped": f"{where} stopped for a person: {ph.exit_reason}",
            "checkpoint": f"{where} passed its gate: approve or redirect",
            "proposal": f"{where} failed its gate: " + (
                f"pick one of {len(ph.pending_directions)} debug directions"
                if len(ph.pending_directions) != 1 else "pick its debug direction")
            }[waiting.kind]
