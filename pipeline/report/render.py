"""The Phase-6 performance report: report.md with its tables, roofline.png and timeline.png.

Every time in the report names where it comes from. NPU times (prefill, decode, the
optimization steps, the kernels) are either modeled by the performance model
(`kernels/performance/model.py`) or measured on the NPU; the phase times come from the event log and
are measured on the CPU of this host. The plots are drawn with matplotlib's Agg canvas,
never pyplot, so no display and no global state are involved.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from npu_deploy.events.describe import printable
from npu_deploy.kernels.performance.model import Rates

TIME_SOURCES = ("modeled", "measured-npu")
KERNEL_SOURCES = ("modeled", "measured-npu", "measured-cpu")
BACKENDS = ("emulator", "xrt")
SOURCE_LABELS = {"modeled": "modeled", "measured-npu": "measured on NPU",
                 "measured-cpu": "measured on CPU"}
HOST_LABEL = "measured on the CPU of this host"
TOP_KERNELS = 15
DPI = 100
ROOFLINE_SIZE = (8.0, 5.5)          # inches; the PNG is DPI times this
TIMELINE_SIZE = (9.0, 4.5)


@dataclass(frozen=True)
class KernelPoint(Rates):
    """One launch of the deployed prefill plan, with its work and its time."""

    label: str                      # e.g. "L0.q_proj"
    kernel: str                     # e.g. "gemm_bf16"
    flops: float
    bytes: int                      # moved to or from DDR
    seconds: float
    source: str                     # "modeled" | "measured-npu" | "measured-cpu"
    # upstream's standalone time of this kernel at this shape, measured on NPU2 (its
    # kernel registry), and that data's provenance; None where it measured no such shape
    upstream_s: float | None = None
    upstream_source: str | None = None

    def __post_init__(self) -> None:
        where = f"kernel point {self.label!r}"
        _check_source(where, self.source, KERNEL_SOURCES)
        for name in ("flops", "bytes", "seconds"):
            _check_non_negative(where, name, getattr(self, name))

    @property
    def intensity(self) -> float:
        """Arithmetic intensity in FLOP per DDR byte."""
        return self.flops / self.bytes if self.bytes else math.inf

    def roof_seconds(self, peak_flops: float, ddr_bw: float) -> float:
        """The time at the roofline: the slower of doing the FLOPs at peak and moving the
        bytes at full DDR bandwidth (the same as min(peak, bw * intensity))."""
        return max(self.flops / peak_flops, self.bytes / ddr_bw)

    def bound(self, peak_flops: float, ddr_bw: float) -> str:
        """Compute-bound at or right of the ridge point (peak / bw), else memory-bound."""
        if not self.flops and not self.bytes:
            return "-"
        return "compute" if self.intensity >= peak_flops / ddr_bw else "memory"

    @property
    def plottable(self) -> bool:
        """A log-log roofline cannot place zero FLOPs, zero bytes or zero time."""
        return self.flops > 0 and self.bytes > 0 and self.seconds > 0


@dataclass(frozen=True)
class PhaseSpan:
    """One phase of the deployment as the event log timed it (host CPU clock)."""

    phase: int
    name: str
    start_s: float                  # since the run started
    wall_s: float
    agent_s: float
    backend_s: float
    attempts: int
    outcome: str                    # "passed", "needs_human", ...
    waiting_s: float = 0.0          # for a person: a checkpoint, a proposal, a stop
    paused_s: float = 0.0

    def __post_init__(self) -> None:
        where = f"phase {self.phase} ({self.name})"
        for name in ("start_s", "wall_s", "agent_s", "backend_s", "waiting_s", "paused_s",
                     "attempts"):
            _check_non_negative(where, name, getattr(self, name))

    @property
    def own_s(self) -> float:
        """The wall less a person's waiting and the pauses: the phase's speed."""
        return max(0.0, self.wall_s - self.waiting_s - self.paused_s)

    @property
    def label(self) -> str:
        return f"{self.phase} {self.name}"


@dataclass(frozen=True)
class ReportData:
    """Everything the Phase-6 report shows, gathered from one run."""

    run_id: str
    model: str
    backend: str                    # "emulator" or "xrt"
    time_source: str                # "modeled" | "measured-npu": where the NPU times come from
    peak_flops: float               # FLOP/s of the array, the compute roof
    ddr_bw: float                   # bytes/s, the memory roof
    prefill: dict[str, float]       # e.g. {"baseline_s": .., "deployed_s": .., "tokens": 128}
    decode: dict[str, float]        # e.g. {"baseline_s": .., "deployed_s": .., "tokens_per_s": ..}
    transforms: list[dict[str, object]]
    gates: list[dict[str, object]]
    kernels: list[KernelPoint]
    phases: list[PhaseSpan]
    answers: list[dict[str, str]] = field(default_factory=list)
    # each failed gate's evidence and what its retry changed (gather.retry_rows)
    retries: list[dict[str, object]] = field(default_factory=list)
    # per canonical prompt: the deployment's leading greedy tokens shared with the FP32
    # oracle (the newest phase 3-6 gate's), the bf16 reference's (None: no bar recorded)
    # and the oracle's steps (gather.agreement_rows)
    agreement: list[dict[str, object]] = field(default_factory=list)

    def __post_init__(self) -> None:
        _check_source("time_source", self.time_source, TIME_SOURCES)
        if self.backend not in BACKENDS:
            raise ValueError(f"backend is {self.backend!r}; use one of {', '.join(BACKENDS)}")
        if self.time_source == "measured-npu" and self.backend != "xrt":
            raise ValueError(f"time_source 'measured-npu' needs backend 'xrt', not "
                             f"{self.backend!r}: the emulator runs on the CPU")
        for name in ("peak_flops", "ddr_bw"):
            value = getattr(self, name)
            if not (isinstance(value, int | float) and value > 0 and math.isfinite(value)):
                raise ValueError(f"{name} is {value!r}; a roof must be a positive number")
        for mode in ("prefill", "decode"):
            for key, value in getattr(self, mode).items():
                _check_non_negative(mode, key, value)
        for i, t in enumerate(self.transforms):
            for key in ("before_s", "after_s"):
                if t.get(key) is not None:
                    _check_non_negative(f"transform {i} ({t.get('transform')})", key, t[key])

    @property
    def source_label(self) -> str:
        return SOURCE_LABELS[self.time_source]


def _check_source(where: str, source: str, allowed: tuple[str, ...]) -> None:
    if source not in allowed:
        raise ValueError(f"{where} is {source!r}; use one of {', '.join(allowed)}")


def _check_non_negative(where: str, name: str, value: object) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ValueError(f"{where}: {name} is {value!r}, not a number")
    if not float(value) >= 0 or math.isinf(value):
        raise ValueError(f"{where}: {name} is {value!r}; times and counts must be finite "
                         "and >= 0")


# --- formatting ------------------------------------------------------------------------

def format_time(seconds: float | None) -> str:
    """Seconds as people read them: "2.00 s", "500 ms", "45.6 µs"."""
    if seconds is None:
        return "-"
    if seconds == 0:
        return "0 s"
    if seconds >= 0.9995:           # what would round to "1000 ms" reads as seconds
        return f"{seconds:.2f} s"
    if seconds >= 0.9995e-3:
        return f"{_three_digits(seconds * 1e3)} ms"
    return f"{_three_digits(seconds * 1e6)} µs"


def _three_digits(x: float) -> str:
    return f"{x:.0f}" if x >= 99.95 else f"{x:.1f}" if x >= 9.995 else f"{x:.2f}"


def speedup(before: float | None, after: float | None) -> str:
    """before / after as "4.00x", or "-" when either is missing or after is zero."""
    if before is None or after is None or after == 0:
        return "-"
    return f"{before / after:.2f}x"


def _cell(value: object) -> str:
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: Iterable[str], rows: Iterable[Iterable[object]],
           right: Iterable[int] = ()) -> list[str]:
    """A markdown table; columns whose index is in `right` are right-aligned."""
    head = list(header)
    aligned = set(right)
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join("---:" if i in aligned else "---" for i in range(len(head))) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return lines


def _float(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    return float(value)


# --- report.md -------------------------------------------------------------------------

def _source_line(data: ReportData) -> str:
    if data.time_source == "modeled":
        npu = ("The NPU times in this report (prefill, decode, optimization steps, kernels) "
               "are modeled by the performance model (`kernels/performance/model.py`), not "
               "measured: nothing here was timed on an NPU.")
    else:
        npu = ("The prefill, decode and optimization-step times in this report were measured "
               "on the NPU through XRT: each dispatch timed from the host, start to the end "
               "of its wait, with its buffer writes and reads. After a warm run that "
               "compiles, loads and writes the weights, each figure is the median of the "
               "measured runs, and a transform counts as faster only when its slowest run "
               "beat the fastest run without it.")
        if any(k.source == "modeled" for k in data.kernels):
            npu += (" The kernel points on the roofline are modeled (a dispatch may hold "
                    "several launches), and say so.")
    return f"**Where the times come from.** {npu} The phase times are {HOST_LABEL}."


def _summary(data: ReportData) -> list[str]:
    src = data.source_label
    rows: list[list[str]] = []
    for mode, figures in (("prefill", data.prefill), ("decode", data.decode)):
        base, deployed = figures.get("baseline_s"), figures.get("deployed_s")
        tokens = figures.get("tokens")
        if mode == "decode":
            what = "decode (per token)" if tokens is None else f"decode ({tokens:g} tokens)"
        else:
            what = "prefill" if tokens is None else f"prefill ({tokens:g} tokens)"
        rows.append([what, format_time(base), format_time(deployed), speedup(base, deployed)])
    lines = ["## Summary", ""]
    lines += _table(["figure", f"baseline ({src})", f"deployed ({src})", "speed-up"], rows,
                    right=(1, 2, 3))
    rates = _token_rates(data)
    if rates:
        lines += [""] + [f"- {name} ({src}): {value:.1f} tokens/s" for name, value in rates]
    known = {"baseline_s", "deployed_s", "tokens", "tokens_per_s"}
    extra = [(mode, k, v) for mode, figs in (("prefill", data.prefill), ("decode", data.decode))
             for k, v in sorted(figs.items()) if k not in known]
    if extra:
        lines += [""] + [f"- {mode} {k} ({src}): "
                         f"{format_time(v) if k.endswith('_s') else f'{v:g}'}"
                         for mode, k, v in extra]
    return lines


def _token_rates(data: ReportData) -> list[tuple[str, float]]:
    """Tokens per second: prefill tokens over the deployed prefill time, and the decode
    rate as given (or else its tokens, one by default, over the deployed decode time)."""
    rates = []
    tokens, prefill_s = data.prefill.get("tokens"), data.prefill.get("deployed_s")
    if tokens and prefill_s:
        rates.append(("prefill", tokens / prefill_s))
    decode = data.decode.get("tokens_per_s")
    if decode is None and data.decode.get("deployed_s"):
        decode = data.decode.get("tokens", 1.0) / data.decode["deployed_s"]
    if decode is not None:
        rates.append(("decode", decode))
    return rates


def _gates(data: ReportData) -> list[str]:
    rows = [[g.get("phase", "-"), g.get("gate", "-"), "PASS" if g.get("passed") else "FAIL",
             g.get("attempts", "-"), g.get("worst") or "-"] for g in data.gates]
    return ["## Gates", ""] + (_table(["phase", "gate", "result", "attempts", "worst check"],
                                      rows, right=(0, 3)) if rows else ["No gate results."])


def _retries(data: ReportData) -> list[str]:
    """Each failed gate's evidence and what the retry changed; nothing when no gate failed."""
    if not data.retries:
        return []
    rows = [[r["phase"], r["attempt"], r["evidence"] or "-", r["next"] or "-"]
            for r in data.retries]
    return ["## Retries", "", "A retry of a deterministic gate changes something; each "
            "failed attempt's evidence and the change that followed:", "",
            *_table(["phase", "attempt", "evidence", "then"], rows, right=(0, 1))]


