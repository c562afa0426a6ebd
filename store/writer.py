"""The single writer of a run: validated, hash-chained, durable appends.

Exactly one `RunWriter` per run exists across all processes: it holds an OS
file lock (released by the kernel if the process dies). It keeps the run's
head and folded state in memory and updates them only after a commit.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from filelock import FileLock, Timeout

from events import (
    DeploymentState,
    Event,
    InvalidEvent,
    NewEvent,
    apply,
    canonical_json,
    check_envelope,
    current_schema_version,
    new_run_id,
    seal,
    utc_now,
    validate_payload,
)

from .errors import (
    CommandAlreadyConsumed,
    IdempotencyConflict,
    RunLocked,
    StoreCorrupt,
    StoreError,
    UnknownRun,
)
from .eventstore import EVENT_COLUMNS, EventStore, event_from_row, validate_run_id

#: A snapshot is cached every this many events (and when the writer closes).
SNAPSHOT_EVERY = 1000

#: How long a writer waits for a run's lock. Not zero: a reader asking
#: `is_locked` holds the lock for an instant while it probes.
LOCK_WAIT_S = 1.0

_INSERT = ("INSERT INTO events (event_id, run_id, run_version, type, schema_version, phase, "
           "attempt, actor, ts, causation_id, correlation_id, idempotency_key, payload, "
           "prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")

_UPDATE_RUN = ("UPDATE runs SET head_version = ?, head_hash = ?, head_seq = ?, head_type = ?, "
               "head_ts = ?, status = ?, current_phase = ?, phase_reached = ?, verdict = ?, "
               "input_tokens = ?, output_tokens = ?, cost_usd = ? WHERE run_id = ?")


def prepare(new: NewEvent, *, run_id: str, run_version: int, prev_hash: str,
            event_id: str | None = None, ts: str | None = None) -> Event:
    """Validate a new event and seal it as the next link after `prev_hash`."""
    if not isinstance(new, NewEvent):
        raise InvalidEvent(f"expected a NewEvent, got {type(new).__name__}")
    check_envelope(new)
    payload = validate_payload(new.type, new.payload)
    return seal(replace(new, payload=payload), run_id=run_id, run_version=run_version,
                prev_hash=prev_hash, schema_version=current_schema_version(new.type),
                payload_json=canonical_json(payload), event_id=event_id, ts=ts)


def insert_row(conn: sqlite3.Connection, event: Event) -> int:
    cur = conn.execute(_INSERT, (
        event.event_id, event.run_id, event.run_version, event.type, event.schema_version,
        event.phase, event.attempt, event.actor, event.ts, event.causation_id,
        event.correlation_id, event.idempotency_key, event.payload_json, event.prev_hash,
        event.hash))
    assert cur.lastrowid is not None
    return cur.lastrowid


def update_run_row(conn: sqlite3.Connection, state: DeploymentState, head: Event) -> None:
    conn.execute(_UPDATE_RUN, (
        state.version, state.last_hash, head.seq, head.type, head.ts, state.status,
        state.current_phase, state.phase_reached, state.verdict, state.totals.input_tokens,
        state.totals.output_tokens, state.totals.cost_usd, state.run_id))


def insert_run_row(conn: sqlite3.Connection, first: Event) -> None:
    p = first.payload
    conn.execute(
        "INSERT INTO runs (run_id, created_ts, model, backend, agent, parent_run_id, "
        "parent_version, head_version, head_hash, status) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, ?)",
        (first.run_id, first.ts, p.get("model"), p.get("backend"), p.get("agent"),
         p.get("parent_run_id"), p.get("parent_version"), first.prev_hash, "new"))


def take_run_lock(store: EventStore, run_id: str) -> FileLock:
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


class RunWriter:
    def __init__(self, store: EventStore, run_id: str, lock: FileLock) -> None:
        self.store = store
        self.run_id = run_id
        self._lock = lock
        # Our own connection: commits from it move other connections' data_version.
        self._store = EventStore.open(store.path)
        self._conn = self._store.conn
        # Never extend a chain that does not verify: the new links would vouch for it.
        report = self._store.verify(run_id)
        if not report.ok or report.state is None:
            self._store.close()
            raise StoreCorrupt(f"run {run_id} fails verification, refusing to append: "
                               f"{report.problem}")
        self.state: DeploymentState = report.state
        self._since_snapshot = 0
        self._closed = False

    # --- opening ------------------------------------------------------------------

    @classmethod
    def attach(cls, store: EventStore, run_id: str) -> RunWriter:
        if store.readonly:
            raise StoreError(f"{store.path} was opened read-only; open it writable to append")
        if store.conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone() is None:
            raise UnknownRun(f"no run {run_id!r} in {store.path}; `npu-deploy runs` lists them")
        lock = take_run_lock(store, run_id)
        try:
            return cls(store, run_id, lock)
        except BaseException:
            lock.release()
            raise

    @classmethod
    def create(cls, store: EventStore, started: dict[str, Any], *, run_id: str | None = None,
               actor: str = "harness", first_type: str = "run.started") -> RunWriter:
        if store.readonly:
            raise StoreError(f"{store.path} was opened read-only; open it writable to append")
        run_id = validate_run_id(run_id or new_run_id())
        first = prepare(NewEvent(first_type, started, actor=actor, idempotency_key="run.start"),
                        run_id=run_id, run_version=1, prev_hash="0" * 64)
        lock = take_run_lock(store, run_id)
        try:
            conn = store.conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                if conn.execute("SELECT 1 FROM runs WHERE run_id = ?", (run_id,)).fetchone():
                    raise StoreError(f"run {run_id} already exists in {store.path}; "
                                     "choose another run id")
                insert_run_row(conn, first)
                seq = insert_row(conn, first)
                first = replace(first, seq=seq)
                update_run_row(conn, apply(DeploymentState(), first), first)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return cls(store, run_id, lock)
        except BaseException:
            lock.release()
            raise

    # --- appending ------------------------------------------------------------------

    @property
    def version(self) -> int:
        return self.state.version

    def append(self, new: NewEvent, *, consumes: str | None = None) -> Event:
        """Append one event durably (its own transaction, fsync'd by synchronous=FULL).

        With an idempotency key already used in this run, the stored event is
        returned and nothing is written. With `consumes`, the inbox command of
        that id is marked as recorded by this event in the same transaction.
        """
        return self.append_batch([new], consumes=[consumes] if consumes else None)[0]

    def append_batch(self, news: Sequence[NewEvent],
                     consumes: Sequence[str | None] | None = None) -> list[Event]:
        """Append several events in one transaction: all of them, or none."""
        self._check_open()
        out: list[Event | None] = [None] * len(news)
        fresh: list[tuple[int, Event]] = []
        state = self.state
        seen_keys: dict[str, int] = {}
        for i, new in enumerate(news):
            key = new.idempotency_key if isinstance(new, NewEvent) else None
            if key is not None:
                stored = self._by_key(key)
                if stored is not None:
                    out[i] = _same_or_conflict(stored, new)
                    continue
                if key in seen_keys:
                    raise IdempotencyConflict(f"idempotency_key {key!r} appears twice in one batch")
                seen_keys[key] = i
            event = prepare(new, run_id=self.run_id, run_version=state.version + len(fresh) + 1,
                            prev_hash=fresh[-1][1].hash if fresh else state.last_hash)
            fresh.append((i, event))
        if not fresh:
            return [e for e in out if e is not None]
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            committed = []
            for i, event in fresh:
                event = replace(event, seq=insert_row(conn, event))
                command = consumes[i] if consumes else None
                if command:
                    self._consume(command, event)
                state = apply(state, event)
                committed.append((i, event))
            update_run_row(conn, state, committed[-1][1])
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        # Commit, then apply: the in-memory head moves only after the commit.
        self.state = state
        for i, event in committed:
            out[i] = event
        self._since_snapshot += len(committed)
        if self._since_snapshot >= SNAPSHOT_EVERY:
            self.snapshot()
        return [e for e in out if e is not None]

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

    def _by_key(self, key: str) -> Event | None:
        row = self._conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND "
                                 "idempotency_key = ?", (self.run_id, key)).fetchone()
        return event_from_row(row) if row else None

    # --- closing ------------------------------------------------------------------------

    def snapshot(self) -> None:
        self._store.save_snapshot(self.state)
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
