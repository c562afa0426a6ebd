"""The deployment's state machine: eight phases with their sub-states, and the run around
them, as one table for the `transitions` library.

The machine is driven by events. Every event type that moves a deployment maps to one
trigger (`trigger_for`); the conductor asks the machine whether the trigger is legal
(`check`), commits the event, folds it, and only then fires the trigger (`fire`). Guards
read the folded state from before the event and the event's payload, never anything else,
so the answer before the commit and after it is the same. An illegal trigger raises
`IllegalTransition`; nothing is ignored. No callback does I/O.

The machine's state is also a pure function of the folded state (`state_of`): resuming a
run rebuilds the machine there without firing any callback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from transitions import EventData
from transitions.extensions.nesting import HierarchicalMachine, NestedState

from npu_deploy.events import DeploymentState
from npu_deploy.events.decisions import answered, refusal
from npu_deploy.events.state import GATE_TOOL, PHASE_NAMES

PHASES: Final = tuple(range(len(PHASE_NAMES)))
SUBSTATES: Final = ("working", "gating", "passed", "failed", "awaiting_human", "debugging",
                    "done")
DEFAULT_BUDGET: Final = 3          # attempts of one phase before a person is asked


class IllegalTransition(RuntimeError):
    """An event that the machine does not allow in its current state."""


class _State(NestedState):
    separator = "."                 # sub-state names hold underscores


class _Machine(HierarchicalMachine):
    state_cls = _State


def phase_state(phase: int, sub: str) -> str:
    return f"running.p{phase}.{sub}"


# --- the table ---------------------------------------------------------------------------

# Per phase k: (trigger, source, dest, guards). "{prev}" is where phase k starts from;
# a dest of None is an internal transition (recorded, the state stays).
PHASE_TABLE: Final = (
    ("enter", "{prev}", "working", ()),
    ("enter", "awaiting_human", "working", ("retry_decided",)),
    ("enter", "debugging", "working", ("retry_decided",)),
    ("enter", "@needs_human", "working", ("retry_decided",)),
    ("evaluate", "working", "gating", ()),
    ("gate", "gating", "passed", ("gate_passed",)),
    ("gate", "gating", "failed", ("gate_failed",)),
    ("checkpoint", "passed", "awaiting_human", ()),
    ("propose", "failed", "debugging", ("within_budget",)),
    ("decide", "awaiting_human", None, ("checkpoint_open",)),
    ("decide", "debugging", None, ("proposal_open",)),
    ("decide", "@needs_human", None, ("stopped_here",)),
    ("decide", "debugging", None, ("override_open",)),
    ("decide", "@needs_human", None, ("override_open",)),
    ("exit", "awaiting_human", "done", ("approved",)),
    ("exit", "debugging", "done", ("approved",)),
    ("exit", "@needs_human", "done", ("approved",)),
    ("exit", "failed", "@needs_human", ("budget_exhausted",)),
    ("exit", "debugging", "@needs_human", ("nothing_to_change",)),
    ("exit", "working", "@needs_human", ("interrupted",)),
    ("exit", "gating", "@needs_human", ("interrupted",)),
)

RUN_TABLE: Final = (
    ("start", "new", "ready", ()),
    # A person's pause and abort: legal as events/decisions.py says (a paused run takes no
    # second pause).
    ("pause", ["ready", "running", "paused", "needs_human"], "paused", ("decision_open",)),
    ("request_abort", ["ready", "running", "paused", "needs_human"], None, ("decision_open",)),
    ("abort", ["ready", "running", "paused", "needs_human"], "aborted", ("aborting",)),
    ("finish", phase_state(PHASES[-1], "done"), "finished", ()),
    # FAIL: the evaluator's verdict, or a run given up on, blocks acceptance.
    ("fail", ["running", "needs_human"], "failed", ()),
    ("resume", ["ready", "running", "paused", "needs_human"], None, ()),
)


def _where(template: str, k: int) -> str:
    if template == "{prev}":
        return "ready" if k == 0 else phase_state(k - 1, "done")
    if template.startswith("@"):
        return template[1:]
    return phase_state(k, template)


def transitions_table() -> list[dict[str, Any]]:
    """Every transition, as `transitions` takes them (generated from the two tables)."""
    out: list[dict[str, Any]] = []
    for k in PHASES:
        for trigger, source, dest, guards in PHASE_TABLE:
            out.append({"trigger": f"{trigger}_p{k}", "source": _where(source, k),
                        "dest": None if dest is None else _where(dest, k),
                        "conditions": list(guards)})
    for run_trigger, run_source, run_dest, run_guards in RUN_TABLE:
        out.append({"trigger": run_trigger, "source": run_source, "dest": run_dest,
                    "conditions": list(run_guards)})
    return out


def states_table() -> list[Any]:
    phases = [{"name": f"p{k}", "children": list(SUBSTATES)} for k in PHASES]
    return ["new", "ready", {"name": "running", "children": phases}, "paused",
            "needs_human", "finished", "failed", "aborted"]


# --- from events to triggers and from the fold to states -----------------------------------

def trigger_for(type_: str, payload: dict[str, Any], phase: int | None,
                actor: str = "harness") -> str | None:
    """The trigger an event fires, or None for events that move no state (messages, tool
    steps, profiles, ...)."""
    if type_ in ("run.started", "run.forked"):
        return "start"
    if type_ == "run.resumed":
        return "resume"
    if type_ == "run.finished":
        return {"ABORTED": "abort", "FAIL": "fail"}.get(payload.get("verdict", ""), "finish")
    if type_ == "human.decision" and payload["decision"] == "pause":
        return "pause"
    if type_ == "human.decision" and payload["decision"] == "abort":
        return "request_abort"
    per_phase = {"phase.entered": "enter", "gate.evaluated": "gate",
                 "checkpoint.requested": "checkpoint", "debug.proposed": "propose",
                 "human.decision": "decide", "phase.exited": "exit"}
    if type_ == "tool.requested" and payload.get("tool") == GATE_TOOL and actor == "harness":
        return f"evaluate_p{phase}"
    if type_ in per_phase:
        if phase is None:
            raise IllegalTransition(f"{type_} needs the phase it belongs to")
        return f"{per_phase[type_]}_p{phase}"
    return None


def state_of(s: DeploymentState) -> str:
    """The machine state a folded deployment is in."""
    if s.status in ("new", "paused", "needs_human", "finished", "failed", "aborted"):
        return s.status
    if s.current_phase is None:
        return "ready"
    status = s.phases[s.current_phase].status
    if status == "exited:passed":
        return phase_state(s.current_phase, "done")
    if status not in SUBSTATES:
        raise IllegalTransition(f"phase {s.current_phase} is {status!r}, which the machine "
                                "has no state for")
    return phase_state(s.current_phase, status)


# --- the guards ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Facts:
    """What a guard may read: the folded state before the event, and the event."""

    pre: DeploymentState
    payload: dict[str, Any]
    phase: int | None
    budget: int


def _phase(f: Facts) -> Any:
    return f.pre.phases[f.phase] if f.phase is not None else None


def _decision_open(f: Facts, *answers: str) -> bool:
    """The decision is legal now (events/decisions.py) and closes one of these waits."""
    return (answered(f.pre, f.payload, f.phase) in answers
            and refusal(f.pre, f.payload, f.phase) is None)


def _attempts_in_budget(f: Facts) -> int:
    ph = _phase(f)
    return int(ph.attempts - ph.budget_from)


GUARDS: dict[str, Callable[[Facts], bool]] = {
    "gate_passed": lambda f: bool(f.payload["passed"]),
    "gate_failed": lambda f: not f.payload["passed"],
    "within_budget": lambda f: _attempts_in_budget(f) < f.budget,
    "budget_exhausted": lambda f: (_attempts_in_budget(f) >= f.budget
                                   and f.payload["outcome"] == "needs_human"),
    "interrupted": lambda f: f.payload["outcome"] == "needs_human",
    # a deterministic failure whose directions change nothing: the policy stops for a person
    "nothing_to_change": lambda f: (f.payload["outcome"] == "needs_human"
                                    and _phase(f).pending_deterministic),
    "retry_decided": lambda f: _phase(f).decision in ("redirect", "pick"),
    "decision_open": lambda f: refusal(f.pre, f.payload, f.phase) is None,
    # The decisions: which are legal is events/decisions.py's rule; each guard names the
    # wait its decisions close.
    "checkpoint_open": lambda f: _decision_open(f, "checkpoint"),      # approve, redirect
    "proposal_open": lambda f: (f.payload["decision"] == "pick"
                                and _decision_open(f, "proposal")),
    "stopped_here": lambda f: (f.payload["decision"] == "redirect"
                               and _decision_open(f, "stopped")),
    # A person passes a phase whose last gate failed: while its debug directions wait, or
    # after it stopped for a person. Only an explicit override (never a plain approve).
    "override_open": lambda f: (bool(f.payload.get("override"))
                                and _decision_open(f, "proposal", "stopped")),
    "approved": lambda f: (_phase(f).decision == "approve"
                           and f.payload["outcome"] == "passed"),
    "aborting": lambda f: f.pre.aborting,
}


# --- the machine ---------------------------------------------------------------------------

class DeploymentMachine:
    """The model the `transitions` machine drives. `state` is the machine's state."""

    state: str

    def __init__(self, budget: int = DEFAULT_BUDGET, at: DeploymentState | None = None
                 ) -> None:
        self.budget = budget
        self._machine = _Machine(model=self, states=states_table(),
                                 transitions=transitions_table(), initial="new",
                                 send_event=True, auto_transitions=False,
                                 model_override=False)
        for name, guard in GUARDS.items():
            setattr(self, name, _guard(guard))
        if at is not None:
            self.rebuild(at)

    def rebuild(self, folded: DeploymentState) -> None:
        """Put the machine where the folded state is, firing no callback (resume)."""
        self._machine.set_state(state_of(folded), model=self)

    def _facts(self, pre: DeploymentState, payload: dict[str, Any], phase: int | None
               ) -> dict[str, Any]:
        return {"facts": Facts(pre, payload, phase, self.budget)}

    def allows(self, trigger: str, pre: DeploymentState, payload: dict[str, Any],
               phase: int | None) -> bool:
        """Whether firing `trigger` now, for this event, is legal."""
        if trigger not in self._machine.events:
            return False
        return bool(self.may_trigger(trigger, **self._facts(pre, payload, phase)))

    def check(self, trigger: str, pre: DeploymentState, payload: dict[str, Any],
              phase: int | None) -> None:
        if not self.allows(trigger, pre, payload, phase):
            raise IllegalTransition(f"{trigger} is not allowed in state {self.state}")

    def fire(self, trigger: str, pre: DeploymentState, payload: dict[str, Any],
             phase: int | None) -> None:
        """Fire `trigger` for an event already committed (raises if it is illegal)."""
        self.check(trigger, pre, payload, phase)
        if not self.trigger(trigger, **self._facts(pre, payload, phase)):
            raise IllegalTransition(f"{trigger} did not fire from state {self.state}")

    # `transitions` adds `trigger`, `may_trigger` and the `is_*` helpers to this model.
    trigger: Callable[..., bool]
    may_trigger: Callable[..., bool]


def _guard(fn: Callable[[Facts], bool]) -> Callable[[EventData], bool]:
    def guard(event: EventData) -> bool:
        return fn(event.kwargs["facts"])
    return guard


def mermaid() -> str:
    """The machine drawn as a Mermaid state diagram, from the same tables."""
    from transitions.extensions.diagrams import HierarchicalGraphMachine

    base: Any = HierarchicalGraphMachine.state_cls

    class _GraphState(base):  # type: ignore[misc,valid-type]
        separator = "."

    class _Graph(HierarchicalGraphMachine):
        state_cls = _GraphState

    class _Model:
        pass

    table = [{**t, "conditions": t["conditions"] or None} for t in transitions_table()]
    graph = _Graph(model=_Model(), states=states_table(), transitions=table, initial="new",
                   auto_transitions=False, graph_engine="mermaid", title="npu-deploy run",
                   show_conditions=True)
    return str(graph.get_graph().draw(None))
