"""The run screen's tabs: gate metrics, performance, the agent's transcript, the plan. Each
receives what to show (from `RunTimeline`) and draws it; none reads the store itself."""

from __future__ import annotations

import math
import re
from collections import OrderedDict
from collections.abc import Callable, Hashable
from functools import partial
from typing import Any

from rich.console import RenderableType
from rich.segment import Segment
from rich.table import Table
from rich.text import Text
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip

from npu_deploy.events import PHASE_NAMES, DeploymentState, Event
from npu_deploy.events.describe import describe, gate_figures, printable

from ..timeline import GateRow, gate_rows

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


def any_width(build: Callable[[], RenderableType]) -> Callable[[int], RenderableType]:
    """A part's build for a renderable that Rich lays out at whatever width it is given."""
    return lambda _width: build()


class Panel(ScrollView, can_focus=True):
    """A scrolling tab body drawn with the Line API: what `put` receives is laid out by Rich
    once, at the panel's width, and kept as strips, so a seek costs one Rich render and
    never a relayout of the screen (a Static in an auto-height container costs both)."""

    CACHED_PARTS = 96

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._parts: tuple[Part, ...] = ()
        self._lines: list[Line] = []
        self._width = 0
        self._cache: OrderedDict[tuple[Hashable, int], list[Line]] = OrderedDict()

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
        self.refresh()

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
    """The gate of a phase: every check against its threshold, failures first, and how
    each value moved across the phase's attempts."""

    def show(self, state: DeploymentState, phase: int | None) -> None:
        if phase is None:
            self.put(Text("No phase has started yet.", style="dim"))
            return
        ph = state.phases[phase]
        if not ph.gates:
            self.put(Text(f"Phase {phase} ({PHASE_NAMES[phase]}): no gate evaluated yet "
                          f"(attempt {ph.attempts}, {ph.status}).", style="dim"))
            return
        last = ph.gates[-1]
        rows = gate_rows(ph.gates)
        failed = [r for r in rows if r.gating and not r.passed]
        head = Text.assemble(
            (f"Phase {phase} ({PHASE_NAMES[phase]}) gate {last.gate}: ", "bold"),
            ("PASS" if last.passed else "FAIL", "bold green" if last.passed else "bold red"),
            f"  attempt {last.attempt}, {plural(len(rows), 'check')}, "
            f"{len(failed)} gating failing")
        self.put(head, gate_table(rows))


def plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def gate_table(rows: list[GateRow]) -> Table:
    table = Table(expand=True, show_edge=False, pad_edge=False)
    retried = any(len(r.history) > 1 for r in rows)
    columns = [("", "left"), ("subject", "left"), ("metric", "left"), ("value", "right"),
               ("needs", "left")] + ([("across attempts", "left")] if retried else [])
    for name, justify in columns:
        table.add_column(name, justify=justify,   # type: ignore[arg-type]
                         no_wrap=name != "subject", min_width=14 if name == "subject" else None,
                         ratio=2 if name == "subject" else None)
    for r in rows:
        mark = Text("ok", style="green") if r.passed else Text("FAIL", style="bold red")
        if not r.gating:
            mark = Text("lens", style="dim")
        trend = " → ".join("—" if v is None else gate_figures(v, r.threshold)[0]
                           for v in r.history) if len(r.history) > 1 else ""
        style = "" if r.passed or not r.gating else "red"
        value, threshold = gate_figures(r.value, r.threshold)
        cells: list[RenderableType] = [mark, Text(printable(r.subject)),
                                       Text(printable(r.metric)), value,
                                       f"{r.comparison} {threshold}"]
        table.add_row(*cells, *([trend] if retried else []), style=style)
    return table


class PerformancePanel(Panel):
    """Per-dispatch times, TTFT and tokens/s, and the roofline, each with where its figures
    came from."""

    def show(self, profiles: dict[str, Event], report: dict[str, Any] | None,
             report_ref: str | None = None) -> None:
        if not profiles and not report:
            self.put(Text("No profile recorded yet (phases 4 and 5 record them).", style="dim"))
            return
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
            parts.append((("roofline", report_ref), any_width(partial(roofline, report)))
                         if report_ref else roofline(report))
        else:
            parts.append(Text("The roofline appears when phase 6 writes the report.",
                              style="dim"))
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


