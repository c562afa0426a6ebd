"""A stored run opened again: `resume` goes on where it stopped (crashed, paused, stopped
for a person), `fork` starts a new run from any version of its history; both read the
configuration the run was started with (`run_config`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from npu_deploy.events import Event, NewEvent
from npu_deploy.events.payloads import RunForked, RunResumed
from npu_deploy.store import EventStore, RunWriter

from .conductor import Conductor
from .machine import DEFAULT_BUDGET
from .phase_run import Pipeline, Policy


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
