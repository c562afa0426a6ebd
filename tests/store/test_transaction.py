"""The store's one transaction pattern: all or nothing, the write lock taken up front when
asked, and a nested transaction refused instead of silently joining the outer one."""

from __future__ import annotations

import sqlite3

import pytest
from sqlite_utils import Database

from npu_deploy.store import EventStore
from npu_deploy.store.errors import NestedTransaction
from npu_deploy.store.transaction import transaction


@pytest.fixture
def db(tmp_path):
    d = Database(sqlite3.connect(tmp_path / "t.db", check_same_thread=False))
    d.execute("PRAGMA journal_mode = WAL")
    d.execute("PRAGMA foreign_keys = ON")
    d.execute("CREATE TABLE parents (id INTEGER PRIMARY KEY)")
    d.execute("CREATE TABLE children (id INTEGER PRIMARY KEY, "
              "parent INTEGER REFERENCES parents(id))")
    yield d
    d.close()


def other(tmp_path) -> sqlite3.Connection:
    """A second connection to the same file that never waits for a lock."""
    conn = sqlite3.connect(tmp_path / "t.db", isolation_level=None, timeout=0)
    return conn


def count(conn: sqlite3.Connection, table: str = "parents") -> int:
    return int(conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def test_a_block_that_ends_is_committed_for_every_connection(db, tmp_path):
    with transaction(db) as conn:
        conn.execute("INSERT INTO parents VALUES (1)")
        conn.execute("INSERT INTO parents VALUES (2)")
    assert not db.conn.in_transaction
    assert count(other(tmp_path)) == 2


def test_a_block_that_raises_writes_nothing_and_the_error_goes_on(db, tmp_path):
    with pytest.raises(KeyError), transaction(db) as conn:
        conn.execute("INSERT INTO parents VALUES (1)")
        raise KeyError("boom")
    assert not db.conn.in_transaction
    assert count(other(tmp_path)) == 0
    with transaction(db) as conn:                  # the connection is still usable
        conn.execute("INSERT INTO parents VALUES (3)")
    assert count(db.conn) == 1


def test_a_commit_that_fails_is_rolled_back(db, tmp_path):
    # A deferred foreign key is checked at COMMIT, which then fails.
    with pytest.raises(sqlite3.IntegrityError), transaction(db) as conn:
        conn.execute("PRAGMA defer_foreign_keys = ON")
        conn.execute("INSERT INTO parents VALUES (1)")
        conn.execute("INSERT INTO children VALUES (1, 99)")
    assert not db.conn.in_transaction
    assert count(db.conn) == 0 and count(db.conn, "children") == 0


def test_a_nested_transaction_is_refused_and_the_outer_one_goes_on(db, tmp_path):
    with transaction(db) as conn:
        conn.execute("INSERT INTO parents VALUES (1)")
        with pytest.raises(NestedTransaction, match="cannot nest"), transaction(db):
            raise AssertionError("the inner block must not run")
        assert conn.in_transaction
        conn.execute("INSERT INTO parents VALUES (2)")
    assert count(other(tmp_path)) == 2
    # sqlite-utils' atomic() would have nested with a savepoint instead
    with db.atomic(), pytest.raises(NestedTransaction):
        with transaction(db):
            pass


def test_immediate_takes_the_write_lock_before_the_first_write(db, tmp_path):
    rival = other(tmp_path)
    with transaction(db):
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            rival.execute("BEGIN IMMEDIATE")
    with transaction(db, immediate=False):
        rival.execute("BEGIN IMMEDIATE")            # a deferred BEGIN has locked nothing yet
        rival.execute("ROLLBACK")


def test_the_store_refuses_to_open_a_transaction_inside_its_own(tmp_path):
    with EventStore.open(tmp_path / "runs.db") as store:
        with transaction(store.db), pytest.raises(NestedTransaction):
            store.put_blob(b"inside another transaction")
        assert store.put_blob(b"on its own").startswith("sha256:")
