"""The single writer of a run: validated, hash-chained, durable appends.

Exactly one `RunWriter` per run exists across all processes: it holds an OS
file lock (released by the kernel if the process dies). It keeps the run's
head and folded state in memory and moves them only after a commit.

An append is on the agent's critical path, once per message, tool call and
gate, so its cost is kept close to a bare SQLite insert: the run's head in
`runs` is advanced by a trigger inside SQLite, and the writer adds the head's
MAC (store/anchor.py) in the same transaction, one fsync per append.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import Any

from filelock import FileLock, Timeout

from npu_deploy.events import (
    GENESIS_HASH,
    DeploymentState,
    Event,
    InvalidEvent,
    NewEvent,
    apply,
    canonical_json,
    check_envelope,
    check_event,
    current_schema_version,
    new_run_id,
    seal,
    utc_now,
    validate_payload,
    with_head,
)
from npu_deploy.events.keys import RUN_START
from npu_deploy.events.payloads import RunForked, RunStarted
from npu_deploy.events.state import reduce_body

from .anchor import KEY_ENV, anchor_head, key_path, signing_key, user_key
from .errors import (
    CommandAlreadyConsumed,
    IdempotencyConflict,
    RunLocked,
    StoreCorrupt,
    StoreError,
    Unanchored,
    UnknownRun,
)
from .inbox import command_problem, is_policys, policy_problem
from .rows import EVENT_COLUMNS, event_from_row, validate_run_id
from .snapshots import Snapshots
from .storefile import StoreFile
from .transaction import transaction
from .verification import Verifier, VerifyReport

#: A snapshot is cached every this many events (and when the writer closes).
SNAPSHOT_EVERY = 1000

#: How long a writer waits for a run's lock. Not zero: a reader asking
#: `is_locked` holds the lock for an instant while it probes.
LOCK_WAIT_S = 1.0

_INSERT = ("INSERT INTO events (event_id, run_id, run_version, type, schema_version, phase, "
           "attempt, actor, ts, causation_id, correlation_id, idempotency_key, payload, "
           "prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")

_UPDATE_SUMMARY = ("UPDATE runs SET status = ?, current_phase = ?, phase_reached = ?, "
                   "verdict = ?, input_tokens = ?, output_tokens = ?, cost_usd = ? "
                   "WHERE run_id = ?")


def prepare(new: NewEvent, *, run_id: str, run_version: int, prev_hash: str,
            event_id: str | None = None, ts: str | None = None) -> Event:
    """Validate a new event and seal it as the next link after `prev_hash`: its payload
    against its type's schema, then every field of the sealed event with `check_event`,
    the very checks an import applies to each event it reads (store/transfer.py)."""
    if not isinstance(new, NewEvent):
        raise InvalidEvent(f"expected a NewEvent, got {type(new).__name__}")
    check_envelope(new)
    payload = validate_payload(new.type, new.payload)
    event = seal(new, run_id=run_id, run_version=run_version, prev_hash=prev_hash,
                 schema_version=current_schema_version(new.type),
                 payload_json=canonical_json(payload), payload=payload, event_id=event_id,
                 ts=ts)
    check_event(event)
    return event


def insert_row(conn: sqlite3.Connection, event: Event) -> Event:
    """Insert an event (the `events_advance_head` trigger moves its run's head) and
    return it with the `seq` the storage gave it."""
    return event._replace(seq=conn.execute(_INSERT, event[1:16]).lastrowid)


def run_summary(state: DeploymentState) -> tuple[Any, ...]:
    """The run's listing columns, as `_UPDATE_SUMMARY` sets them."""
    t = state.totals
    return (state.status, state.current_phase, state.phase_reached, state.verdict,
            t.input_tokens, t.output_tokens, t.cost_usd, state.run_id)


def update_run_summary(conn: sqlite3.Connection, state: DeploymentState) -> None:
    """Keep the run's listing columns in step with its folded state."""
    conn.execute(_UPDATE_SUMMARY, run_summary(state))


def insert_run_row(conn: sqlite3.Connection, first: Event) -> None:
    p = first.payload
    conn.execute(
        "INSERT INTO runs (run_id, created_ts, model, backend, agent, parent_run_id, "
        "parent_version, head_version, head_hash, status) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
        (first.run_id, first.ts, p.get("model"), p.get("backend"), p.get("agent"),
         p.get("parent_run_id"), p.get("parent_version"), first.prev_hash, "new"))


def take_run_lock(store: StoreFile, run_id: str) -> FileLock:
    """The OS file lock that makes a process the only writer of a run."""
    path = store.lock_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, timeout=LOCK_WAIT_S)
    try:
        lock.acquire()
    except Timeout:
        raise RunLocked(f"run {run_id} is being written by another process (lock {path}); "
                        "wait for it to finish, or stop that process first") from None
    return lock


