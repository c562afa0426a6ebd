"""Two matrices of one store side by side (`npu-deploy matrix compare A B`): what changed
since last time, cell by cell, with the regressions marked.

Cells are matched by their cell (model, prompt length, backend, agent); a cell in only one
matrix is listed as such and is no regression (the specs differ: a model added or dropped).
Per cell and side it reads the cell's run from the store (store/matrix.py's book names it):

- the verdict (`run.finished`), or how the cell stands when its run has none;
- each phase's last gate (the folded state keeps every `gate.evaluated` in
  `PhaseState.gates`): passed or not, and the worst value of each gating metric over the
  gate's subjects (a lens never decides a gate, so it is not compared);
- the deployed prefill and decode times: the last `profile.recorded` of each scope, with
  its `source` (modeled, or measured on the NPU on the xrt backend; never one for the other).

A regression is B worse than A: a verdict that was PASS and is not, a gate that passed and
fails, a gate value worse by more than its metric's tolerance, a time slower by more than
its source's tolerance. Each tolerance, and why it is that value, is below.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Final

from npu_deploy.events import PHASE_NAMES, DeploymentState, GateSummary
from npu_deploy.store import EventStore
from npu_deploy.store.matrix import MatrixRun, matrices, matrix_runs

from .spec import Cell

HIGHER: Final = "higher"
LOWER: Final = "lower"

#: Modeled times: the performance model (kernels/performance/model.py) is deterministic, so
#: the same plan gives the same seconds on every machine and every run. A difference is never
#: noise but a change of the plan (a transform lost, another tile) or of the model; only float
#: round-off (far below a millionth) is let through, as phase 6's report_rel_diff does.
MODELED_TOLERANCE: Final = 1e-6
#: Measured times (the xrt backend, on the NPU): each is a median over timed runs, and the
#: same plan timed twice differs by the host's scheduling, clocks and the other processes.
#: Slower is then asked to be both more than this fraction AND outside the runs' spread (B's
#: fastest run slower than A's slowest: the speed gate's rule, pipeline/gates/speed.py, the
#: other way round). The fraction is a floor chosen, not measured here (no NPU was reachable):
#: it keeps two medians of one plan from being called a regression when no runs are recorded.
MEASURED_TOLERANCE: Final = 0.05
#: A gate value is worse when it moved toward its threshold by more than this share of the
#: room a perfect value has there: the threshold itself for an error (perfect at 0), one less
#: the threshold for a similarity (perfect at 1). Phase 2's cosine of 0.99 leaves room 0.01,
#: so a cosine that drops by more than 0.001 is marked; phase 0's logits error of 1e-4 is
#: marked when it grew by more than 1e-5. A tenth of the room: a deployment that spends a
#: tenth of its margin in one change is worth a look before the gate itself fails, while
#: smaller moves (such as another order of summing bf16 partials can make) are not marked.
ROOM_SHARE: Final = 0.1

#: The gating metrics of pipeline/gates/ (and the evaluator's re-runs of them): which way is
#: better, and their kind. An error is perfect at 0, a similarity at 1; a count (tokens
#: agreed, yes/no checks recorded as 1 or 0, findings) comes from greedy decoding or a rule,
#: deterministic, so one less (or one more finding) is a change: tolerance 0.
METRICS: Final[dict[str, tuple[str, str]]] = {
    "prefill_logits_rel_l2": (LOWER, "error"), "decode_logits_rel_l2": (LOWER, "error"),
    "rel_l2": (LOWER, "error"), "max_abs": (LOWER, "error"),
    "relative_difference": (LOWER, "error"),
    "cosine": (HIGHER, "similarity"), "cosine_pos_min": (HIGHER, "similarity"),
    "pearson": (HIGHER, "similarity"), "within_frac": (HIGHER, "similarity"),
    "greedy_tokens_identical": (HIGHER, "count"), "stored_oracle_tokens": (HIGHER, "count"),
    "greedy_tokens_agreed": (HIGHER, "count"),
    "greedy_tokens_agreed_vs_bf16": (HIGHER, "count"),
    "first_token_vs_bf16": (HIGHER, "count"), "configured": (HIGHER, "count"),
    "written": (HIGHER, "count"), "blocking_findings": (LOWER, "count"),
}

SCOPES: Final = ("prefill", "decode")
#: What marks a regression, in every form of the table.
MARK: Final = "REGRESSION"
#: The tolerances, as the JSON states them beside the comparison.
TOLERANCES: Final = {
    "modeled_time_relative": MODELED_TOLERANCE,
    "measured_time_relative": MEASURED_TOLERANCE,
    "measured_time_outside_spread": True,
    "gate_value_room_share": ROOM_SHARE,
    "count": 0,
}


class UnknownMatrix(LookupError):
    """A matrix name the store's book does not hold; the message lists those it does."""


