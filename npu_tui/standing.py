"""Where a run stands, in words, when this window lets go of it: when a conductor of this
process returns (a notice), and after the TUI quits (a line on the shell, with the command
that goes on)."""

from __future__ import annotations

from pathlib import Path

from textual.notifications import SeverityLevel

from npu_deploy.events import PHASE_NAMES, DeploymentState
from npu_deploy.events.decisions import waiting_text
from npu_deploy.events.describe import one_line, printable
from npu_deploy.store import EventStore

from .matrices import node_holding


def returned_words(run_id: str, outcome: str, state: DeploymentState
                   ) -> tuple[str, SeverityLevel]:
    """The notice when the conductor this window ran for `run_id` returns: why it stopped,
    from the run's state, and what goes on from there."""
    run = printable(run_id)
    if outcome.startswith("stopped: "):
        return (f"Run {run} stopped on an error: {one_line(outcome.removeprefix('stopped: '))}",
                "error")
    if state.status == "aborted":
        return f"Run {run} was aborted.", "information"
    if state.terminal:
        return f"Run {run} finished: verdict {state.verdict}.", "information"
    if state.status == "paused":
        return (f"Run {run} is paused. To go on: r on it in the runs list, or npu-deploy "
                f"resume {run} in a shell.", "information")
    return f"Run {run} stopped here: it is {state.status}.", "information"


def where_it_stands(state: DeploymentState, status: str) -> str:
    """"is paused at phase 2 (single block)", "waits: phase 0 (build CPU oracle) passed its
    gate: approve or redirect", in words that follow "run RUN "."""
    waiting = waiting_text(state)
    if waiting is not None:
        return f"{'is paused' if status == 'paused' else 'waits'}: {one_line(waiting, 160)}"
    k = state.current_phase
    return f"is {status}" + (f" at phase {k} ({PHASE_NAMES[k]})" if k is not None else "")


def quit_line(store_path: str | Path, run_id: str, *, here: bool) -> str | None:
    """After the TUI quit: the line for a run that waits for a person or is paused, saying
    where it stands and the command that goes on (`here`: its conductor still runs in this
    process, which is ending, so nothing will run it). None for a run that is running
    without waiting for anyone (in another process, or here mid-step), that ended, or that
    is not in the store."""
    with EventStore.open(store_path, readonly=True) as store:
        if run_id not in store.run_ids():
            return None
        state = store.fold(run_id)
        # another process runs it: one of this host's, or a node working it for its matrix
        elsewhere = not here and (store.is_locked(run_id)
                                  or node_holding(store, run_id) is not None)
    waits = waiting_text(state) is not None
    if state.terminal or (here and not waits and state.status == "running"):
        return None                     # ended; or cut mid-step, which the caller says
    # a conductor of this process was left a pause as the TUI quit: `resume` records it
    status = "paused" if here else state.status
    if not waits and status not in ("paused", "needs_human"):
        return None
    run = printable(run_id)
    command = (f"`npu-deploy attach {run}` opens it to decide" if elsewhere and waits
               else f"`npu-deploy resume {run}` goes on")
    return f"run {run} {where_it_stands(state, status)}; {command}"
