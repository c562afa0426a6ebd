"""The conductor: the only writer of a run. It drives the machine through the phases.

    enter phase -> the agent works through `PhaseRun.step` (every step an event) -> the
    harness runs the gate from stored artifacts -> checkpoint -> decision -> next phase

Every event is committed before the machine moves (`_record`), and the next action is
always chosen from the folded state. Every event the conductor writes carries an
idempotency key derived from (phase, attempt, what) (events.keys.AttemptKey), so a
conductor killed at any point and resumed writes each event once: an agent re-run after a
crash replays its completed steps from the log instead of doing them again.

Agents, gates and debug matchers are interfaces (`Pipeline`); the autopilot issue fills
them with the real phases.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from npu_deploy.events import DeploymentState, Event, NewEvent, PhaseState
from npu_deploy.events.decisions import refusal
from npu_deploy.events.describe import check_text, evidence_text, failed_metrics, failing_checks
from npu_deploy.events.keys import FACT, MESSAGE, MODEL_CALL, RUN_FINISHED, STEP, AttemptKey
from npu_deploy.events.payloads import (
    RETRY_AS_IS,
    AgentMessage,
    CheckpointRequested,
    DebugDirection,
    DebugProposed,
    Decision,
    ErrorRaised,
    ExperienceRecorded,
    GateEvaluated,
    HumanDecision,
    LessonRecorded,
    ModelCalled,
    Outcome,
    Payload,
    PhaseEntered,
    PhaseExited,
    ProfileRecorded,
    RunFinished,
    RunForked,
    RunResumed,
    RunStarted,
    SkillLoaded,
    ToolCompleted,
    ToolRequested,
    validate_payload,
)
from npu_deploy.events.phases import thresholds_in_force
from npu_deploy.events.state import GATE_TOOL, PHASE_NAMES
from npu_deploy.store import EventStore, RunWriter, progress

from .machine import DEFAULT_BUDGET, PHASES, DeploymentMachine, state_of, trigger_for

POLL_S = 0.2                # how often a waiting conductor looks at the inbox
OVERRIDDEN = "a person overrode the failed gate"   # the phase.exited reason; the evaluator fails it
#: The phase.exited reason of a deterministic failure no direction can change (the evidence
#: follows): a person redirects (e.g. "use tile_n 64 for q_proj") or overrides.
NOTHING_TO_CHANGE = ("the gate fails the same way on every unchanged retry and no direction "
                     "changes anything left to try; a person decides: ")
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


class _Stop(Exception):
    """Unwinds an agent's work when a person paused or aborted the run."""


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


# --- the conductor -------------------------------------------------------------------------

