"""Opening the SQLite file safely, and the schema with its forward migrations.

Nothing here writes to a file before it has been recognised as an npu-deploy
store of a schema this code understands: a foreign, truncated or newer file is
refused untouched.
"""

from __future__ import annotations

import os
import sqlite3
import struct
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .errors import NewerSchema, NotAStore, StoreCorrupt, StoreUnreadable
from .files import dangling_link_problem, no_store_at, regular_or_missing
from .medium import (
    open_read_only,
    read_only_error,
    storage_error,
    wal_holds_pages,
    why_unwritable,
)
from .transaction import transaction

if TYPE_CHECKING:
    from sqlite_utils import Database

SQLITE_MAGIC = b"SQLite format 3\x00"


#: The tables of schema 1 and their columns (with sqlite-utils' column types): what `_v1`
#: creates and what `expected_columns` checks an opened store against without making them.
_V1_TABLES: dict[str, dict[str, Any]] = {
    "runs": {
        "run_id": str, "created_ts": str, "model": str, "backend": str, "agent": str,
        "parent_run_id": str, "parent_version": int,
        # A summary of the folded state, kept by the writer in the same
        # transaction as each append so that listing runs is one query.
        "head_version": int, "head_hash": str, "head_seq": int, "head_type": str,
        "head_ts": str, "status": str, "current_phase": int, "phase_reached": int,
        "verdict": str, "input_tokens": int, "output_tokens": int, "cost_usd": float},
    "events": {
        "seq": int, "event_id": str, "run_id": str, "run_version": int, "type": str,
        "schema_version": int, "phase": int, "attempt": int, "actor": str, "ts": str,
        "causation_id": str, "correlation_id": str, "idempotency_key": str,
        "payload": str, "prev_hash": str, "hash": str},
    "blobs": {"sha256": str, "size": int, "codec": str, "data": bytes, "created_ts": str},
    "snapshots": {"run_id": str, "run_version": int, "reducer_version": int, "hash": str,
                  "state": str, "created_ts": str},
    "inbox": {"command_id": str, "run_id": str, "kind": str, "payload": str, "author": str,
              "created_ts": str, "consumed_event_id": str, "consumed_ts": str},
}


def _v1(db: Database) -> None:
    t = _V1_TABLES
    db.table("runs").create(t["runs"], pk="run_id",
                            not_null={"created_ts", "head_version", "head_hash", "status"})
    db.table("events").create(t["events"], pk="seq",
                              foreign_keys=[("run_id", "runs", "run_id")],
                              not_null={"event_id", "run_id", "run_version", "type",
                                        "schema_version", "actor", "ts", "payload",
                                        "prev_hash", "hash"})
    # No index on event_id: ids are UUIDv7 (time + 74 random bits), and one more
    # B-tree page per durable append costs more than the rare lookup by id saves.
    db.table("events").create_index(["run_id", "run_version"], unique=True)
    # Partial: only keyed events are deduplicated, and an unkeyed append (most of
    # them) touches one index page less. `tail` needs no (run_id, seq) index: it
    # range-scans the rowid from its cursor.
    db.conn.execute("CREATE UNIQUE INDEX idx_events_run_idempotency ON events "
                    "(run_id, idempotency_key) WHERE idempotency_key IS NOT NULL")
    db.table("blobs").create(t["blobs"], pk="sha256", not_null={"size", "codec", "data"})
    db.table("snapshots").create(t["snapshots"],
                                 pk=("run_id", "run_version", "reducer_version"))
    db.table("inbox").create(t["inbox"], pk="command_id",
                             not_null={"run_id", "kind", "payload", "created_ts"})
    db.table("inbox").create_index(["run_id", "consumed_event_id"])
    # One statement at a time: executescript() would commit the migration half-way.
    for name, when, body in _TRIGGERS:
        db.conn.execute(f"CREATE TRIGGER {name} {when} BEGIN {body}; END")


