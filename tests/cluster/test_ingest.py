"""The head takes a node's events (store/ingest.py, through the collector of cluster/) only
whole, only continuing its copy, only signed by an enrolled, unrevoked node key; verify
names the node of each stretch; a command left at the head reaches the node's inbox once
and is consumed at the head by the node's decision. Real stores, real runs (the conductor
with the fast fake pipeline), real Ed25519 keys; no Ray (tests/cluster/test_ray_matrix.py
runs these through Ray)."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest
from tui_runs import pipeline

from npu_deploy.cluster.collector import Collector
from npu_deploy.machine import Conductor, Policy, resume
from npu_deploy.store import EventStore
from npu_deploy.store.ingest import Shipment, ShipmentRefused, pack
from npu_deploy.store.nodes import (
    NodeKey,
    NodeRefused,
    enroll,
    load_keyring,
    node_key,
    node_key_path,
    public_from_text,
    revoke,
)


def _node(tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch, *,
          enrolled: bool = True) -> NodeKey:
    monkeypatch.setenv("NPU_DEPLOY_NODE_KEY_FILE", str(tmp_path / f"{name}.key"))
    key = node_key(create=True)
    assert key is not None
    if enrolled:
        enroll(name, key.public)
    return key


def _node_run(db: Path, run_id: str, *, halt_at_checkpoint: bool = False) -> EventStore:
    """A run written on a node: the fake pipeline through every phase (or to phase 0's
    checkpoint, waiting for a person)."""
    store = EventStore.open(db)
    c = Conductor.start(store, pipeline(), Policy(auto_approve=not halt_at_checkpoint),
                        model="tiny-llama", run_id=run_id)
    try:
        c.run(wait=False)
    finally:
        c.close()
    return store


def _shipment(store: EventStore, key: NodeKey, run_id: str, after: int,
              upto: int | None = None) -> Shipment:
    events, blobs = pack(store, run_id, after)
    if upto is not None:
        events = [e for e in events if e["run_version"] <= upto]
    last = events[-1]
    return Shipment(run_id, events, blobs, key.sign(run_id, last["run_version"], last["hash"]))


def _head_events(db: Path, run_id: str) -> list[tuple[int, str]]:
    with sqlite3.connect(db) as conn:
        return list(conn.execute("SELECT run_version, hash FROM events WHERE run_id = ? "
                                 "ORDER BY run_version", (run_id,)))


def test_stretches_shipped_in_order_make_the_run_at_the_head_and_verify_names_the_node(
        tmp_path, monkeypatch):
    key = _node(tmp_path, "npu-a", monkeypatch)
    node = _node_run(tmp_path / "node.db", "r1")
    total = node.fold("r1").version
    head = Collector(str(tmp_path / "head.db"), "m")
    assert head.ship(_shipment(node, key, "r1", 0, upto=10)) == 10
    # a stretch shipped again (the node did not hear the answer) is the very same: skipped
    assert head.ship(_shipment(node, key, "r1", 0, upto=10)) == 10
    assert head.ship(_shipment(node, key, "r1", 5)) == total
    assert _head_events(tmp_path / "head.db", "r1") == [
        (e.run_version, e.hash) for e in node.events("r1")]
    report = head.store.verify("r1")
    assert report.trusted and report.made_on == (f"npu-a (v1-v{total})",)
    assert f"made on npu-a (v1-v{total})" in report.line()
    assert head.stats()["events"] == total


def test_a_restarted_head_takes_the_run_up_where_its_store_ends(tmp_path, monkeypatch):
    """What the head acknowledged was committed: a new collector on the same store (the head
    restarted) goes on from there, and a second node's stretch is named as its own."""
    key_a = _node(tmp_path, "npu-a", monkeypatch)
    key_b = _node(tmp_path, "npu-b", monkeypatch)
    node = _node_run(tmp_path / "node.db", "r1")
    total = node.fold("r1").version
    first = Collector(str(tmp_path / "head.db"), "m")
    first.ship(_shipment(node, key_a, "r1", 0, upto=12))
    first.store.close()
    again = Collector(str(tmp_path / "head.db"), "m")
    assert again.begin("r1", {"model": "tiny-llama"}, key_b.id)["version"] == 12
    again.ship(_shipment(node, key_b, "r1", 12))
    assert again.store.verify("r1").made_on == ("npu-a (v1-v12)", f"npu-b (v13-v{total})")


@pytest.mark.parametrize("damage", ["payload", "hash", "gap", "fork", "run"])
def test_a_damaged_or_disjoint_shipment_is_refused_whole(tmp_path, monkeypatch, damage):
    key = _node(tmp_path, "npu-a", monkeypatch)
    node = _node_run(tmp_path / "node.db", "r1")
    head = Collector(str(tmp_path / "head.db"), "m")
    head.ship(_shipment(node, key, "r1", 0, upto=6))
    before = _head_events(tmp_path / "head.db", "r1")
    events, blobs = pack(node, "r1", 6)
    if damage == "payload":      # re-signed by the node, but an event edited on the way
        events[2]["payload"] = {**events[2]["payload"], "note": "edited"}
    elif damage == "hash":       # the edit's hash recomputed: the next link breaks
        events[0]["prev_hash"] = "0" * 64
    elif damage == "gap":
        events = events[3:]
    elif damage == "fork":       # another v1-v6 than the head holds
        other = _node_run(tmp_path / "other.db", "r1")
        events, blobs = pack(other, "r1", 0)
    else:
        events[1]["run_id"] = "r2"
    last = events[-1]
    shipment = Shipment("r1", events, blobs, key.sign("r1", last["run_version"], last["hash"]))
    with pytest.raises(ShipmentRefused) as refused:
        head.ship(shipment)
    assert "\n" not in str(refused.value)
    assert _head_events(tmp_path / "head.db", "r1") == before


