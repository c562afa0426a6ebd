"""Moving a run between stores as one JSONL file, its chain intact.

Line 1 is a header; then one line per event, in order, with the payload as
stored (before any upcasting, so every hash recomputes); then one line per
blob the events reference, compressed and base64-encoded; then (format 2) one
line per inbox command the run's persons' decisions recorded, as stored with its
MAC (store/carried.py). Import checks the whole file first and writes it in one
transaction, or not at all. A format-1 file (no commands) still imports, and its
persons' decisions then say why nothing stands behind them.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from npu_deploy.events import (
    BLOB_REF_RE,
    GENESIS_HASH,
    DeploymentState,
    Event,
    InvalidEvent,
    apply,
    blob_refs,
    canonical_json,
    check_event,
    declared_blob_refs,
    upcast,
    utc_now,
    validate_payload,
)
from npu_deploy.events.envelope import shown

from .anchor import anchor_head, user_key
from .blobs import CODECS, BlobMismatch, unpack
from .blobs import MAX_BLOB_BYTES as MAX_BLOB_BYTES  # the most an import inflates
from .carried import (
    CarriedCommand,
    check_consumed,
    command_from_record,
    command_record,
    consumed_commands,
    restore_commands,
)
from .errors import ImportRefused, StoreError
from .eventstore import EventStore
from .files import atomic_file, check_writable_target, regular_or_missing
from .inbox import uncarried_upto
from .rows import validate_run_id
from .schema import SCHEMA_VERSION
from .transaction import read_snapshot, transaction
from .writer import insert_row, insert_run_row, take_run_lock, update_run_summary

FORMAT = "npu-deploy-run"
FORMAT_VERSION = 2
#: The formats import reads: 1 carried no inbox commands.
READ_FORMATS = (1, 2)

_ENVELOPE = ("event_id", "run_id", "run_version", "type", "schema_version", "phase",
             "attempt", "actor", "ts", "causation_id", "correlation_id", "idempotency_key",
             "payload", "prev_hash", "hash")


def export_run(store: EventStore, run_ref: str, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Write a verified run and its blobs to `path` (atomically); returns the header.

    Everything is read in one read transaction (the runs row, the events, the blobs), so a
    run another process is appending to exports as it was at one instant, and imports."""
    target = Path(path)
    check_writable_target(target, what="export file")
    with read_snapshot(store.conn):
        run_id = store.resolve_run(run_ref)
        report = store.verify(run_id, fold=False)
        if not report.ok:
            raise StoreError(f"run {run_id} fails verification, export refused: "
                             f"{report.problem}")
        commands = consumed_commands(store.conn, run_id, store.events(
            run_id, upto_version=report.events, types=("human.decision",)))
        header = {"format": FORMAT, "format_version": FORMAT_VERSION,
                  "store_schema": SCHEMA_VERSION, "run_id": run_id, "events": report.events,
                  "commands": len(commands),
                  # Decisions that came through a format-1 export, with nothing behind them.
                  "uncarried_upto": uncarried_upto(store.conn, run_id),
                  "head_hash": report.head_hash,
                  # The importer keeps it only if its own key makes the same (store/anchor.py).
                  "head_mac": store.conn.execute("SELECT head_mac FROM runs WHERE run_id = ?",
                                                 (run_id,)).fetchone()[0]}
        with atomic_file(target) as out:
            out.write(canonical_json(header) + "\n")
            needed: set[str] = set()
            maybe: set[str] = set()
            for event in store.events(run_id, upto_version=report.events):
                stored = json.loads(event.payload_json)   # as written, not upcast
                needed |= declared_blob_refs(event.type, event.payload)
                maybe |= blob_refs(stored)
                out.write(canonical_json({"event": {**event.to_dict(), "payload": stored}})
                          + "\n")
            written = 0
            for ref in sorted(needed | maybe):
                row = store.blob_row(ref.removeprefix("sha256:"))
                if row is None and ref in needed:
                    raise StoreError(f"run {run_id} references blob {ref}, which is missing "
                                     f"from {store.path}; export refused")
                if row is not None:   # a digest that is not one of our blobs stays a string
                    out.write(canonical_json({"blob": ref, "codec": row[0],
                                              "data": base64.b64encode(row[1]).decode()})
                              + "\n")
                    written += 1
            for command in commands:
                out.write(command_record(command) + "\n")
    return {**header, "blobs": written}


