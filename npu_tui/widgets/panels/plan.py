"""The Plan tab: the recipe, each plan's time across the transforms tried, the transforms,
and each current plan's dispatches with their times."""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from npu_deploy.events import Event
from npu_deploy.events.describe import printable

from .base import SOURCE_LABEL, Panel, Part, SparkColours, Tones, any_width, plural, sparkline


@dataclass(frozen=True, slots=True)
class PlanView:
    """One of the deployment's plans at the cursor, as the Plan tab shows it."""

    scope: str                       # prefill or decode
    mode: str                        # "prefill L=128", as the transform results say it
    ref: str                         # the plan's blob
    plan: dict[str, Any]             # kernels/plans/plan.py as toolbox.py plan_json stores it
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