def test_only_an_enrolled_unrevoked_key_that_signed_what_was_shipped_is_taken(
        tmp_path, monkeypatch):
    stranger = _node(tmp_path, "stranger", monkeypatch, enrolled=False)
    key = _node(tmp_path, "npu-a", monkeypatch)
    node = _node_run(tmp_path / "node.db", "r1")
    head = Collector(str(tmp_path / "head.db"), "m")
    with pytest.raises(ShipmentRefused, match=f"signed by node key {stranger.id}, which the "
                                              "head's keyring"):
        head.ship(_shipment(node, stranger, "r1", 0, upto=4))
    with pytest.raises(NodeRefused, match="does not hold it"):
        head.begin("r1", {}, stranger.id)
    forged = _shipment(node, key, "r1", 0, upto=4)
    forged = Shipment("r1", forged.events, forged.blobs,
                      _shipment(node, key, "r1", 0, upto=3).signature)
    with pytest.raises(ShipmentRefused, match="does not match what was shipped"):
        head.ship(forged)
    head.ship(_shipment(node, key, "r1", 0, upto=4))
    revoke("npu-a")
    with pytest.raises(ShipmentRefused, match="was revoked at"):
        head.ship(_shipment(node, key, "r1", 4))
    assert _head_events(tmp_path / "head.db", "r1")[-1][0] == 4
    # what it signed before is no longer vouched for
    report = head.store.verify("r1")
    assert report.ok and not report.trusted and "was revoked at" in report.unanchored


def test_verify_breaks_when_a_stored_node_signature_no_longer_holds(tmp_path, monkeypatch):
    key = _node(tmp_path, "npu-a", monkeypatch)
    node = _node_run(tmp_path / "node.db", "r1")
    head = Collector(str(tmp_path / "head.db"), "m")
    head.ship(_shipment(node, key, "r1", 0))
    head.store.close()
    with sqlite3.connect(tmp_path / "head.db") as conn:
        conn.execute("UPDATE node_anchors SET signature = ? WHERE run_id = 'r1'",
                     (_shipment(node, key, "r1", 0, upto=3).signature,))
    with EventStore.open(tmp_path / "head.db") as store:
        report = store.verify("r1")
    assert not report.ok and "signature over" in report.problem


def test_a_command_left_at_the_head_is_left_once_on_the_node_and_consumed_at_the_head(
        tmp_path, monkeypatch):
    key = _node(tmp_path, "npu-a", monkeypatch)
    node = _node_run(tmp_path / "node.db", "r1", halt_at_checkpoint=True)
    head = Collector(str(tmp_path / "head.db"), "m")
    head.ship(_shipment(node, key, "r1", 0))
    command_id = head.store.post_command("r1", "redirect", {"instruction": "retile q_proj"},
                                         author="ada@head")
    relayed = head.pending("r1")
    assert [c["command_id"] for c in relayed] == [command_id]
    for _ in range(2):                     # relayed twice: left once
        for c in relayed:
            node.post_command("r1", c["kind"], c["payload"], author=c["author"],
                              relayed=c["command_id"])
    assert [c["command_id"] for c in node.pending_commands("r1")] == [command_id]
    shipped = node.fold("r1").version
    conductor = resume(node, "r1", pipeline())
    try:
        conductor.run(wait=False)
    finally:
        conductor.close()
    decisions = [e for e in node.events("r1") if e.type == "human.decision"]
    assert [d.payload["command_id"] for d in decisions] == [command_id]
    head.ship(_shipment(node, key, "r1", shipped))
    assert head.pending("r1") == []
    assert head.store.unbacked_decisions("r1") == {}
    assert head.store.verify("r1").trusted


def test_node_keys_and_the_keyring(tmp_path, monkeypatch):
    key = _node(tmp_path, "npu-a", monkeypatch, enrolled=False)
    assert os.stat(node_key_path()).st_mode & 0o777 == 0o600
    assert node_key(create=False) == key          # made once, read back
    enroll("npu-a", public_from_text(key.public.hex().upper()))
    with pytest.raises(NodeRefused, match="enrolled already, as node npu-a"):
        enroll("other", key.public)
    with pytest.raises(NodeRefused, match="revoke npu-a"):
        enroll("npu-a", bytes(32))
    with pytest.raises(NodeRefused, match="not a node's public key"):
        public_from_text("xyz")
    with pytest.raises(NodeRefused, match="node name"):
        enroll("[bold]x", bytes(31) + b"\x01")
    revoke("npu-a")
    with pytest.raises(NodeRefused, match="never trusted again"):
        enroll("npu-a2", key.public)
    ring = load_keyring()
    assert [(n.name, n.revoked_ts is not None) for n in ring.nodes] == [("npu-a", True)]
    Path(os.environ["NPU_DEPLOY_KEYRING"]).write_text("{not json")
    with pytest.raises(NodeRefused, match="is not an npu-deploy keyring"):
        load_keyring()
