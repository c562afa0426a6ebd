"""The folded state of one deployment, and the pure reducer that builds it.

`fold(events)` is `functools.reduce(apply, events, DeploymentState())`: the same
events always give the same state, in any process, at any later time. No I/O.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field, replace
from functools import reduce
from typing import Any, Final

from .decisions import answered, stopped
from .envelope import GENESIS_HASH, Event, parse_ts
from .phases import PHASE_NAMES

#: Bumped whenever `apply` changes meaning; snapshots of another version are ignored.
REDUCER_VERSION: Final = 3

TERMINAL_RUN_STATUSES: Final = ("finished", "failed", "aborted")

#: The tool name under which the harness records running a phase's gate.
GATE_TOOL: Final = "gate"


@dataclass(frozen=True, slots=True)
class GateSummary:
    gate: str
    passed: bool
    attempt: int | None
    event_id: str
    checks: tuple[dict[str, Any], ...]


@dataclass(frozen=True, slots=True)
class PhaseState:
    phase: int
    status: str = "pending"  # pending working gating passed failed awaiting_human debugging
                             # exited:*
    attempts: int = 0
    gates: tuple[GateSummary, ...] = ()      # every gate result, oldest first
    pending_checkpoint: str | None = None
    pending_proposal: str | None = None
    pending_directions: tuple[dict[str, Any], ...] = ()
    pending_deterministic: bool = False      # a retry of the open proposal must change something
    instruction: str | None = None
    debug_direction: str | None = None
    debug_change: dict[str, Any] | None = None   # the picked direction's RetryChange
    decision: str | None = None              # the last decision of this attempt
    budget_from: int = 0                     # attempts before a person's last restart
    outcome: str | None = None
    exit_reason: str = ""
    entered_ts: str | None = None
    exited_ts: str | None = None             # its last exit: a redirect's wait runs from here
    # Where the phase's time went (first entry to last exit, the waits between attempts
    # included): the agent's steps, the backend's, a person's turn, a pause; the rest is
    # the harness's own work.
    wall_time_s: float = 0.0
    agent_time_s: float = 0.0
    backend_time_s: float = 0.0
    waiting_time_s: float = 0.0
    paused_time_s: float = 0.0
    waiting_since: str | None = None         # a checkpoint, proposal or stop not yet answered

    @property
    def last_gate(self) -> GateSummary | None:
        return self.gates[-1] if self.gates else None

    @property
    def work_time_s(self) -> float:
        """The phase's wall time less a person's waiting and pauses: the figure to judge
        its speed by, so that a slow reader never makes a phase look slow."""
        return max(0.0, self.wall_time_s - self.waiting_time_s - self.paused_time_s)

    @property
    def times(self) -> tuple[float, float, float, float, float]:
        """Wall, agent, backend, waiting and paused seconds (describe.time_split's order)."""
        return (self.wall_time_s, self.agent_time_s, self.backend_time_s,
                self.waiting_time_s, self.paused_time_s)


@dataclass(frozen=True, slots=True)
class RunTotals:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0
    model_calls: int = 0
    tool_calls: int = 0
    errors: int = 0


def _initial_phases() -> tuple[PhaseState, ...]:
    return tuple(PhaseState(phase=p) for p in range(len(PHASE_NAMES)))


@dataclass(frozen=True, slots=True)
class DeploymentState:
    run_id: str = ""
    version: int = 0
    last_hash: str = GENESIS_HASH
    status: str = "new"   # new running paused needs_human finished failed aborted
    model: str = ""
    backend: str = ""
    agent: str = ""
    policy: str = ""
    current_phase: int | None = None
    phases: tuple[PhaseState, ...] = field(default_factory=_initial_phases)
    totals: RunTotals = field(default_factory=RunTotals)
    started_ts: str | None = None
    last_ts: str | None = None
    last_type: str | None = None
    verdict: str | None = None
    resumes: int = 0
    forked_from: tuple[str, int] | None = None
    profiles: int = 0
    aborting: bool = False        # a person decided to abort; run.finished follows
    paused_since: str | None = None   # a pause decision not yet followed by run.resumed

    @property
    def wall_time_s(self) -> float:
        if not self.started_ts or not self.last_ts:
            return 0.0
        return (parse_ts(self.last_ts) - parse_ts(self.started_ts)).total_seconds()

    @property
    def phase_reached(self) -> int | None:
        entered = [p.phase for p in self.phases if p.attempts]
        return max(entered) if entered else None

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL_RUN_STATUSES

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DeploymentState:
        phases = tuple(
            PhaseState(**{**p, "gates": tuple(GateSummary(**{**g, "checks": tuple(g["checks"])})
                                              for g in p["gates"]),
                          "pending_directions": tuple(p["pending_directions"])})
            for p in data["phases"])
        forked = data.get("forked_from")
        return cls(**{**data, "phases": phases, "totals": RunTotals(**data["totals"]),
                      "forked_from": tuple(forked) if forked else None})


def _set_phase(state: DeploymentState, phase: int | None, **changes: Any) -> DeploymentState:
    if phase is None:
        return state
    phases = list(state.phases)
    phases[phase] = replace(phases[phase], **changes)
    return replace(state, phases=tuple(phases))


def _seconds(start: str, end: str) -> float:
    return (parse_ts(end) - parse_ts(start)).total_seconds()


def _wait_from(s: DeploymentState, phase: int | None, ts: str) -> DeploymentState:
    """A person's turn begins; a paused run's clock is the pause's, not the wait's."""
    if phase is None or s.paused_since is not None:
        return s
    return _set_phase(s, phase, waiting_since=ts)


def _wait_ends(s: DeploymentState, phase: int | None, ts: str) -> DeploymentState:
    if phase is None or s.phases[phase].waiting_since is None:
        return s
    ph = s.phases[phase]
    return _set_phase(s, phase, waiting_since=None, waiting_time_s=ph.waiting_time_s
                      + _seconds(ph.waiting_since, ts))  # type: ignore[arg-type]


def _waits_for_a_person(s: DeploymentState) -> bool:
    k = s.current_phase
    return k is not None and (stopped(s) or s.phases[k].pending_checkpoint is not None
                              or s.phases[k].pending_proposal is not None)


def _paused(s: DeploymentState, e: Event) -> DeploymentState:
    """A pause stops a person's wait: its time is the pause's until the run resumes."""
    return replace(_wait_ends(s, s.current_phase, e.ts), status="paused", paused_since=e.ts)


def _unpaused(s: DeploymentState, e: Event) -> DeploymentState:
    k, since = s.current_phase, s.paused_since
    if since is None:
        return s
    s = replace(s, paused_since=None)
    # a pause between phases (the last one exited, the next not entered) is no phase's time
    if k is not None and (s.phases[k].entered_ts is not None or _waits_for_a_person(s)):
        s = _set_phase(s, k, paused_time_s=s.phases[k].paused_time_s + _seconds(since, e.ts))
    return _wait_from(s, k, e.ts) if _waits_for_a_person(s) else s


def _on_run_started(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    return replace(s, run_id=e.run_id, status="running", model=p["model"],
                   backend=p["backend"], agent=p["agent"], policy=p["policy"],
                   started_ts=e.ts)


def _on_run_forked(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    s = _on_run_started(s, e, p)
    return replace(s, forked_from=(p["parent_run_id"], p["parent_version"]))


def _on_run_resumed(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    # A paused or crashed run goes on; one whose phase stopped for a person still waits for
    # one, also when it was paused while it waited (the pause overwrote its status).
    status = "needs_human" if stopped(s) else "running"
    return replace(_unpaused(s, e), status=status, resumes=s.resumes + 1)


def _on_run_finished(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    status = {"ABORTED": "aborted", "FAIL": "failed"}.get(p["verdict"], "finished")
    return replace(s, status=status, verdict=p["verdict"])


def _on_phase_entered(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    if e.phase is None:
        return s
    ph = s.phases[e.phase]
    s = replace(s, current_phase=e.phase, status="running")
    # the time since its last exit (a person's turn after a stop) is the phase's too
    gap = _seconds(ph.exited_ts, e.ts) if ph.exited_ts else 0.0
    return _set_phase(s, e.phase, status="working", attempts=e.attempt or ph.attempts + 1,
                      instruction=p["instruction"], debug_direction=p["debug_direction"],
                      debug_change=ph.debug_change if p["debug_direction"] else None,
                      pending_checkpoint=None, pending_proposal=None, pending_directions=(),
                      decision=None, outcome=None, entered_ts=e.ts,
                      wall_time_s=ph.wall_time_s + gap, waiting_since=None)


def _on_phase_exited(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    if e.phase is None:
        return s
    ph = s.phases[e.phase]
    since = ph.entered_ts or ph.exited_ts        # an override exits a stopped phase again
    spent = _seconds(since, e.ts) if since else 0.0
    if p["outcome"] == "needs_human":
        s = replace(s, status="needs_human")
    elif p["outcome"] == "passed" and s.status == "needs_human":
        s = replace(s, status="running")      # a person overrode the gate of a stopped phase
    # The agent's and backend's seconds are the phase's so far (the conductor sums the
    # phase's events), not this attempt's: they replace, never add. A stop for a person
    # closes an open proposal: a redirect or an override answers it now.
    s = _set_phase(s, e.phase, status=f"exited:{p['outcome']}", outcome=p["outcome"],
                   pending_proposal=None, pending_directions=(),
                   exit_reason=p.get("reason", ""), entered_ts=None, exited_ts=e.ts,
                   wall_time_s=ph.wall_time_s + spent,
                   agent_time_s=max(ph.agent_time_s, p.get("agent_s", 0.0)),
                   backend_time_s=max(ph.backend_time_s, p.get("backend_s", 0.0)))
    return _wait_from(s, e.phase, e.ts) if p["outcome"] == "needs_human" else s


def _on_gate(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    if e.phase is None:
        return s
    gate = GateSummary(gate=p["gate"], passed=p["passed"], attempt=e.attempt,
                       event_id=e.event_id, checks=tuple(p["checks"]))
    return _set_phase(s, e.phase, status="passed" if p["passed"] else "failed",
                      gates=s.phases[e.phase].gates + (gate,))


def _on_checkpoint(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    s = _set_phase(s, e.phase, status="awaiting_human", pending_checkpoint=p["checkpoint_id"])
    return _wait_from(s, e.phase, e.ts)


def _on_debug(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    s = _set_phase(s, e.phase, status="debugging", pending_proposal=p["proposal_id"],
                   pending_directions=tuple(p["directions"]),
                   pending_deterministic=p.get("deterministic", False))
    return _wait_from(s, e.phase, e.ts)


def _on_decision(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    decision, answers = p["decision"], answered(s, p, e.phase)
    if decision == "pause":
        return _paused(s, e)
    s = _wait_ends(s, e.phase if e.phase is not None else s.current_phase, e.ts)
    if decision == "abort":
        return replace(s, aborting=True)
    if answers == "stopped" and decision == "redirect" and e.phase is not None:
        # The phase restarts at its next phase.entered; until then the run stays stopped.
        return _set_phase(s, e.phase, pending_checkpoint=None, instruction=p["instruction"],
                          decision=decision, budget_from=s.phases[e.phase].attempts)
    if answers == "stopped":
        # A person passes the phase in spite of its gate; its phase.exited follows.
        return _set_phase(s, e.phase, decision=decision)
    s = replace(s, status="running")
    if answers == "checkpoint":
        instruction = {"instruction": p["instruction"]} if decision == "redirect" else {}
        return _set_phase(s, e.phase, pending_checkpoint=None, decision=decision, **instruction)
    # a proposal: a debug direction picked, or its failed gate overridden
    direction: dict[str, Any] = {}
    if decision == "pick" and e.phase is not None:
        picked = next((d for d in s.phases[e.phase].pending_directions
                       if d["direction_id"] == p["direction_id"]), {})
        direction = {"debug_direction": p["direction_id"], "debug_change": picked.get("change")}
    return _set_phase(s, e.phase, pending_proposal=None, pending_directions=(),
                      decision=decision, **direction)


def _on_model_called(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    t = s.totals
    return replace(s, totals=replace(
        t, input_tokens=t.input_tokens + p["input_tokens"],
        output_tokens=t.output_tokens + p["output_tokens"],
        cache_read_tokens=t.cache_read_tokens + p["cache_read_tokens"],
        cache_write_tokens=t.cache_write_tokens + p["cache_write_tokens"],
        cost_usd=t.cost_usd + p["cost_usd"], model_calls=t.model_calls + 1))


def _on_tool_requested(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    s = replace(s, totals=replace(s.totals, tool_calls=s.totals.tool_calls + 1))
    if p["tool"] == GATE_TOOL and e.actor == "harness":
        s = _set_phase(s, e.phase, status="gating")     # the harness evaluates the gate
    return s


def _on_error(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    return replace(s, totals=replace(s.totals, errors=s.totals.errors + 1))


def _on_profile(s: DeploymentState, e: Event, p: dict[str, Any]) -> DeploymentState:
    return replace(s, profiles=s.profiles + 1)


_REDUCERS = {
    "run.started": _on_run_started,
    "run.forked": _on_run_forked,
    "run.resumed": _on_run_resumed,
    "run.finished": _on_run_finished,
    "phase.entered": _on_phase_entered,
    "phase.exited": _on_phase_exited,
    "gate.evaluated": _on_gate,
    "checkpoint.requested": _on_checkpoint,
    "debug.proposed": _on_debug,
    "human.decision": _on_decision,
    "model.called": _on_model_called,
    "tool.requested": _on_tool_requested,
    "error": _on_error,
    "profile.recorded": _on_profile,
}


#: Event types that change more than the head (version, hash, time, type) of the state.
REDUCED_TYPES: Final = frozenset(_REDUCERS)


def with_head(state: DeploymentState, event: Event) -> DeploymentState:
    return replace(state, version=event.run_version, last_hash=event.hash, last_ts=event.ts,
                   last_type=event.type)


def apply(state: DeploymentState, event: Event) -> DeploymentState:
    """Fold one event into the state. Event types with no reducer only advance the head."""
    reducer = _REDUCERS.get(event.type)
    if reducer is not None:
        state = reducer(state, event, event.payload)
    return with_head(state, event)


def reduce_body(state: DeploymentState, event: Event) -> DeploymentState:
    """`apply` without moving the head. No reducer reads the head, so a fold may
    call this per event and `with_head` once, after the last one."""
    reducer = _REDUCERS.get(event.type)
    return state if reducer is None else reducer(state, event, event.payload)


def fold(events: Iterable[Event], state: DeploymentState | None = None) -> DeploymentState:
    """`functools.reduce(apply, events, state)`, computed with one head update."""
    state = state if state is not None else DeploymentState()
    last = None
    for event in events:
        state = reduce_body(state, event)
        last = event
    return state if last is None else with_head(state, last)


def fold_slowly(events: Iterable[Event], state: DeploymentState | None = None
                ) -> DeploymentState:
    """The definition of `fold`, one `apply` per event (tests hold `fold` to it)."""
    return reduce(apply, events, state if state is not None else DeploymentState())