class Conductor:
    """Drives one run. Open it with `start` (a new run) or `attach` (resume)."""

    def __init__(self, store: EventStore, writer: RunWriter, pipeline: Pipeline,
                 policy: Policy, on_event: Callable[[Event], None] | None = None) -> None:
        self.store, self.writer, self.pipeline, self.policy = store, writer, pipeline, policy
        self.on_event = on_event
        self.machine = DeploymentMachine(policy.budget, at=writer.state)
        self.run_id = writer.run_id
        # What the pipeline keeps for this run while this conductor drives it (its workspace:
        # model, backend, the store's artifacts); it lives and dies with the conductor.
        self.workspace: Any = None

    # --- opening -------------------------------------------------------------------

    @classmethod
    def start(cls, store: EventStore, pipeline: Pipeline, policy: Policy, *, model: str,
              backend: str = "emulator", code_version: str = "dev",
              config: dict[str, Any] | None = None, run_id: str | None = None,
              on_event: Callable[[Event], None] | None = None) -> Conductor:
        started = RunStarted(model=model, backend=backend, agent=pipeline.agent.name,
                             code_version=code_version, policy=policy.name,
                             thresholds=thresholds_in_force(),   # the phase table's, now
                             config={"budget": policy.budget,
                                     "auto_approve": policy.auto_approve,
                                     "pause_at": sorted(policy.pause_at), **(config or {})})
        writer = RunWriter.create(store, started, run_id=run_id)
        return cls(store, writer, pipeline, policy, on_event)

    def close(self) -> None:
        self.writer.close()

    @property
    def state(self) -> DeploymentState:
        return self.writer.state

    # --- recording: commit, then apply ---------------------------------------------

    def _record(self, fact: Payload, *, phase: int | None = None, attempt: int | None = None,
                actor: str = "harness", key: AttemptKey | str | None = None,
                consumes: str | None = None, causation_id: str | None = None) -> Event:
        type_ = fact.event_type
        payload = validate_payload(type_, fact.to_dict())
        if key is not None:
            stored = self._stored(key)
            if stored is not None:           # written before a crash: once is enough
                return stored
        pre = self.writer.state
        trigger = trigger_for(type_, payload, phase, actor)
        if trigger is not None:
            self.machine.check(trigger, pre, payload, phase)     # refused before the commit
        event = self.writer.append(NewEvent(type_, payload, actor=actor, phase=phase,
                                            attempt=attempt, causation_id=causation_id,
                                            idempotency_key=None if key is None else str(key)),
                                   consumes=consumes)
        if trigger is not None:
            self.machine.fire(trigger, pre, payload, phase)          # ... applied after it
        if type_ == "run.resumed":
            self.machine.rebuild(self.writer.state)
        if self.on_event is not None:
            self.on_event(event)
        if type_ == "phase.exited":
            self.writer.snapshot()                                 # a phase boundary
        return event

    def _stored(self, key: AttemptKey | str) -> Event | None:
        return self.writer.find(str(key))

    def _step(self, key: AttemptKey, tool: str, arguments: dict[str, Any],
              fn: Callable[[], dict[str, Any]], *, idempotent: bool, backend: bool,
              actor: str, expected: tuple[type[Exception], ...] = ()) -> dict[str, Any]:
        phase, attempt, call_id = key.phase, key.attempt, str(key)
        stored = self._stored(key.done())
        if stored is not None:
            done = stored.typed(ToolCompleted)
            if not done.ok:
                raise ToolFailed(done.result.get("error", "failed"))
            return dict(done.result)
        self._between_steps()
        args = {**arguments, "idempotent": idempotent, "backend": backend}
        if self._stored(key) is not None and not idempotent:
            raise StepInterrupted(f"step {tool} of phase {phase} attempt {attempt} was started "
                                  "and not finished, and cannot be repeated safely")
        self._record(ToolRequested(call_id=call_id, tool=tool, arguments=args),
                     phase=phase, attempt=attempt, actor=actor, key=key)
        t0 = time.perf_counter()
        try:
            with progress.reporting(self.store.progress_path(self.run_id), call_id, tool):
                result = fn()
        except expected as e:
            message = f"{type(e).__name__}: {e}"
            self._record(ToolCompleted(call_id=call_id, tool=tool, ok=False,
                                       result={"error": message},
                                       duration_s=time.perf_counter() - t0),
                         phase=phase, attempt=attempt, actor=actor, key=key.done())
            raise ToolFailed(message) from e
        self._record(ToolCompleted(call_id=call_id, tool=tool, ok=True, result=result,
                                   duration_s=time.perf_counter() - t0),
                     phase=phase, attempt=attempt, actor=actor, key=key.done())
        return result

    # --- the inbox --------------------------------------------------------------------

    def _consume_inbox(self, only: tuple[str, ...] | None = None) -> None:
        """Record each pending command as a human.decision, exactly once (or refuse it,
        recording why, when the run cannot take it now)."""
        for cmd in self.store.pending_commands(self.run_id):
            if only is not None and cmd["kind"] not in only:
                continue
            s = self.writer.state
            phase = s.current_phase
            attempt = s.phases[phase].attempts if phase is not None else None
            if not self.store.command_is_authentic(cmd):
                # Written into the store by something without this user's key (store/anchor.py):
                # not a person's decision, whatever its author field says.
                self._record(ErrorRaised(kind="command_refused", recoverable=True,
                                         message=f"{cmd['kind']} refused: its MAC does not "
                                         "check with this user's key, so no person's "
                                         "npu-deploy (decide, the TUI) wrote it"),
                             phase=phase, attempt=attempt, consumes=cmd["command_id"])
                continue
            if s.status == "paused" and cmd["kind"] not in ("pause", "abort"):
                continue      # a paused run takes it after run.resumed (events/decisions.py)
            fields = {**cmd["payload"], "decision": cmd["kind"],
                      "command_id": cmd["command_id"], "author": cmd["author"]}
            if cmd["kind"] == "approve" and phase is not None:
                fields.setdefault("checkpoint_id", s.phases[phase].pending_checkpoint)
            if cmd["kind"] == "pick" and phase is not None:
                fields.setdefault("proposal_id", s.phases[phase].pending_proposal)
            decision = HumanDecision.from_dict(fields)
            payload = decision.to_dict()
            trigger = trigger_for("human.decision", payload, phase)
            allowed = trigger is not None and self.machine.allows(trigger, s, payload, phase)
            refuses = getattr(self.pipeline.agent, "refuses", None)
            why_not = (refuses(phase, decision.instruction) if allowed and refuses is not None
                       and phase is not None and decision.instruction else None)
            if why_not is not None:
                # The agent could not follow it: the wait stays open for another answer.
                self._record(ErrorRaised(kind="instruction_not_understood", recoverable=True,
                                         message=f"redirect refused: {why_not}"),
                             phase=phase, attempt=attempt, consumes=cmd["command_id"])
                continue
            if allowed:
                self._record(decision, phase=phase, attempt=attempt, actor="human",
                             consumes=cmd["command_id"])
            else:
                why = refusal(s, payload, phase) or f"is {self.machine.state}"
                self._record(ErrorRaised(kind="command_refused", recoverable=True,
                                         message=f"{cmd['kind']} refused: the run {why}"),
                             phase=phase, attempt=attempt, consumes=cmd["command_id"])

    def _between_steps(self) -> None:
        self._consume_inbox(only=("pause", "abort"))
        if self.state.status == "paused" or self.state.aborting:
            raise _Stop

    # --- the loop ---------------------------------------------------------------------

    def run(self, *, wait: bool = True, poll_s: float = POLL_S) -> Halt:
        """Drive the run until it ends, stops for a person, or (wait=False) would wait."""
        while True:
            self._consume_inbox()
            halt = self._advance(wait)
            if halt is not None:
                if halt.reason in ("awaiting_human", "awaiting_pick") and wait:
                    time.sleep(poll_s)
                    continue
                return halt

    def _advance(self, wait: bool) -> Halt | None:
        """One step, chosen from the folded state: the handler of the machine's state
        (RUN_STEPS), or of the current phase's sub-state (PHASE_STEPS). None when it
        recorded something and the run goes on; a Halt when it stops or waits."""
        s = self.state
        where = self.machine.state
        assert where == state_of(s), (where, state_of(s))
        if s.aborting and where not in ENDED:
            self._record(RunFinished(verdict="ABORTED", summary="aborted by a person"),
                         key=RUN_FINISHED)
            return None
        if where in RUN_STEPS:
            return RUN_STEPS[where](self, s)
        k, sub = _parse(where)
        return PHASE_STEPS[sub](self, k, s.phases[k])

    # --- the steps, by state (the tables after the class) ------------------------------

    def _ended(self, s: DeploymentState) -> Halt:
        return Halt(s.status, s.verdict or "")

    def _paused(self, s: DeploymentState) -> Halt:
        return Halt("paused", "npu-deploy resume RUN goes on")

    def _stopped(self, s: DeploymentState) -> Halt | None:
        k = s.current_phase
        if k is not None and self._act_on_decision("needs_human", k, s.phases[k]):
            return None
        return Halt("needs_human", s.phases[k].exit_reason if k is not None else "")

    def _ready(self, s: DeploymentState) -> None:
        self._enter(0)

    def _request_checkpoint(self, k: int, ph: PhaseState) -> None:
        attempt_key = AttemptKey(k, ph.attempts)
        self._record(CheckpointRequested(
            checkpoint_id=str(attempt_key),
            summary=f"phase {k} ({PHASE_NAMES[k]}) passed its gate"),
            phase=k, attempt=ph.attempts, key=attempt_key.child("checkpoint"))

    def _at_checkpoint(self, k: int, ph: PhaseState) -> Halt | None:
        if self._act_on_decision("awaiting_human", k, ph):
            return None
        if self.policy.decides(k):
            self._policy_decision(k, ph.attempts, "approve", checkpoint_id=ph.pending_checkpoint)
            return None
        return Halt("awaiting_human", f"phase {k} waits for approve, redirect, pause or abort")

    def _at_proposal(self, k: int, ph: PhaseState) -> Halt | None:
        if self._act_on_decision("debugging", k, ph):
            return None
        if self.policy.auto_approve:
            # A deterministic failure repeats unchanged: the policy picks only a direction
            # whose retry changes something, and with none stops for a person.
            choices = [d for d in ph.pending_directions
                       if d.get("change") or not ph.pending_deterministic]
            if not choices:
                self._exit(k, ph.attempts, "needs_human", NOTHING_TO_CHANGE +
                           self._evidence_words(k, ph.attempts))
                return None
            best = max(choices, key=lambda d: d["score"])
            self._policy_decision(k, ph.attempts, "pick", proposal_id=ph.pending_proposal,
                                  direction_id=best["direction_id"])
            return None
        return Halt("awaiting_pick", f"phase {k} waits for a debug direction")

    def _phase_done(self, k: int, ph: PhaseState) -> None:
        if k == PHASES[-1]:
            self._record(RunFinished(verdict="PASS", summary="every phase passed its gate"),
                         key=RUN_FINISHED)
        else:
            self._enter(k + 1)

    def _act_on_decision(self, where: str, k: int, ph: PhaseState) -> bool:
        """Carry out the decision recorded for phase k while the run waited `where`
        (AFTER_DECISION); False when none is recorded yet."""
        act = AFTER_DECISION.get((where, ph.decision or ""))
        if act is None:
            return False
        act(self, k, ph)
        return True

    def _retry(self, k: int, ph: PhaseState) -> None:
        self._enter(k)

    def _pass_approved(self, k: int, ph: PhaseState) -> None:
        self._exit(k, ph.attempts, "passed", "approved")

    def _pass_overridden(self, k: int, ph: PhaseState) -> None:
        self._exit(k, ph.attempts, "passed", OVERRIDDEN)

    def _enter(self, k: int) -> None:
        ph = self.state.phases[k]
        attempt = ph.attempts + 1
        self._record(PhaseEntered(name=PHASE_NAMES[k], instruction=ph.instruction,
                                  debug_direction=ph.debug_direction
                                  if ph.decision == "pick" else None),
                     phase=k, attempt=attempt, key=AttemptKey(k, attempt, "entered"))

    def _work(self, k: int, attempt: int) -> Halt | None:
        run = PhaseRun(self, k, attempt)
        try:
            self.pipeline.agent.work(run)
        except _Stop:
            return None
        except NeedsHuman as e:
            self._exit(k, attempt, "needs_human", str(e))
            return None
        self._step_gate_request(k, attempt)
        return None

    def _step_gate_request(self, k: int, attempt: int) -> None:
        key = AttemptKey(k, attempt, "gate")
        self._record(ToolRequested(call_id=str(key), tool=GATE_TOOL,
                                   arguments={"gate": k, "idempotent": True, "backend": True}),
                     phase=k, attempt=attempt, key=key)

    def _gate(self, k: int, attempt: int) -> None:
        key = AttemptKey(k, attempt, "gate")
        gate = self.pipeline.gates.get(k)
        if gate is None:
            raise KeyError(f"the pipeline has no gate for phase {k}")
        t0 = time.perf_counter()
        try:
            with progress.reporting(self.store.progress_path(self.run_id), str(key), GATE_TOOL):
                result = gate.evaluate(PhaseRun(self, k, attempt, role="gate"))
        except _Stop:
            return
        self._record(ToolCompleted(call_id=str(key), tool=GATE_TOOL, ok=True,
                                   result={"passed": bool(result.passed)},
                                   duration_s=time.perf_counter() - t0),
                     phase=k, attempt=attempt, key=key.done())
        self._record(result, phase=k, attempt=attempt, key=key.child("result"))

    def _after_failure(self, k: int, attempt: int) -> None:
        s = self.state
        ph = s.phases[k]
        gate = ph.last_gate
        failing = failing_checks(gate.checks if gate else ())
        symptom = "; ".join(check_text(c) for c in failing[:3])
        if ph.attempts - ph.budget_from >= self.policy.budget:
            self._exit(k, attempt, "needs_human",
                       f"gate failed {self.policy.budget} times: {symptom}")
            return
        payload = {"gate": gate.gate if gate else "", "passed": False,
                   "checks": list(gate.checks if gate else ())}
        run = PhaseRun(self, k, attempt, role="debug")
        try:
            directions = self.pipeline.matcher.propose(run, payload)
        except _Stop:
            return
        # a matcher says whether this failure repeats unchanged (a method of the run, or a flag)
        said = getattr(self.pipeline.matcher, "deterministic", False)
        deterministic = bool(said(run) if callable(said) else said)
        # A matcher answers with JSON objects (DebugMatcher): checked as the value is built.
        self._record(DebugProposed(proposal_id=str(AttemptKey(k, attempt)), symptom=symptom,
                                   directions=list(directions),
                                   evidence=failed_metrics(failing),
                                   deterministic=deterministic),
                     phase=k, attempt=attempt, key=AttemptKey(k, attempt, "debug"))

    def _evidence_words(self, k: int, attempt: int) -> str:
        """The evidence of phase k's proposal at `attempt`, as one line."""
        for e in self.store.events(self.run_id, phase=k, types=("debug.proposed",)):
            if e.attempt == attempt:
                return "; ".join(evidence_text(m) for m in e.payload.get("evidence", ()))
        return ""

    def _policy_decision(self, k: int, attempt: int, decision: Decision, **fields: Any) -> None:
        key = AttemptKey(k, attempt).child("policy", decision)
        self._record(HumanDecision(decision=decision, command_id=str(key),
                                   author=f"policy:{self.policy.name}", **fields),
                     phase=k, attempt=attempt, actor="harness", key=key)

    def _exit(self, k: int, attempt: int, outcome: Outcome, reason: str) -> None:
        wall, agent, backend = self._phase_times(k)
        ph = self.state.phases[k]     # a person's waiting and pauses, as the log folds them
        # An override may follow this attempt's needs_human exit: it is an exit of its own.
        what = "overridden" if reason == OVERRIDDEN else "exited"
        self._record(PhaseExited(outcome=outcome, reason=reason, wall_s=wall, agent_s=agent,
                                 backend_s=backend, waiting_s=ph.waiting_time_s,
                                 paused_s=ph.paused_time_s),
                     phase=k, attempt=attempt, key=AttemptKey(k, attempt, what))

    def _phase_times(self, k: int) -> tuple[float, float, float]:
        """Wall, agent and backend seconds of phase k so far, from its events: steps an
        agent marked as backend work and the gates are backend time; the other steps and
        the model calls are agent time."""
        from npu_deploy.events.envelope import parse_ts

        first = last = None
        agent = backend = 0.0
        backend_calls: set[str] = set()
        for e in self.store.events(self.run_id, phase=k):
            first = first or e.ts
            last = e.ts
            if e.type == "tool.requested":
                request = e.typed(ToolRequested)
                if request.tool == GATE_TOOL or request.arguments.get("backend"):
                    backend_calls.add(request.call_id)
            elif e.type == "tool.completed":
                done = e.typed(ToolCompleted)
                call = AttemptKey.parse(done.call_id)
                if call is not None and call.role == "gate":
                    continue        # a step inside a gate: the gate's own time holds it
                if done.call_id in backend_calls:
                    backend += done.duration_s
                else:
                    agent += done.duration_s
            elif e.type == "model.called":
                agent += e.typed(ModelCalled).duration_s
        wall = (parse_ts(last) - parse_ts(first)).total_seconds() if first and last else 0.0
        return wall, agent, backend


