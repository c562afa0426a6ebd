"""The Gates tab: every check of a phase's gate against its threshold, in a table whose five
columns stay at any width, with each check's values across the attempts."""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.style import Style
from rich.table import Table
from rich.text import Text

from npu_deploy.events import PHASE_NAMES, DeploymentState
from npu_deploy.events.describe import gate_figures, one_line, printable

from ...legend import PLAIN_TONES, TREND_MARKS, gate_mark
from ...timeline import GateRow, gate_rows
from .base import Panel, SparkColours, Tones, plural, sparkline


class GatesPanel(Panel):
    """The gate of a phase: every check against its threshold, failures first, the checker's
    message under each check that has one, and how each value moved across the attempts."""

    def show(self, state: DeploymentState, phase: int | None) -> None:
        #: The values across attempts of each check that has two or more: what the
        #: sparklines draw, by (subject, metric).
        self.trends: dict[tuple[str, str], tuple[float | None, ...]] = {}
        if phase is None:
            self.put(Text("No phase has started yet.", style=self.tones["muted"]))
            return
        ph = state.phases[phase]
        if not ph.gates:
            self.put(Text(f"Phase {phase} ({PHASE_NAMES[phase]}): no gate evaluated yet "
                          f"(attempt {ph.attempts}, {ph.status}).", style=self.tones["muted"]))
            return
        last = ph.gates[-1]
        rows = gate_rows(ph.gates)
        self.trends = {(r.subject, r.metric): r.history for r in rows if len(r.history) > 1}
        failed = [r for r in rows if r.gating and not r.passed]
        tones = self.tones
        head = Text.assemble(
            (f"Phase {phase} ({PHASE_NAMES[phase]}) gate ", "bold"),
            (printable(last.gate), "bold"), (": ", "bold"),
            ("PASS", tones["pass"] + Style(bold=True)) if last.passed else
            ("FAIL", tones["fail"] + Style(bold=True)),
            f"  attempt {last.attempt}, {plural(len(rows), 'check')}, "
            f"{len(failed)} gating failing")
        # the rows follow from the gate event and the attempts before it
        self.put(head, (("gate", last.event_id, len(ph.gates)),
                        partial(gate_table, rows, printable(last.gate), tones,
                                colours=self.spark_colours())))


#: The gate table's columns, left to right; every one is drawn at every width. The gate's
#: name is the same on every row: it is in the line above the table, not a column.
GATE_COLUMNS = ("status", "subject", "metric", "value", "threshold")
SUBJECT, METRIC = 1, 2        # the columns that say what a row is; they give up cells last
FLOORS = {SUBJECT: 10, METRIC: 8}     # the fewest cells either is shortened to


def shorten(text: Text, width: int) -> Text:
    """`text` in at most `width` cells: a dotted or slashed path first loses the letters of
    its leading parts ("layers.0.mlp.down_proj" -> "l.0.m.down_proj"), its last part kept
    whole; what is still too long is cut with an ellipsis, never silently mid-word."""
    if text.cell_len <= width:
        return text
    parts = re.split(r"([./])", text.plain)
    for i in range(0, len(parts) - 1, 2):
        if len(parts[i]) > 1:
            parts[i] = parts[i][0]
            if Text("".join(parts)).cell_len <= width:
                return Text("".join(parts), style=text.style)
    shown = Text("".join(parts), style=text.style)
    shown.truncate(width, overflow="ellipsis")
    return shown


_WORDS = re.compile(r"([^A-Za-z0-9]+)")


def _first_letters(vocabulary: set[str]) -> dict[str, str]:
    """Each word of letters cut to the shortest start that no other word of `vocabulary`
    begins with ("logits" -> "lo" beside "l2"): two different words never read the same.
    A word with a digit is never cut (a cut number reads as another number)."""
    short = {}
    for word in vocabulary:
        if len(word) < 2 or not word.isalpha():
            continue
        for n in range(1, len(word)):
            start = word[:n]
            if not any(o != word and o.startswith(start) for o in vocabulary):
                short[word] = start
                break
    return short


def fit_names(names: list[str], width: int) -> dict[str, str]:
    """Every name of a column in at most `width` cells, each still told apart from the
    others: a word two or more of the names share gives up its letters (the most shared
    first, a name's last word last: "prefill_logits_max_abs" -> "prefill_lo_max_abs" ->
    "p_lo_max_abs"); a word of one name alone is what tells it apart, and stays whole. What
    is still too long ends in an ellipsis."""
    split = {name: _WORDS.split(name) for name in set(names)}
    vocabulary = {w for parts in split.values() for w in parts[::2] if w}
    short = _first_letters(vocabulary)
    shared = {w: sum(w in parts[::2] for parts in split.values()) for w in vocabulary}
    out = {}
    for name, parts in split.items():
        parts = list(parts)
        words = [i for i in range(0, len(parts), 2)
                 if parts[i] in short and shared[parts[i]] > 1]
        words.sort(key=lambda i: (i == len(parts) - 1, -shared[parts[i]], i))
        for i in words:
            if Text("".join(parts)).cell_len <= width:
                break
            parts[i] = short[parts[i]]
        text = Text("".join(parts))
        text.truncate(width, overflow="ellipsis")
        out[name] = text.plain
    return out


