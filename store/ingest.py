"""Taking a node's events into the head's store as they are written (npu-deploy matrix).

A node runs a deployment against a store of its own and ships each new stretch of the run
to the head: the events as stored, the blobs they reference, and the node's signature over
the newest one (store/nodes.py). The head takes a shipment only whole, after checking it as
an import checks a file (every field by the writer's own checks, every hash recomputed,
every link), that it continues the run exactly where the head's copy ends (a stretch the
head holds already is skipped when it is the very same, refused when it differs), and that
an enrolled, unrevoked node key signed it. It then writes the events, the blobs and the
node's signature in one transaction, moves the run's row, and anchors the head with this
user's key, so `verify` says OK for the run here and names the node (store/verification.py).

A person's decision recorded on the node names the inbox command it answers. When that
command is the head's (left with `decide` or the TUI here, and relayed to the node by
cluster/), the head marks its own command consumed by the shipped event, so it is relayed
no more: each command is recorded once in the whole run, whichever node records it.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any

from npu_deploy.events import (
    GENESIS_HASH,
    DeploymentState,
    Event,
    apply,
    blob_refs,
    canonical_json,
    declared_blob_refs,
    utc_now,
)

from .anchor import anchor_head, signing_key
from .errors import ImportRefused, StoreError
from .eventstore import EventStore
from .nodes import Keyring, NodeRefused
from .transaction import transaction
from .transfer import blob_from_record, event_from_record
from .writer import insert_row, insert_run_row, take_run_lock, update_run_summary


class ShipmentRefused(StoreError):
    """A shipment the head does not take: nothing of it was stored."""


@dataclass(frozen=True)
class Shipment:
    """A stretch of one run from a node: event records as an export writes them, blob
    records, and the node's signature over the last event."""

    run_id: str
    events: list[dict[str, Any]]
    blobs: list[dict[str, Any]]
    signature: str


@dataclass(frozen=True)
class Received:
    run_id: str
    version: int           # the head's copy of the run now ends here
    node: str
    added: int             # events new to the head


def pack(store: EventStore, run_id: str, after_version: int,
         known_blobs: set[str] | None = None) -> tuple[list[dict[str, Any]],
                                                        list[dict[str, Any]]]:
    """The event and blob records of `run_id` after `after_version`, as a shipment carries
    them (blobs in `known_blobs`, digests already shipped, are left out)."""
    events, blobs = [], []
    wanted: set[str] = set()
    for event in store.events(run_id, after_version=after_version):
        stored = event.to_dict()
        stored["payload"] = json.loads(event.payload_json)   # as written, not upcast
        events.append(stored)
        wanted |= declared_blob_refs(event.type, event.payload) | blob_refs(stored["payload"])
    for ref in sorted(wanted - (known_blobs or set())):
        row = store.blob_row(ref.removeprefix("sha256:"))
        if row is not None:
            blobs.append({"blob": ref, "codec": row[0],
                          "data": base64.b64encode(row[1]).decode()})
    return events, blobs


def _checked(shipment: Shipment) -> tuple[list[Event], dict[str, tuple[str, bytes, int]]]:
    """Every event and blob of a shipment checked as an import checks a file's."""
    where = f"shipment of run {shipment.run_id}"
    events: list[Event] = []
    try:
        for record in shipment.events:
            event = event_from_record(record, where)
            if event.run_id != shipment.run_id:
                raise ShipmentRefused(f"{where}: holds an event of run {event.run_id}")
            if events and (event.run_version != events[-1].run_version + 1
                           or event.prev_hash != events[-1].hash):
                raise ShipmentRefused(f"{where}: v{event.run_version} does not link to "
                                      "the event before it")
            if event.computed_hash() != event.hash:
                raise ShipmentRefused(f"{where}: hash mismatch at v{event.run_version}: "
                                      "the event was changed after it was written")
            events.append(event)
        blobs = dict(blob_from_record(r, where) for r in shipment.blobs)
    except ImportRefused as e:
        raise ShipmentRefused(str(e)) from None
    if not events:
        raise ShipmentRefused(f"{where}: holds no events")
    return events, blobs


