"""What an agent sees of the conductor (`PhaseRun`: one attempt of one phase, every step
an event), the interfaces a pipeline fills (`Agent`, `Gate`, `DebugMatcher`, `Pipeline`),
the policy that decides for a person, why a conductor halts, and the errors an agent raises.

The conductor (conductor.py) drives these; nothing here moves the machine.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from npu_deploy.events import Event
from npu_deploy.events.keys import FACT, MESSAGE, MODEL_CALL, STEP, AttemptKey
from npu_deploy.events.payloads import (
    RETRY_AS_IS,
    AgentMessage,
    DebugDirection,
    ErrorRaised,
    ExperienceRecorded,
    GateEvaluated,
    LessonRecorded,
    ModelCalled,
    Payload,
    ProfileRecorded,
    SkillLoaded,
)
from npu_deploy.events.state import PHASE_NAMES

from .machine import DEFAULT_BUDGET

if TYPE_CHECKING:
    from .conductor import Conductor

#: What `PhaseRun.record` takes: facts, never moves of the machine.
AGENT_FACTS = (ProfileRecorded, SkillLoaded, LessonRecorded, ExperienceRecorded)


# --- the interfaces ------------------------------------------------------------------------

class Agent(Protocol):
    """Does a phase's work through `PhaseRun.step` and `PhaseRun.say`. An agent that reads
    only some instructions may also have `refuses(phase, instruction) -> str | None`: why it
    cannot follow a redirect, which is then refused and leaves the wait open."""

    name: str

    def work(self, run: PhaseRun) -> None: ...


class Gate(Protocol):
    """Evaluates a phase's gate from stored artifacts: its `gate.evaluated` payload."""

    def evaluate(self, run: PhaseRun) -> GateEvaluated: ...


class DebugMatcher(Protocol):
    """Ranks debug directions (DebugDirection payloads) for a failed gate."""

    def propose(self, run: PhaseRun, gate: dict[str, Any]) -> list[DebugDirection]: ...


class _RetryAsIs:
    def propose(self, run: PhaseRun, gate: dict[str, Any]) -> list[DebugDirection]:
        return [RETRY_AS_IS]


@dataclass
class Pipeline:
    agent: Agent
    gates: dict[int, Gate]
    matcher: DebugMatcher = field(default_factory=_RetryAsIs)


@dataclass(frozen=True)
class Policy:
    """Who decides at checkpoints and debug picks: a person (interactive), or the
    auto-approve policy except at the phases in `pause_at`."""

    auto_approve: bool = False
    pause_at: frozenset[int] = frozenset()
    budget: int = DEFAULT_BUDGET

    @property
    def name(self) -> str:
        base = "auto-approve" if self.auto_approve else "interactive"
        return base + (f" pause-at {sorted(self.pause_at)}" if self.pause_at else "")

    def decides(self, phase: int) -> bool:
        return self.auto_approve and phase not in self.pause_at


@dataclass(frozen=True)
class Halt:
    """Why `Conductor.run` returned: finished, aborted, paused, needs_human, or waiting for
    a person (awaiting_human, awaiting_pick) when asked not to wait."""

    reason: str
    detail: str = ""


class NeedsHuman(RuntimeError):
    """Raised by an agent: the attempt cannot go on without a person (a budget spent, a
    refusal, a request to change the skill catalog). The phase exits as needs_human with
    this message as its reason."""


class StepInterrupted(NeedsHuman):
    """A step that is not idempotent was found started but not finished."""


class ToolFailed(RuntimeError):
    """A step whose work raised one of the errors its caller expects (a bad argument from a
    model, a missing file): recorded as a failed `tool.completed`, raised again on replay."""


# --- what an agent sees ---------------------------------------------------------------------

class PhaseRun:
    """One attempt of one phase, as its agent and gate see it."""

    def __init__(self, conductor: Conductor, phase: int, attempt: int, role: str = "") -> None:
        self.conductor, self.phase, self.attempt = conductor, phase, attempt
        self.role = role            # "" for the agent; the gate's steps get their own keys
        self._keys = AttemptKey(phase, attempt, role)
        ph = conductor.state.phases[phase]
        self.instruction: str | None = ph.instruction
        self.debug_direction: str | None = ph.debug_direction
        # what the picked direction's retry changes (a RetryChange as JSON), if it says
        self.debug_change: dict[str, Any] | None = ph.debug_change
        self._n = 0

    @property
    def name(self) -> str:
        return PHASE_NAMES[self.phase]

    def _next(self, kind: str) -> AttemptKey:
        """The key of this run's next message, fact, model call or step."""
        self._n += 1
        return self._keys.counted(kind, self._n)

    def say(self, text: str, *, answering: str | None = None) -> None:
        """An agent message, recorded once; `answering`: the id of the event it answers
        (a person's decision), as its causation."""
        self.conductor._record(AgentMessage(role="assistant", text=text),
                               phase=self.phase, attempt=self.attempt, actor="agent",
                               key=self._next(MESSAGE), causation_id=answering)

    def decision(self) -> Event | None:
        """The person's decision this attempt follows (its redirect or pick), if any."""
        found = None
        for e in self.conductor.store.events(self.conductor.run_id, phase=self.phase,
                                             types=("human.decision",)):
            if e.payload["decision"] in ("redirect", "pick") and (e.attempt or 0) < self.attempt:
                found = e
        return found

    def record(self, fact: Payload) -> None:
        """A fact the agent (or gate) establishes, recorded once: a profile, a loaded skill,
        a lesson, an experience (AGENT_FACTS)."""
        if not isinstance(fact, AGENT_FACTS):
            raise ValueError(f"an agent records {', '.join(c.event_type for c in AGENT_FACTS)}"
                             f", not {fact.event_type}")
        self.conductor._record(fact, phase=self.phase, attempt=self.attempt,
                               actor="harness" if self.role else "agent",
                               key=self._next(FACT))

    def step(self, tool: str, arguments: dict[str, Any], fn: Callable[[], dict[str, Any]],
             *, idempotent: bool = True, backend: bool = False,
             expected: tuple[type[Exception], ...] = ()) -> dict[str, Any]:
        """Run `fn` as a recorded tool step and return its result. A step already completed
        in the log (a resumed run) returns the stored result without running again. An
        exception of `expected` is recorded as a failed step and raised as `ToolFailed`."""
        return self.conductor._step(self._next(STEP), tool, arguments, fn,
                                    idempotent=idempotent, backend=backend,
                                    actor="harness" if self.role else "agent",
                                    expected=expected)

    def exchange(self, call: Callable[[], ModelCalled | ErrorRaised]) -> Event:
        """A model call, recorded once: `call()` returns its ModelCalled, or an ErrorRaised
        when the call failed. A resumed run gets the stored event back and the model is not
        called (nor paid) twice."""
        key = self._next(MODEL_CALL)
        stored = self.conductor._stored(key)
        if stored is not None:
            return stored
        self.conductor._between_steps()
        outcome = call()
        if not isinstance(outcome, ModelCalled | ErrorRaised):
            raise ValueError(f"a model call records model.called or error, not {outcome!r}")
        return self.conductor._record(outcome, phase=self.phase, attempt=self.attempt,
                                      actor="agent", key=key)

    def events(self, *types: str) -> list[Event]:
        """This attempt's events so far (of `types`, if given)."""
        return [e for e in self.conductor.store.events(self.conductor.run_id, phase=self.phase,
                                                       types=types)
                if e.attempt == self.attempt]