def roofline(report: dict[str, Any], width: int = 60, height: int = 12) -> RenderableType:
    """A log-log text roofline of the deployed prefill's launches (the report's data)."""
    peak, bw = float(report["peak_flops"]), float(report["ddr_bw"])
    points = [(k["flops"] / k["bytes"], k["flops"] / k["seconds"]) for k in report["kernels"]
              if k["bytes"] and k["seconds"] and k["flops"]]
    source = SOURCE_LABEL.get(report.get("time_source", ""), report.get("time_source", ""))
    if not points:
        return Text(f"roofline: no kernel points ({source})", style="dim")
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
                f"10^{y_hi:.1f}", style="dim")
    return text


class AgentPanel(Panel):
    """The agent's transcript: messages, tool calls, model calls, and the run's totals."""

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
        rows: list[Part] = [(("agent", e.run_version),
                             partial(transcript_lines, e, self.app.console, self.rich_style))
                            for e in transcript]
        self.put(totals, *(rows or [Text("nothing yet", style="dim")]))


TRANSCRIPT_INDENT = 8 + 16           # the version and the type
TRANSCRIPT_STYLE = {"agent.message": "", "model.called": "magenta", "error": "red",
                    "tool.requested": "cyan", "tool.completed": "cyan dim"}


def transcript_row(e: Event) -> Text:
    """One event of the transcript: its version and type, then what it says, wrapped under
    itself. Plain text, cheaper to lay out than a table row."""
    style = TRANSCRIPT_STYLE.get(e.type, "")
    if e.type == "tool.completed" and not e.payload.get("ok"):
        style = "red"
    return Text.assemble((f"{e.run_version:>7} ", "dim"), (f"{e.type:<16}", style),
                         (describe(e, 300), style), no_wrap=False)


def transcript_lines(e: Event, console: Any, style: Any, width: int) -> list[Line]:
    return hanging_lines(transcript_row(e), TRANSCRIPT_INDENT, console, style, width)


def hanging_lines(row: Text, indent: int, console: Any, style: Any, width: int) -> list[Line]:
    """`row` as lines of `width` cells whose wrapped lines start under the text, after a
    prefix of `indent` cells: wrapped and turned into segments without a Rich layout pass."""
    head, body = row[:indent], row[indent:]
    pad = Text(" " * indent)
    return [Segment.adjust_line_length([*(head if i == 0 else pad).render(console),
                                        *line.render(console)], width, style)
            for i, line in enumerate(body.wrap(console, max(8, width - indent)))]


class PlanPanel(Panel):
    """The deployment's current recipe and plan, and every transform tried."""

    def show(self, results: list[Event], recipe: dict[str, Any] | None,
             plan: dict[str, Any] | None, plan_ref: str | None = None) -> None:
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
        tried = [e for e in results if e.payload["tool"] == "apply_transform"]
        if tried:   # the newest result and the count name the rows
            parts.append((("tried", tried[-1].run_version, len(tried)),
                          any_width(partial(transforms_table, tried))))
        if plan:
            parts.append((("plan", plan_ref), any_width(partial(plan_table, plan))) if plan_ref
                         else plan_table(plan))
        if not parts:
            parts.append(Text("No plan yet: phase 1 selects the tiles, phases 4 and 5 "
                              "transform the plan.", style="dim"))
        self.put(*parts)


def transforms_table(tried: list[Event]) -> Table:
    table = Table(title="transforms tried (times modeled)", expand=True,
                  show_edge=False, title_justify="left")
    for col in ("v", "phase", "transform", "mode", "before ms", "after ms", "kept",
                "why"):
        table.add_column(col, no_wrap=True, overflow="ellipsis")
    for e in tried:
        r = e.payload["result"]
        after = r.get("after_s")
        # what an agent's tool call named and said: Text, never markup
        table.add_row(str(e.run_version), str(e.phase), Text(printable(str(r["transform"]))),
                      Text(printable(str(r.get("mode", "")))),
                      f"{r['before_s'] * 1e3:.2f}",
                      "—" if after is None else f"{after * 1e3:.2f}",
                      Text("kept", style="green") if r["kept"] else
                      Text("dropped", style="yellow"), Text(printable(str(r.get("reason", "")))))
    return table


def plan_table(plan: dict[str, Any]) -> Table:
    steps = Table(title=Text(printable(f"current plan: {plan.get('summary', '')}")), expand=True,
                  show_edge=False, title_justify="left")
    steps.add_column("#", justify="right")
    steps.add_column("step")
    steps.add_column("launches")
    for i, s in enumerate(plan.get("steps", []), 1):
        if "dispatch" in s:
            steps.add_row(str(i), Text(printable(s["dispatch"])),
                          Text(printable(", ".join(s["launches"]))))
        else:
            steps.add_row(str(i), Text(printable(s["host"]), style="dim"), "host")
    return steps