def gate_table(rows: list[GateRow], gate: str, tones: Tones, width: int,
               colours: SparkColours | None = None) -> RenderableType:
    """The checks in `width` cells with the columns of GATE_COLUMNS at any width: the
    subject and the metric, whichever is wider first, give up cells to fit (their shared
    words first, `fit_names`), the values across attempts are a sixth column where there is
    room, and a check's message is a line under its row, wrapped across the columns after
    the status (a Rich table has no cell that spans a row, so the columns are laid out
    here, at widths fixed for the panel). `gate` names the table's gate: its heading says
    it, not its rows."""
    cells = [gate_cells(r, tones) for r in rows]
    widths = [max(len(name), *(c[i].cell_len for c in cells))
              for i, name in enumerate(GATE_COLUMNS)]
    over = sum(widths) + len(widths) - 1 - width
    heads = list(GATE_COLUMNS)
    if over > 0:        # "ok", "FAIL", "lens" say what the column is: its heading goes first
        status = max(c[0].cell_len for c in cells)
        over -= widths[0] - status
        widths[0], heads[0] = status, ""
    while over > 0:
        i = max((SUBJECT, METRIC), key=lambda i: widths[i] - FLOORS[i])
        if widths[i] <= FLOORS[i]:
            break
        widths[i] -= 1
        over -= 1
    # a failing check's subject of words (a kernel's) wraps under itself instead (`line`)
    wraps = [not r.passed and r.gating and " " in r.subject for r in rows]
    names = {i: fit_names([c[i].plain for c in cells], widths[i]) for i in (SUBJECT, METRIC)}
    cells = [[Text(names[i][c.plain], style=c.style)
              if i in names and not (w and i == SUBJECT) else c for i, c in enumerate(row)]
             for row, w in zip(cells, wraps, strict=True)]
    # the values across attempts: a sparkline and the figures where they fit, else the
    # sparkline alone (one block per attempt), else nothing
    room = width - sum(widths) - len(widths)
    trends = [trend_cell(r, colours, figures=True) for r in rows]
    if not any(trends) or max(len("across attempts"), *(t.cell_len for t in trends)) > room:
        trends = [trend_cell(r, colours, figures=False) for r in rows]
    show_trend = any(trends) and max(len("trend"), *(t.cell_len for t in trends)) <= room
    trend_head = "across attempts" if any(" " in t.plain for t in trends) else "trend"

    def line(row: list[Text], trend: Text | None, style: Style | str = "") -> RenderableType:
        """One row at the columns' widths, so that the rows line up: one line of text, or
        where a failing check's subject has words to wrap, a grid in which it wraps under
        itself (a word longer than the column ends in an ellipsis, Rich's overflow)."""
        if style and " " in row[SUBJECT].plain and row[SUBJECT].cell_len > widths[SUBJECT]:
            grid = Table.grid(padding=(0, 1, 0, 0))
            for i, w in enumerate(widths):
                grid.add_column(width=w, justify="right" if i in RIGHT else "left",
                                no_wrap=i != SUBJECT, overflow="ellipsis")
            if trend is not None:
                grid.add_column(no_wrap=True)
            grid.add_row(*(c if i == SUBJECT else shorten(c, w) for i, (c, w)
                           in enumerate(zip(row, widths, strict=True))),
                         *([trend] if trend is not None else []), style=style)
            return grid
        out = Text(style=style, no_wrap=True, overflow="ellipsis")
        for i, (cell, w) in enumerate(zip(row, widths, strict=True)):
            cell = shorten(cell, w)
            pad = " " * (w - cell.cell_len)
            out.append_text(Text(pad) + cell if i in RIGHT else cell + Text(pad))
            out.append(" ")
        if trend is not None:
            out.append_text(trend)
        out.rstrip()
        return out

    lines: list[RenderableType] = [
        line([Text(n, style="bold underline") for n in heads],
             Text(trend_head, style="bold underline") if show_trend else None)]
    for r, row, trend in zip(rows, cells, trends, strict=True):
        lines.append(line(row, trend if show_trend else None,
                          "" if r.passed or not r.gating else tones["fail"]))
        if r.message:
            lines.append(Padding(Text(f"↳ {one_line(r.message)}",
                                      style="" if r.passed else tones["fail"]),
                                 (0, 0, 0, widths[0] + 1)))
    return Group(*lines)


class GateTable:
    """`gate_table` laid out at whatever width Rich gives it (a dialog's Static), in the
    tones `tones()` gives when it is drawn (a widget's theme now; no colour by default)."""

    def __init__(self, rows: list[GateRow], gate: str,
                 tones: Callable[[], Tones] = lambda: PLAIN_TONES) -> None:
        self.rows, self.gate, self.tones = rows, gate, tones

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield gate_table(self.rows, self.gate, self.tones(), options.max_width)


#: The right-aligned columns (value, threshold): figures line up on their last digit.
RIGHT = (3, 4)


def gate_cells(r: GateRow, tones: Tones) -> list[Text]:
    mark = gate_mark(r.passed, r.gating)
    value, threshold = gate_figures(r.value, r.threshold)
    # a check against the bf16 reference's figure (phase 3's bf16 bar) says whose it is
    whose = " bf16" if r.metric.endswith(BF16_SUFFIX) else ""
    return [Text(mark.glyph, style=tones[mark.tone]), Text(printable(r.subject)),
            Text(printable(r.metric)), Text(value),
            Text(f"{r.comparison} {threshold}{whose}")]


#: The metrics whose threshold is the bf16 reference's figure (pipeline/gates/model.py).
BF16_SUFFIX = "_vs_bf16"


def trend_text(r: GateRow) -> Text:
    if len(r.history) <= 1:
        return Text("")
    return Text(f" {TREND_MARKS['then'].glyph} ".join(
        TREND_MARKS["missing"].glyph if v is None else gate_figures(v, r.threshold)[0]
        for v in r.history))


def trend_cell(r: GateRow, colours: SparkColours | None, *, figures: bool) -> Text:
    """A check's values across attempts: its sparkline, then (with `figures`) the values."""
    if len(r.history) <= 1:
        return Text("")
    line = sparkline(r.history, colours)
    return line + " " + trend_text(r) if figures else line


