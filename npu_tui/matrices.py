"""The run browser's matrices (`npu-deploy matrix`, docs/cluster.md): the head's book read
once per reload (store/matrix.py `book`), a group per matrix with a header row (its name,
its cells done of all), and for each cell's run the node that runs it and its last gate's
headline figures. The browser lays them out (screens/runs.py); this module says what each
row and each preview holds."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from rich.style import StyleType
from rich.table import Table
from rich.text import Text

from npu_deploy.events.describe import gate_figures, printable
from npu_deploy.store import EventStore, RunSummary
from npu_deploy.store.matrix import (
    CELL_STATES,
    ON_NODE,
    BookEntry,
    BookRow,
    GateHeadline,
    book,
    node_stretches,
)
from npu_deploy.store.matrix import node_holding as _node_holding

from .widgets.run_title import abbreviate

#: The key of a matrix's header row, before its name, and of the row over the runs of no
#: matrix: no run id holds a ':' (events/envelope.py RUN_ID_RE), so no key is both.
HEADER_KEY = "matrix:"
OTHERS_KEY = ":others"
#: The key of a cell whose run has not begun, before the run id it will have.
QUEUED_KEY = "cell:"
#: The cell states that end a cell: its run ended, or it failed for a reason no retry changes.
DONE = ("finished", "error")
#: A run's status by its tone (legend.py TONES): at work, failed, a person's turn, passed;
#: and a cell's book state where its run has not begun.
STATUS_TONE = {"running": "active", "crashed": "fail", "needs_human": "human",
               "finished": "pass", "failed": "fail", "aborted": "muted", "paused": "human",
               "queued": "muted", "error": "fail"}


@dataclass(frozen=True)
class Row:
    """A row of the run browser: its key (a run's id, or a header's), each column's forms
    (screens/runs.py `fit_columns` picks one), and what colours it."""

    key: str
    forms: dict[str, dict[str, str]]
    status: str = ""
    gate_tone: str = ""
    header: bool = False

    def style(self, column: str, tones: dict[str, Any]) -> StyleType:
        if self.header:
            return "bold"
        if column == "status":
            return tones[STATUS_TONE.get(self.status, "")]
        return tones[self.gate_tone] if column == "gate" else ""


@dataclass(frozen=True)
class Cell:
    """One row of a matrix: the book's row, with its run's last gate."""

    row: BookRow

    @property
    def gate(self) -> GateHeadline | None:
        return self.row.gate

    def status(self, summary: RunSummary | None) -> str:
        """The run's status as the browser shows it: the store's, except that a run its node
        works is running, not crashed; a cell not yet begun is its book state."""
        if summary is None:
            return self.row.state
        if summary.status == "crashed" and self.row.state in ON_NODE:
            return "running"
        return summary.status


@dataclass(frozen=True)
class Group:
    entry: BookEntry
    cells: list[Cell]

    @property
    def total(self) -> int:
        """The matrix's cells: its spec's product (every cell is entered as it starts, so
        the book may hold fewer while the matrix is entered), or the book's, if more."""
        spec = self.entry.spec
        product = math.prod(len(spec.get(k) or ()) for k in
                            ("models", "seq_lens", "backends", "agents"))
        return max(product, len(self.cells))

    @property
    def done(self) -> int:
        return sum(c.row.state in DONE for c in self.cells)


def node_holding(store: EventStore, run_id: str) -> str | None:
    """store.matrix.node_holding, on the app's store."""
    return _node_holding(store.conn, run_id)


def read_groups(store: EventStore) -> list[Group]:
    """Every matrix of the store, newest first, with its cells (one query)."""
    return [Group(entry, [Cell(row) for row in entry.runs]) for entry in book(store.conn)]


def gate_forms(gate: GateHeadline | None) -> dict[str, str]:
    """The gate column's forms: its name, verdict and headline check (the first failing
    gating check, else the first gating one) with its threshold, and how many more such
    checks there are; short: the verdict and the headline value."""
    if gate is None:
        return {"full": "—", "short": "—"}
    first = gate.check
    value, threshold = gate_figures(first["value"], first["threshold"])
    word = "PASS" if gate.passed else "FAIL"
    more = f" (+{gate.count - 1})" if gate.count > 1 else ""
    metric = _shown(first["metric"], 32)
    return {"full": f"{_shown(gate.gate, 24)} {word} {metric} {value} "
                    f"{first['comparison']} {threshold}{more}",
            "short": f"{word} {metric} {value}"}


@functools.lru_cache(maxsize=1024)
def _shown(text: str, width: int) -> str:
    """Stored text as a cell shows it, cut to `width`: a matrix's gates and nodes repeat
    their few names over thousands of rows."""
    return abbreviate(printable(text, None), width)