#: What the conductor does next in each state of the machine outside a phase.
RUN_STEPS: dict[str, Callable[[Conductor, DeploymentState], Halt | None]] = {
    "finished": Conductor._ended, "failed": Conductor._ended, "aborted": Conductor._ended,
    "paused": Conductor._paused,                # until `npu-deploy resume`
    "needs_human": Conductor._stopped,          # a decision recorded, or wait for one
    "ready": Conductor._ready,                  # phase 0 begins
}
ENDED = ("finished", "failed", "aborted")

#: What the conductor does next in each sub-state of the current phase.
PHASE_STEPS: dict[str, Callable[[Conductor, int, PhaseState], Halt | None]] = {
    "working": lambda c, k, ph: c._work(k, ph.attempts),       # the agent, then the gate asked
    "gating": lambda c, k, ph: c._gate(k, ph.attempts),        # the harness runs the gate
    "passed": Conductor._request_checkpoint,                   # for a person, or the policy
    "failed": lambda c, k, ph: c._after_failure(k, ph.attempts),   # directions, or a stop
    "awaiting_human": Conductor._at_checkpoint,                # a decision, the policy's, or wait
    "debugging": Conductor._at_proposal,                       # a pick, the policy's, or wait
    "done": Conductor._phase_done,                             # the next phase, or the end
}