@dataclass(frozen=True)
class ImportResult:
    run_id: str
    events: int
    blobs: int
    already_present: bool
    commands: int = 0      # the inbox commands it restored


@dataclass(frozen=True)
class ExportedRun:
    """The checked contents of an export file, ready to import."""

    events: list[Event]
    blobs: dict[str, tuple[str, bytes, int]]   # sha256 hex -> (codec, stored bytes, size)
    head_mac: str | None = None    # the anchor of the run in the store it came from
    #: The inbox commands its decisions recorded (by id, with where each is in the file).
    commands: dict[str, tuple[CarriedCommand, str]] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    #: Up to this version its decisions came through a format-1 export, without commands.
    uncarried_upto: int = 0


def read_export(path: str | os.PathLike[str]) -> ExportedRun:
    """Parse and check a whole export file without touching any store."""
    return _read_export(Path(path))


def _anchor_imported(conn: Any, run_id: str, carried: str | None) -> bool:
    """Keep the anchor the export carries when this user's key makes the very same one over
    the imported row (the run comes from a store of this key, unchanged); otherwise the run
    stays unanchored here, and `verify` says so."""
    key = user_key(create=False)
    if key is None or carried is None:
        return False
    anchor_head(conn, key, run_id)
    ours = conn.execute("SELECT head_mac FROM runs WHERE run_id = ?", (run_id,)).fetchone()[0]
    if hmac.compare_digest(ours, carried):
        return True
    conn.execute("UPDATE runs SET head_mac = NULL WHERE run_id = ?", (run_id,))
    return False


def import_run(store: EventStore, source: str | os.PathLike[str] | ExportedRun) -> ImportResult:
    """Check every link and blob of an export, then add the run to `store` in one transaction."""
    exported = source if isinstance(source, ExportedRun) else read_export(source)
    events, blobs = exported.events, exported.blobs
    run_id = events[0].run_id
    lock = take_run_lock(store, run_id)
    try:
        with transaction(store.db) as conn:
            # Checked under the write lock, so two importers of one file cannot race.
            existing = conn.execute("SELECT head_version, head_hash FROM runs WHERE run_id = ?",
                                    (run_id,)).fetchone()
            if existing is not None:
                if tuple(existing) != (events[-1].run_version, events[-1].hash):
                    raise ImportRefused(f"run {run_id} already exists in {store.path} with "
                                        "other events; import into another store (--db)")
                # The same run: what a newer export of it carries is added (the commands
                # a format-1 file lacked), nothing else.
                added = restore_commands(conn, exported.commands)
                return ImportResult(run_id, len(events), len(blobs), already_present=True,
                                    commands=added)
            insert_run_row(conn, events[0])
            state = DeploymentState()
            for event in events:
                state = apply(state, insert_row(conn, event))
            update_run_summary(conn, state)
            _anchor_imported(conn, run_id, exported.head_mac)
            now = utc_now()
            for digest, (codec, data, size) in blobs.items():
                conn.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?, ?, ?, ?)",
                             (digest, size, codec, data, now))
            added = restore_commands(conn, exported.commands)
            conn.execute("INSERT OR REPLACE INTO imports VALUES (?, ?, ?, ?)",
                         (run_id, exported.format_version, exported.uncarried_upto, now))
    finally:
        lock.release()
    return ImportResult(run_id, len(events), len(blobs), already_present=False,
                        commands=added)



#: The deepest nesting of arrays and objects an imported event may hold. Payloads nest a
#: few levels; Python's JSON parser recurses per level and would fail past ~1000.
MAX_JSON_DEPTH = 64
_TOO_DEEP = object()


