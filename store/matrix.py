"""The head's book of matrices: each matrix (its spec as given) and, per cell, its run with
where and how it stands (the node that runs it, how many times it was started, why it
stopped). The runs themselves are ordinary runs of the store; this book only groups them,
for `matrix`, `matrix compare` and the TUI. Reading it never needs sqlite-utils."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from typing import Any

from npu_deploy.events import canonical_json, utc_now

from .errors import StoreError
from .storefile import StoreFile
from .transaction import transaction

#: How a cell stands: waiting for a node; running on one; its run ended (the verdict is the
#: run's); stopped for a person; failed for a reason no retry changes.
CELL_STATES = ("queued", "running", "finished", "needs_human", "error")
#: A cell whose run its node holds: the head holds no lock for it, so its runs row reads
#: "crashed" here while the node works it (or Ray finds it another node).
ON_NODE = ("queued", "running")


@dataclass(frozen=True)
class MatrixRun:
    matrix_id: str
    run_id: str
    cell: dict[str, Any]
    state: str
    node: str | None
    tries: int
    detail: str | None
    updated_ts: str


def _has_book(conn: sqlite3.Connection) -> bool:
    """A store of a schema before 4, opened read-only (so not migrated), has no book."""
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                        "name = 'matrix_runs'").fetchone() is not None


def record_matrix(store: StoreFile, matrix_id: str, spec: dict[str, Any]) -> bool:
    """Enter a matrix in the book; True when it is new. The same name given another spec is
    refused: a matrix is re-run (its unfinished cells resumed) under the spec it began with."""
    text = canonical_json(spec)
    with transaction(store.db) as conn:
        row = conn.execute("SELECT spec FROM matrices WHERE matrix_id = ?",
                           (matrix_id,)).fetchone()
        if row is not None:
            if row[0] != text:
                raise StoreError(f"matrix {matrix_id} exists in {store.path} with another "
                                 "spec; name the new one otherwise (--name)")
            return False
        conn.execute("INSERT INTO matrices VALUES (?, ?, ?)", (matrix_id, text, utc_now()))
    return True


def note_cell(store: StoreFile, matrix_id: str, run_id: str, cell: dict[str, Any], state: str,
              *, node: str | None = None, detail: str | None = None,
              started: bool = False) -> None:
    """Where and how a cell's run stands now (`started`: one more try began)."""
    if state not in CELL_STATES:
        raise ValueError(f"cell state {state!r}")
    with transaction(store.db) as conn:
        conn.execute(
            "INSERT INTO matrix_runs VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT(run_id) DO "
            "UPDATE SET state = excluded.state, node = coalesce(excluded.node, node), "
            "tries = tries + excluded.tries, detail = excluded.detail, "
            "updated_ts = excluded.updated_ts",
            (run_id, matrix_id, canonical_json(cell), state, node, int(started), detail,
             utc_now()))


def matrix_runs(conn: sqlite3.Connection, matrix_id: str | None = None) -> list[MatrixRun]:
    """The book's rows, of one matrix or all, in the order the cells were entered."""
    return _rows(conn, "WHERE matrix_id = ?" if matrix_id else "",
                 (matrix_id,) if matrix_id else ())


def cell_of(conn: sqlite3.Connection, run_id: str) -> MatrixRun | None:
    """The book's row of a run, or None when the run is no matrix's."""
    found = _rows(conn, "WHERE run_id = ?", (run_id,))
    return found[0] if found else None


def node_holding(conn: sqlite3.Connection, run_id: str) -> str | None:
    """The node that works `run_id` for its matrix (the book says queued or running): its
    shipper takes a person's commands for the run from this store's inbox, so nothing here
    may run the run too (not the TUI, not `resume`). None when no node holds it."""
    row = cell_of(conn, run_id)
    if row is None or row.state not in ON_NODE:
        return None
    return row.node or "its node"


def _rows(conn: sqlite3.Connection, where: str, args: tuple[str, ...]) -> list[MatrixRun]:
    if not _has_book(conn):
        return []
    rows = conn.execute("SELECT matrix_id, run_id, cell, state, node, tries, detail, "
                        f"updated_ts FROM matrix_runs {where} ORDER BY rowid", args)
    return [MatrixRun(m, r, json.loads(c), s, n, t, d, u) for m, r, c, s, n, t, d, u in rows]


