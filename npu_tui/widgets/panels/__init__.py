"""The run screen's tabs: gate metrics, performance, the agent's transcript, the plan. Each
receives what to show (from `RunTimeline`) and draws it; none reads the store itself."""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.padding import Padding
from rich.segment import Segment
from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from npu_deploy.events import PHASE_NAMES, DeploymentState, Event
from npu_deploy.events.describe import describe, gate_figures, one_line, printable, tone_of

from ...legend import PLAIN_TONES, SPARK_BARS, TONE_CLASSES, TREND_MARKS, gate_mark, tone_styles
from ...timeline import GateRow, gate_rows

LAYER_PREFIX = re.compile(r"^L\d+\.")
SOURCE_LABEL = {"modeled": "MODELED (performance model, not measured)",
                "measured-npu": "MEASURED on the NPU", "measured-cpu": "MEASURED on the CPU"}


def source_label(profile: dict[str, Any]) -> str:
    """Where a recorded profile's figures come from; measured ones with their runs."""
    label = SOURCE_LABEL.get(profile["source"], profile["source"])
    runs = profile.get("runs")
    if not runs:
        return label
    return (f"{label}: median of {len(runs)} runs, {min(runs) * 1e3:.2f}-"
            f"{max(runs) * 1e3:.2f} ms")


#: A laid-out line, as segments: kept lines are not Strips, each of which carries seven
#: caches of its own that the garbage collector would walk (tui_bench.py, gen-2 pauses).
Line = list[Segment]
#: What `Panel.put` shows: a renderable, or (key, build) whose lines are kept under the key;
#: build(width) returns a renderable or the lines themselves.
Part = RenderableType | tuple[Hashable, Callable[[int], RenderableType | list[Line]]]
#: The tones' styles (legend.py), as `tone_styles` reads them from a widget's theme.
Tones = dict[str, Style]


def any_width(build: Callable[[], RenderableType]) -> Callable[[int], RenderableType]:
    """A part's build for a renderable that Rich lays out at whatever width it is given."""
    return lambda _width: build()


class Panel(ScrollView, can_focus=True):
    """A scrolling tab body drawn with the Line API: what `put` receives is laid out by Rich
    once, at the panel's width, and kept as strips, so a seek costs one Rich render and
    never a relayout of the screen (a Static in an auto-height container costs both)."""

    CACHED_PARTS = 96
    #: A sparkline's lowest and highest values are drawn in these colours (app.tcss).
    COMPONENT_CLASSES: ClassVar[set[str]] = {"panel--spark-low", "panel--spark-high",
                                             *TONE_CLASSES}
    #: Whether a new `put` scrolls to the last line (the Agent tab: the cursor's event).
    KEEP_END: ClassVar[bool] = False

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._parts: tuple[Part, ...] = ()
        self._lines: list[Line] = []
        self._width = 0
        self._cache: OrderedDict[tuple[Hashable, int], list[Line]] = OrderedDict()
        self._tones: Tones | None = None

    def put(self, *parts: Part) -> None:
        """Show `parts`, one below the other. A part is a renderable, laid out afresh, or
        `(key, build)`: `build(width)` is called and its lines kept under `key` (a part whose
        content follows from the key, such as an event's version or a blob's digest), so a
        seek that shows it again costs no Rich layout."""
        self._parts = parts
        self._lay_out()

    def on_resize(self) -> None:
        if self.scrollable_content_region.width != self._width:
            self._lay_out()

    def notify_style_update(self) -> None:
        self._cache.clear()           # a theme change: the kept lines have the old colours
        self._tones = None
        super().notify_style_update()

    def _lay_out(self) -> None:
        self._width = width = self.scrollable_content_region.width
        if width <= 0:               # not shown yet: laid out on the first resize
            self._lines = []
            return
        lines: list[Line] = []
        for part in self._parts:
            if isinstance(part, tuple):
                key, build = part
                kept = self._cache.get((key, width))
                if kept is None:
                    built = build(width)
                    kept = self._cache[(key, width)] = built if isinstance(built, list) \
                        else self._lines_of(built, width)
                    if len(self._cache) > self.CACHED_PARTS:
                        self._cache.popitem(last=False)
                else:
                    self._cache.move_to_end((key, width))
                lines.extend(kept)
            else:
                lines.extend(self._lines_of(part, width))
        self._lines = lines
        self._set_virtual_height(len(lines))
        if self.KEEP_END and self.scroll_y < self.max_scroll_y:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)
        self.refresh()

    @property
    def tones(self) -> Tones:
        """The tones in the theme's colours now (read once per style: a seek shows a panel
        again); the screen shows its panels again after a theme change (RunScreen,
        `theme_changed_signal`)."""
        if self._tones is None:
            self._tones = tone_styles(self)
        return self._tones

    def spark_colours(self) -> SparkColours:
        """The theme's colours for sparklines, over the panel's background (as Textual's
        Sparkline widget takes them)."""
        _, base = self.background_colors
        low, high = (base + self.get_component_styles(f"panel--spark-{end}").color
                     for end in ("low", "high"))
        return SparkColours(low, high, self.tones["muted"])

    def _lines_of(self, renderable: RenderableType, width: int) -> list[Line]:
        console = self.app.console
        return list(console.render_lines(
            renderable, console.options.update(width=width, height=None),
            style=self.rich_style, pad=True))

    def _set_virtual_height(self, height: int) -> None:
        """The canvas's new height without a relayout of the screen (what assigning
        `virtual_size` costs): the scrollbar is always shown (app.tcss), so only its thumb
        changes, and the scroll offset is kept inside the new canvas."""
        self.set_reactive(Panel.virtual_size, Size(self._width, height))
        self.vertical_scrollbar.window_virtual_size = height
        if self.scroll_y > self.max_scroll_y:
            self.scroll_to(y=self.max_scroll_y, animate=False, immediate=True)

    def render_line(self, y: int) -> Strip:
        i, width = self.scroll_offset.y + y, self.size.width
        style = self.visual_style.rich_style     # Textual's cached style: no ancestor walk
        if i >= len(self._lines):
            return Strip.blank(width, style)
        return Strip(self._lines[i], self._width).crop_extend(0, width, style)

    @property
    def text(self) -> str:
        """What the panel shows, as plain lines."""
        return "\n".join("".join(seg.text for seg in line).rstrip() for line in self._lines)


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


