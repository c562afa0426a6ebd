"""The run screen's tabs: gate metrics, performance, the agent's transcript, the plan. Each
receives what to show (from `RunTimeline`) and draws it; none reads the store itself."""

from __future__ import annotations

import math
import re
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.containers import VerticalScroll
from textual.widgets import Static

from events import PHASE_NAMES, DeploymentState, Event
from events.describe import describe

from ..timeline import GateRow, gate_rows

LAYER_PREFIX = re.compile(r"^L\d+\.")
SOURCE_LABEL = {"modeled": "MODELED (performance model, not measured)",
                "measured-npu": "MEASURED on the NPU", "measured-cpu": "MEASURED on the CPU"}


def _num(x: float | None) -> str:
    if x is None:
        return "—"
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        return f"{x:.4g}"
    return f"{x:.3e}"


class Panel(VerticalScroll):
    """A scrolling tab body holding one Static."""

    def compose(self) -> Any:
        yield Static(id=f"{self.id}-body", classes="panel-body")

    def put(self, *renderables: RenderableType) -> None:
        self.query_one(Static).update(Group(*renderables))


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
        trend = " → ".join(_num(v) for v in r.history) if len(r.history) > 1 else ""
        style = "" if r.passed or not r.gating else "red"
        cells: list[RenderableType] = [mark, r.subject, r.metric, _num(r.value),
                                       f"{r.comparison} {_num(r.threshold)}"]
        table.add_row(*cells, *([trend] if retried else []), style=style)
    return table


class PerformancePanel(Panel):
    """Per-dispatch times, TTFT and tokens/s, and the roofline, each with where its figures
    came from."""

    def show(self, profiles: dict[str, Event], report: dict[str, Any] | None) -> None:
        if not profiles and not report:
            self.put(Text("No profile recorded yet (phases 4 and 5 record them).", style="dim"))
            return
        parts: list[RenderableType] = []
        prefill, decode = profiles.get("prefill"), profiles.get("decode")
        summary = Table.grid(padding=(0, 2))
        if prefill is not None:
            p = prefill.payload
            summary.add_row("TTFT (prefill)", f"{p['total_s'] * 1e3:.2f} ms",
                            f"{p.get('tokens') or '?'} tokens", SOURCE_LABEL.get(p["source"],
                                                                           p["source"]))
        if decode is not None:
            p = decode.payload
            rate = (p.get("tokens") or 1) / p["total_s"] if p["total_s"] else 0.0
            summary.add_row("decode", f"{p['total_s'] * 1e3:.2f} ms/token", f"{rate:.1f} tok/s",
                            SOURCE_LABEL.get(p["source"], p["source"]))
        parts.append(summary)
        for scope, e in profiles.items():
            parts.append(kernel_table(scope, e))
            parts.append(profile_table(scope, e))
        if report:
            parts.append(roofline(report))
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
        table = Table(expand=True, show_edge=False, show_header=False, pad_edge=False)
        table.add_column(justify="right", style="dim", no_wrap=True)
        table.add_column(no_wrap=True)
        table.add_column()
        for e in transcript:
            style = {"agent.message": "", "model.called": "magenta", "error": "red",
                     "tool.requested": "cyan", "tool.completed": "cyan dim"}.get(e.type, "")
            if e.type == "tool.completed" and not e.payload.get("ok"):
                style = "red"
            table.add_row(str(e.run_version), e.type, describe(e, 300), style=style)
        if not transcript:
            table.add_row("", "", Text("nothing yet", style="dim"))
        self.put(totals, table)


class PlanPanel(Panel):
    """The deployment's current recipe and plan, and every transform tried."""

    def show(self, results: list[Event], recipe: dict[str, Any] | None,
             plan: dict[str, Any] | None) -> None:
        parts: list[RenderableType] = []
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
        if tried:
            table = Table(title="transforms tried (times modeled)", expand=True,
                          show_edge=False, title_justify="left")
            for col in ("v", "phase", "transform", "mode", "before ms", "after ms", "kept",
                        "why"):
                table.add_column(col, no_wrap=True, overflow="ellipsis")
            for e in tried:
                r = e.payload["result"]
                after = r.get("after_s")
                table.add_row(str(e.run_version), str(e.phase), r["transform"], r.get("mode", ""),
                              f"{r['before_s'] * 1e3:.2f}",
                              "—" if after is None else f"{after * 1e3:.2f}",
                              Text("kept", style="green") if r["kept"] else
                              Text("dropped", style="yellow"), r.get("reason", ""))
            parts.append(table)
        if plan:
            steps = Table(title=f"current plan: {plan.get('summary', '')}", expand=True,
                          show_edge=False, title_justify="left")
            steps.add_column("#", justify="right")
            steps.add_column("step")
            steps.add_column("launches")
            for i, s in enumerate(plan.get("steps", []), 1):
                if "dispatch" in s:
                    steps.add_row(str(i), s["dispatch"], ", ".join(s["launches"]))
                else:
                    steps.add_row(str(i), Text(s["host"], style="dim"), "host")
            parts.append(steps)
        if not parts:
            parts.append(Text("No plan yet: phase 1 selects the tiles, phases 4 and 5 "
                              "transform the plan.", style="dim"))
        self.put(*parts)