_TRIGGERS = [
    ("events_append_only_update", "BEFORE UPDATE ON events",
     "SELECT RAISE(ABORT, 'events are append-only: UPDATE refused')"),
    ("events_append_only_delete", "BEFORE DELETE ON events",
     "SELECT RAISE(ABORT, 'events are append-only: DELETE refused')"),
    ("blobs_immutable", "BEFORE UPDATE ON blobs",
     "SELECT RAISE(ABORT, 'blobs are content-addressed: UPDATE refused')"),
    ("inbox_consumed_once", "BEFORE UPDATE ON inbox WHEN OLD.consumed_event_id IS NOT NULL",
     "SELECT RAISE(ABORT, 'inbox command already consumed')"),
    ("inbox_kept", "BEFORE DELETE ON inbox",
     "SELECT RAISE(ABORT, 'inbox commands are kept: DELETE refused')"),
    # The run's head follows every insert, inside SQLite: no writer or importer can
    # forget it, and `verify` compares it with the last event to catch a cut tail.
    ("events_advance_head", "AFTER INSERT ON events",
     "UPDATE runs SET head_version = NEW.run_version, head_hash = NEW.hash, "
     "head_seq = NEW.seq, head_type = NEW.type, head_ts = NEW.ts WHERE run_id = NEW.run_id"),
    ("runs_head_advances",
     "BEFORE UPDATE OF head_version ON runs WHEN NEW.head_version < OLD.head_version",
     "SELECT RAISE(ABORT, 'a run head only moves forward')"),
]


#: The columns schema 2 adds.
_V2_COLUMNS: dict[str, dict[str, Any]] = {
    "runs": {"head_mac": str}, "snapshots": {"mac": str}, "inbox": {"mac": str}}


def _v2(db: Database) -> None:
    """The anchor (store/anchor.py): a MAC of each run's head, of each snapshot and of each
    person's command. Rows from before hold none: their runs read as unanchored."""
    for table, columns in _V2_COLUMNS.items():
        for name, type_ in columns.items():
            db.table(table).add_column(name, type_)


#: The table schema 3 adds: one row per run that came from an export file, with the export
#: format it came in and the version up to which its decisions came without their inbox
#: commands (store/transfer.py): a format-1 export carried none, so its persons' decisions
#: say why nothing stands behind them (store/inbox.py).
_V3_TABLES: dict[str, dict[str, Any]] = {
    "imports": {"run_id": str, "format_version": int, "uncarried_upto": int,
                "imported_ts": str}}


def _v3(db: Database) -> None:
    db.table("imports").create(_V3_TABLES["imports"], pk="run_id",
                               not_null={"format_version", "uncarried_upto", "imported_ts"})


#: The tables schema 4 adds, for matrices of deployments run on several hosts (cluster/):
#: each matrix and its cells' runs with where and how each stands, and each stretch of a
#: run a node shipped, with that node's signature over its last event (store/nodes.py,
#: store/ingest.py).
_V4_TABLES: dict[str, dict[str, Any]] = {
    "matrices": {"matrix_id": str, "spec": str, "created_ts": str},
    "matrix_runs": {"run_id": str, "matrix_id": str, "cell": str, "state": str, "node": str,
                    "tries": int, "detail": str, "updated_ts": str},
    "node_anchors": {"run_id": str, "upto_version": int, "head_hash": str, "node": str,
                     "node_key": str, "signature": str, "received_ts": str}}


def _v4(db: Database) -> None:
    t = _V4_TABLES
    db.table("matrices").create(t["matrices"], pk="matrix_id", not_null={"spec", "created_ts"})
    db.table("matrix_runs").create(t["matrix_runs"], pk="run_id",
                                   not_null={"matrix_id", "cell", "state", "updated_ts"})
    db.table("matrix_runs").create_index(["matrix_id"])
    db.table("node_anchors").create(t["node_anchors"], pk=("run_id", "upto_version"),
                                    not_null={"head_hash", "node", "node_key", "signature",
                                              "received_ts"})


#: MIGRATIONS[i] takes a store from schema i to i + 1, adding the columns COLUMNS_ADDED[i]
#: names (tests/store checks that the two agree).
MIGRATIONS: list[Callable[[Database], None]] = [_v1, _v2, _v3, _v4]
COLUMNS_ADDED: list[dict[str, dict[str, Any]]] = [_V1_TABLES, _V2_COLUMNS, _V3_TABLES,
                                                  _V4_TABLES]
SCHEMA_VERSION = len(MIGRATIONS)


