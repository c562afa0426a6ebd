"""A run as the TUI reads it: event lines in pages, marks for the scrubber, the folded state
at any event (from keyframes), and what each panel shows at that event.

No Textual here: the screens call this from the UI thread (every call is one or two indexed
SQLite reads) and the warm-up worker calls `warm` from its own thread and connection.
"""

from __future__ import annotations

import bisect
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Final, NamedTuple

from npu_deploy.events import DeploymentState, Event
from npu_deploy.events import fold as fold_events
from npu_deploy.events.describe import describe, glyph_of, tone_of
from npu_deploy.events.state import GateSummary
from npu_deploy.store import EventStore, StoreError
from npu_deploy.store.rows import EVENT_COLUMNS, event_from_row

PAGE: Final = 256              # event lines read per query
PAGES_KEPT: Final = 64         # about 16k lines in memory, whatever the run's length
KEYFRAME: Final = 250          # a folded state kept every this many events: a seek folds
                               # 125 on average (the store snapshots every 1000)
KEPT_BLOBS: Final = 64         # JSON blobs (plans, recipes, reports) kept parsed
UI_QUIET_S: Final = 0.15       # the warm-up waits this long after the UI's last seek

#: What the scrubber and the jump keys need, found once per run with one indexed query.
MARKED_TYPES: Final = ("phase.entered", "phase.exited", "gate.evaluated", "checkpoint.requested",
                       "debug.proposed", "human.decision", "run.finished", "run.resumed",
                       "error", "profile.recorded")
#: Tool results the Plan and Performance panels read.
PLAN_TOOLS: Final = ("select_tiles", "choose_datapath", "apply_transform", "write_report")
#: The agent's side of the log: the Agent panel.
AGENT_TYPES: Final = ("agent.message", "model.called", "tool.requested", "tool.completed",
                      "tool.abandoned", "skill.loaded", "lesson.recorded", "error")

class EventLine(NamedTuple):
    """One line of the event stream."""

    version: int
    seq: int
    type: str
    phase: int | None
    attempt: int | None
    actor: str
    ts: str
    summary: str         # events/describe.py: the summary every surface shows
    tone: str            # how the line is coloured (events/describe.py TONES)

    @property
    def glyph(self) -> str:
        return glyph_of(self.type)


@dataclass(frozen=True, slots=True)
class Mark:
    """An event the scrubber shows and the jump keys stop at."""

    version: int
    kind: str            # phase gate_pass gate_fail checkpoint debug decision finished error
    phase: int | None
    label: str


#: A kept line is a plain tuple of strings and numbers, which the garbage collector stops
#: tracking after one pass (a NamedTuple it would track for ever): 16k kept lines would
#: otherwise lengthen every full collection, a stall in the frame after a seek
#: (benchmarks/tui_bench.py). `RunTimeline.line` names the fields.
Row = tuple[int, int, str, int | None, int | None, str, str, str, str]


def row_of(e: Event) -> Row:
    return (e.run_version, e.seq or 0, e.type, e.phase, e.attempt, e.actor, e.ts,
                     describe(e, 200), tone_of(e))


def mark_of(e: Event) -> Mark | None:
    p, k = e.payload, e.phase
    where = f"phase {k}" if k is not None else "run"
    if e.type == "phase.entered":
        return Mark(e.run_version, "phase", k, f"{where} attempt {e.attempt}")
    if e.type == "gate.evaluated":
        kind = "gate_pass" if p["passed"] else "gate_fail"
        return Mark(e.run_version, kind, k, f"{where} gate {'PASS' if p['passed'] else 'FAIL'}")
    if e.type == "checkpoint.requested":
        return Mark(e.run_version, "checkpoint", k, f"{where} checkpoint")
    if e.type == "debug.proposed":
        return Mark(e.run_version, "debug", k, f"{where} debug directions")
    if e.type == "human.decision":
        return Mark(e.run_version, "decision", k, f"{where} {p['decision']} by {p['author']}")
    if e.type == "run.finished":
        return Mark(e.run_version, "finished", k, f"run {p['verdict']}")
    if e.type == "error":
        return Mark(e.run_version, "error", k, f"{where} error {p['kind']}")
    return None


@dataclass(frozen=True, slots=True)
class PhaseBand:
    phase: int
    first: int           # the version of its first phase.entered
    last: int            # the version before the next phase began (or the head)