def _transforms(data: ReportData) -> list[str]:
    src = data.source_label
    rows = []
    for t in data.transforms:
        before, after = _float(t.get("before_s")), _float(t.get("after_s"))
        rows.append([t.get("phase", "-"), t.get("transform", "-"),
                     "yes" if t.get("kept") else "no", format_time(before), format_time(after),
                     speedup(before, after), t.get("reason") or "-"])
    header = ["phase", "transform", "kept", f"before ({src})", f"after ({src})", "speed-up",
              "reason"]
    return ["## Optimization steps", ""] + (_table(header, rows, right=(0, 3, 4, 5)) if rows
                                            else ["No transforms were tried."])


def kernels_by_time(kernels: Iterable[KernelPoint]) -> list[KernelPoint]:
    """Longest launch first; ties by label, so the order never depends on the input's."""
    return sorted(kernels, key=lambda k: (-k.seconds, k.label))


def _kernels(data: ReportData) -> list[str]:
    lines = ["## Kernels", ""]
    if not data.kernels:
        return lines + ["No launches were profiled."]
    sources = sorted({k.source for k in data.kernels})
    mixed = len(sources) > 1
    when = "source per row" if mixed else SOURCE_LABELS[sources[0]]
    top = kernels_by_time(data.kernels)[:TOP_KERNELS]
    total = sum(k.seconds for k in data.kernels)
    ridge = data.peak_flops / data.ddr_bw
    shown = (f"All {len(top)} launches" if len(top) == len(data.kernels)
             else f"The {len(top)} longest of {len(data.kernels)} launches")
    lines += [f"{shown} of the deployed prefill plan ({format_time(total)} in all, {when}). "
              "Roofs: "
              f"{data.peak_flops / 1e12:.3g} TFLOP/s and {data.ddr_bw / 1e9:.3g} GB/s DDR, "
              f"ridge point {ridge:.3g} FLOP/byte; a launch left of the ridge is memory-bound.",
              ""]
    rows = []
    notes: dict[str, int] = {}
    for k in top:
        roof = k.roof_seconds(data.peak_flops, data.ddr_bw)
        fraction = f"{roof / k.seconds:.0%}" if k.seconds else "-"
        upstream = "-"
        if k.upstream_s is not None and k.upstream_source is not None:
            mark = notes.setdefault(k.upstream_source, len(notes) + 1)
            upstream = f"{format_time(k.upstream_s)} [{mark}]"
        row = [k.label, k.kernel, format_time(k.seconds), upstream,
               f"{k.achieved_flops / 1e9:.1f}", f"{k.achieved_bw / 1e9:.2f}", fraction,
               k.bound(data.peak_flops, data.ddr_bw)]
        rows.append(row + ([SOURCE_LABELS[k.source]] if mixed else []))
    header = ["launch", "kernel", f"time ({when})", "upstream, standalone (measured on NPU2)",
              "GFLOP/s", "GB/s", "of roofline", "bound"]
    if not notes:       # no launch was measured upstream: no column of dashes
        header, rows = header[:3] + header[4:], [r[:3] + r[4:] for r in rows]
    lines += _table(header + (["source"] if mixed else []), rows,
                    right=(2, 3, 4, 5, 6) if notes else (2, 3, 4, 5))
    if notes:
        lines += [""] + [f"[{mark}] measured on NPU2: {source}" for source, mark in notes.items()]
        lines += ["", "Upstream's figures time one kernel alone at the same shape, at the "
                      "configuration its sweep found fastest; GFLOP/s, GB/s and the roofline "
                      f"columns are those of the {when} time."]
    skipped = sum(not k.plottable for k in data.kernels)
    if skipped:
        lines += ["", f"{skipped} of {len(data.kernels)} launches are not on the roofline "
                      "plot: zero FLOPs, zero bytes or zero time has no place on a log axis."]
    return lines