#: What a recorded decision makes the conductor do, by where the run waited: restart the
#: phase (a redirect, a pick) or pass it (approved; a failed gate overridden).
AFTER_DECISION: dict[tuple[str, str], Callable[[Conductor, int, PhaseState], None]] = {
    ("awaiting_human", "approve"): Conductor._pass_approved,
    ("awaiting_human", "redirect"): Conductor._retry,
    ("debugging", "pick"): Conductor._retry,
    ("debugging", "approve"): Conductor._pass_overridden,
    ("needs_human", "redirect"): Conductor._retry,
    ("needs_human", "approve"): Conductor._pass_overridden,
}


def _parse(where: str) -> tuple[int, str]:
    _, phase, sub = where.split(".")
    return int(phase[1:]), sub


# --- resume and fork -------------------------------------------------------------------------

class RunEnded(RuntimeError):
    """The run is finished or aborted: there is nothing to resume."""


def run_config(store: EventStore, run_id: str) -> dict[str, Any]:
    """The configuration the run was started (or forked) with."""
    first = store.event_at(run_id, 1)
    if first is None:
        raise KeyError(f"run {run_id} has no events")
    return dict(first.payload.get("config") or {})


def policy_of(config: dict[str, Any]) -> Policy:
    return Policy(auto_approve=bool(config.get("auto_approve", False)),
                  pause_at=frozenset(int(p) for p in config.get("pause_at", ())),
                  budget=int(config.get("budget", DEFAULT_BUDGET)))