def header_forms(group: Group, columns: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """A matrix's header row: its name in the run column, its cells done of all in the
    status column (never given up), nothing in the others."""
    out = {c: dict.fromkeys(("full", "short", "name", "cut"), "") for c in columns}
    name = printable(group.entry.matrix_id, None)
    out["run"] = {"full": f"matrix {name}", "short": name}
    out["status"] = {"full": f"{group.done}/{group.total} done"}
    return out


def others_forms(runs: int, columns: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """The header over the runs of no matrix."""
    out = {c: dict.fromkeys(("full", "short", "name", "cut"), "") for c in columns}
    out["run"] = {"full": "not in a matrix", "short": "others"}
    out["status"] = {"full": f"{runs} run{'s' if runs != 1 else ''}"}
    return out


def tally(cells: list[Cell]) -> str:
    """How many cells stand in each state, in CELL_STATES' order: "2 finished, 1 running"."""
    counts = {s: sum(c.row.state == s for c in cells) for s in CELL_STATES}
    return ", ".join(f"{n} {s}" for s, n in counts.items() if n) or "none entered yet"


def group_preview(group: Group) -> Table:
    """The preview of a matrix's header row: its spec, its cells by state and its nodes."""
    spec = group.entry.spec
    grid = Table.grid(padding=(0, 1))
    grid.add_row("matrix", Text(printable(group.entry.matrix_id)))
    grid.add_row("entered", group.entry.created_ts[:16].replace("T", " ") + " UTC")
    for key in ("models", "seq_lens", "backends", "agents"):
        grid.add_row(key.replace("_", " "), Text(printable(
            ", ".join(str(v) for v in spec.get(key) or ()))))
    grid.add_row("cells", f"{group.done}/{group.total} done: {tally(group.cells)}")
    nodes: dict[str, int] = {}
    for c in group.cells:
        if c.row.node:
            nodes[c.row.node] = nodes.get(c.row.node, 0) + 1
    if nodes:
        grid.add_row("nodes", Text(printable(", ".join(
            f"{n} ({k} cell{'s' if k > 1 else ''})" for n, k in nodes.items()))))
    return grid


def made_on(store: EventStore, run_id: str) -> str:
    """Which node shipped which stretch of the run, as `verify` names them ("npu-host-1
    (v1-v40), npu-host-2 (v41-v60)"); the signatures are `verify`'s to check."""
    parts: list[list[Any]] = []
    start = 1
    for upto, _hash, node, _key, _sig in node_stretches(store.conn, run_id):
        if parts and parts[-1][0] == node:
            parts[-1][2] = upto
        else:
            parts.append([node, start, upto])
        start = upto + 1
    return ", ".join(f"{n} (v{a}-v{b})" for n, a, b in parts)


def cell_preview(grid: Table, store: EventStore, cell: Cell) -> None:
    """A matrix run's own lines under its preview: its matrix and cell, its node and tries,
    where it was made, why it stopped, and its last gate."""
    row = cell.row
    c = row.cell
    grid.add_row("matrix", Text(printable(
        f"{row.matrix_id}: {c.get('model')} s{c.get('seq_len')} {c.get('backend')} "
        f"{c.get('agent')}")))
    grid.add_row("cell", Text(printable(
        f"{row.state} on {row.node or 'no node yet'}, {row.tries} tr"
        f"{'ies' if row.tries != 1 else 'y'}")))
    shipped = made_on(store, row.run_id)
    if shipped:
        grid.add_row("made on", Text(printable(shipped)))
    if row.detail:
        grid.add_row("detail", Text(printable(row.detail)))
    if cell.gate is not None:
        grid.add_row("gate", Text(gate_forms(cell.gate)["full"]))


def queued_forms(cell: Cell, short: str) -> dict[str, dict[str, str]]:
    """The columns of a cell whose run has not begun: its run id (`short`: the shortest
    start of it no other run's shares) and model, nothing more."""
    run_id = printable(cell.row.run_id, None)
    model = printable(str(cell.row.cell.get("model", "")), None)
    out = {c: {"full": "—"} for c in ("phase", "verdict", "started (UTC)", "events", "tokens",
                                      "cost")}
    out["phase"]["short"] = "—"
    return out | {"run": {"full": abbreviate(run_id, 40), "short": printable(short, None) + (
        "…" if short != cell.row.run_id else "")},
                  "model": {"full": abbreviate(model, 40),
                            "name": abbreviate(model.rsplit("/", 1)[-1], 24),
                            "cut": abbreviate(model.rsplit("/", 1)[-1], 14)}}


def cell_row(cell: Cell, summary: RunSummary | None, short: str,
             forms: dict[str, dict[str, str]] | None) -> Row:
    """A matrix run's row: the browser's columns of its run (`forms`; None for a cell whose
    run has not begun), with its node, its status as a matrix run and its last gate."""
    status = cell.status(summary)
    gate = cell.gate
    tone = "" if gate is None else "pass" if gate.passed else "fail"
    key = cell.row.run_id if summary is not None else QUEUED_KEY + cell.row.run_id
    return Row(key, (forms or queued_forms(cell, short)) | {
        "node": {"full": _shown(cell.row.node or "—", 64)},
        "status": {"full": status}, "gate": gate_forms(gate)}, status, tone)