def _phases(data: ReportData) -> list[str]:
    parts = ("start", "wall", "own", "agent", "backend", "waiting", "paused")
    rows = [[p.label, *(format_time(getattr(p, f"{c}_s")) for c in parts), p.attempts,
             p.outcome] for p in _phase_order(data.phases)]
    header = ["phase", *(f"{c} (host CPU)" for c in parts), "attempts", "outcome"]
    return ["## Phases", "", f"Seconds are {HOST_LABEL}, from the event log; they are not NPU "
            "times. A phase's wall splits into the agent's steps, the backend's, waiting for a "
            "person (a checkpoint, a proposal, a stop) and pauses; the rest is the harness. "
            "Own is the wall less the waiting and the pauses: a phase's speed, never charged "
            "with a person's reading time.", ""] + (
        _table(header, rows, right=tuple(range(1, len(parts) + 2))) if rows
        else ["No phases were recorded."])


def _phase_order(phases: Iterable[PhaseSpan]) -> list[PhaseSpan]:
    return sorted(phases, key=lambda p: (p.start_s, p.phase))


def _answers(data: ReportData) -> list[str]:
    if not data.answers:
        return []
    lines = ["## Answers", "", f"The deployed model on the {data.backend} backend:"]
    for a in data.answers:
        lines += ["", f"**Prompt:** {_cell(a.get('prompt', ''))}", "",
                  *(f"> {line}" for line in str(a.get("answer", "")).splitlines() or [""])]
    return lines