def resume(store: EventStore, run_id: str, pipeline: Pipeline, *,
           on_event: Callable[[Event], None] | None = None, adopt: bool = False) -> Conductor:
    """Take the run's lock, fold its log (from the newest valid snapshot), rebuild the
    machine where the run stopped, and record `run.resumed`. The returned conductor goes on
    with `run()`: it consumes the pending inbox commands first (a pending pause before
    `run.resumed`, which answers it), re-runs an unfinished
    idempotent step under its idempotency key, and stops for a person at a step that was
    started and cannot be repeated. A run this user's key did not anchor (an import from
    another key's store) is refused unless `adopt`."""
    writer = RunWriter.attach(store, run_id, adopt=adopt)
    try:
        s = writer.state
        if s.terminal:
            raise RunEnded(f"run {run_id} is {s.status} (verdict {s.verdict}); nothing to "
                           "resume. Fork it (npu-deploy fork RUN --at VERSION) to try again")
        conductor = Conductor(store, writer, pipeline, policy_of(run_config(store, run_id)),
                              on_event)
        # A pause posted before this resume (the TUI leaves one when it quits mid-step) is
        # answered by it: recorded as the decision it was, then resumed from, not obeyed
        # at the first step boundary.
        conductor._consume_inbox(only=("pause",))
        s = writer.state
        unfinished = _unfinished_step(store, run_id)
        reason = s.status if s.status in ("paused", "needs_human") else "crashed"
        conductor._record(RunResumed(from_version=s.version, reason=reason,
                                     unfinished_step=unfinished))
        return conductor
    except BaseException:
        writer.close()
        raise