class RunTimeline:
    """One run of one store, read in pages. Not thread-safe except `warm` (own store)."""

    def __init__(self, store: EventStore, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        self.head = 0
        self._pages: OrderedDict[int, list[Row]] = OrderedDict()
        self._blobs: OrderedDict[str, Any] = OrderedDict()
        self._keys: dict[int, DeploymentState] = {}
        self._key_versions: list[int] = []
        self._keys_lock = threading.Lock()
        self._seeking_until = 0.0
        self.marks: list[Mark] = []
        self._mark_versions: list[int] = []
        self.profiles: list[int] = []            # versions of profile.recorded
        self.plan_results: list[int] = []        # versions of tool.completed of PLAN_TOOLS
        self._indexed_upto = 0
        self.refresh()

    # --- the head and the index ---------------------------------------------------------

    def refresh(self) -> int:
        """Read the run's head and index what is new; returns the head."""
        row = self.store.conn.execute("SELECT head_version FROM runs WHERE run_id = ?",
                                      (self.run_id,)).fetchone()
        head = int(row[0]) if row else 0
        if head != self.head:
            self._pages.pop(self.head // PAGE, None)     # the last page grew
            self.head = head
        if head > self._indexed_upto:
            self._index(self._indexed_upto, head)
        return head

    def _index(self, after: int, upto: int) -> None:
        types = MARKED_TYPES + ("tool.completed",)
        marks = ", ".join("?" * len(types))
        tools = ", ".join("?" * len(PLAN_TOOLS))
        rows = self.store.conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND run_version > ? "
            f"AND run_version <= ? AND type IN ({marks}) AND (type != 'tool.completed' OR "
            f"json_extract(payload, '$.tool') IN ({tools})) ORDER BY run_version",
            (self.run_id, after, upto, *types, *PLAN_TOOLS)).fetchall()
        self.add((event_from_row(r) for r in rows), upto)

    def add(self, events: Iterable[Event], upto: int | None = None) -> None:
        """Index events already read (the live poll hands them over)."""
        for e in events:
            if e.run_version <= self._indexed_upto:
                continue
            m = mark_of(e)
            if m is not None:
                self.marks.append(m)
                self._mark_versions.append(m.version)
            if e.type == "profile.recorded":
                self.profiles.append(e.run_version)
            elif e.type == "tool.completed" and e.payload.get("tool") in PLAN_TOOLS:
                self.plan_results.append(e.run_version)
            self._indexed_upto = e.run_version
        if upto is not None:
            self._indexed_upto = max(self._indexed_upto, upto)

    def extend(self, events: Sequence[Event]) -> None:
        """The live poll read these events (oldest first): index them, move the head, and
        append their lines to the page they fall in, so nothing is read twice."""
        self.add(events)
        for e in events:
            if e.run_version != self.head + 1:
                continue
            index = (e.run_version - 1) // PAGE
            page = self._pages.get(index)
            if page is not None and len(page) == e.run_version - 1 - index * PAGE:
                page.append(row_of(e))
            elif index * PAGE + 1 == e.run_version:
                self._pages[index] = [row_of(e)]
            self.head = e.run_version
        if events and events[-1].run_version > self.head:     # a gap: those pages are read
            self.head = events[-1].run_version

    # --- lines -----------------------------------------------------------------------------

    def line(self, version: int) -> EventLine | None:
        """The line of event `version` (1-based), read with its page."""
        if not 1 <= version <= self.head:
            return None
        index = (version - 1) // PAGE
        page = self._pages.get(index)
        if page is None or len(page) < min(PAGE, self.head - index * PAGE):
            page = self._read_page(index)
        else:
            self._pages.move_to_end(index)
        offset = version - 1 - index * PAGE
        return EventLine._make(page[offset]) if offset < len(page) else None

    def _read_page(self, index: int) -> list[Row]:
        first = index * PAGE
        page = [row_of(e) for e in self.store.events(self.run_id, after_version=first,
                                                      upto_version=first + PAGE)]
        self._pages[index] = page
        while len(self._pages) > PAGES_KEPT:
            self._pages.popitem(last=False)
        return page

    def event(self, version: int) -> Event | None:
        return self.store.event_at(self.run_id, version)

    # --- the folded state, from keyframes --------------------------------------------------

    def state_at(self, version: int) -> DeploymentState:
        """The run's state after event `version`: the nearest keyframe (ours or the store's
        snapshot) folded forward, keeping a keyframe every KEYFRAME events on the way."""
        version = max(0, min(version, self.head))
        state = self._nearest(version)
        return self._fold_to(self.store, state, version)

    def _nearest(self, version: int) -> DeploymentState:
        with self._keys_lock:
            i = bisect.bisect_right(self._key_versions, version)
            ours = self._keys[self._key_versions[i - 1]] if i else None
        if ours is not None and version - ours.version < KEYFRAME:
            return ours                    # no snapshot can be closer than one keyframe
        snap = self.store.load_snapshot(self.run_id, version)
        best = max((s for s in (ours, snap) if s is not None), key=lambda s: s.version,
                   default=None)
        return best or DeploymentState()

    def _fold_to(self, store: EventStore, state: DeploymentState, version: int
                 ) -> DeploymentState:
        while state.version < version:
            stop = min(version, (state.version // KEYFRAME + 1) * KEYFRAME)
            before = state.version
            state = fold_events(store.events(self.run_id, after_version=before,
                                             upto_version=stop), state)
            if state.version == before:          # nothing there (a cut log): stop
                break
            if state.version % KEYFRAME == 0:
                self._keep(state)
        return state

    def _keep(self, state: DeploymentState) -> None:
        with self._keys_lock:
            if state.version not in self._keys:
                self._keys[state.version] = state
                bisect.insort(self._key_versions, state.version)

    def seeking(self) -> None:
        """The UI is seeking: the warm-up steps aside for UI_QUIET_S. Each of its steps holds
        the GIL for up to the interpreter's switch interval whenever the UI thread waits on
        SQLite, which had put the frame after a seek over 50 ms while keyframes warmed."""
        self._seeking_until = time.monotonic() + UI_QUIET_S

    def warm(self, store: EventStore, cancelled: Callable[[], bool] = lambda: False) -> None:
        """Keyframes across the whole run (a worker thread, its own store): from each of the
        store's snapshots, fold the stretch up to the next one, looking at the UI between
        keyframes."""
        target = self.head
        state = store.load_snapshot(self.run_id, KEYFRAME) or DeploymentState()
        while state.version < target and not cancelled():
            stop = min(target, (state.version // KEYFRAME + 1) * KEYFRAME)
            snap = store.load_snapshot(self.run_id, stop)
            if snap is not None and snap.version > state.version:
                state = snap
            while time.monotonic() < self._seeking_until and not cancelled():
                time.sleep(UI_QUIET_S / 3)
            state = self._fold_to(store, state, stop)
            if state.version < stop:
                break

    # --- marks and bands ---------------------------------------------------------------------

    def next_mark(self, version: int, kinds: Sequence[str], forward: bool = True) -> Mark | None:
        if forward:
            i = bisect.bisect_right(self._mark_versions, version)
            candidates = self.marks[i:]
        else:
            i = bisect.bisect_left(self._mark_versions, version)
            candidates = list(reversed(self.marks[:i]))
        return next((m for m in candidates if m.kind in kinds), None)

    def bands(self) -> list[PhaseBand]:
        entered = [m for m in self.marks if m.kind == "phase" and m.phase is not None]
        out: list[PhaseBand] = []
        for i, m in enumerate(entered):
            last = entered[i + 1].version - 1 if i + 1 < len(entered) else self.head
            assert m.phase is not None
            if out and out[-1].phase == m.phase:          # a retry: the same band goes on
                out[-1] = replace(out[-1], last=last)
            else:
                out.append(PhaseBand(m.phase, m.version, last))
        return out

    # --- what the panels show at an event ------------------------------------------------------

    def latest(self, versions: list[int], upto: int, count: int = 1) -> list[Event]:
        i = bisect.bisect_right(versions, upto)
        found = [self.event(v) for v in versions[max(0, i - count):i]]
        return [e for e in found if e is not None]

    def profiles_at(self, version: int) -> dict[str, Event]:
        """The newest profile of each scope at or before `version`."""
        out: dict[str, Event] = {}
        for e in reversed(self.latest(self.profiles, version, count=16)):
            out.setdefault(e.payload["scope"], e)
        return out

    def plan_results_at(self, version: int, count: int = 20) -> list[Event]:
        return self.latest(self.plan_results, version, count=count)

    def transcript_at(self, version: int, count: int = 40) -> list[Event]:
        """The agent's newest `count` events at or before `version`, oldest first."""
        rows = self.store.conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND run_version <= ? AND "
            f"type IN ({', '.join('?' * len(AGENT_TYPES))}) ORDER BY run_version DESC LIMIT ?",
            (self.run_id, version, *AGENT_TYPES, count)).fetchall()
        return [event_from_row(r) for r in reversed(rows)]

    def blob_json(self, ref: str | None) -> Any:
        """A JSON blob, read once: blobs are content-addressed, so a kept one never goes
        stale. Callers only read what it returns."""
        if not ref:
            return None
        if ref in self._blobs:
            self._blobs.move_to_end(ref)
            return self._blobs[ref]
        try:
            value = json.loads(self.store.get_blob(ref))
        except (StoreError, ValueError):     # a missing or damaged blob: the panel goes without
            value = None
        self._blobs[ref] = value
        if len(self._blobs) > KEPT_BLOBS:
            self._blobs.popitem(last=False)
        return value


# --- gate rows ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class GateRow:
    subject: str
    metric: str
    value: float
    comparison: str
    threshold: float
    passed: bool
    gating: bool
    history: tuple[float | None, ...]     # the value at each attempt of the phase, oldest first
    message: str


def gate_rows(gates: Sequence[GateSummary]) -> list[GateRow]:
    """The newest gate's checks, failures first, each with its values across attempts."""
    if not gates:
        return []
    by_attempt = [{(c["subject"], c["metric"]): c["value"] for c in g.checks} for g in gates]
    rows = []
    for c in gates[-1].checks:
        key = (c["subject"], c["metric"])
        rows.append(GateRow(c["subject"], c["metric"], float(c["value"]), c["comparison"],
                            float(c["threshold"]), bool(c["passed"]), bool(c.get("gating", True)),
                            tuple(a.get(key) for a in by_attempt), c.get("message", "")))
    rows.sort(key=lambda r: (r.passed, not r.gating))
    return rows


def unfinished_step(store: EventStore, run_id: str) -> str | None:
    """The newest tool step that was requested and never completed (a crash mid-step)."""
    step = _open_step(store, run_id)
    if step is None:
        return None
    tool, phase, attempt, call_id = step
    return f"{tool} (phase {phase}, attempt {attempt}, call {call_id})"


def step_in_flight(store: EventStore, run_id: str) -> tuple[str, int | None, str] | None:
    """The run's newest step requested and not (yet) completed: its tool, phase and call
    id. A live run's step in progress, or a crashed run's."""
    step = _open_step(store, run_id)
    return None if step is None else (step[0], step[1], step[3])


def _open_step(store: EventStore, run_id: str
               ) -> tuple[str, int | None, int | None, str] | None:
    """The newest tool.requested without its tool.completed or tool.abandoned: tool, phase,
    attempt, call id."""
    done: set[str] = set()
    rows = store.conn.execute(
        "SELECT type, json_extract(payload, '$.call_id'), json_extract(payload, '$.tool'), "
        "phase, attempt FROM events WHERE run_id = ? AND type IN ('tool.requested', "
        "'tool.completed', 'tool.abandoned') ORDER BY run_version DESC LIMIT 200",
        (run_id,)).fetchall()
    for type_, call_id, tool, phase, attempt in rows:
        if type_ != "tool.requested":
            done.add(call_id)
        elif call_id not in done:
            return tool, phase, attempt, call_id
    return None


def step_estimates(store: EventStore, run_id: str) -> dict[tuple[str, int | None], float]:
    """How long each (tool, phase) took in earlier runs of the same model as `run_id`: the
    median of their completed steps' durations. Empty for a model run once."""
    rows = store.conn.execute(
        "SELECT json_extract(payload, '$.tool'), phase, json_extract(payload, '$.duration_s') "
        "FROM events WHERE type = 'tool.completed' AND run_id != ? AND run_id IN ("
        " SELECT run_id FROM events WHERE type = 'run.started' AND json_extract(payload, "
        " '$.model') = (SELECT json_extract(payload, '$.model') FROM events WHERE run_id = ? "
        " AND type = 'run.started' LIMIT 1))", (run_id, run_id)).fetchall()
    took: dict[tuple[str, int | None], list[float]] = {}
    for tool, phase, duration in rows:
        if isinstance(duration, (int, float)):
            took.setdefault((tool, phase), []).append(float(duration))
    return {k: sorted(v)[len(v) // 2] for k, v in took.items()}