def _agreement(data: ReportData) -> list[str]:
    """The deployment's greedy agreement with the oracle beside the bf16 bar's."""
    if not data.agreement:
        return []
    rows = [[a["prompt"], a["deployed"], "-" if a["bf16"] is None else a["bf16"], a["steps"]]
            for a in data.agreement]
    known = all(a["bf16"] is not None for a in data.agreement)
    rows.append(["all prompts", sum(_int(a["deployed"]) for a in data.agreement),
                 sum(_int(a["bf16"]) for a in data.agreement) if known else "-",
                 sum(_int(a["steps"]) for a in data.agreement)])
    words = ("Leading greedy tokens each canonical prompt shares with the FP32 oracle: the "
             "deployment's (the newest phase 3-6 gate's) beside Hugging Face's own run of the "
             "model in bf16 on the CPU (phase 0), the bar the deployment must not fall behind "
             "(docs/design.md, phase 3).")
    if not known:
        words += " This run's phase 0 recorded no bf16 reference: it was held to no bar."
    return ["## Greedy agreement with the oracle", "", words, "",
            *_table(["prompt", "deployed", "Hugging Face bf16", "of"], rows,
                    right=(1, 2, 3))]


def _int(v: object) -> int:
    return int(v) if isinstance(v, int | float) else 0


