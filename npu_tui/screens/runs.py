"""The runs screen: every run in the store, a preview of the selected one, and the ways in:
open (replay), attach live, resume, fork, filter, and a new deployment."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, ClassVar

from rich.style import StyleType
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Input, Static
from textual.widgets.data_table import CellDoesNotExist

from npu_deploy.events.decisions import waiting_text
from npu_deploy.events.describe import printable, time_split
from npu_deploy.store import RunSummary

from ..legend import TONE_CLASSES, tone_styles
from ..matrices import (
    HEADER_KEY,
    OTHERS_KEY,
    QUEUED_KEY,
    Cell,
    Group,
    Row,
    cell_preview,
    cell_row,
    group_preview,
    header_forms,
    others_forms,
    read_groups,
)
from ..read_only import read_only_words
from ..widgets.footer import KeysFooter
from ..widgets.phase_strip import SHORT
from ..widgets.run_title import abbreviate, unique_prefix, unique_prefixes

if TYPE_CHECKING:
    from ..app import DeployApp, Driver

#: The table's columns, left to right; a store with matrices adds each run's node and its
#: last gate's headline figures (matrices.py).
COLUMNS = ("run", "model", "phase", "status", "verdict", "started (UTC)", "events", "tokens",
           "cost")
MATRIX_COLUMNS = ("run", "model", "node", "phase", "status", "verdict", "gate",
                  "started (UTC)", "events", "tokens", "cost")
#: What a narrow table gives up first, in order, until its rows fit: a shorter form of a
#: column (the run id's unique start, the model without its owner) or the column itself.
#: The run, its status and its verdict are never given up: they say what the row is.
NARROWING = (("cost", None), ("tokens", None), ("events", None), ("run", "short"),
             ("model", "name"), ("started (UTC)", None), ("model", "cut"), ("phase", "short"),
             ("model", None), ("phase", None))
#: The same with matrices: a cell's start says less than its gate, and its model (in its
#: run id) less than its node; the gate goes last.
MATRIX_NARROWING = (("cost", None), ("tokens", None), ("events", None), ("run", "short"),
                    ("started (UTC)", None), ("model", "name"), ("gate", "short"),
                    ("model", "cut"), ("phase", "short"), ("model", None), ("node", None),
                    ("phase", None), ("gate", None))
NARROW_BELOW = 110           # columns: under this, the preview goes under the table
TABLE_SHARE = (3, 5)        # the table's share of a wide screen; the preview has the rest
MODEL_CUT = 14               # the model column's width at its narrowest form
FIRST_ROWS = 100             # rows added at once: more than a screen holds
CHUNK_ROWS = 500             # then this many at a time,
CHUNK_PAUSE_S = 0.05         # this long apart: a frame is drawn and keys answered between


def fit_columns(rows: list[dict[str, dict[str, str]]], width: int,
                columns: tuple[str, ...] = COLUMNS,
                narrowing: tuple[tuple[str, str | None], ...] = NARROWING) -> dict[str, str]:
    """Which form of each column (a key of each row's cell) the table shows in `width`
    cells: every column at its first form, then NARROWING's steps in order until the widest
    cell of each shown column, with a cell's padding, fits. A column given up is absent.
    Each form's widest cell is measured once (over 10,000 rows, each step measured every
    row of every column again: 0.3 s of the browser's first paint with matrices)."""
    forms = dict.fromkeys(columns, "full")
    widest: dict[tuple[str, str], int] = {}

    def width_of(c: str, f: str) -> int:
        if (c, f) not in widest:
            widest[c, f] = 2 + max([len(c), *(len(r[c][f]) for r in rows)])
        return widest[c, f]

    def needed() -> int:
        return sum(width_of(c, f) for c, f in forms.items())

    for column, form in narrowing:
        if needed() <= width:
            break
        if column not in forms:
            continue
        if form is None:
            del forms[column]
        else:
            forms[column] = form
    return forms


class RunsScreen(Screen[None]):
    #: The screen's class by width (app.tcss): narrow puts the preview under the table.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (NARROW_BELOW, "-wide")]
    COMPONENT_CLASSES: ClassVar[set[str]] = set(TONE_CLASSES)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open", "Open", id="runs.open"),
        Binding("a", "attach", "Attach live", id="runs.attach"),
        Binding("r", "resume", "Resume", id="runs.resume"),
        Binding("k", "fork", "Fork", id="runs.fork"),
        Binding("n", "new", "New deployment", id="runs.new"),
        Binding("slash", "filter", "Filter", id="runs.filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False, id="runs.clear_filter"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.summaries: dict[str, RunSummary] = {}
        self.filter_text = ""
        self._forms: list[tuple[str, str]] = []     # the columns shown, and their forms
        self._rows: list[tuple[str, tuple[tuple[str, StyleType], ...]]] = []  # shown rows
        self._filling = 0                # which fill of the table is under way (`_fill`)
        self._data_version: int | None = None
        self._width = 0                  # the table's width at the last reload
        self._select: str | None = None
        self.groups: list[Group] = []            # the store's matrices (matrices.py)
        self.cells: dict[str, Cell] = {}         # each matrix run's cell

    @property
    def deploy_app(self) -> DeployApp:
        return self.app    # type: ignore[return-value]

    def compose(self) -> ComposeResult:
        # The width's class before the first reload: Textual sets it at the first resize,
        # after the first frame, and the table would be filled twice (once too wide).
        width = self.app.size.width
        self.add_class(next(c for w, c in reversed(self.HORIZONTAL_BREAKPOINTS) if width >= w),
                       update=False)
        yield Static(id="runs-title")
        yield Input(placeholder="filter: run, model, status or verdict", id="runs-filter")
        with Horizontal(id="runs-body"):
            yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
            yield Static(id="preview")
        yield KeysFooter()

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        self.query_one("#runs-filter", Input).display = False
        self.reload()
        self.set_interval(1.0, self.poll)
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.reload())
        table.focus()

    # --- the list ---------------------------------------------------------------------------

    def _unchanged(self) -> bool:
        """Whether the list would read as it does: no commit to the store since the last
        reload (SQLite's `data_version`, which moves when another connection commits) and
        every run shown as running still holds its lock (a crash commits nothing)."""
        store = self.deploy_app.store
        version = store.conn.execute("PRAGMA data_version").fetchone()[0]
        if version != self._data_version:
            self._data_version = version
            return False
        return all(store.is_locked(r.run_id) for r in self.summaries.values()
                   if r.status == "running")

    def poll(self) -> None:
        """Every second: reload, unless nothing a row shows can have changed (over 10,000
        runs a reload reads every row of `runs` and probes every lock)."""
        if not self._unchanged():
            self.reload()

    def reload(self) -> None:
        store = self.deploy_app.store
        self._data_version = store.conn.execute("PRAGMA data_version").fetchone()[0]
        self._width = self._table_width()
        runs = store.runs()
        self.summaries = {r.run_id: r for r in runs}
        self.groups = read_groups(store)
        self.cells = {c.row.run_id: c for g in self.groups for c in g.cells}
        needle = self.filter_text.lower()
        shown = [r for r in reversed(runs) if not needle or needle in self._words(r.run_id)]
        table = self.query_one(DataTable)
        selected = self._select or self._cursor_key()
        self._select = None
        entries = self._entries(shown)
        forms = fit_columns([e.forms for e in entries], self._width,
                            *((MATRIX_COLUMNS, MATRIX_NARROWING) if self.groups else ()))
        tones = tone_styles(self)
        # what a person typed (a run id, a model name) is data: Text, never markup
        cells = [(e.key, tuple((e.forms[c][f], e.style(c, tones)) for c, f in forms.items()))
                 for e in entries]
        read_only = self.deploy_app.read_only
        self.query_one("#runs-title", Static).update(Text.assemble(
            ("npu-deploy", "bold"),
            # said once, first: a narrow terminal cuts the line's end
            "" if read_only is None else (printable(f"  {read_only_words(read_only)}"),
                                          tones["human"]),
            printable(                         # a path and a filter are what someone typed
                f"  {self.deploy_app.store.path}  {len(runs)} runs"
                + (f" ({len(self.groups)} matri{'ces' if len(self.groups) > 1 else 'x'})"
                   if self.groups else "")
                + (f", {len(shown)} shown (filter {self.filter_text!r})" if needle else ""))))
        if list(forms.items()) == self._forms and [k for k, _ in cells] == \
                [k for k, _ in self._rows] and len(table.rows) == len(cells):
            # the same runs in the same order (a live run moved on): its cells, in place
            for (key, row), (_, before) in zip(cells, self._rows, strict=True):
                for column, cell, old in zip(forms, row, before, strict=True):
                    if cell != old:
                        table.update_cell(key, column, Text(cell[0], style=cell[1]))
            self._rows = cells
            if selected is not None and selected != self._cursor_key() and \
                    selected in table.rows:
                table.move_cursor(row=table.get_row_index(selected), animate=False)
            self._preview()
            return
        if list(forms.items()) != self._forms:
            self._forms = list(forms.items())
            table.clear(columns=True)
            for c in forms:
                table.add_column(c, key=c)
        else:
            table.clear()
        self._rows = cells
        self._filling += 1
        self._fill(self._filling, 0, selected)
        self._preview()

    def _fill(self, filling: int, start: int, selected: str | None) -> None:
        """Add the rows from `start` on to the table: a screenful now, the rest a chunk at a
        time CHUNK_PAUSE_S apart, so that the first rows are drawn at once and keys are
        answered between chunks (Textual measures every cell of every row it is given).
        A later reload's fill makes this one stop."""
        if filling != self._filling:
            return
        table = self.query_one(DataTable)
        size = FIRST_ROWS if start == 0 else CHUNK_ROWS
        for key, row in self._rows[start:start + size]:
            table.add_row(*(Text(text, style=style) for text, style in row), key=key)
        if selected is not None and selected in table.rows and (
                start == 0 or self._cursor_key() != selected):
            table.move_cursor(row=table.get_row_index(selected), animate=False)
            selected = None
        if start + size < len(self._rows):
            self.set_timer(CHUNK_PAUSE_S, partial(self._fill, filling, start + size, selected))

    def _words(self, run_id: str) -> str:
        """What the filter looks in for a run: its id, model, status and verdict, and for a
        matrix run its matrix and node."""
        r = self.summaries.get(run_id)
        cell = self.cells.get(run_id)
        words = [run_id, r.model if r else "", self.status(run_id), r.verdict or "" if r else ""]
        if cell is not None:
            words += [cell.row.matrix_id, cell.row.node or ""]
        return " ".join(words).lower()

    def status(self, run_id: str) -> str:
        """A run's status as its row shows it (a run its node works is running)."""
        r = self.summaries.get(run_id)
        cell = self.cells.get(run_id)
        return cell.status(r) if cell is not None else r.status if r is not None else ""

    def _entries(self, shown: list[RunSummary]) -> list[Row]:
        """The table's rows: the runs shown, newest first; in a store with matrices, a group
        per matrix first (its header, then its cells in the book's order, a cell not begun
        included), then the runs of no matrix under a header of their own."""
        shorts = unique_prefixes([*self.summaries, *self.cells])
        if not self.groups:
            return [Row(r.run_id, self._cells(r, shorts[r.run_id]), r.status) for r in shown]
        needle = self.filter_text.lower()
        visible = {r.run_id for r in shown}
        out: list[Row] = []
        for group in self.groups:
            rows = []
            for cell in group.cells:
                run_id = cell.row.run_id
                r = self.summaries.get(run_id)
                if (r is None and needle not in self._words(run_id)) or \
                        (r is not None and run_id not in visible):
                    continue
                rows.append(cell_row(cell, r, shorts[run_id], None if r is None else
                                     self._cells(r, shorts[run_id])))
            if rows or not needle:
                out.append(Row(HEADER_KEY + group.entry.matrix_id,
                               header_forms(group, MATRIX_COLUMNS), header=True))
                out += rows
        others = [r for r in shown if r.run_id not in self.cells]
        if others:
            out.append(Row(OTHERS_KEY, others_forms(len(others), MATRIX_COLUMNS), header=True))
            out += [Row(r.run_id, self._cells(r, shorts[r.run_id]) | {
                "node": {"full": ""}, "gate": {"full": "", "short": ""}}, r.status)
                for r in others]
        return out

    @staticmethod
    def _cells(r: RunSummary, short: str) -> dict[str, dict[str, str]]:
        """Each column's forms for run `r` (the first is the widest; fit_columns picks one);
        `short`: the shortest start of its id that names it alone."""
        run_id = printable(r.run_id, None)
        model = printable(r.model, None)
        name = model.rsplit("/", 1)[-1]
        phase = "—" if r.phase_reached is None else str(r.phase_reached)
        return {
            "run": {"full": abbreviate(run_id, 40),
                    "short": printable(short, None) + ("…" if short != r.run_id else "")},
            "model": {"full": abbreviate(model, 40), "name": abbreviate(name, 24),
                      "cut": abbreviate(name, MODEL_CUT)},
            "phase": {"full": phase if r.phase_reached is None else
                      f"{phase} {SHORT[r.phase_reached]}", "short": phase},
            "status": {"full": r.status},
            "verdict": {"full": r.verdict or "—"},
            "started (UTC)": {"full": r.created_ts[:16].replace("T", " ")},
            "events": {"full": str(r.events)},
            "tokens": {"full": f"{r.input_tokens + r.output_tokens:,}"},
            "cost": {"full": f"${r.cost_usd:.2f}"},
        }

    def _table_width(self) -> int:
        """The cells the table's rows may take: the screen's width, less the preview beside
        it when the screen is wide (app.tcss), the table's scroll bar and a margin."""
        width = self.size.width or self.app.size.width
        if self.has_class("-wide"):
            width = width * TABLE_SHARE[0] // TABLE_SHARE[1]
        return width - 3

    def on_resize(self) -> None:
        if self._table_width() != self._width:     # the columns may fit otherwise now
            self.reload()

    def select(self, run_id: str) -> None:
        """Put the cursor on `run_id` at the next reload (the run a person comes back from)."""
        self._select = run_id
        if self.is_mounted:
            self.reload()

    def _cursor_key(self) -> str | None:
        """The key of the row under the cursor: a run's id, or a header's (matrices.py)."""
        table = self.query_one(DataTable)
        if not table.row_count:
            return None
        try:
            key = table.coordinate_to_cell_key(table.cursor_coordinate).row_key
        except CellDoesNotExist:             # no row under the cursor
            return None
        return str(key.value) if key.value is not None else None

    def selected(self) -> str | None:
        """The run under the cursor; None on a header or a cell whose run has not begun."""
        key = self._cursor_key()
        return key if key in self.summaries else None

    @on(DataTable.RowHighlighted)
    def _highlighted(self) -> None:
        self._preview()

    @on(DataTable.RowSelected)
    def _selected(self) -> None:
        self.action_open()

    def _preview(self) -> None:
        preview = self.query_one("#preview", Static)
        run_id = self.selected()
        if run_id is None and self._cursor_key() is not None:
            preview.update(self._other_preview(str(self._cursor_key())))
            return
        if run_id is None:
            preview.update(Text("No runs yet: n here, or `npu-deploy deploy MODEL`, starts "
                                "one.", style=tone_styles(self)["muted"]))
            return
        store = self.deploy_app.store
        s = store.fold(run_id)
        r = self.summaries.get(run_id)
        grid = Table.grid(padding=(0, 1))
        grid.add_row("run", Text(printable(run_id)))
        grid.add_row("model", Text(printable(f"{s.model} on {s.backend}, agent {s.agent}")))
        grid.add_row("policy", Text(printable(s.policy)))
        status = r.status if r else s.status
        grid.add_row("status", Text(status))
        if status in ("crashed", "paused"):
            # nothing runs it: say how it goes on, here and from a shell (a read-only store:
            # from a writable copy of it)
            short = unique_prefix(run_id, self.summaries)
            grid.add_row("next", Text(printable(
                f"npu-deploy resume {short} on a writable copy of the store"
                if self.deploy_app.read_only else
                f"r resumes it here, or npu-deploy resume {short} in a shell"),
                style=tone_styles(self)["human"]))
        if s.forked_from:
            grid.add_row("forked", Text(printable(f"from {s.forked_from[0]} at "
                                                  f"v{s.forked_from[1]}")))
        for ph in s.phases:
            if ph.attempts:
                gate = ph.last_gate
                verdict = "" if gate is None else ("PASS" if gate.passed else "FAIL")
                grid.add_row(f"phase {ph.phase}", f"{ph.status} a{ph.attempts} {verdict} "
                             f"{ph.work_time_s:.1f}s own ({time_split(*ph.times)})")
        waits = waiting_text(s)
        if waits:
            grid.add_row("waits", Text(printable(waits), style=tone_styles(self)["human"]))
        grid.add_row("events", f"{s.version}, resumed {s.resumes}x")
        if run_id in self.cells:
            cell_preview(grid, store, self.cells[run_id])
        preview.update(grid)

    def _other_preview(self, key: str) -> Table | Text:
        """The preview of a header row or of a cell whose run has not begun."""
        if key.startswith(HEADER_KEY):
            group = next((g for g in self.groups if HEADER_KEY + g.entry.matrix_id == key),
                         None)
            if group is not None:
                return group_preview(group)
        if key.startswith(QUEUED_KEY) and key.removeprefix(QUEUED_KEY) in self.cells:
            grid = Table.grid(padding=(0, 1))
            grid.add_row("run", Text(printable(key.removeprefix(QUEUED_KEY))))
            cell_preview(grid, self.deploy_app.store, self.cells[key.removeprefix(QUEUED_KEY)])
            return grid
        return Text("The runs below belong to no matrix: deployed here, or imported.",
                    style=tone_styles(self)["muted"])

    # --- actions -------------------------------------------------------------------------------

    def action_open(self) -> None:
        run_id = self.selected()
        if run_id:
            self.deploy_app.open_run(run_id, live=self.status(run_id) == "running")

    def action_attach(self) -> None:
        run_id = self.selected()
        if run_id:
            self.deploy_app.open_run(run_id, live=True)

    def action_resume(self) -> None:
        run_id = self.selected()
        if run_id is not None:
            self.deploy_app.ask_resume(run_id, self.status(run_id))

    def action_fork(self) -> None:
        from .dialogs import ForkDialog

        run_id = self.selected()
        app = self.deploy_app
        if run_id is None or app.refuses_writing(f"fork run {run_id}"):
            return
        if app.driver is None:
            self.notify("this TUI has no deployment driver; run `npu-deploy fork RUN --at N`",
                        severity="error")
            return
        head = self.summaries[run_id].events

        def go(answer: tuple[int, str] | None) -> None:
            if answer is not None and app.driver is not None:
                try:
                    new = app.driver.fork(run_id, answer[0], answer[1] or None)
                except ValueError as e:
                    self.notify(str(e), severity="error")
                    return
                self.notify(f"forked {run_id} at v{answer[0]} as {new}")
                self.reload()

        app.push_screen(ForkDialog(run_id, head, head), go)

    def action_new(self) -> None:
        """The new-deployment form; the run it starts runs in this process, as `npu-deploy
        deploy MODEL` without --headless, and its screen opens live."""
        from .new_deployment import NewDeployment

        app = self.deploy_app
        if app.refuses_writing("start a new deployment"):
            return
        if app.driver is None:
            self.notify("this TUI has no deployment driver; run `npu-deploy deploy MODEL`",
                        severity="error")
            return

        def go(driver: Driver | None) -> None:
            if driver is not None:
                app.drive_deploy(driver)

        app.push_screen(NewDeployment(app.driver), go)

    def action_filter(self) -> None:
        box = self.query_one("#runs-filter", Input)
        box.display = True
        box.focus()

    @on(Input.Changed, "#runs-filter")
    def _filter_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self.reload()

    @on(Input.Submitted, "#runs-filter")
    def _filter_done(self) -> None:
        self.query_one(DataTable).focus()

    def commands(self) -> Iterable[SystemCommand]:
        """The palette's commands: a new deployment, and those for the selected run."""
        if self.deploy_app.driver is not None:
            yield SystemCommand("New deployment", "deploy a model as a new run, here",
                                self.action_new)
        run_id = self.selected()
        if run_id is None:
            return
        short = run_id[:12]
        yield SystemCommand(f"Open run {short}", "replay it", self.action_open)
        yield SystemCommand(f"Attach to run {short}", "follow it live", self.action_attach)
        if self.status(run_id) in ("crashed", "paused", "needs_human"):
            yield SystemCommand(f"Resume run {short}", "run its conductor here",
                                self.action_resume)
        yield SystemCommand(f"Fork run {short}", "a new run from a prefix", self.action_fork)
        yield SystemCommand("Filter runs", "by id, model, status or verdict",
                            self.action_filter)

    def action_clear_filter(self) -> None:
        box = self.query_one("#runs-filter", Input)
        box.value, box.display = "", False
        self.filter_text = ""
        self.reload()
        self.query_one(DataTable).focus()