@dataclass(frozen=True)
class Value:
    """One gating metric of a gate: its worst value over the gate's subjects."""

    metric: str
    value: float
    threshold: float
    better: str              # HIGHER or LOWER
    kind: str                # error, similarity, count, time, or other
    subjects: int

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "threshold": self.threshold, "better": self.better,
                "kind": self.kind, "subjects": self.subjects}


@dataclass(frozen=True)
class Gate:
    """A phase's last gate of one run."""

    phase: int
    gate: str
    passed: bool
    attempts: int
    values: tuple[Value, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"gate": self.gate, "passed": self.passed, "attempts": self.attempts,
                "values": {v.metric: v.to_dict() for v in self.values}}


@dataclass(frozen=True)
class Time:
    """The last profile of a scope: its total seconds and where they come from."""

    scope: str
    total_s: float
    source: str              # modeled, measured-npu or measured-cpu (events/payloads.py)
    runs: tuple[float, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {"total_s": self.total_s, "source": self.source, "runs": list(self.runs)}


@dataclass(frozen=True)
class Side:
    """A cell's run in one matrix, as the comparison reads it."""

    run_id: str
    standing: str            # the verdict, else how the cell stands (running, error, ...)
    verdict: str | None
    gates: dict[int, Gate]
    times: dict[str, Time]

    def to_dict(self) -> dict[str, Any]:
        return {"run_id": self.run_id, "standing": self.standing, "verdict": self.verdict,
                "gates": {str(k): g.to_dict() for k, g in sorted(self.gates.items())},
                "times": {k: t.to_dict() for k, t in self.times.items()}}


@dataclass(frozen=True)
class Row:
    """One line of the table: what is compared, each side's words, and the regression
    found there (empty when none)."""

    what: str
    a: str
    b: str
    regression: str = ""


@dataclass(frozen=True)
class CellComparison:
    cell: Cell
    a: Side | None
    b: Side | None
    rows: tuple[Row, ...]

    @property
    def only_in(self) -> str | None:
        return "A" if self.b is None else "B" if self.a is None else None

    @property
    def regressions(self) -> list[str]:
        return [r.regression for r in self.rows if r.regression]

    def to_dict(self) -> dict[str, Any]:
        return {"cell": _cell_dict(self.cell), "only_in": self.only_in,
                "a": self.a.to_dict() if self.a else None,
                "b": self.b.to_dict() if self.b else None,
                "rows": [r.__dict__ for r in self.rows], "regressions": self.regressions}


@dataclass(frozen=True)
class Comparison:
    a: str
    b: str
    cells: tuple[CellComparison, ...]
    tolerances: dict[str, Any] = field(default_factory=lambda: TOLERANCES)

    @property
    def regressions(self) -> int:
        """How many rows are marked (a row may name more than one thing worse)."""
        return sum(len(c.regressions) for c in self.cells)

    @property
    def headline(self) -> str:
        """What the table finds, in one line."""
        marked = sum(1 for c in self.cells if c.regressions)
        return (f"{self.b} (B) against {self.a} (A): {self.regressions} row(s) marked {MARK} "
                f"in {marked} of {len(self.cells)} cell(s)")

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a, "b": self.b, "regressions": self.regressions,
                "tolerances": self.tolerances, "cells": [c.to_dict() for c in self.cells]}


def _cell_dict(cell: Cell) -> dict[str, Any]:
    return {"model": cell.model, "seq_len": cell.seq_len, "backend": cell.backend,
            "agent": cell.agent}


# --- reading a side ----------------------------------------------------------------------

def compare(store: EventStore, a: str, b: str) -> Comparison:
    """Matrices `a` and `b` of `store`, cell by cell (UnknownMatrix for a name the book
    does not hold)."""
    side_a, side_b = _cells(store, a), _cells(store, b)
    cells = list(side_a) + [c for c in side_b if c not in side_a]
    return Comparison(a, b, tuple(_compare_cell(c, side_a.get(c), side_b.get(c))
                                  for c in cells))