def ingest(store: EventStore, shipment: Shipment, keyring: Keyring,
           state: DeploymentState | None = None) -> tuple[Received, DeploymentState]:
    """Add a node's shipment to `store` whole, or refuse it (ShipmentRefused, NodeRefused)
    with nothing stored. `state`, the run's folded state at the head's copy's end when the
    caller kept it, saves folding the run again; the new state is returned with it."""
    events, blobs = _checked(shipment)
    last = events[-1]
    try:
        node = keyring.check(shipment.run_id, last.run_version, last.hash, shipment.signature)
    except NodeRefused as e:
        raise ShipmentRefused(str(e)) from None
    run_id = shipment.run_id
    lock = take_run_lock(store, run_id)
    try:
        with transaction(store.db) as conn:
            head = conn.execute("SELECT head_version, head_hash FROM runs WHERE run_id = ?",
                                (run_id,)).fetchone()
            held_version, held_hash = (0, GENESIS_HASH) if head is None else tuple(head)
            fresh = _past_what_is_held(conn, run_id, events, held_version)
            if fresh and (fresh[0].run_version != held_version + 1
                          or fresh[0].prev_hash != held_hash):
                raise ShipmentRefused(
                    f"run {run_id}: the shipment starts at v{fresh[0].run_version} but the "
                    f"head holds the run up to v{held_version}: a stretch is missing")
            if head is None:
                insert_run_row(conn, events[0])
                state = DeploymentState()
            elif state is None or state.version != held_version:
                state = store.fold(run_id)
            _need_blobs(conn, run_id, fresh, blobs)
            for event in fresh:
                state = apply(state, insert_row(conn, event))
                _consume(conn, event)
            for digest, (codec, data, size) in blobs.items():
                conn.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?, ?, ?, ?)",
                             (digest, size, codec, data, utc_now()))
            if fresh:
                update_run_summary(conn, state)
                anchor_head(conn, signing_key(f"to anchor run {run_id} as the head"), run_id)
            conn.execute("INSERT OR IGNORE INTO node_anchors VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (run_id, last.run_version, last.hash, node.name, node.id,
                          shipment.signature, utc_now()))
    finally:
        lock.release()
    return Received(run_id, max(held_version, last.run_version), node.name, len(fresh)), state


def _past_what_is_held(conn: Any, run_id: str, events: list[Event],
                       held_version: int) -> list[Event]:
    """The events the head does not hold yet. A stretch shipped again (a node that did not
    hear the head's answer) is skipped when it is the very same events; one that differs
    from the head's copy is a fork of the run, refused."""
    fresh = []
    for event in events:
        if event.run_version > held_version:
            fresh.append(event)
            continue
        row = conn.execute("SELECT hash FROM events WHERE run_id = ? AND run_version = ?",
                           (run_id, event.run_version)).fetchone()
        if row is None or row[0] != event.hash:
            raise ShipmentRefused(f"run {run_id}: the shipment's v{event.run_version} differs "
                                  "from the head's copy: two nodes wrote the run apart")
    return fresh


def _need_blobs(conn: Any, run_id: str, events: list[Event],
                blobs: dict[str, tuple[str, bytes, int]]) -> None:
    for event in events:
        for ref in declared_blob_refs(event.type, event.payload):
            digest = ref.removeprefix("sha256:")
            if digest not in blobs and conn.execute(
                    "SELECT 1 FROM blobs WHERE sha256 = ?", (digest,)).fetchone() is None:
                raise ShipmentRefused(f"run {run_id}: v{event.run_version} references blob "
                                      f"{ref}, which the shipment lacks")


def _consume(conn: Any, event: Event) -> None:
    """A person's decision that answers one of the head's commands consumes it here too."""
    if event.type != "human.decision" or not event.payload.get("command_id"):
        return
    conn.execute("UPDATE inbox SET consumed_event_id = ?, consumed_ts = ? WHERE command_id = ? "
                 "AND run_id = ? AND consumed_event_id IS NULL",
                 (event.event_id, utc_now(), event.payload["command_id"], event.run_id))


def relayable(store: EventStore, run_id: str) -> list[dict[str, Any]]:
    """The head's pending commands for `run_id` that its key signed, each as the node's
    inbox takes it: what a person left here for a run that runs on a node."""
    out = []
    for command in store.pending_commands(run_id):
        if store.command_unsigned(command) is None:
            out.append({k: command[k] for k in ("command_id", "kind", "payload", "author")}
                       | {"payload_json": canonical_json(command["payload"])})
    return out