def _read_export(path: Path) -> ExportedRun:
    regular_or_missing(path, what="an export file", error=ImportRefused,
                       fix="pass the path of a file `npu-deploy export` wrote")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ImportRefused(f"no file {path}") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ImportRefused(f"cannot read {path} as an export file ({e})") from None
    # "\n" alone ends a line, as export writes them and an editor counts them: splitlines()
    # would also break inside a JSON string at U+2028 or \x1c and misnumber every line.
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if not lines:
        raise ImportRefused(f"{path} is empty; export a run with `npu-deploy export RUN -o FILE`")
    records = []
    for n, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except ValueError:
            raise ImportRefused(f"{path} line {n} is not JSON: the file is not an "
                                "npu-deploy export, or it was cut or edited") from None
        except RecursionError:   # the parser recursed once per level
            record = _TOO_DEEP
        if record is _TOO_DEEP or _too_deep(record):
            raise ImportRefused(f"{path} line {n} nests deeper than {MAX_JSON_DEPTH} levels, "
                                "which no npu-deploy export does: the file was edited")
        records.append(record)
    header = records[0]
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ImportRefused(f"{path} is not an npu-deploy run export (no header on line 1)")
    for name in ("format_version", "store_schema", "events", "commands", "uncarried_upto"):
        if name in header and type(header[name]) is not int:
            raise ImportRefused(f"{path} line 1: header {name} {shown(header[name])} is not "
                                "an integer: the file was edited")
    newer = header.get("store_schema", 0) > SCHEMA_VERSION
    if header.get("format_version") not in READ_FORMATS or newer:
        raise ImportRefused(f"{path} was written by a newer npu-deploy "
                            f"(format {header.get('format_version')}); upgrade to import it")
    try:
        run_id = validate_run_id(header["run_id"])
    except (KeyError, InvalidEvent) as e:
        raise ImportRefused(f"{path} header has no valid run_id ({e})") from None
    events: list[Event] = []
    blobs: dict[str, tuple[str, bytes, int]] = {}
    commands: dict[str, tuple[CarriedCommand, str]] = {}
    prev = GENESIS_HASH
    seen_ids: set[str] = set()
    seen_keys: set[str] = set()
    for n, record in enumerate(records[1:], 2):
        where = f"{path} line {n}"
        if isinstance(record, dict) and "event" in record:
            event = event_from_record(record["event"], where)
            if event.run_id != run_id:
                raise ImportRefused(f"{where}: event of run {event.run_id}, header says {run_id}")
            if event.run_version != len(events) + 1 or event.prev_hash != prev:
                raise ImportRefused(f"{where}: v{event.run_version} does not link to the "
                                    "previous event: the file was cut, reordered or edited")
            if event.computed_hash() != event.hash:
                raise ImportRefused(f"{where}: hash mismatch at v{event.run_version}: "
                                    "the event was edited after export")
            if event.event_id in seen_ids:
                raise ImportRefused(f"{where}: event_id {event.event_id} is already used by "
                                    "an earlier event: the file was edited")
            if event.idempotency_key is not None and event.idempotency_key in seen_keys:
                raise ImportRefused(f"{where}: idempotency_key {shown(event.idempotency_key)} "
                                    "is already used by an earlier event: the file was edited")
            seen_ids.add(event.event_id)
            if event.idempotency_key is not None:
                seen_keys.add(event.idempotency_key)
            events.append(event)
            prev = event.hash
        elif isinstance(record, dict) and "blob" in record:
            digest, entry = blob_from_record(record, where)
            blobs[digest] = entry
        elif isinstance(record, dict) and "command" in record and header["format_version"] > 1:
            command = command_from_record(record["command"], run_id, where)
            if command.command_id in commands:
                raise ImportRefused(f"{where}: command {command.command_id} is carried "
                                    "twice: the file was edited")
            commands[command.command_id] = (command, where)
        else:
            raise ImportRefused(f"{where}: neither an event nor a blob"
                                + (" nor an inbox command" if header["format_version"] > 1
                                   else ""))
    if not events or events[0].type not in ("run.started", "run.forked"):
        raise ImportRefused(f"{path} holds no run: its first event must start a run")
    if len(events) != header.get("events") or prev != header.get("head_hash"):
        raise ImportRefused(f"{path} holds {len(events)} events but its header says "
                            f"{header.get('events')}: the file was cut or edited")
    if header["format_version"] > 1 and len(commands) != header.get("commands"):
        raise ImportRefused(f"{path} holds {len(commands)} inbox commands but its header says "
                            f"{header.get('commands')}: the file was cut or edited")
    missing = set().union(*(declared_blob_refs(e.type, e.payload) for e in events))
    missing -= {f"sha256:{d}" for d in blobs}
    if missing:
        raise ImportRefused(f"{path} lacks blob {sorted(missing)[0]} that its events reference")
    check_consumed(commands, events)
    head_mac = header.get("head_mac")
    old = header["format_version"] == 1
    return ExportedRun(events, blobs, head_mac if isinstance(head_mac, str) else None,
                       commands, header["format_version"],
                       len(events) if old else min(header.get("uncarried_upto", 0), len(events)))