def _cells(store: EventStore, name: str) -> dict[Cell, Side]:
    """Each cell of matrix `name` with its run read from the store, in the book's order."""
    known = [m for m, _ in matrices(store.conn)]
    if name not in known:
        held = ", ".join(known) if known else "none (run `npu-deploy matrix` first)"
        raise UnknownMatrix(f"no matrix {name!r} in {store.path}; it holds: {held}")
    return {_cell(r): _side(store, r) for r in matrix_runs(store.conn, name)}


def _cell(row: MatrixRun) -> Cell:
    c = row.cell
    return Cell(str(c["model"]), int(c["seq_len"]), str(c["backend"]), str(c["agent"]))


def _side(store: EventStore, row: MatrixRun) -> Side:
    """The cell's run: its verdict, gates and times (a cell whose run has no event yet,
    queued or refused before it began, stands as the book says)."""
    state = store.fold(row.run_id)
    if state.version == 0:
        standing = row.state + (f" ({row.detail})" if row.detail else "")
        return Side(row.run_id, standing, None, {}, {})
    standing = state.verdict or store.live_status(row.run_id, state.status)
    if row.state == "error" and not state.verdict:
        standing = "error" + (f" ({row.detail})" if row.detail else "")
    return Side(row.run_id, standing, state.verdict, _gates(state), _times(store, row.run_id))


def _gates(state: DeploymentState) -> dict[int, Gate]:
    return {ph.phase: Gate(ph.phase, ph.last_gate.gate, ph.last_gate.passed, ph.attempts,
                           _values(ph.last_gate))
            for ph in state.phases if ph.last_gate is not None}


def _values(gate: GateSummary) -> tuple[Value, ...]:
    """Each gating metric's worst value over the gate's subjects, in the gate's order."""
    worst: dict[str, Value] = {}
    for c in gate.checks:
        if not c.get("gating", True):
            continue
        metric, value = c["metric"], float(c["value"])
        better, kind = judged_as(metric, c["comparison"], value, c["threshold"])
        seen = worst.get(metric)
        if seen is None or (value < seen.value if better == HIGHER else value > seen.value):
            worst[metric] = Value(metric, value, float(c["threshold"]), better, kind,
                                  seen.subjects + 1 if seen else 1)
        else:
            worst[metric] = replace(seen, subjects=seen.subjects + 1)
    return tuple(worst.values())


def judged_as(metric: str, comparison: str, value: float, threshold: float
              ) -> tuple[str, str]:
    """Which way `metric` is better, and its kind (METRICS; a time by its `_s` name, a
    token-set check by its name). A metric of no known kind goes the way its check's
    comparison passes: a count when its figures are whole numbers, else `other`, shown but
    never judged by its value (no tolerance is known for it)."""
    if metric in METRICS:
        return METRICS[metric]
    if metric.endswith("_token_set"):
        return HIGHER, "count"
    if metric.endswith("_s"):
        return LOWER, "time"
    better = HIGHER if comparison in (">=", ">") else LOWER
    whole = float(value).is_integer() and float(threshold).is_integer()
    return better, "count" if whole and comparison != "==" else "other"


def _times(store: EventStore, run_id: str) -> dict[str, Time]:
    """The last profile of each of prefill and decode: the deployed plan's."""
    times: dict[str, Time] = {}
    for e in store.events(run_id, types=("profile.recorded",)):
        p = e.payload
        if p["scope"] in SCOPES:
            times[p["scope"]] = Time(p["scope"], float(p["total_s"]), p["source"],
                                     tuple(p.get("runs") or ()))
    return {s: times[s] for s in SCOPES if s in times}


# --- judging a cell ----------------------------------------------------------------------

def _compare_cell(cell: Cell, a: Side | None, b: Side | None) -> CellComparison:
    if a is None or b is None:
        side = a or b
        assert side is not None
        rows = [Row("verdict", side.standing if a else "not in A",
                    side.standing if b else "not in B")]
        return CellComparison(cell, a, b, tuple(rows))
    rows = [_verdict_row(a, b)]
    rows += [_gate_row(k, a.gates.get(k), b.gates.get(k))
             for k in sorted(set(a.gates) | set(b.gates))]
    rows += [_time_row(s, a.times.get(s), b.times.get(s))
             for s in SCOPES if s in a.times or s in b.times]
    return CellComparison(cell, a, b, tuple(rows))