def _unfinished_step(store: EventStore, run_id: str) -> str | None:
    """The call id of a step requested and never completed nor abandoned, if any."""
    open_calls: dict[str, str] = {}
    for e in store.events(run_id, types=("tool.requested", "tool.completed", "tool.abandoned")):
        if e.type == "tool.requested":
            open_calls[e.payload["call_id"]] = e.payload["tool"]
        elif e.type in ("tool.completed", "tool.abandoned"):
            open_calls.pop(e.payload["call_id"], None)
    return next(iter(open_calls), None)


def fork(store: EventStore, run_id: str, at_version: int, note: str | None = None,
         *, new_run_id: str | None = None) -> str:
    """A new run whose history is `run_id`'s first `at_version` events (the source is only
    read), starting with `run.forked`. Resume it to go on from that state. The source must
    verify, anchored by this user's key: a fork's new chain would vouch for what it copies."""
    report = store.verify(run_id, fold=False)
    if not report.trusted:
        raise ValueError(f"run {run_id} does not verify, fork refused: {report.line()}")
    events = list(store.events(run_id, upto_version=at_version))
    if not events or events[-1].run_version != at_version:
        last = store.fold(run_id).version
        raise ValueError(f"run {run_id} has versions 1..{last}; --at must be one of them")
    first = events[0].payload
    forked = RunForked(parent_run_id=run_id, parent_version=at_version,
                       parent_hash=events[-1].hash, model=first["model"],
                       backend=first["backend"], agent=first["agent"],
                       code_version=first["code_version"], policy=first.get("policy", ""),
                       note=note, config=dict(first.get("config") or {}))
    with RunWriter.create(store, forked, run_id=new_run_id) as w:
        w.append_batch([NewEvent(e.type, e.payload, actor=e.actor, phase=e.phase,
                                 attempt=e.attempt, causation_id=e.causation_id,
                                 correlation_id=e.correlation_id,
                                 idempotency_key=e.idempotency_key)
                        for e in events[1:]])
        return w.run_id


