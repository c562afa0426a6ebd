"""The conductor: the only writer of a run. It drives the machine through the phases.

    enter phase -> the agent works through `PhaseRun.step` (every step an event) -> the
    harness runs the gate from stored artifacts -> checkpoint -> decision -> next phase

Every event is committed before the machine moves (`_record`), and the next action is
always chosen from the folded state. Every event the conductor writes carries an
idempotency key derived from (phase, attempt, what) (events.keys.AttemptKey), so a
conductor killed at any point and resumed writes each event once: an agent re-run after a
crash replays its completed steps from the log instead of doing them again.

Agents, gates and debug matchers are interfaces (`Pipeline`, phase_run.py, with
`PhaseRun`, what an agent sees); the autopilot issue fills them with the real phases. A
stored run is opened again by reopen.py (resume, fork), its pipeline loaded by name by
pipelines.py.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from npu_deploy.events import DeploymentState, Event, NewEvent, PhaseState
from npu_deploy.events.decisions import refusal
from npu_deploy.events.describe import check_text, evidence_text, failed_metrics, failing_checks
from npu_deploy.events.keys import RUN_FINISHED, AttemptKey
from npu_deploy.events.payloads import (
    CheckpointRequested,
    DebugProposed,
    Decision,
    ErrorRaised,
    HumanDecision,
    ModelCalled,
    Outcome,
    Payload,
    PhaseEntered,
    PhaseExited,
    RunFinished,
    RunStarted,
    ToolCompleted,
    ToolRequested,
    validate_payload,
)
from npu_deploy.events.phases import thresholds_in_force
from npu_deploy.events.state import GATE_TOOL, PHASE_NAMES
from npu_deploy.store import EventStore, RunWriter, progress

from .machine import PHASES, DeploymentMachine, state_of, trigger_for
from .phase_run import (
    Halt,
    NeedsHuman,
    PhaseRun,
    Pipeline,
    Policy,
    StepInterrupted,
    ToolFailed,
)

POLL_S = 0.2                # how often a waiting conductor looks at the inbox
OVERRIDDEN = "a person overrode the failed gate"   # the phase.exited reason; the evaluator fails it
#: The phase.exited reason of a deterministic failure no direction can change (the evidence
#: follows): a person redirects (e.g. "use tile_n 64 for q_proj") or overrides.
NOTHING_TO_CHANGE = ("the gate fails the same way on every unchanged retry and no direction "
                     "changes anything left to try; a person decides: ")


class _Stop(Exception):
    """Unwinds an agent's work when a person paused or aborted the run."""


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
            unsigned = self.store.command_unsigned(cmd)
            if unsigned is not None:
                # Not signed by this user's key (store/anchor.py): not a person's decision
                # here, whatever its author field says. Why, by its cause: no MAC (written
                # past npu-deploy), another key's (left under a key since changed), altered.
                self._record(ErrorRaised(kind="command_refused", recoverable=True,
                                         message=f"{cmd['kind']} refused: the command "
                                         f"{unsigned}; leave it again with `decide` or "
                                         "the TUI under this user's key"),
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
