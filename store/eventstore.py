"""The event store: reading, tailing, verifying and folding runs; blobs; the inbox;
snapshots. Appends go through a `RunWriter` (one per run, under a file lock).
"""

from __future__ import annotations

import json
import os
import sqlite3
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from hashlib import sha256
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock, Timeout
from sqlite_utils import Database

from npu_deploy.events import (
    BLOB_REF_RE,
    EVENT_TYPES,
    GENESIS_HASH,
    REDUCER_VERSION,
    DeploymentState,
    Event,
    InvalidEvent,
    blob_refs,
    canonical_json,
    declared_blob_refs,
    sha256_hex,
    upcast,
    utc_now,
    uuid7,
    validate_payload,
    with_head,
)
from npu_deploy.events import fold as fold_events
from npu_deploy.events.envelope import (
    PREIMAGE_SEPARATORS,
    RUN_ID_RE,
    SEP,
    STORED_COLUMNS,
    hash_preimage,
)
from npu_deploy.events.state import REDUCED_TYPES, reduce_body

from .anchor import (
    HEAD_FIELDS,
    check,
    command_fields,
    key_id,
    key_path,
    mac,
    signing_key,
    snapshot_fields,
    user_key,
)
from .errors import StoreCorrupt, StoreError, UnknownRun
from .locations import default_db_path
from .schema import connect, release
from .transaction import read_snapshot, transaction

if TYPE_CHECKING:
    from npu_deploy.events.payloads import RunStarted

    from .writer import RunWriter

EVENT_COLUMNS = ", ".join(STORED_COLUMNS)

COMMAND_KINDS = ("approve", "redirect", "pick", "pause", "abort")
RUN_OPENERS = ("run.started", "run.forked")


def event_from_row(row: tuple[Any, ...], payload: Any = None) -> Event:
    """A stored row as an `Event`; `payload` is upcast to its type's current schema."""
    if payload is None:
        payload = json.loads(row[13])
    type_, schema_version = row[4], row[5]
    if schema_version != EVENT_TYPES.get(type_, (None, schema_version))[1]:
        payload = upcast(type_, schema_version, payload)
    return Event._make((*row, payload))


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    created_ts: str
    model: str
    backend: str
    agent: str
    events: int
    head_type: str
    head_ts: str
    status: str          # running (lock held), crashed, paused, needs_human, finished, aborted
    current_phase: int | None
    phase_reached: int | None
    verdict: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    parent_run_id: str | None


@dataclass(frozen=True)
class VerifyReport:
    run_id: str
    ok: bool
    events: int
    head_hash: str
    problem: str | None = None
    bad_version: int | None = None
    bad_seq: int | None = None
    state: DeploymentState | None = None
    #: The head's MAC checked with this user's key (store/anchor.py); `ok` alone says the
    #: chain, blobs and snapshots hold together, which anyone able to write the file can fake.
    anchored: bool = False
    unanchored: str | None = None    # why not, when the chain is intact but not anchored

    @property
    def status(self) -> str:
        """ok (intact and anchored), unanchored (intact, nothing more proven), broken."""
        return "broken" if not self.ok else "ok" if self.anchored else "unanchored"

    @property
    def trusted(self) -> bool:
        return self.ok and self.anchored

    def line(self) -> str:
        if not self.ok:
            return f"{self.run_id}: BROKEN: {self.problem}"
        if not self.anchored:
            return (f"{self.run_id}: UNANCHORED: chain intact ({self.events} events, head "
                    f"{self.head_hash[:16]}), but {self.unanchored}: without the key that wrote "
                    "it, a rewritten chain cannot be told from the original")
        return (f"{self.run_id}: OK, {self.events} events, head {self.head_hash[:16]}, "
                "anchored by this user's key")


