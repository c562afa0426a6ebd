"""The one way the store writes several statements atomically: `with transaction(db):`.

sqlite-utils' `Database.atomic()` is close, but not what a store shared by several processes
needs. It opens with a deferred `BEGIN`, which takes the write lock only at the first write;
a transaction that has read by then and finds that another connection wrote in between
cannot be upgraded and fails with SQLITE_BUSY at once, without waiting for busy_timeout
(sqlite.org/lang_transaction.html; the busy handler is skipped where waiting could
deadlock, sqlite.org/c3ref/busy_handler.html). `BEGIN IMMEDIATE` takes the lock up front,
waiting for it. And `atomic()` nests by opening a savepoint, which commits or rolls back
with the outer transaction: a caller that expects its own commit would be fooled. SQLite
itself has no nested BEGIN, so a nested `transaction` is a bug, refused with a clear error.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from .errors import NestedTransaction
from .medium import disk_full, is_disk_full

if TYPE_CHECKING:
    from sqlite_utils import Database


def _conn(db: Database | sqlite3.Connection) -> sqlite3.Connection:
    return db if isinstance(db, sqlite3.Connection) else db.conn


@contextmanager
def transaction(db: Database | sqlite3.Connection, *, immediate: bool = True
                ) -> Iterator[sqlite3.Connection]:
    """Run the block as one transaction of `db`'s connection: committed when it ends, rolled
    back (and the error raised again) when it raises. `immediate` takes the write lock at
    the start, waiting up to the connection's busy_timeout for another writer to finish.

    Durability is the connection's: with `synchronous = FULL` (schema.connect) the COMMIT
    returns after the fsync. A COMMIT that fails rolls back too; one that fails for want of
    space raises `DiskFull`."""
    conn = _conn(db)
    if conn.in_transaction:
        raise NestedTransaction("a transaction is already open on this connection and SQLite "
                                "cannot nest them: do this work inside the open transaction, "
                                "or after it ends")
    try:
        conn.execute("BEGIN IMMEDIATE" if immediate else "BEGIN")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # Some errors (a full disk, an interrupt) end the transaction themselves.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
    except sqlite3.Error as e:
        # No room: rolled back, so what was committed stays; said in one line (medium.py).
        if is_disk_full(e):
            raise disk_full(_file_of(conn)) from e
        raise


def _file_of(conn: sqlite3.Connection) -> str | None:
    """The main database file of a connection (no I/O: SQLite knows it)."""
    try:
        return str(conn.execute("PRAGMA database_list").fetchone()[2]) or None
    except sqlite3.Error:
        return None


@contextmanager
def read_snapshot(db: Database | sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """Run the block's reads in one read transaction: every query sees the store as it was
    at the block's first read, whatever other processes commit meanwhile (in WAL mode a
    reader keeps its snapshot, sqlite.org/wal.html#concurrency). Inside an open transaction
    the block joins it: that one is already a single snapshot."""
    conn = _conn(db)
    if conn.in_transaction:
        yield conn
        return
    conn.execute("BEGIN")
    try:
        # A deferred BEGIN takes its snapshot at the first read: take it now.
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")   # nothing was written; ends the read transaction