def matrices(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    """Every matrix (id, created), oldest first."""
    if not _has_book(conn):
        return []
    return [tuple(r) for r in conn.execute(
        "SELECT matrix_id, created_ts FROM matrices ORDER BY created_ts, matrix_id")]


def node_stretches(conn: sqlite3.Connection, run_id: str) -> list[tuple[int, str, str, str, str]]:
    """Each stretch of the run a node shipped: (up to version, head hash, node, key id,
    signature), in order."""
    if not _has_book(conn):
        return []
    return [tuple(r) for r in conn.execute(
        "SELECT upto_version, head_hash, node, node_key, signature FROM node_anchors "
        "WHERE run_id = ? ORDER BY upto_version", (run_id,))]


@dataclass(frozen=True)
class GateHeadline:
    """What the run browser shows of a run's newest gate: its name, its verdict, the check
    it leads with (the first failing gating check, else the first gating one, else the
    first), and how many checks of that kind it has."""

    gate: str
    passed: bool
    check: dict[str, Any]
    count: int


@dataclass(frozen=True, slots=True)
class BookRow:
    """A cell's row as the run browser reads it: the book's columns (its cell as stored,
    decoded when asked) and its run's last gate, if it has one."""

    matrix_id: str
    run_id: str
    cell_json: str
    state: str
    node: str | None
    tries: int
    detail: str | None
    gate: GateHeadline | None

    @property
    def cell(self) -> dict[str, Any]:
        return dict(json.loads(self.cell_json))


@dataclass(frozen=True)
class BookEntry:
    """A matrix as the run browser groups it: its spec, when it was entered, its cells."""

    matrix_id: str
    spec: dict[str, Any]
    created_ts: str
    runs: list[BookRow]


#: The book and each run's newest gate in one read. The gate is found backwards through the
#: run's (run_id, run_version) index, a few rows from the head for a run at work or ended;
#: SQLite's JSON functions take its headline check and its count out of the payload, so a
#: gate of many checks is not decoded whole for one line. gate.evaluated has one schema.
_BOOK = """
WITH cells AS (
  SELECT r.rowid AS entered, r.*, (SELECT e.seq FROM events e WHERE e.run_id = r.run_id
    AND e.type = 'gate.evaluated' ORDER BY e.run_version DESC LIMIT 1) AS gate_seq
  FROM matrix_runs r)
SELECT m.matrix_id, m.spec, m.created_ts, c.run_id, c.cell, c.state, c.node, c.tries,
  c.detail, json_extract(g.payload, '$.gate'), json_extract(g.payload, '$.passed'),
  (SELECT value FROM json_each(g.payload, '$.checks') ORDER BY
     json_extract(value, '$.gating') IS 0, json_extract(value, '$.passed'), key LIMIT 1),
  (SELECT count(*) FROM json_each(g.payload, '$.checks') WHERE
     json_extract(value, '$.gating') IS NOT 0 AND
     (json_extract(g.payload, '$.passed') OR json_extract(value, '$.passed') = 0))
FROM matrices m LEFT JOIN cells c ON c.matrix_id = m.matrix_id
  LEFT JOIN events g ON g.seq = c.gate_seq
ORDER BY m.created_ts DESC, m.matrix_id, c.entered"""


def book(conn: sqlite3.Connection) -> list[BookEntry]:
    """Every matrix, newest first, with its cells' runs in the order they were entered and
    each run's last gate's headline: one query, for the TUI's run browser."""
    if not _has_book(conn):
        return []
    out: list[BookEntry] = []
    for (m, spec, created, run_id, cell, state, node, tries, detail, gate, passed, check,
         count) in conn.execute(_BOOK):
        if not out or out[-1].matrix_id != m:
            out.append(BookEntry(m, dict(json.loads(spec)), created, []))
        if run_id is not None:
            headline = None if check is None else \
                GateHeadline(gate, bool(passed), json.loads(check), count)
            out[-1].runs.append(BookRow(m, run_id, cell, state, node, tries, detail, headline))
    return out