def report_markdown(data: ReportData) -> str:
    """The text of report.md: deterministic, no dates, every time with its source."""
    sections = [
        [f"# Performance report: {data.model}, run {data.run_id}", "",
         f"Backend: {data.backend}.", "", _source_line(data)],
        _summary(data), _gates(data), _agreement(data), _retries(data), _transforms(data),
        _kernels(data), _phases(data), _answers(data),
        ["## Plots", "", f"Roofline of the deployed prefill plan's launches "
         f"({SOURCE_LABELS[_kernel_source(data)]}):", "", "![roofline](roofline.png)", "",
         f"Phases of the run ({HOST_LABEL}):", "", "![timeline](timeline.png)"],
    ]
    # A model name, a prompt, an answer, a gate's name: text from a person, a model or an
    # agent, its control and invisible characters shown as escapes (events/describe.py)
    return printable("\n\n".join("\n".join(s) for s in sections if s) + "\n", None)


# --- plots -----------------------------------------------------------------------------

def _kernel_source(data: ReportData) -> str:
    sources = {k.source for k in data.kernels}
    return sources.pop() if len(sources) == 1 else data.time_source


def save_png(fig: Figure, path: Path) -> None:
    """Write fig as a PNG of DPI x its size in inches, with no metadata that could vary."""
    FigureCanvasAgg(fig)            # Agg, attached to this figure only: no display, no pyplot
    fig.savefig(path, dpi=DPI, metadata={"Software": None})