def _verdict_row(a: Side, b: Side) -> Row:
    lost = a.verdict == "PASS" and b.verdict != "PASS"
    return Row("verdict", a.standing, b.standing,
               f"verdict PASS -> {b.standing}" if lost else "")


def _gate_row(k: int, a: Gate | None, b: Gate | None) -> Row:
    what = f"phase {k} {PHASE_NAMES[k]}"
    found: list[str] = []
    if a is not None and b is not None:
        if a.passed and not b.passed:
            found.append(f"gate {b.gate} passed -> failed")
        theirs = {v.metric: v for v in a.values}
        found += [w for v in b.values if v.metric in theirs
                  and (w := worse_value(theirs[v.metric], v))]
    return Row(what, gate_words(a), gate_words(b), "; ".join(found))


def gate_words(g: Gate | None) -> str:
    """A gate in a cell of the table: its verdict, attempts past the first, its values."""
    if g is None:
        return "-"
    head = ("pass" if g.passed else "FAIL") + (f" ({g.attempts} attempts)"
                                              if g.attempts > 1 else "")
    values = ", ".join(f"{v.metric} {v.value:.6g}" for v in g.values)
    return f"{head}: {values}" if values else head


def worse_value(a: Value, b: Value) -> str:
    """Why B's value of a metric is worse than A's beyond its tolerance, or ""."""
    if a.kind != b.kind or a.kind == "other":
        return ""
    change = b.value - a.value if b.better == LOWER else a.value - b.value
    if a.kind == "time":
        measured = "measured" in a.metric
        allowed = a.value * (MEASURED_TOLERANCE if measured else MODELED_TOLERANCE)
    elif a.kind == "error":
        allowed = ROOM_SHARE * abs(a.threshold)
    elif a.kind == "similarity":
        allowed = ROOM_SHARE * max(0.0, 1.0 - a.threshold)
    else:
        allowed = 0.0
    if change <= allowed:
        return ""
    return (f"{b.metric} {a.value:.6g} -> {b.value:.6g} ({b.better} is better; "
            f"tolerance {allowed:.3g})")


def _time_row(scope: str, a: Time | None, b: Time | None) -> Row:
    return Row(f"{scope} time", time_words(a), time_words(b),
               slower(a, b) if a is not None and b is not None else "")


def time_words(t: Time | None) -> str:
    if t is None:
        return "-"
    where = {"modeled": "modeled", "measured-npu": "measured on the NPU",
             "measured-cpu": "measured on the CPU"}.get(t.source, t.source)
    return f"{t.total_s * 1e3:.4g} ms ({where})"


def slower(a: Time, b: Time) -> str:
    """Why B's time is slower than A's beyond its source's tolerance, or "". Times of two
    sources (modeled against measured) are not compared: neither stands for the other."""
    if a.source != b.source:
        return ""
    measured = a.source != "modeled"
    share = MEASURED_TOLERANCE if measured else MODELED_TOLERANCE
    if b.total_s <= a.total_s * (1 + share):
        return ""
    if measured and a.runs and b.runs and min(b.runs) <= max(a.runs):
        return ""       # within the runs' spread: noise, by the rule above
    kind = "measured" if measured else "modeled"
    return (f"{a.scope} {a.total_s * 1e3:.4g} -> {b.total_s * 1e3:.4g} ms {kind} "
            f"(+{(b.total_s / a.total_s - 1) * 100:.3g}%; tolerance {share * 100:.2g}%)")


# --- Markdown, for CI --------------------------------------------------------------------

def to_markdown(c: Comparison) -> str:
    """The table as GitHub Markdown: a heading that counts the regressions, then a row per
    compared item, each regression in bold under its own column."""
    lines = [f"# Matrix {_md(c.b)} against {_md(c.a)}", "",
             f"{_md(c.headline)}. Each time says whether it is modeled or measured.", "",
             "| cell | what | A | B | regression |", "|---|---|---|---|---|"]
    for cell in c.cells:
        label = _md(cell.cell.label) + (f" (only in {cell.only_in})" if cell.only_in else "")
        for i, row in enumerate(cell.rows):
            mark = f"**{MARK}**: {_md(row.regression)}" if row.regression else ""
            lines.append(f"| {label if i == 0 else ''} | {_md(row.what)} | {_md(row.a)} | "
                         f"{_md(row.b)} | {mark} |")
    return "\n".join(lines) + "\n"


def _md(text: str) -> str:
    """Text in a Markdown table cell: its pipes escaped, its line breaks as spaces."""
    return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").split())
