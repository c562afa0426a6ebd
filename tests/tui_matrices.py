"""A head's store with matrices for the TUI's tests (tests/tui/test_tui_matrices.py): runs
made on a node's own store by the real conductor on the fake pipeline (tests/tui_runs.py,
under its fake clock), shipped into the head's store by store/ingest.py with a real node
key enrolled in a keyring of the test's, and entered in the head's book
(store/matrix.py), as `npu-deploy matrix` does it across hosts (docs/cluster.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tui_runs

from npu_deploy.machine import Conductor, Policy
from npu_deploy.store import EventStore
from npu_deploy.store.ingest import Received, Shipment, ingest, pack
from npu_deploy.store.matrix import note_cell, record_matrix
from npu_deploy.store.nodes import NodeKey, enroll, load_keyring, node_key

MATRIX = "nightly"
NODE = "npu-host-1"
SPEC = {"name": MATRIX, "models": ["tiny"], "seq_lens": [16, 32, 64], "backends": ["emulator"],
        "agents": ["autopilot"]}
#: A second matrix, entered first, whose name and model hold Rich markup: shown as is.
MARKUP = "sweep[b]x[/b]"
MARKUP_MODEL = "[bold]tiny[red]"


def cell_run(seq_len: int, matrix: str = MATRIX) -> str:
    """A cell's run id as cluster/spec.py makes it (what a run id cannot hold as "_")."""
    return re.sub(r"[^A-Za-z0-9._-]", "_", f"{matrix}.tiny.s{seq_len}.emulator.autopilot")


def cell(seq_len: int, model: str = "tiny") -> dict[str, Any]:
    return {"model": model, "seq_len": seq_len, "backend": "emulator", "agent": "autopilot"}


@dataclass
class Head:
    """The head's store, a node's store and the node's key."""

    path: Path
    node_path: Path
    key: NodeKey

    def ship(self, run_id: str) -> Received:
        """The node's events of `run_id` that the head lacks, shipped and taken in."""
        with EventStore.open(self.path) as head, EventStore.open(self.node_path) as node:
            row = head.conn.execute("SELECT head_version FROM runs WHERE run_id = ?",
                                    (run_id,)).fetchone()
            events, blobs = pack(node, run_id, row[0] if row else 0)
            last = events[-1]
            signature = self.key.sign(run_id, last["run_version"], last["hash"])
            return ingest(head, Shipment(run_id, events, blobs, signature), load_keyring())[0]


def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> NodeKey:
    """A node key of the test's, enrolled in a keyring of the test's (the user's key that
    anchors the head's runs is the session's: tests/conftest.py)."""
    monkeypatch.setenv("NPU_DEPLOY_KEYRING", str(tmp_path / "nodes.json"))
    monkeypatch.setenv("NPU_DEPLOY_NODE_KEY_FILE", str(tmp_path / "node.key"))
    key = node_key(create=True)
    assert key is not None
    enroll(NODE, key.public)
    return key


def build_head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Head:
    """The head of two matrices: `sweep[b]x[/b]` (one finished cell of a model whose name
    holds markup), and `nightly`, entered later, of three cells: s16 finished (PASS, after a
    failed gate), s32 waiting at phase 0's checkpoint on its node, s64 queued; and one run
    made on the head itself, in no matrix. Everything is written on the fake clock, so the
    browser reads the same on every run."""
    key = keys(tmp_path, monkeypatch)
    clock = tui_runs.FakeClock()
    monkeypatch.setattr("npu_deploy.store.matrix.utc_now", clock.utc_now)
    head = Head(tmp_path / "runs.db", tmp_path / "node.db", key)
    with EventStore.open(head.node_path) as node, tui_runs.deterministic(clock):
        tui_runs.finished_run(node, cell_run(16))
        tui_runs.checkpoint_run(node, cell_run(32))
        c = Conductor.start(node, tui_runs.pipeline(), Policy(auto_approve=True),
                            model=MARKUP_MODEL, run_id=cell_run(8, MARKUP))
        try:
            assert c.run(wait=False).reason == "finished"
        finally:
            c.close()
    with EventStore.open(head.path) as store, tui_runs.deterministic(clock):
        tui_runs.stopped_run(store, "here-1")
        record_matrix(store, MARKUP, {**SPEC, "name": MARKUP, "seq_lens": [8]})
        note_cell(store, MARKUP, cell_run(8, MARKUP), cell(8, MARKUP_MODEL), "running",
                  node=NODE, started=True)
    head.ship(cell_run(8, MARKUP))
    with EventStore.open(head.path) as store, tui_runs.deterministic(clock):
        note_cell(store, MARKUP, cell_run(8, MARKUP), cell(8, MARKUP_MODEL), "finished")
        record_matrix(store, MATRIX, SPEC)
        for seq in (16, 32, 64):
            note_cell(store, MATRIX, cell_run(seq), cell(seq), "queued")
        for seq in (16, 32):
            note_cell(store, MATRIX, cell_run(seq), cell(seq), "running", node=NODE,
                      started=True)
    head.ship(cell_run(16))
    head.ship(cell_run(32))
    with EventStore.open(head.path) as store:
        note_cell(store, MATRIX, cell_run(16), cell(16), "finished",
                  detail="finished: PASS")
    return head


def advance(node: EventStore, run_id: str) -> str:
    """The node's run resumed on the fake pipeline (recording what its inbox holds) and run
    to its next stop, as the node's conductor does; returns why it stopped."""
    from npu_deploy.machine import resume

    conductor = resume(node, run_id, tui_runs.pipeline())
    try:
        return conductor.run(wait=False).reason
    finally:
        conductor.close()