def plural(n: int, word: str, many: str | None = None) -> str:
    return f"{n} {word if n == 1 else many or word + 's'}"


#: The gate table's columns, left to right; every one is drawn at every width.
GATE_COLUMNS = ("status", "gate", "subject", "metric", "value", "threshold")
SUBJECT_MIN = 10              # the subject is shortened to no fewer cells than this


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


def gate_table(rows: list[GateRow], gate: str, tones: Tones, width: int,
               colours: SparkColours | None = None) -> RenderableType:
    """The checks in `width` cells with the six columns of GATE_COLUMNS at any width: the
    subject (then the gate name, then the metric) is shortened to fit, the values across
    attempts are a seventh column where there is room, and a check's message is a line
    under its row, wrapped across the columns after the status (a Rich table has no cell
    that spans a row, so the columns are laid out here, at widths fixed for the panel)."""
    cells = [gate_cells(r, gate, tones) for r in rows]
    widths = [max(len(name), *(c[i].cell_len for c in cells))
              for i, name in enumerate(GATE_COLUMNS)]
    over = sum(widths) + len(widths) - 1 - width
    for i, floor in ((2, SUBJECT_MIN), (1, 4), (3, 6)):   # subject, then gate, then metric
        cut = min(max(0, over), max(0, widths[i] - floor))
        widths[i] -= cut
        over -= cut
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
        if style and " " in row[2].plain and row[2].cell_len > widths[2]:
            grid = Table.grid(padding=(0, 1, 0, 0))
            for i, w in enumerate(widths):
                grid.add_column(width=w, justify="right" if i in RIGHT else "left",
                                no_wrap=i != 2, overflow="ellipsis")
            if trend is not None:
                grid.add_column(no_wrap=True)
            grid.add_row(*(c if i == 2 else shorten(c, w) for i, (c, w)
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
        line([Text(n, style="bold underline") for n in GATE_COLUMNS],
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
RIGHT = (4, 5)


def gate_cells(r: GateRow, gate: str, tones: Tones) -> list[Text]:
    mark = gate_mark(r.passed, r.gating)
    value, threshold = gate_figures(r.value, r.threshold)
    return [Text(mark.glyph, style=tones[mark.tone]), Text(gate), Text(printable(r.subject)),
            Text(printable(r.metric)), Text(value), Text(f"{r.comparison} {threshold}")]


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


@dataclass(frozen=True, slots=True)
class SparkColours:
    """A sparkline's colours (Textual colours), its lowest value's and its highest's, and
    the style of a missing value's mark."""

    low: Any
    high: Any
    muted: Style


def sparkline(values: Sequence[float | None], colours: SparkColours | None = None) -> Text:
    """`values` as Textual's Sparkline draws them, one block each on a linear scale from
    the lowest to the highest (all equal: the lowest block), shaded from the low colour to
    the high; a missing value is a dash (legend.py TREND_MARKS)."""
    known = [v for v in values if v is not None]
    lo, hi = (min(known), max(known)) if known else (0.0, 0.0)
    extent = hi - lo or 1.0
    text = Text(no_wrap=True)
    for v in values:
        if v is None:
            text.append(TREND_MARKS["missing"].glyph, colours.muted if colours else "dim")
            continue
        ratio = (v - lo) / extent
        style = Style(color=colours.low.blend(colours.high, ratio).rich_color) if colours \
            else ""
        text.append(SPARK_BARS[int(ratio * (len(SPARK_BARS) - 1))], style)
    return text


class PerformancePanel(Panel):
    """Per-dispatch times, TTFT and tokens/s, and the roofline, each with where its figures
    came from."""

    def show(self, profiles: dict[str, Event], report: dict[str, Any] | None,
             report_ref: str | None = None) -> None:
        if not profiles and not report:
            self.put(Text("No profile recorded yet (phases 4 and 5 record them).",
                          style=self.tones["muted"]))
            return
        tones = self.tones
        parts: list[Part] = []
        prefill, decode = profiles.get("prefill"), profiles.get("decode")
        summary = Table.grid(padding=(0, 2))
        if prefill is not None:
            p = prefill.payload
            summary.add_row("TTFT (prefill)", f"{p['total_s'] * 1e3:.2f} ms",
                            f"{p.get('tokens') or '?'} tokens", source_label(p))
        if decode is not None:
            p = decode.payload
            rate = (p.get("tokens") or 1) / p["total_s"] if p["total_s"] else 0.0
            summary.add_row("decode", f"{p['total_s'] * 1e3:.2f} ms/token", f"{rate:.1f} tok/s",
                            source_label(p))
        parts.append(summary)
        for scope, e in profiles.items():
            parts.append((("kernels", e.run_version), any_width(partial(kernel_table, scope, e))))
            parts.append((("profile", e.run_version), any_width(partial(profile_table, scope, e))))
        if report:
            parts.append((("roofline", report_ref), any_width(partial(roofline, report, tones)))
                         if report_ref else roofline(report, tones))
        else:
            parts.append(Text("The roofline appears when phase 6 writes the report.",
                              style=tones["muted"]))
        self.put(*parts)


def per_kernel(entries: list[dict[str, Any]]) -> dict[str, tuple[int, float]]:
    """Dispatch times summed over the layers: "L3.q_proj" counts as "q_proj"."""
    out: dict[str, tuple[int, float]] = {}
    for entry in entries:
        name = LAYER_PREFIX.sub("", entry["name"])
        n, t = out.get(name, (0, 0.0))
        out[name] = (n + 1, t + entry["seconds"])
    return out


def kernel_table(scope: str, e: Event, top: int = 12) -> Table:
    p = e.payload
    total = p["total_s"] or 1.0
    table = Table(title=f"{scope} per kernel, summed over layers", expand=True,
                  show_edge=False, title_justify="left")
    for col, justify in (("kernel", "left"), ("launches", "right"), ("ms", "right"),
                         ("share", "right")):
        table.add_column(col, justify=justify)   # type: ignore[arg-type]
    rows = sorted(per_kernel(p["entries"]).items(), key=lambda kv: -kv[1][1])[:top]
    for name, (n, seconds) in rows:
        table.add_row(name, str(n), f"{seconds * 1e3:.3f}", f"{100 * seconds / total:.1f}%")
    return table


def profile_table(scope: str, e: Event, top: int = 12) -> Table:
    p = e.payload
    table = Table(title=f"{scope} slowest dispatches of {len(p['entries'])}: "
                        f"{p['total_s'] * 1e3:.2f} ms "
                        f"(v{e.run_version}, {SOURCE_LABEL.get(p['source'], p['source'])})",
                  expand=True, show_edge=False, title_justify="left")
    table.add_column("dispatch / step")
    table.add_column("kind")
    table.add_column("ms", justify="right")
    table.add_column("share", justify="right")
    total = p["total_s"] or 1.0
    for entry in sorted(p["entries"], key=lambda x: -x["seconds"])[:top]:
        table.add_row(entry["name"], entry["kind"], f"{entry['seconds'] * 1e3:.3f}",
                      f"{100 * entry['seconds'] / total:.1f}%")
    return table


def roofline(report: dict[str, Any], tones: Tones, width: int = 60, height: int = 12
             ) -> RenderableType:
    """A log-log text roofline of the deployed prefill's launches (the report's data)."""
    peak, bw = float(report["peak_flops"]), float(report["ddr_bw"])
    points = [(k["flops"] / k["bytes"], k["flops"] / k["seconds"]) for k in report["kernels"]
              if k["bytes"] and k["seconds"] and k["flops"]]
    source = SOURCE_LABEL.get(report.get("time_source", ""), report.get("time_source", ""))
    if not points:
        return Text(f"roofline: no kernel points ({source})", style=tones["muted"])
    xs = [math.log10(x) for x, _ in points]
    x_lo, x_hi = min(xs + [math.log10(peak / bw)]) - 0.5, max(xs + [math.log10(peak / bw)]) + 0.5
    y_hi = math.log10(peak) + 0.2
    y_lo = min(math.log10(y) for _, y in points) - 0.5
    grid = [[" "] * width for _ in range(height)]

    def cell(lx: float, ly: float) -> tuple[int, int]:
        c = int((lx - x_lo) / (x_hi - x_lo) * (width - 1))
        r = int((y_hi - ly) / (y_hi - y_lo) * (height - 1))
        return min(height - 1, max(0, r)), min(width - 1, max(0, c))

    for c in range(width):
        lx = x_lo + c * (x_hi - x_lo) / (width - 1)
        roof = min(math.log10(peak), math.log10(bw) + lx)
        r, _ = cell(lx, roof)
        grid[r][c] = "─" if roof >= math.log10(peak) else "╱"
    for x, y in points:
        r, c = cell(math.log10(x), math.log10(y))
        grid[r][c] = "●"
    text = Text(f"roofline of the deployed prefill: {len(points)} launches, "
                f"peak {peak / 1e12:.1f} TFLOP/s, DDR {bw / 1e9:.0f} GB/s ({source})\n",
                style="bold")
    for row in grid:
        text.append("".join(row) + "\n")
    text.append(f"x: FLOP/byte 10^{x_lo:.1f}..10^{x_hi:.1f}   y: FLOP/s 10^{y_lo:.1f}.."
                f"10^{y_hi:.1f}", style=tones["muted"])
    return text


class AgentPanel(Panel):
    """The agent's transcript up to the cursor: messages, tool calls, model calls, and the
    run's totals. Its last line is the agent's newest event at the cursor, kept in view."""

    KEEP_END = True

    def show(self, state: DeploymentState, transcript: list[Event]) -> None:
        t = state.totals
        totals = Text.assemble(
            ("agent ", "bold"), f"{state.agent or '?'}  ",
            ("model calls ", "bold"), f"{t.model_calls}  ",
            ("tokens ", "bold"), f"in {t.input_tokens:,} out {t.output_tokens:,} "
                                 f"cache read {t.cache_read_tokens:,} write "
                                 f"{t.cache_write_tokens:,}  ",
            ("cost ", "bold"), f"${t.cost_usd:.4f}  ",
            ("tool calls ", "bold"), f"{t.tool_calls}  ", ("errors ", "bold"), f"{t.errors}")
        tones = self.tones
        rows: list[Part] = [(("agent", e.run_version),
                             partial(transcript_lines, e, tones, self.app.console,
                                     self.rich_style))
                            for e in transcript]
        self.put(totals, *(rows or [Text("nothing yet", style=tones["muted"])]))


TRANSCRIPT_INDENT = 8 + 16           # the version and the type


def transcript_row(e: Event, tones: Tones) -> Text:
    """One event of the transcript: its version and type, then what it says, wrapped under
    itself, in the event's tone as the event stream draws it. Plain text, cheaper to lay
    out than a table row."""
    style = tones[tone_of(e)]
    return Text.assemble((f"{e.run_version:>7} ", tones["muted"]), (f"{e.type:<16}", style),
                         (describe(e, 300), style), no_wrap=False)


def transcript_lines(e: Event, tones: Tones, console: Any, style: Style, width: int
                     ) -> list[Line]:
    return hanging_lines(transcript_row(e, tones), TRANSCRIPT_INDENT, console, style, width)


def hanging_lines(row: Text, indent: int, console: Any, style: Style, width: int
                  ) -> list[Line]:
    """`row` as lines of `width` cells whose wrapped lines start under the text, after a
    prefix of `indent` cells: wrapped and turned into segments without a Rich layout pass,
    over the panel's `style` (its background, and the colour of untoned text)."""
    head, body = row[:indent], row[indent:]
    pad = Text(" " * indent)
    return [Segment.adjust_line_length(list(Segment.apply_style(
                [*(head if i == 0 else pad).render(console), *line.render(console)], style)),
                width, style)
            for i, line in enumerate(body.wrap(console, max(8, width - indent)))]


@dataclass(frozen=True, slots=True)
class PlanView:
    """One of the deployment's plans at the cursor, as the Plan tab shows it."""

    scope: str                       # prefill or decode
    mode: str                        # "prefill L=128", as the transform results say it
    ref: str                         # the plan's blob
    plan: dict[str, Any]             # kernels/plan.py as pipeline/toolbox.py plan_json stores it
    profile: Event | None            # the newest profile of this plan, if it was profiled
    trend: tuple[float, ...]         # the plan's time before the first transform and after each
    trend_source: str                # where those times came from (modeled, measured-npu, ...)


class PlanPanel(Panel):
    """The recipe, the time of each plan across the transforms tried (a sparkline), the
    transforms, and each current plan as a table of its dispatches with their times."""

    def show(self, results: list[Event], recipe: dict[str, Any] | None,
             plans: list[PlanView]) -> None:
        #: What the sparklines draw: each plan's time across the transforms, by scope.
        self.trends = {v.scope: v.trend for v in plans if len(v.trend) > 1}
        tones = self.tones
        parts: list[Part] = []
        if recipe:
            summary = Table.grid(padding=(0, 2))
            summary.add_row("GEMM datapath", str(recipe.get("gemm_datapath", "?")))
            summary.add_row("tile configs", str(len(recipe.get("configs", {}))))
            summary.add_row("prefill transforms",
                            ", ".join(recipe.get("prefill_transforms", [])) or "none")
            summary.add_row("decode transforms",
                            ", ".join(recipe.get("decode_transforms", [])) or "none")
            parts.append(summary)
        if self.trends:
            parts.append(trend_lines(plans, self.spark_colours()))
        tried = [e for e in results if e.payload["tool"] == "apply_transform"]
        if tried:   # the newest result and the count name the rows
            parts.append((("tried", tried[-1].run_version, len(tried)),
                          partial(transforms_table, tried, tones)))
        for view in plans:   # a plan and the profile it is timed by name its lines
            parts.append((("plan", view.ref, view.profile and view.profile.run_version),
                          any_width(partial(plan_table, view, tones))))
        if not parts:
            parts.append(Text("No plan yet: phase 1 selects the tiles, phases 4 and 5 "
                              "transform the plan.", style=tones["muted"]))
        self.put(*parts)


def source_word(source: str) -> str:
    """MODELED, MEASURED on the NPU, ...: the short form of a source, for a title."""
    return {"modeled": "MODELED"}.get(source, SOURCE_LABEL.get(source, source))


def trend_lines(plans: list[PlanView], colours: SparkColours) -> Table:
    """Each plan's time before the first transform and after each one tried, a sparkline
    beside the figures, with where they came from."""
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True)
    grid.add_column(no_wrap=True)
    grid.add_column()
    for v in plans:
        if len(v.trend) > 1:
            grid.add_row(f"{v.scope} {source_word(v.trend_source)}", sparkline(v.trend, colours),
                         f"{v.trend[0] * 1e3:.2f} → {v.trend[-1] * 1e3:.2f} ms, "
                         f"{len(v.trend) - 1} tried")
    return grid


def transforms_table(tried: list[Event], tones: Tones, width: int) -> RenderableType:
    """The transforms tried, under a heading per mode: event number, transform, the plan's
    time before and after, kept or dropped; why one was dropped, dim, on the line under."""
    sources = {str(e.payload["result"].get("source", "modeled")) for e in tried}
    lines: list[RenderableType] = [Text(
        "transforms tried, times " + ", ".join(sorted(map(source_word, sources))), "bold")]
    name_width = max(8, min(max(len(str(e.payload["result"]["transform"])) for e in tried),
                            width - 5 - 19 - 8))
    mode = None
    for e in tried:
        r = e.payload["result"]
        if r.get("mode") != mode:
            mode = r.get("mode")
            lines.append(Text(printable(str(mode)), "underline"))
        after = r.get("after_s")
        # what an agent's tool call named and said: Text, never markup
        name = Text(printable(str(r["transform"])))
        name.truncate(name_width, overflow="ellipsis", pad=True)
        times = f"{r['before_s'] * 1e3:>7.2f} → " + ("      —" if after is None
                                                     else f"{after * 1e3:>7.2f}")
        lines.append(Text.assemble((f"{e.run_version:>4} ", tones["muted"]), name,
                                   f" {times} ms ",
                                   ("kept", tones["pass"]) if r["kept"] else
                                   ("dropped", tones["muted"]),
                                   no_wrap=True, overflow="ellipsis"))
        if r.get("reason") and not r["kept"]:      # a kept one's reason: it was faster
            lines.append(Padding(Text(printable(str(r["reason"])), tones["muted"]),
                                 (0, 0, 0, 5)))
    return Group(*lines)


def kernels_of(launches: list[str]) -> str:
    """The kernels of a dispatch's launches ("L0.q_proj:gemm_bf16"), each once, with how
    many launches run it: "gemm_bf16 ×3, rmsnorm"."""
    counts: dict[str, int] = {}
    for launch in launches:
        kernel = launch.rsplit(":", 1)[-1]
        counts[kernel] = counts.get(kernel, 0) + 1
    return ", ".join(k if n == 1 else f"{k} ×{n}" for k, n in counts.items())


def plan_table(view: PlanView, tones: Tones) -> RenderableType:
    """A plan's steps in order: each dispatch with its kernels, its launches and its time
    and share of the plan's total from the profile of this plan (host steps dim)."""
    steps = view.plan.get("steps", [])
    p = view.profile.payload if view.profile is not None else None
    times = {e["name"]: e["seconds"] for e in p["entries"]} if p else {}
    total = p["total_s"] if p else 0.0
    dispatches = [s for s in steps if "dispatch" in s]
    launches = sum(len(s["launches"]) for s in dispatches)
    where = (f"times {source_word(p['source'])} (v{view.profile.run_version}, "
             f"total {total * 1e3:.2f} ms)" if p and view.profile is not None
             else "not profiled yet: times appear when this plan is profiled")
    table = Table(title=Text(printable(
        f"{view.scope} plan ({view.mode}): "
        f"{plural(len(dispatches), 'dispatch', 'dispatches')}, "
        f"{plural(launches, 'launch', 'launches')}, {len(steps) - len(dispatches)} host "
        f"steps; {where}")),
        expand=True, show_edge=False, pad_edge=False, box=box.SIMPLE_HEAD,
        title_justify="left")
    table.add_column("dispatch", no_wrap=True, overflow="ellipsis", ratio=2)
    table.add_column("kernels", overflow="fold", ratio=3)
    table.add_column("launches", justify="right", no_wrap=True)
    table.add_column("ms", justify="right", no_wrap=True)
    table.add_column("share", justify="right", no_wrap=True)
    for s in steps:
        name = s.get("dispatch", s.get("host", "?"))
        seconds = times.get(name)
        ms = "—" if seconds is None else f"{seconds * 1e3:.3f}"
        share = "—" if seconds is None or not total else f"{100 * seconds / total:.1f}%"
        if "dispatch" in s:
            table.add_row(Text(printable(name)), Text(printable(kernels_of(s["launches"]))),
                          str(len(s["launches"])), ms, share)
        else:
            table.add_row(Text(printable(name)), Text("host"), "", ms, share,
                          style=tones["muted"])
    return table