DEFAULT_PIPELINE = "npu_deploy.agents.autopilot:pipeline"
CLAUDE_PIPELINE = "npu_deploy.agents.claude:pipeline"

#: The pipelines a run's stored configuration may name: a resume loads (imports and calls)
#: the one its run names, so the name is code, and a run can come from anyone's export file.
#: Others are registered by the code that brings them (`register_pipeline`), or by the
#: person in NPU_DEPLOY_PIPELINES (comma-separated); `--pipeline` on the command line is
#: the person's own choice and needs no registration.
REGISTERED_PIPELINES: set[str] = {DEFAULT_PIPELINE, CLAUDE_PIPELINE}
PIPELINES_ENV = "NPU_DEPLOY_PIPELINES"


class PipelineRefused(ValueError):
    """A run names a pipeline that is not registered: it is not loaded."""


def register_pipeline(spec: str) -> None:
    REGISTERED_PIPELINES.add(canonical_pipeline(spec))


def is_registered(spec: str) -> bool:
    env = {canonical_pipeline(s.strip())
           for s in os.environ.get(PIPELINES_ENV, "").split(",") if s.strip()}
    return canonical_pipeline(spec) in REGISTERED_PIPELINES | env


def stored_pipeline(store: EventStore, run_id: str) -> str:
    """The registered pipeline a run names in its configuration (the autopilot's when it
    names none); a name nobody registered is refused, and nothing of it is imported."""
    named = run_config(store, run_id).get("pipeline") or DEFAULT_PIPELINE
    spec = canonical_pipeline(str(named))
    if not is_registered(spec):
        raise PipelineRefused(
            f"run {run_id} names pipeline {spec!r}, which is not a registered pipeline, so "
            "nothing of it was run; pass --pipeline MODULE:FUNCTION to choose one yourself, "
            f"or add it to {PIPELINES_ENV} if you trust it")
    return spec


#: Pipelines under the names their modules had before the project moved under one installed
#: namespace: runs stored then name them so in `run.started`, and still resume.
MOVED_PIPELINES = {"skills.autopilot:pipeline": "npu_deploy.agents.autopilot:pipeline",
                   "skills.claude:pipeline": "npu_deploy.agents.claude:pipeline"}


def canonical_pipeline(spec: str) -> str:
    """The current name of the pipeline `spec` names."""
    return MOVED_PIPELINES.get(spec, spec)


def load_pipeline(spec: str) -> Pipeline:
    """A pipeline from "module:function" (the function returns a Pipeline)."""
    import importlib

    module, _, attr = canonical_pipeline(spec).partition(":")
    if not module or not attr:
        raise ValueError(f"pipeline {spec!r}: expected module:function")
    try:
        factory = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"pipeline {spec!r} cannot be loaded: {e}") from None
    if not callable(factory):
        raise ValueError(f"pipeline {spec!r} names a {type(factory).__name__}, not a function "
                         "returning a Pipeline")
    try:
        pipeline = factory()
    except Exception as e:   # code the user named: whatever it raises is their error
        raise ValueError(f"pipeline {spec!r} failed when called with no arguments "
                         f"({type(e).__name__}: {e}); name a function that returns a "
                         "Pipeline") from None
    if not isinstance(pipeline, Pipeline):
        raise ValueError(f"pipeline {spec!r} returned {type(pipeline).__name__}, not a Pipeline")
    return pipeline
