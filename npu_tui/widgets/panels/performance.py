"""The Performance tab: TTFT, tokens/s, the per-kernel and per-dispatch profiles and a text
roofline, each with where its figures came from."""

from __future__ import annotations

import math
import re
from functools import partial
from typing import Any

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from npu_deploy.events import Event

from .base import SOURCE_LABEL, Panel, Part, Tones, any_width, source_label

LAYER_PREFIX = re.compile(r"^L\d+\.")


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