class EventStore:
    """One SQLite store file. Open with `EventStore.open(path)` (read-write,
    creating and migrating it) or `EventStore.open(path, readonly=True)`."""

    def __init__(self, path: Path, db: Database, *, readonly: bool) -> None:
        self.path = path
        self.db = db
        self.readonly = readonly
        self._closed = False
        self._tail_bound: dict[str, tuple[int, int]] = {}

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, *,
             readonly: bool = False) -> EventStore:
        p = Path(path) if path is not None else default_db_path()
        return cls(p, connect(p, readonly=readonly), readonly=readonly)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.db.close()
        release(self.path)

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def conn(self) -> sqlite3.Connection:
        return self.db.conn

    # --- runs ----------------------------------------------------------------

    def lock_path(self, run_id: str) -> Path:
        return self.path.with_name(self.path.name + ".locks") / f"{run_id}.lock"

    def progress_path(self, run_id: str) -> Path:
        """Where the run's step in flight says how far it has got (store/progress.py)."""
        return self.lock_path(run_id).with_suffix(".progress")

    def is_locked(self, run_id: str) -> bool:
        """True while some process holds this run's writer lock."""
        path = self.lock_path(run_id)
        if not path.exists():
            return False
        probe = FileLock(path, timeout=0)
        try:
            probe.acquire()
        except Timeout:
            return True
        except OSError:
            return False
        probe.release()
        return False

    def live_status(self, run_id: str, folded_status: str) -> str:
        """The folded status, corrected by the lock: a run whose state says running
        but whose writer lock is free has crashed (resume it)."""
        if self.is_locked(run_id):
            return "running"
        return "crashed" if folded_status in ("running", "new") else folded_status

    def resolve_run(self, ref: str) -> str:
        """A full run id from an id or a unique prefix of one: never from an empty prefix
        (which every run has) or from text no run id can start with (a space, a newline)."""
        if not RUN_ID_RE.match(ref):
            what = "is empty" if not ref else "is not a run id or the start of one"
            raise UnknownRun(f"run {ref!r} {what}: give a run's id or the first characters "
                             "of it (letters, digits, '.', '_', '-'); `npu-deploy runs` lists "
                             "them")
        rows = [r[0] for r in self.conn.execute(
            "SELECT run_id FROM runs WHERE run_id = ? OR run_id LIKE ? ESCAPE '\\' LIMIT 3",
            (ref, ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"))]
        if ref in rows:
            return ref
        if len(rows) == 1:
            return rows[0]
        if not rows:
            raise UnknownRun(f"no run {ref!r} in {self.path}; `npu-deploy runs` lists them")
        raise UnknownRun(f"{ref!r} matches several runs ({', '.join(rows[:2])}, ...); "
                         "give more of the id")

    def run_ids(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT run_id FROM runs ORDER BY created_ts")]

    def runs(self) -> list[RunSummary]:
        out = []
        for r in self.db.query("SELECT * FROM runs ORDER BY created_ts"):
            status = self.live_status(r["run_id"], r["status"])
            out.append(RunSummary(
                run_id=r["run_id"], created_ts=r["created_ts"], model=r["model"] or "",
                backend=r["backend"] or "", agent=r["agent"] or "", events=r["head_version"],
                head_type=r["head_type"] or "", head_ts=r["head_ts"] or "", status=status,
                current_phase=r["current_phase"], phase_reached=r["phase_reached"],
                verdict=r["verdict"], input_tokens=r["input_tokens"] or 0,
                output_tokens=r["output_tokens"] or 0, cost_usd=r["cost_usd"] or 0.0,
                parent_run_id=r["parent_run_id"]))
        return out

    def writer(self, run_id: str) -> RunWriter:
        """Take the writer lock of an existing run (to resume it)."""
        from .writer import RunWriter
        return RunWriter.attach(self, self.resolve_run(run_id))

    def create_run(self, started: RunStarted | dict[str, Any], *, run_id: str | None = None,
                   actor: str = "harness") -> RunWriter:
        """Start a new run with its `run.started` event; returns its writer."""
        from .writer import RunWriter
        return RunWriter.create(self, started, run_id=run_id, actor=actor)

    # --- reading ---------------------------------------------------------------

    def events(self, run_id: str, *, after_version: int = 0,
               upto_version: int | None = None, phase: int | None = None,
               types: tuple[str, ...] = ()) -> Iterator[Event]:
        """A run's events in order, from the oldest (or after a version); only those of
        one phase, or of some types, when asked."""
        upto = upto_version if upto_version is not None else 2**62
        where, args = "", [run_id, after_version, upto]
        if phase is not None:
            where += " AND phase = ?"
            args.append(phase)
        if types:
            where += f" AND type IN ({', '.join('?' * len(types))})"
            args.extend(types)
        cur = self.conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND run_version > ? "
            f"AND run_version <= ?{where} ORDER BY run_version", args)
        while rows := cur.fetchmany(512):
            for row in rows:
                yield event_from_row(row)

    def event_at(self, run_id: str, version: int) -> Event | None:
        row = self.conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? "
                                "AND run_version = ?", (run_id, version)).fetchone()
        return event_from_row(row) if row else None

    def tail(self, run_id: str, after_seq: int, limit: int = 10_000) -> list[Event]:
        """Events of a run with `seq > after_seq`, in order.

        Cheap to poll: while `PRAGMA data_version` says no other connection has
        committed since this run was last found to have nothing past the same
        point, no query runs at all.
        """
        data_version = self.conn.execute("PRAGMA data_version").fetchone()[0]
        known = self._tail_bound.get(run_id)
        if known is not None and known[0] == data_version and after_seq >= known[1]:
            return []
        # `+run_id` keeps the planner off the run_id index: a rowid range scan from
        # the cursor reads only what is new, however long the run already is.
        rows = self.conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE seq > ? AND +run_id = ? "
            "ORDER BY seq LIMIT ?", (after_seq, run_id, limit)).fetchall()
        if not rows:
            self._tail_bound[run_id] = (data_version, after_seq)
        return [event_from_row(r) for r in rows]

    # --- folding, snapshots -----------------------------------------------------

    def fold(self, run_id: str, upto_version: int | None = None, *,
             use_snapshots: bool = True) -> DeploymentState:
        """The run's state after `upto_version` (default: all events)."""
        state = DeploymentState()
        if use_snapshots:
            state = self.load_snapshot(run_id, upto_version) or state
        return fold_events(self.events(run_id, after_version=state.version,
                                       upto_version=upto_version), state)

    def save_snapshot(self, state: DeploymentState) -> None:
        """Cache a folded state. Deleting snapshots changes nothing but speed."""
        if self.readonly or not state.run_id:
            return
        fields = snapshot_fields(state.run_id, state.version, REDUCER_VERSION, state.last_hash,
                                 canonical_json(state.to_dict()))
        with transaction(self.db):
            self.conn.execute(
                "INSERT OR REPLACE INTO snapshots (run_id, run_version, reducer_version, hash, "
                "state, created_ts, mac) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*fields, utc_now(), mac(signing_key(), "snapshot", fields)))

    def load_snapshot(self, run_id: str, upto_version: int | None = None
                      ) -> DeploymentState | None:
        """The newest usable snapshot: same reducer, its hash still on the chain, and its MAC
        made by this user's key (an edited or foreign snapshot is passed over: the fold then
        starts from an older one, or from the first event)."""
        key = user_key(create=False)
        if key is None:
            return None
        rows = self.conn.execute(
            "SELECT s.run_version, s.hash, s.state, s.mac FROM snapshots s JOIN events e "
            "ON e.run_id = s.run_id AND e.run_version = s.run_version AND e.hash = s.hash "
            "WHERE s.run_id = ? AND s.reducer_version = ? AND s.run_version <= ? "
            "ORDER BY s.run_version DESC",
            (run_id, REDUCER_VERSION, upto_version if upto_version is not None else 2**62))
        for version, hash_, text, stored_mac in rows:
            fields = snapshot_fields(run_id, version, REDUCER_VERSION, hash_, text)
            if check(key, stored_mac, "snapshot", fields) != "ok":
                continue
            try:
                return DeploymentState.from_dict(json.loads(text))
            except (ValueError, TypeError, KeyError):
                continue   # a damaged cache entry is ignored, never trusted
        return None

    # --- verification -------------------------------------------------------------

    def verify(self, run_id: str, *, fold: bool = True) -> VerifyReport:
        """Check a run's hash chain link by link and name the first bad event.

        Checks: versions contiguous from 1, seq increasing with version, each
        `prev_hash` equal to the previous event's hash, each hash recomputed
        from the stored columns (the payload as its exact stored text, so no
        re-encoding is needed), no field holding the preimage separator, the
        first event a run start, and the run's recorded head equal to its last
        event (which catches deleted tail events); then every blob a payload
        references that the store holds (its bytes hashing to its digest), every snapshot
        whose MAC this user's key made, and last the head MAC over the runs row
        (store/anchor.py), which alone tells a rewritten chain from the original.
        Folds the run on the way when asked, decoding only the events that change
        the state. The runs row, the events, the blobs and the snapshots are read in one
        read transaction, so a writer appending meanwhile is not taken for a cut or
        altered chain.
        """
        with read_snapshot(self.db):
            return self._verify(run_id, fold=fold)

    def _verify(self, run_id: str, *, fold: bool) -> VerifyReport:
        head_row = self.conn.execute(f"SELECT {', '.join(HEAD_FIELDS)}, head_mac FROM runs "
                                     "WHERE run_id = ?", (run_id,)).fetchone()
        if head_row is None:
            raise UnknownRun(f"no run {run_id!r} in {self.path}; `npu-deploy runs` lists them")
        expected_prev, version, last_seq = GENESIS_HASH, 0, 0
        state, last = DeploymentState(), None
        blobs: dict[str, int] = {}   # every blob a payload references -> the first version
        needed: set[str] = set()      # those its schema declares (BlobRef): must be here
        try:
            cur = self.conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? "
                                    "ORDER BY run_version", (run_id,))
            while rows := cur.fetchmany(1024):
                for row in rows:
                    seq, type_, stored_hash = row[0], row[4], row[15]
                    preimage = hash_preimage(*row[1:15])
                    if (row[3] != version + 1 or row[14] != expected_prev or seq <= last_seq
                            or preimage.count(SEP) != PREIMAGE_SEPARATORS
                            or sha256(preimage.encode()).hexdigest() != stored_hash
                            or (version == 0 and type_ not in RUN_OPENERS)
                            or type_ not in EVENT_TYPES):
                        problem = _problem(row, version, expected_prev, last_seq)
                        return VerifyReport(run_id, False, version, expected_prev,
                                            f"event v{row[3]} (seq {seq}, {type_}): {problem}",
                                            bad_version=row[3], bad_seq=seq)
                    version, expected_prev, last_seq, last = row[3], stored_hash, seq, row
                    # The hash covers the payload's exact text, so only the events that
                    # change the state need decoding (see events.state.fold).
                    if fold and type_ in REDUCED_TYPES:
                        state = reduce_body(state, event_from_row(row))
                    if "sha256:" in row[13]:
                        for ref in blob_refs(json.loads(row[13])):
                            blobs.setdefault(ref.removeprefix("sha256:"), row[3])
                        needed.update(r.removeprefix("sha256:") for r in declared_blob_refs(
                            type_, event_from_row(row).payload))
        except sqlite3.DatabaseError as e:
            raise StoreCorrupt(f"{self.path} is damaged while reading run {run_id} ({e}); "
                               "restore it from a copy or an export") from None
        except ValueError:   # a payload that is not JSON, though its hash matched
            raise StoreCorrupt(f"run {run_id}: event v{version + 1} has a payload that is not "
                               "JSON yet matches its hash: it was written by something other "
                               "than npu-deploy") from None
        head_version, head_hash = head_row[7:9]
        if version != head_version or expected_prev != head_hash:
            return VerifyReport(
                run_id, False, version, expected_prev,
                f"the run's recorded head is v{head_version} but its last event is v{version}: "
                + ("events after the last one were removed" if version < head_version
                   else "the run's head record was altered"), bad_version=version + 1)
        if last is None:
            return VerifyReport(run_id, False, 0, GENESIS_HASH, "the run has no events")
        damage = self._blob_problem(blobs, needed) or self._snapshot_problem(run_id)
        key = user_key(create=False)
        anchor = check(key, head_row[-1], "head", head_row[:-1])
        if anchor == "bad":
            damage = ("its head MAC, made by this user's key, does not match the run as stored: "
                       "events or the runs row were rewritten since (an edit, a cut, an "
                       "insertion or a recomputed chain)")
        if damage:
            return VerifyReport(run_id, False, version, expected_prev, damage)
        if fold:
            state = with_head(state, event_from_row(last))
        return VerifyReport(run_id, True, version, expected_prev, state=state if fold else None,
                            anchored=anchor == "ok",
                            unanchored=None if anchor == "ok" else _unanchored(anchor, key))

    def _blob_problem(self, blobs: dict[str, int], needed: set[str]) -> str | None:
        """The first referenced blob whose stored bytes are not its digest, or that its
        payload's schema declares (`needed`) and the store lacks. Another string that only
        looks like a reference (a skill file's digest in `skill.loaded`) may name no blob."""
        for digest, version in blobs.items():
            row = self.conn.execute("SELECT codec, data, size FROM blobs WHERE sha256 = ?",
                                    (digest,)).fetchone()
            what = f"blob sha256:{digest[:16]}... (referenced by v{version})"
            if row is None:
                if digest in needed:
                    return f"{what} is missing from the store: it was deleted"
                continue
            try:   # never more than the size recorded, plus one byte to see a longer one
                data = (zlib.decompressobj().decompress(row[1], (row[2] or 0) + 1)
                        if row[0] == "zlib" else row[1])
            except zlib.error:
                data = b""
            if row[0] not in ("zlib", "raw") or sha256_hex(data) != digest:
                return f"{what} does not match its digest: its stored bytes were changed"
        return None

    def _snapshot_problem(self, run_id: str) -> str | None:
        """A snapshot whose MAC, made by this user's key, no longer matches it. (A snapshot
        without a MAC of this key is never used, so it proves nothing and breaks nothing.)"""
        key = user_key(create=False)
        rows = self.conn.execute("SELECT run_version, reducer_version, hash, state, mac "
                                 "FROM snapshots WHERE run_id = ?", (run_id,))
        for version, reducer, hash_, text, stored in rows:
            fields = snapshot_fields(run_id, version, reducer, hash_, text)
            if check(key, stored, "snapshot", fields) == "bad":
                return f"the snapshot at v{version} was altered after it was written"
        return None

    def integrity_problem(self) -> str | None:
        """SQLite's own structural check of the whole file (B-trees, pages)."""
        try:
            result = [r[0] for r in self.conn.execute("PRAGMA quick_check")]
        except sqlite3.DatabaseError as e:
            return str(e)
        return None if result == ["ok"] else "; ".join(result[:3])

    # --- blobs ------------------------------------------------------------------

    def put_blob(self, data: bytes) -> str:
        """Store bytes once, compressed; returns the reference 'sha256:<hex>'."""
        digest = sha256_hex(data)
        with transaction(self.db):
            self.conn.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?, ?, ?, ?)",
                              (digest, len(data), "zlib", zlib.compress(data, 6), utc_now()))
        return f"sha256:{digest}"

    def get_blob(self, ref: str) -> bytes:
        if not BLOB_REF_RE.match(ref):
            raise StoreError(f"{ref!r} is not a blob reference (sha256:<64 hex>)")
        digest = ref.removeprefix("sha256:")
        row = self.conn.execute("SELECT codec, data FROM blobs WHERE sha256 = ?",
                                (digest,)).fetchone()
        if row is None:
            raise StoreError(f"blob {ref} is not in {self.path}; import the run's export "
                             "file, which carries its blobs")
        data = zlib.decompress(row[1]) if row[0] == "zlib" else row[1]
        if sha256_hex(data) != digest:
            raise StoreCorrupt(f"blob {ref} in {self.path} does not match its hash: the "
                               "stored bytes were changed")
        return data

    def blob_row(self, digest: str) -> tuple[str, bytes] | None:
        row = self.conn.execute("SELECT codec, data FROM blobs WHERE sha256 = ?",
                                (digest,)).fetchone()
        return (row[0], row[1]) if row else None

    # --- inbox ------------------------------------------------------------------

    def post_command(self, run_id: str, kind: str, payload: dict[str, Any] | None = None,
                     *, author: str = "human") -> str:
        """Leave a command (a person's decision) for the run's writer; returns its id."""
        if kind not in COMMAND_KINDS:
            raise InvalidEvent(f"kind: {kind!r} is not one of {', '.join(COMMAND_KINDS)}")
        command_id = uuid7()
        # Refuse now what could not be recorded later: the command must make a valid
        # human.decision (a redirect needs its instruction, a pick its direction).
        validate_payload("human.decision", {**(payload or {}), "decision": kind,
                                            "command_id": command_id, "author": author})
        run_id = self.resolve_run(run_id)
        # The MAC tells the conductor a person's tool wrote it (store/anchor.py): a process
        # that can write the store but not read the key cannot pass as a person.
        fields = command_fields(run_id, command_id, kind, canonical_json(payload or {}), author)
        with transaction(self.db):
            self.conn.execute(
                "INSERT INTO inbox (run_id, command_id, kind, payload, author, created_ts, mac) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*fields, utc_now(), mac(signing_key(), "command", fields)))
        return command_id

    @staticmethod
    def command_is_authentic(command: dict[str, Any]) -> bool:
        """Whether a pending command (as `pending_commands` gives it) carries a MAC made by
        this user's key over what it says."""
        fields = command_fields(command["run_id"], command["command_id"], command["kind"],
                                canonical_json(command["payload"]), command["author"])
        return check(user_key(create=False), command.get("mac"), "command", fields) == "ok"

    def pending_commands(self, run_id: str) -> list[dict[str, Any]]:
        """Commands not yet recorded as events, oldest first."""
        return [{**r, "payload": json.loads(r["payload"])} for r in self.db.query(
            "SELECT * FROM inbox WHERE run_id = ? AND consumed_event_id IS NULL "
            "ORDER BY created_ts, command_id", [run_id])]


def _problem(row: tuple[Any, ...], version: int, expected_prev: str, last_seq: int) -> str:
    """Why a stored row is not the next link of its chain, in words."""
    seq, run_version, type_, prev_hash, stored_hash = row[0], row[3], row[4], row[14], row[15]
    if run_version != version + 1:
        return (f"expected v{version + 1} next: " +
                (f"v{version + 1}..v{run_version - 1} are missing" if run_version > version + 1
                 else "versions out of order"))
    if version == 0 and type_ not in RUN_OPENERS:
        return "a run must begin with run.started or run.forked"
    if seq <= last_seq:
        return f"seq {seq} does not follow seq {last_seq}: rows were reordered"
    if prev_hash != expected_prev:
        return "prev_hash does not link to the previous event: the chain was cut or spliced"
    preimage = hash_preimage(*row[1:15])
    if preimage.count(SEP) != PREIMAGE_SEPARATORS:
        return "a field holds a separator character: the stored row was edited"
    if sha256(preimage.encode()).hexdigest() != stored_hash:
        return "hash mismatch: the stored row differs from what was written"
    return f"unknown event type {type_!r}"


def _unanchored(anchor: str, key: bytes | None) -> str:
    if anchor == "absent":
        return ("it carries no anchor (imported from a store anchored by another key, or "
                "written before anchoring)")
    if key is None:
        return f"there is no key at {key_path()} to check its anchor"
    return f"its anchor was made by another key than this user's (key id {key_id(key)})"


def validate_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise InvalidEvent(f"run_id: {run_id!r} must be 1-64 letters, digits, '.', '_' or '-'")
    return run_id


