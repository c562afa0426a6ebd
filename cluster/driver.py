"""Running a matrix: its cells as Ray tasks, each needing one unit of the `npu` resource, and
the head's collector taking their events into the head's store.

With no address, a Ray instance is started on this machine, declaring as many `npu` units
as the emulator backend runs deployments side by side here (`emulator_npus`): the same
command works on one laptop. With an address (`ray start --head` on the head, `ray start
--address HEAD:6379 --resources '{"npu": 1}'` on each NPU host), the cells go to the hosts.

A task whose node dies is run again by Ray on another node (up to `retries` times), and
takes the run over from what the head holds (node.py). A task that fails by raising (a
model that does not load, a node the head does not trust) is not run again: the same
inputs would fail the same way, so the cell says why and the matrix goes on.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from npu_deploy.store import EventStore
from npu_deploy.store.matrix import note_cell, record_matrix

from .spec import Cell, MatrixSpec

NPU = "npu"
RETRIES = 3                # how many times a cell survives losing its node


def emulator_npus() -> int:
    """How many deployments the emulator backend runs side by side on this machine: one per
    core (each deployment's torch then runs on one core of its own)."""
    return max(1, os.cpu_count() or 1)


@dataclass(frozen=True)
class CellOutcome:
    cell: Cell
    run_id: str
    state: str
    verdict: str | None
    detail: str
    node: str | None


@dataclass(frozen=True)
class MatrixOutcome:
    matrix: str
    cells: list[CellOutcome]
    wall_s: float
    events: int          # events the head took in, and the seconds its collector spent
    ingest_s: float

    @property
    def exit_code(self) -> int:
        """0 when every run passed; 3 when one waits for a person; 1 otherwise."""
        if all(c.verdict == "PASS" for c in self.cells):
            return 0
        return 3 if any(c.state == "needs_human" for c in self.cells) else 1


def start_ray(address: str | None, npus: int | None) -> None:
    """Connect to the cluster at `address`, or start a local instance with `npus` units."""
    import ray

    quiet: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                             "configure_logging": False}
    if address:
        ray.init(address=address, **quiet)
    else:
        ray.init(resources={NPU: npus or emulator_npus()}, **quiet)
    if not ray.cluster_resources().get(NPU):
        raise RuntimeError(f"the Ray cluster at {address or 'this machine'} declares no "
                           f"'{NPU}' resource: start each NPU host with `ray start --address "
                           "HEAD:6379 --resources '{\"npu\": 1}'`")


def run_matrix(spec: MatrixSpec, db: Path, *, retries: int = RETRIES,
               say: Callable[[str], None] = print) -> MatrixOutcome:
    """Run every cell of `spec` not already finished in the store at `db` (the head's) on
    the connected Ray cluster; returns when every cell has ended or stopped for a person."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from .collector import Collector
    from .node import deploy_cell

    t0 = time.perf_counter()
    store = EventStore.open(db)
    try:
        record_matrix(store, spec.name, spec.to_dict())
        todo = _cells_to_run(store, spec, say)
    finally:
        store.close()
    here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
    collector: Any = ray.remote(Collector).options(num_cpus=0, scheduling_strategy=here).remote(
        str(db), spec.name)
    task = ray.remote(deploy_cell).options(resources={NPU: 1}, num_cpus=0,
                                           max_retries=retries, retry_exceptions=False)
    running = {task.remote(spec.to_dict(), asdict(c), collector): c for c in todo}
    outcomes = []
    while running:
        done, _ = ray.wait(list(running), num_returns=1)
        cell = running.pop(done[0])
        outcome = _outcome(spec, cell, done[0], collector)
        outcomes.append(outcome)
        say(f"{outcome.run_id}: {outcome.verdict or outcome.state} on {outcome.node or '-'}"
            f" ({outcome.detail})")
    stats: dict[str, float] = ray.get(collector.stats.remote())
    ray.kill(collector)
    return MatrixOutcome(spec.name, outcomes, time.perf_counter() - t0, int(stats["events"]),
                         float(stats["busy_s"]))


def _cells_to_run(store: EventStore, spec: MatrixSpec, say: Callable[[str], None]) -> list[Cell]:
    """Enter every cell in the book; those whose run the head holds finished are not run."""
    todo = []
    for cell in spec.cells():
        run_id = cell.run_id(spec.name)
        row = store.conn.execute("SELECT head_type FROM runs WHERE run_id = ?",
                                 (run_id,)).fetchone()
        if row is not None and row[0] == "run.finished":
            say(f"{run_id}: finished already")
            continue
        note_cell(store, spec.name, run_id, asdict(cell), "queued")
        todo.append(cell)
    return todo


def _outcome(spec: MatrixSpec, cell: Cell, ref: Any, collector: Any) -> CellOutcome:
    """The task's result; a task that raised, or lost its node more often than allowed,
    ends its cell as an error with the reason in one line."""
    import ray
    from ray.exceptions import RayTaskError

    run_id = cell.run_id(spec.name)
    try:
        result = ray.get(ref)
    except RayTaskError as e:
        cause = e.cause if e.cause is not None else e
        detail = f"{type(cause).__name__}: {str(cause).strip().splitlines()[-1][:300]}"
    except ray.exceptions.RayError as e:      # the node died once more than `retries`
        detail = f"lost its node too often ({type(e).__name__})"
    else:
        ray.get(collector.end.remote(run_id, result.state, result.detail))
        return CellOutcome(cell, run_id, result.state, result.verdict, result.detail,
                           result.node)
    ray.get(collector.end.remote(run_id, "error", detail))
    return CellOutcome(cell, run_id, "error", None, detail, None)