def refusal(report: VerifyReport, *, adopt: bool) -> StoreError | None:
    """Why a writer may not extend this run, or None. Never a chain that does not verify:
    the new links would vouch for it. Nor one this user's key did not anchor, unless asked
    (`adopt`): the next head MAC would make the key vouch for whatever the chain holds now (an
    import from another key, or a chain rewritten and stripped of its anchor)."""
    run_id = report.run_id
    if not report.ok:
        return StoreCorrupt(f"run {run_id} fails verification, refusing to append: "
                            f"{report.problem}")
    if report.anchored or adopt:
        return None
    if user_key(create=False) is None and report.unanchored_by:
        return Unanchored(
            f"run {run_id} was anchored by key {report.unanchored_by}, and there is no key at "
            f"{key_path()}: put that key file back there (or point {KEY_ENV} at it) and resume "
            "again; nothing was written, and no key was made. --adopt would make a new key "
            "vouch for the run as it stands")
    return Unanchored(f"run {run_id} is not anchored by your key: {report.unanchored}; "
                      "appending would make your key vouch for it. Resume it with --adopt if "
                      "you trust where it came from")


class RunWriter:
    def __init__(self, store: StoreFile, run_id: str, lock: FileLock, *,
                 adopt: bool = False) -> None:
        self.store = store
        self.run_id = run_id
        self._lock = lock
        # Our own connection: commits from it move other connections' data_version.
        # Autocommit: a lone INSERT is its own transaction; larger ones are `transaction`s.
        self._store = StoreFile.open(store.path)
        self._conn = self._store.conn
        self._conn.isolation_level = None
        self._snapshots = Snapshots(self._store)
        report = Verifier(self._store).verify(run_id)
        refused = refusal(report, adopt=adopt)
        if refused is not None or report.state is None:
            self._store.close()
            raise refused or StoreCorrupt(f"run {run_id} has no state to append to")
        # Only now the key, made here if missing (adopt): a refused writer makes none.
        self._key = signing_key(f"to anchor run {run_id}")
        # `_folded` has every reducer applied; its head may lag `_version/_hash`,
        # which move with every append (`state` joins the two when asked).
        self._folded: DeploymentState = report.state
        self._version, self._hash = report.state.version, report.state.last_hash
        self._last: Event | None = None
        self._since_snapshot = 0
        self._closed = False

    # --- opening ------------------------------------------------------------------

    @classmethod
    def attach(cls, store: StoreFile, run_id: str, *, adopt: bool = False) -> RunWriter:
        """The writer of an existing run; `adopt` lets this user's key anchor a run that
        verifies but is not anchored by it (store/anchor.py)."""
        if store.readonly:
            raise StoreError(f"{store.path} was opened read-only; open it writable to append")
        if store.conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
            raise UnknownRun(f"no run {run_id!r} in {store.path}; `npu-deploy runs` lists them")
        if not store.lock_path(run_id).exists():
            # No writer of this run has been here (a store copied without its locks folder):
            # a refusal is found before a lock file is made for it. Checked again under the
            # lock, where it counts.
            refused = refusal(Verifier(store).verify(run_id, fold=False), adopt=adopt)
            if refused is not None:
                raise refused
        lock = take_run_lock(store, run_id)
        try:
            return cls(store, run_id, lock, adopt=adopt)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def create(cls, store: StoreFile, started: RunStarted | RunForked | dict[str, Any], *,
               run_id: str | None = None, actor: str = "harness",
               first_type: str = "run.started") -> RunWriter:
        """A new run, opened by `started`: a RunStarted or RunForked value, or the JSON
        object of a `first_type` payload."""
        if store.readonly:
            raise StoreError(f"{store.path} was opened read-only; open it writable to append")
        run_id = validate_run_id(run_id or new_run_id())
        opening = (NewEvent(first_type, started, actor=actor, idempotency_key=RUN_START)
                   if isinstance(started, dict) else
                   NewEvent.of(started, actor=actor, idempotency_key=RUN_START))
        first = prepare(opening, run_id=run_id, run_version=1, prev_hash=GENESIS_HASH)
        lock = take_run_lock(store, run_id)
        try:
            with transaction(store.db) as conn:
                if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
                    raise StoreError(f"run {run_id} already exists in {store.path}; "
                                     "choose another run id")
                insert_run_row(conn, first)
                update_run_summary(conn, apply(DeploymentState(), insert_row(conn, first)))
                anchor_head(conn, signing_key(f"to anchor the new run {run_id}"), run_id)
            return cls(store, run_id, lock)
        except BaseException:
            lock.release()
            raise

    # --- state ----------------------------------------------------------------------

    @property
    def version(self) -> int:
        return self._version

    @property
    def state(self) -> DeploymentState:
        """The run's folded state after its newest event."""
        if self._last is not None and self._folded.version != self._version:
            self._folded = with_head(self._folded, self._last)
        return self._folded

    # --- appending ------------------------------------------------------------------

    def append(self, new: NewEvent, *, consumes: str | None = None) -> Event:
        """Append one event durably (its own transaction, fsync'd by synchronous=FULL).

        With an idempotency key already used in this run, the stored event is
        returned and nothing is written. With `consumes`, the inbox command of
        that id is marked as recorded by this event in the same transaction.
        """
        self._check_open()
        if consumes is not None or getattr(new, "idempotency_key", None) is not None:
            return self.append_batch([new], consumes=[consumes])[0]
        event = prepare(new, run_id=self.run_id, run_version=self._version + 1,
                        prev_hash=self._hash)
        self._check_decision(event, None)
        folded = reduce_body(self._folded, event)
        if folded is not self._folded and run_summary(folded) != run_summary(self._folded):
            return self._commit([event], None)[0]
        # The run's listing columns stay as they are: the INSERT (whose trigger advances the
        # head) and the head's new MAC.
        with transaction(self._store.db) as conn:
            event = insert_row(conn, event)
            anchor_head(conn, self._key, self.run_id)
        self._folded = folded
        self._advanced(event, 1)
        return event

    def append_batch(self, news: Sequence[NewEvent],
                     consumes: Sequence[str | None] | None = None) -> list[Event]:
        """Append several events in one transaction: all of them, or none."""
        self._check_open()
        out: list[Event | None] = [None] * len(news)
        fresh: list[Event] = []
        fresh_consumes: list[str | None] = []
        seen_keys: set[str] = set()
        version, prev = self._version, self._hash
        for i, new in enumerate(news):
            key = new.idempotency_key if isinstance(new, NewEvent) else None
            if key is not None:
                stored = self._by_key(key)
                if stored is not None:
                    out[i] = _same_or_conflict(stored, new)
                    continue
                if key in seen_keys:
                    raise IdempotencyConflict(f"idempotency_key {key!r} appears twice in one batch")
                seen_keys.add(key)
            version += 1
            event = prepare(new, run_id=self.run_id, run_version=version, prev_hash=prev)
            self._check_decision(event, consumes[i] if consumes else None)
            prev = event.hash
            fresh.append(event)
            fresh_consumes.append(consumes[i] if consumes else None)
        committed = iter(self._commit(fresh, fresh_consumes) if fresh else [])
        return [e if e is not None else next(committed) for e in out]

    def _commit(self, events: list[Event], consumes: list[str | None] | None) -> list[Event]:
        folded = self._folded
        stored = []
        with transaction(self._store.db) as conn:
            for i, event in enumerate(events):
                event = insert_row(conn, event)
                if consumes and consumes[i]:
                    self._consume(consumes[i], event)  # type: ignore[arg-type]
                folded = reduce_body(folded, event)
                stored.append(event)
            if folded is not self._folded and run_summary(folded) != run_summary(self._folded):
                update_run_summary(conn, folded)
            anchor_head(conn, self._key, self.run_id)
        # Commit, then apply: the in-memory head moves only after the commit.
        self._folded = folded
        self._advanced(stored[-1], len(stored))
        return stored

    def _advanced(self, last: Event, count: int) -> None:
        self._version, self._hash, self._last = last.run_version, last.hash, last
        self._since_snapshot += count
        if self._since_snapshot >= SNAPSHOT_EVERY:
            self.snapshot()

    def _check_decision(self, event: Event, consumes: str | None) -> None:
        """A person's decision is appended only as the record of their inbox command (which
        it consumes, and says the same as), or, in a fork, as the copy of its parent's
        decision at the same version. A policy's decision (author "policy:...") is the
        conductor's own act."""
        if event.type != "human.decision":
            return
        if is_policys(event.payload):
            problem = policy_problem(self._config(), event.payload, event.phase)
            if problem is not None:
                raise InvalidEvent(f"human.decision by {event.payload['author']}: {problem}")
            return
        command_id = event.payload.get("command_id")
        if consumes is None:
            origin = self._folded.forked_from
            if origin is not None and event.run_version <= origin[1]:
                theirs = self._conn.execute(
                    "SELECT type, actor, payload FROM events WHERE run_id = ? AND "
                    "run_version = ?", (origin[0], event.run_version)).fetchone()
                if theirs is not None and tuple(theirs) == (event.type, event.actor,
                                                            event.payload_json):
                    return
            raise InvalidEvent(f"human.decision: a person's decision is recorded only from "
                               f"their inbox command, and none is consumed by this one "
                               f"(command_id {command_id}); `decide` or the TUI leaves one")
        problem = (f"command_id {command_id} is not the command it consumes ({consumes})"
                   if consumes != command_id else
                   command_problem(self._conn, self._key, self.run_id, event.payload))
        if problem is not None:
            raise InvalidEvent(f"human.decision: {problem}")

    def _config(self) -> dict[str, Any]:
        """The configuration the run was started (or forked) with."""
        row = self._conn.execute("SELECT payload FROM events WHERE run_id = ? AND "
                                 "run_version = 1", (self.run_id,)).fetchone()
        return dict(json.loads(row[0]).get("config") or {}) if row else {}

    def _consume(self, command_id: str, event: Event) -> None:
        cur = self._conn.execute(
            "UPDATE inbox SET consumed_event_id = ?, consumed_ts = ? WHERE command_id = ? "
            "AND run_id = ? AND consumed_event_id IS NULL",
            (event.event_id, utc_now(), command_id, self.run_id))
        if cur.rowcount == 1:
            return
        row = self._conn.execute("SELECT consumed_event_id FROM inbox WHERE command_id = ? "
                                 "AND run_id = ?", (command_id, self.run_id)).fetchone()
        if row is None:
            raise StoreError(f"no inbox command {command_id} for run {self.run_id}")
        raise CommandAlreadyConsumed(f"inbox command {command_id} was already recorded by "
                                     f"event {row[0]}")

    def find(self, key: str) -> Event | None:
        """The event this run stored under idempotency key `key`, if any."""
        return self._by_key(key)

    def _by_key(self, key: str) -> Event | None:
        row = self._conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND "
                                 "idempotency_key = ?", (self.run_id, key)).fetchone()
        return event_from_row(row) if row else None

    # --- closing ------------------------------------------------------------------------

    def snapshot(self) -> None:
        self._snapshots.save(self.state)
        self._since_snapshot = 0

    def _check_open(self) -> None:
        if self._closed:
            raise StoreError(f"the writer of run {self.run_id} is closed")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._since_snapshot:
                self.snapshot()
        finally:
            self._store.close()
            self._lock.release()

    def __enter__(self) -> RunWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _same_or_conflict(stored: Event, new: NewEvent) -> Event:
    """A retried append returns the stored event; a different one under the same key is refused."""
    payload = validate_payload(new.type, new.payload)
    if stored.type != new.type or stored.payload_json != canonical_json(payload):
        raise IdempotencyConflict(
            f"idempotency_key {new.idempotency_key!r} was already used by event "
            f"v{stored.run_version} ({stored.type}) with different content")
    return stored