def _check_file(path: Path) -> tuple[int, int] | None:
    """Recognise the file before SQLite touches it. Returns (its size, the size its header
    gives) when it is shorter than that, for `_judge_short` to ask SQLite."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            header = f.read(100)
    except PermissionError:
        raise StoreUnreadable(f"cannot read {path}: permission denied") from None
    except OSError as e:
        raise StoreUnreadable(f"cannot read {path}: {e.strerror}") from None
    if size == 0:
        return None  # SQLite treats an empty file as an empty database
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise NotAStore(f"{path} is not an SQLite database (wrong header); "
                        "pass the path of an npu-deploy store to --db")
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    change_counter, pages = struct.unpack(">II", header[24:32])
    valid_for = struct.unpack(">I", header[92:96])[0]
    # The in-header page count is trustworthy when its change counter matches
    # (SQLite file format, section 1.3.7). A file shorter than it lacks pages, unless
    # they are in the -wal: a checkpoint that ran out of space wrote the header first.
    if pages and change_counter == valid_for and size < pages * page_size:
        return size, pages * page_size
    return None


def _judge_short(path: Path, size: int, expected: int) -> None:
    """A file shorter than its header says is judged by SQLite, the -wal's pages included:
    refused only when SQLite's own check (quick_check) finds it damaged. With no -wal the
    store is the file alone, read `immutable` (nothing is created beside it)."""
    if wal_holds_pages(path):
        conn = open_read_only(path)
        cause = "restore it from a copy or an export"
    else:
        conn = sqlite3.connect(f"{path.resolve().as_uri()}?immutable=1", uri=True)
        cause = (f"no {path.name}-wal beside it holds the rest: a store copied while in use "
                 "needs its -wal copied with it; else restore it from a copy or an export")
    try:
        result = [r[0] for r in conn.execute("PRAGMA quick_check")]
    except sqlite3.DatabaseError as e:
        result = [str(e)]
    finally:
        conn.close()
    if result != ["ok"]:
        raise StoreCorrupt(f"{path} is truncated ({size} bytes, its header says {expected}) "
                           f"and SQLite finds it damaged ({result[0]}); {cause}")


# Connections this process holds open, per store file. POSIX drops every lock a process
# holds on a file when any descriptor of that file is closed, so while SQLite has the file
# open here, reading its header with Python would silently release SQLite's locks; another
# process could then take the WAL for its own and lose or corrupt our writes.
_OPEN_HERE: dict[Path, int] = {}


def release(path: Path) -> None:
    """A connection from `connect(path)` was closed."""
    key = Path(path).resolve()
    _OPEN_HERE[key] = _OPEN_HERE.get(key, 1) - 1
    if _OPEN_HERE[key] <= 0:
        del _OPEN_HERE[key]


def connect(path: Path, *, readonly: bool, create: bool = True) -> sqlite3.Connection:
    """Open a store file, migrating it forward when opened for writing. Not `create`: a
    file that holds no store yet (empty) is refused, not made one. Close it through
    `release` too (EventStore does)."""
    path = Path(path)
    db = _connect(path, readonly=readonly, create=create)
    key = path.resolve()
    _OPEN_HERE[key] = _OPEN_HERE.get(key, 0) + 1
    return db


def _connect(path: Path, *, readonly: bool, create: bool) -> sqlite3.Connection:
    exists = regular_or_missing(path, what="a store file",
                                fix="pass the path of an npu-deploy store (or of a new one) "
                                    "to --db")
    if exists and path.resolve() not in _OPEN_HERE:
        short = _check_file(path)
        if short is not None:
            _judge_short(path, *short)
        if not readonly:
            # Recognised through a read-only connection first: opening it for writing
            # would switch a foreign file to WAL before it could be refused.
            if _recognise(path, _open(path, readonly=True)) == 0 and not create:
                raise _no_store_yet(path)
    if not exists and wal_holds_pages(path):
        # SQLite would delete a -wal beside a new, empty store file: its pages are kept.
        raise StoreUnreadable(f"no store file at {path}, but {path.name}-wal is beside it: "
                              "the store was moved or deleted without its -wal, which holds "
                              f"only its newest pages; put {path.name} back beside it, or move "
                              "the -wal away to start a new store")
    if not exists and readonly:
        raise StoreUnreadable(f"{no_store_at(path)}; run a deployment first, or pass --db "
                              "(or NPU_DEPLOY_DB) with the path of an existing store")
    if not exists and (dangling := dangling_link_problem(path)) is not None:
        raise StoreUnreadable(dangling)
    if not exists:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreUnreadable(f"cannot create {path.parent}: {e.strerror}") from None
    # Asked of the kernel, not of SQLite, which would open a read-only file read-only
    # without a word and fail at the first write.
    if not readonly and (reason := why_unwritable(path)) is not None:
        raise read_only_error(path, reason)
    conn = _open(path, readonly=readonly)
    version = _recognise(path, conn, keep_open=True)
    if readonly:
        if version == 0:
            conn.close()
            raise _no_store_yet(path)
        if version < SCHEMA_VERSION:
            conn.close()
            raise StoreUnreadable(f"{path} has store schema {version}; run any writing "
                                  "command once to migrate it to schema "
                                  f"{SCHEMA_VERSION}")
        return conn
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = FULL")
        conn.execute("PRAGMA foreign_keys = ON")
        if version < SCHEMA_VERSION:
            _migrate(conn, version)
    except sqlite3.DatabaseError as e:
        conn.close()
        raise _classify(path, e) from None
    return conn


def _no_store_yet(path: Path) -> StoreUnreadable:
    """An existing file with no store in it (an empty file, or an SQLite database with no
    tables): a command about runs says so, and leaves it as it is, not made a store."""
    what = "an empty file" if _size(path) == 0 else "an SQLite database with no tables"
    return StoreUnreadable(f"{path} is {what}: no store was ever written there; pass the path "
                           "of your store to --db (a deployment makes a new store there)")


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return -1


def _open(path: Path, *, readonly: bool) -> sqlite3.Connection:
    try:
        if readonly:
            conn = open_read_only(path)
        else:
            conn = sqlite3.connect(path, check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 10000")
    except sqlite3.DatabaseError as e:
        raise _classify(path, e) from None
    return conn


def _recognise(path: Path, conn: sqlite3.Connection, *, keep_open: bool = False) -> int:
    """The store schema of an open file, after checking that it is one npu-deploy wrote:
    an empty database, or one whose user_version is a schema we know and whose tables have
    every column that schema gave them. Closes `conn` when it refuses (and always unless
    `keep_open`)."""
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        columns: dict[str, set[str]] = {}
        for (table,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'"):
            columns[table] = {r[1] for r in conn.execute(
                "SELECT * FROM pragma_table_info(?)", (table,))}
        problem = _schema_problem(path, version, columns)
    except sqlite3.DatabaseError as e:
        conn.close()
        raise _classify(path, e) from None
    if problem is not None or not keep_open:
        conn.close()
    if problem is not None:
        raise problem
    return int(version)


def _schema_problem(path: Path, version: int, columns: dict[str, set[str]]
                    ) -> Exception | None:
    if version > SCHEMA_VERSION:
        return NewerSchema(f"{path} has store schema {version}, newer than this npu-deploy "
                           f"understands ({SCHEMA_VERSION}); upgrade npu-deploy to open it")
    tables = set(columns) - {"sqlite_sequence"}
    if version == 0:
        # A store's tables and its user_version are written in one transaction
        # (_migrate): tables without a version were made by something else.
        if tables:
            return NotAStore(f"{path} is an SQLite database but not an npu-deploy store "
                             f"(tables: {', '.join(sorted(tables)[:5])}); pass another --db")
        return None
    for table, wanted in expected_columns(version).items():
        if table not in columns:
            return StoreCorrupt(f"{path} has no table {table}: it is not a store this "
                                "npu-deploy wrote, or it was damaged; restore it from a copy "
                                "or an export")
        lacking = sorted(wanted - columns[table])
        if lacking:
            return StoreCorrupt(f"the store's table {table} lacks column {lacking[0]}: "
                                f"{path} is not a store this npu-deploy wrote, or it was "
                                "damaged; restore it from a copy or an export")
    return None


def expected_columns(version: int) -> dict[str, set[str]]:
    """Each table's columns in a store of schema `version`, as the migrations make them
    (COLUMNS_ADDED, without running them: no sqlite-utils for a command that only reads)."""
    out: dict[str, set[str]] = {}
    for added in COLUMNS_ADDED[:version]:
        for table, columns in added.items():
            out.setdefault(table, set()).update(columns)
    return out


def _migrate(conn: sqlite3.Connection, version: int) -> None:
    from sqlite_utils import Database

    db = Database(conn)
    with transaction(conn) as conn:
        # Re-read under the write lock: another process may have migrated first.
        current = conn.execute("PRAGMA user_version").fetchone()[0]
        for step in range(current, SCHEMA_VERSION):
            MIGRATIONS[step](db)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _classify(path: Path, error: sqlite3.DatabaseError) -> Exception:
    medium = storage_error(path, error)
    if medium is not None:
        return medium
    text = str(error)
    if "not a database" in text:
        return NotAStore(f"{path} is not an SQLite database; pass the path of an npu-deploy "
                         "store to --db")
    if "malformed" in text or "corrupt" in text:
        return StoreCorrupt(f"{path} is damaged ({text}); restore it from a copy or an export")
    if "unable to open" in text or "readonly" in text or "permission" in text.lower():
        access = "read" if os.access(path, os.R_OK) else "open"
        return StoreUnreadable(f"cannot {access} {path} ({text}); check the path and its "
                               "permissions")
    return StoreCorrupt(f"{path}: {text}")