def event_from_record(record: Any, where: str) -> Event:
    """An event line as the writer would have stored it: every field checked by the
    writer's own `check_event`, the payload against its type's schema (after upcasting)."""
    if not isinstance(record, dict) or set(record) != set(_ENVELOPE):
        raise ImportRefused(f"{where}: an event needs exactly the fields {', '.join(_ENVELOPE)}")
    try:
        payload_json = canonical_json(record["payload"])
    except (TypeError, ValueError) as e:
        raise ImportRefused(f"{where}: payload is not JSON ({e})") from None
    event = Event(seq=None, event_id=record["event_id"], run_id=record["run_id"],
                  run_version=record["run_version"], type=record["type"],
                  schema_version=record["schema_version"], phase=record["phase"],
                  attempt=record["attempt"], actor=record["actor"], ts=record["ts"],
                  causation_id=record["causation_id"],
                  correlation_id=record["correlation_id"],
                  idempotency_key=record["idempotency_key"], payload_json=payload_json,
                  prev_hash=record["prev_hash"], hash=record["hash"], payload={})
    try:
        check_event(event)
        if not isinstance(record["payload"], dict):
            raise InvalidEvent(f"payload: expected an object, got {shown(record['payload'])}")
        payload = validate_payload(event.type, upcast(event.type, event.schema_version,
                                                      record["payload"]))
    except InvalidEvent as e:
        raise ImportRefused(f"{where}: {e}") from None
    return event._replace(payload=payload)


def blob_from_record(record: dict[str, Any], where: str) -> tuple[str, tuple[str, bytes, int]]:
    ref, codec = record.get("blob", ""), record.get("codec")
    if not isinstance(ref, str) or not BLOB_REF_RE.match(ref) or codec not in CODECS:
        raise ImportRefused(f"{where}: malformed blob record (a blob needs \"blob\": "
                            f"\"sha256:<64 hex>\", \"codec\": one of {', '.join(CODECS)}, "
                            "and \"data\")")
    try:
        stored = base64.b64decode(record["data"], validate=True)
    except (KeyError, binascii.Error, TypeError, ValueError):
        raise ImportRefused(f"{where}: blob {ref} data is damaged (not base64)") from None
    digest = ref.removeprefix("sha256:")
    try:
        size, _ = unpack(digest, codec, stored, keep=False)
    except BlobMismatch as e:
        raise ImportRefused(f"{where}: {e}") from None
    return digest, (codec, stored, size)


def _too_deep(value: Any) -> bool:
    """Whether a parsed JSON value nests deeper than MAX_JSON_DEPTH (walked without
    recursion)."""
    stack = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        if isinstance(v, dict | list):
            if depth > MAX_JSON_DEPTH:
                return True
            stack.extend((c, depth + 1) for c in (v.values() if isinstance(v, dict) else v))
    return False
