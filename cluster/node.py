"""What a node does with one cell of a matrix: the Ray task's body.

The run is written to a store of the node's own (`runs/RUN.db` in its node folder,
store/nodes.py), by the same conductor `npu-deploy deploy --headless` drives, and a
shipper thread sends each new stretch of it to the head's collector as it is written,
signed with the node's key. The same thread brings the commands a person left at the head
for the run into the node's inbox, each under the head's command id, so it is left here
once however often it comes; the conductor records it as it records any decision.

A task that starts a cell whose run the head already holds (Ray ran it again after its
node died, or the matrix was run again) takes the run over: the node's own copy when it
continues the head's (it ships the rest first), else the head's copy, imported, and the run
resumes from its last event. Its idempotency keys make the conductor write nothing twice
that the head already holds.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from npu_deploy.import_path import leave_the_checkout
from npu_deploy.store import EventStore, import_run
from npu_deploy.store.ingest import Shipment, pack
from npu_deploy.store.nodes import NodeKey, node_dir, node_key

from .spec import Cell, MatrixSpec

SHIP_EVERY_S = 0.5           # the longest a written event waits before it is shipped


@dataclass(frozen=True)
class CellResult:
    run_id: str
    state: str               # finished | needs_human (store/matrix.py's CELL_STATES)
    verdict: str | None
    detail: str
    node: str


def deploy_cell(spec_dict: dict[str, Any], cell_dict: dict[str, Any], collector: Any
                ) -> CellResult:
    """Run one cell to its end (or to a stop for a person) on this node: the Ray task."""
    leave_the_checkout()      # Ray puts the driver's working folder on the task's path
    import ray

    _share_the_cores()
    spec, cell = MatrixSpec(**_tuples(spec_dict)), Cell(**cell_dict)
    run_id = cell.run_id(spec.name)
    key = node_key(create=True)
    assert key is not None
    head = ray.get(collector.begin.remote(run_id, cell_dict, key.id))
    if head["ended"]:
        return CellResult(run_id, "finished", None, "the head holds the finished run",
                          head["node"])
    local = node_dir() / "runs" / f"{run_id}.db"
    local.parent.mkdir(parents=True, exist_ok=True)
    shipped = _take_over(local, run_id, head, collector) if head["version"] else 0
    store = EventStore.open(local)
    shipper = Shipper(local, run_id, key, collector, shipped)
    try:
        conductor = _conductor(store, spec, cell, run_id, shipped, shipper.written)
        shipper.start()
        try:
            halt = conductor.run(wait=False)
            while halt.reason in ("awaiting_human", "awaiting_pick"):
                halt = conductor.run(wait=True)
        finally:
            conductor.close()
    finally:
        shipper.stop()
        store.close()
    ended = halt.reason in ("finished", "failed")
    verdict = halt.detail if ended else None
    return CellResult(run_id, "finished" if ended else "needs_human", verdict,
                      f"{halt.reason}: {halt.detail}", head["node"])


def _share_the_cores() -> None:
    """Give the deployment this node's cores over its `npu` units. Ray sets OMP_NUM_THREADS
    to 1 for a task that asks for no CPU (ray/_private/utils.py, set_omp_num_threads_if_unset),
    which would leave a host with one NPU running the emulator's torch on one core."""
    import os

    import ray
    import torch

    here = ray.get_runtime_context().get_node_id()
    declared: dict[str, float] = next(
        (n["Resources"] for n in ray.nodes() if n["NodeID"] == here), {})
    cores = int(declared.get("CPU", 0)) or os.cpu_count() or 1
    torch.set_num_threads(max(1, cores // max(1, int(declared.get("npu", 1)))))


def _tuples(spec: dict[str, Any]) -> dict[str, Any]:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in spec.items()}


def _conductor(store: EventStore, spec: MatrixSpec, cell: Cell, run_id: str, held: int,
               on_event: Any) -> Any:
    """A new run for the cell, or the run this node holds, resumed."""
    from npu_deploy.deploy_request import code_version, resume_run
    from npu_deploy.machine import Conductor, load_pipeline

    if held or run_id in store.run_ids():
        return resume_run(store, run_id, on_event=on_event, adopt=True)
    deployment = spec.deployment(cell, with_model=True)
    return Conductor.start(store, load_pipeline(deployment.pipeline), deployment.policy(),
                           model=cell.model, backend=cell.backend,
                           code_version=code_version(), run_id=run_id,
                           config={**deployment.config, "matrix": spec.name},
                           on_event=on_event)


def _take_over(local: Path, run_id: str, head: dict[str, Any], collector: Any) -> int:
    """Make the node's store hold the run as the head does (or more): its own copy when that
    continues the head's, else the head's copy imported. Returns the version shipped."""
    import ray

    if local.exists():
        with EventStore.open(local) as store:
            if run_id in store.run_ids():
                at = store.event_at(run_id, head["version"])
                if at is not None and at.hash == head["hash"]:
                    return int(head["version"])     # the shipper sends the rest
        local.rename(local.with_name(f"{local.name}.behind-{time.time_ns()}"))
    exported = local.with_name(f"{run_id}.head.jsonl")
    exported.write_bytes(ray.get(collector.held.remote(run_id)))
    try:
        with EventStore.open(local) as store:
            import_run(store, exported)
    finally:
        exported.unlink(missing_ok=True)
    return int(head["version"])


class Shipper(threading.Thread):
    """Ships the run's new events to the head as they are written, and brings the head's
    commands for the run into the node's inbox."""

    def __init__(self, local: Path, run_id: str, key: NodeKey, collector: Any,
                 shipped: int) -> None:
        super().__init__(name=f"ship {run_id}", daemon=True)
        self.local, self.run_id, self.key, self.collector = local, run_id, key, collector
        self.shipped = shipped
        self.blobs: set[str] = set()
        self._wake, self._done = threading.Event(), threading.Event()
        self.error: BaseException | None = None

    def written(self, _event: Any) -> None:
        """The conductor's on_event: a new event is committed."""
        self._wake.set()

    def run(self) -> None:
        try:
            with EventStore.open(self.local) as store:
                while not self._done.is_set():
                    self._wake.wait(SHIP_EVERY_S)
                    self._wake.clear()
                    self.ship(store)
                    self.relay(store)
                self.ship(store)
        except BaseException as e:      # raised again by stop(), in the task's thread
            self.error = e

    def ship(self, store: EventStore) -> None:
        import ray

        events, blobs = pack(store, self.run_id, self.shipped, self.blobs)
        if not events:
            return
        last = events[-1]
        signature = self.key.sign(self.run_id, last["run_version"], last["hash"])
        ray.get(self.collector.ship.remote(Shipment(self.run_id, events, blobs, signature)))
        self.shipped = last["run_version"]
        self.blobs |= {b["blob"] for b in blobs}

    def relay(self, store: EventStore) -> None:
        """Each command the head holds for the run, left in this node's inbox once."""
        import ray

        for command in ray.get(self.collector.pending.remote(self.run_id)):
            store.post_command(self.run_id, command["kind"], command["payload"],
                               author=command["author"], relayed=command["command_id"])

    def stop(self) -> None:
        self._done.set()
        self._wake.set()
        if self.is_alive():
            self.join()
        if self.error is not None:
            raise self.error
