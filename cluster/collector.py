"""The head's collector: a Ray actor on the head's node, the one writer of the head's store
for the runs of a matrix. Nodes call it to learn what the head holds of a run, to ship the
run's new events (store/ingest.py checks and writes each shipment whole), and to fetch the
commands a person left here for the run. Everything it says it holds is committed to the
store first, so a head that restarts has lost nothing it acknowledged.

The actor is a plain class: driver.py makes it a Ray actor, and tests may call it as is.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

from npu_deploy.events import DeploymentState
from npu_deploy.store import EventStore, export_run
from npu_deploy.store.ingest import Shipment, ingest, relayable
from npu_deploy.store.matrix import note_cell
from npu_deploy.store.nodes import NodeRefused, load_keyring


class Collector:
    """Takes the nodes' events for the runs of matrix `matrix_id` into the store at `db`."""

    def __init__(self, db: str, matrix_id: str) -> None:
        self.db, self.matrix_id = db, matrix_id
        self.store = EventStore.open(Path(db))
        self.states: dict[str, DeploymentState] = {}    # each run's fold at the head's end
        self.cells: dict[str, dict[str, Any]] = {}
        self.events = 0                   # events taken in, and the seconds it took
        self.busy_s = 0.0

    def node_name(self, key_id: str) -> str:
        """The enrolled node of a key, or NodeRefused (the task fails: no retry changes it)."""
        node = load_keyring().by_id(key_id)
        if node is None or node.revoked_ts is not None:
            why = "does not hold it" if node is None else f"revoked it at {node.revoked_ts}"
            raise NodeRefused(f"node key {key_id}: the head's keyring {why}; on that host "
                              "`npu-deploy node key` prints its key, and `npu-deploy node "
                              "enroll NAME KEY` on the head trusts it")
        return node.name

    def begin(self, run_id: str, cell: dict[str, Any], key_id: str) -> dict[str, Any]:
        """A node starts (or takes over) a cell: what the head holds of its run."""
        self.cells[run_id] = cell
        try:
            node = self.node_name(key_id)
        except NodeRefused as e:     # the try is counted: a retry would show as a second
            note_cell(self.store, self.matrix_id, run_id, cell, "error", detail=str(e),
                      started=True)
            raise
        note_cell(self.store, self.matrix_id, run_id, cell, "running", node=node, started=True)
        row = self.store.conn.execute("SELECT head_version, head_hash, head_type FROM runs "
                                      "WHERE run_id = ?", (run_id,)).fetchone()
        if row is None:
            return {"version": 0, "hash": None, "ended": False, "node": node}
        return {"version": row[0], "hash": row[1], "ended": row[2] == "run.finished",
                "node": node}

    def held(self, run_id: str) -> bytes:
        """The head's copy of a run as an export file (store/transfer.py), for a node that
        takes the run over: it imports it, then resumes from its last event."""
        fd, tmp = tempfile.mkstemp(prefix=f".{run_id}.", suffix=".jsonl")
        os.close(fd)
        try:
            export_run(self.store, run_id, tmp)
            return Path(tmp).read_bytes()
        finally:
            Path(tmp).unlink(missing_ok=True)

    def ship(self, shipment: Shipment) -> int:
        """Take a stretch of a run; returns the version the head's copy now ends at."""
        t0 = time.perf_counter()
        received, state = ingest(self.store, shipment, load_keyring(),
                                 self.states.get(shipment.run_id))
        self.states[shipment.run_id] = state
        self.events += received.added
        self.busy_s += time.perf_counter() - t0
        return received.version

    def pending(self, run_id: str) -> list[dict[str, Any]]:
        """The commands a person left at the head for the run, not yet recorded in it."""
        return relayable(self.store, run_id)

    def end(self, run_id: str, state: str, detail: str | None) -> None:
        note_cell(self.store, self.matrix_id, run_id, self.cells.get(run_id, {}), state,
                  detail=detail)

    def stats(self) -> dict[str, float]:
        return {"events": self.events, "busy_s": self.busy_s}