def roofline_figure(data: ReportData) -> Figure:
    """Achieved FLOP/s against arithmetic intensity on log-log axes, under both roofs."""
    fig = Figure(figsize=ROOFLINE_SIZE, layout="constrained")
    ax = fig.add_subplot()
    points = [k for k in data.kernels if k.plottable]
    ridge = data.peak_flops / data.ddr_bw
    xs = [k.intensity for k in points] + [ridge]
    lo, hi = min(xs) / 4, max(xs) * 4
    grid = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(grid, [min(data.peak_flops, data.ddr_bw * x) for x in grid], color="black",
            linewidth=1.5, label="roofline")
    ax.axvline(ridge, color="grey", linestyle=":", linewidth=1)
    kernels = sorted({k.kernel for k in points})
    palette = [f"C{i % 10}" for i in range(len(kernels))]
    markers = "osD^v<>ph*"
    for i, (name, color) in enumerate(zip(kernels, palette, strict=True)):
        group = [k for k in points if k.kernel == name]
        ax.scatter([k.intensity for k in group], [k.achieved_flops for k in group],
                   color=color, marker=markers[i // 10 % len(markers)], s=28, label=name,
                   alpha=0.85, edgecolors="none")
    if not points:
        ax.text(0.5, 0.5, "no launch can be placed", transform=ax.transAxes, ha="center")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte of DDR traffic)")
    ax.set_ylabel("achieved FLOP/s")
    source = SOURCE_LABELS[_kernel_source(data)]
    ax.set_title(printable(f"Roofline, {data.model} prefill launches ({source})", None))
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(fontsize="small", loc="outside right upper")   # never over a point
    return fig


def timeline_figure(data: ReportData) -> Figure:
    """One bar per phase span from its start for its wall time, with the agent's, the
    backend's, a person's waiting and the pauses stacked inside it; the rest is the harness."""
    fig = Figure(figsize=TIMELINE_SIZE, layout="constrained")
    ax = fig.add_subplot()
    spans = _phase_order(data.phases)
    ys = list(range(len(spans)))
    starts = [p.start_s for p in spans]
    ax.barh(ys, [p.wall_s for p in spans], left=starts, height=0.7, color="#d9d9d9",
            edgecolor="#808080", label="wall (rest: harness)")
    ax.barh(ys, [p.agent_s for p in spans], left=starts, height=0.45, color="C0",
            label="agent")
    ax.barh(ys, [p.backend_s for p in spans], left=[p.start_s + p.agent_s for p in spans],
            height=0.45, color="C1", label="backend")
    # a person's turn and the pauses, stacked after the work (the log does not keep their order)
    ends = [p.start_s + p.agent_s + p.backend_s for p in spans]
    ax.barh(ys, [p.waiting_s for p in spans], left=ends, height=0.45, color="C2",
            label="waiting for a person")
    ax.barh(ys, [p.paused_s for p in spans], left=[e + p.waiting_s for e, p in
                                                   zip(ends, spans, strict=True)],
            height=0.45, color="C7", label="paused")
    ax.set_yticks(ys, [p.label for p in spans])
    ax.invert_yaxis()               # phase 0 on top, as the phases are read
    ax.set_xlabel(f"seconds ({HOST_LABEL})")
    ax.set_title(printable(f"Phases of run {data.run_id}", None))
    if not spans:
        ax.text(0.5, 0.5, "no phases recorded", transform=ax.transAxes, ha="center")
    fig.legend(fontsize="small", loc="outside lower center", ncols=3)   # never over a bar
    return fig


def render_report(data: ReportData, out_dir: Path) -> dict[str, Path]:
    """Write report.md, roofline.png and timeline.png into out_dir (created if missing);
    return their paths by name ("report", "roofline", "timeline")."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"report": out_dir / "report.md", "roofline": out_dir / "roofline.png",
             "timeline": out_dir / "timeline.png"}
    paths["report"].write_text(report_markdown(data), encoding="utf-8")
    save_png(roofline_figure(data), paths["roofline"])
    save_png(timeline_figure(data), paths["timeline"])
    return paths
