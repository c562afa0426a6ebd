"""Which events the event stream shows, and in what order: a filter by kind, a tool step's
request and result folded into one line, and search over the run's events.

No Textual here. Every question is one SQL query over the store's events table, so a run of
100k events is never held in memory: a view keeps the versions it shows (an `array` of
integers) and, for each tool step, where its result is. Building a view of a long run takes
a few hundred milliseconds (benchmarks/tui_bench.py), so the stream builds it in a worker
thread with its own store; the live stream grows it a few events at a time.
"""

from __future__ import annotations

import bisect
import json
import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from npu_deploy.store import EventStore

#: The kinds the stream can be narrowed to, each an SQL condition over a row of `events`.
#: Agent: whatever the agent did (its messages, model calls, tool steps, skills, lessons).
#: Gate: the gate's evaluation and the harness's gate step. Human: a person's turn (what
#: waits for one, and what one decided). Error: what the stream colours as a failure, less
#: a failed gate (that is the gate kind): errors, abandoned steps, failed tool results.
KINDS: Final[dict[str, str]] = {
    "all": "1",
    "agent": "actor = 'agent'",
    "gate": "type = 'gate.evaluated' OR (type IN ('tool.requested', 'tool.completed') "
            "AND json_extract(payload, '$.tool') = 'gate')",
    "human": "actor = 'human' OR type IN ('checkpoint.requested', 'debug.proposed', "
             "'human.decision', 'lesson.approved')",
    "profile": "type = 'profile.recorded'",
    "error": "type IN ('error', 'tool.abandoned') OR (type = 'tool.completed' "
             "AND json_extract(payload, '$.ok') = 0)",
}
#: A tool step is requested, then completed (or abandoned, when a crash cut it short).
STEP_TYPES: Final = ("tool.requested", "tool.completed", "tool.abandoned")
#: A view read `around` a version pairs this many events past it, where its steps end.
LOOKAHEAD: Final = 500
_PHASE_TOKEN = re.compile(r"^phase:(\d+)$", re.IGNORECASE)


@dataclass(frozen=True, slots=True)
class StepResult:
    """How a tool step ended: the version of its tool.completed (or tool.abandoned)."""

    version: int
    type: str
    ok: bool
    duration_s: float | None


class StreamView:
    """The versions the stream shows, oldest first, for one kind of event. A tool step is
    one row, its request's, until it is expanded; its result is in `results`."""

    def __init__(self, kind: str = "all", *, paired: bool = True) -> None:
        if kind not in KINDS:
            raise ValueError(f"no event kind {kind!r}: one of {', '.join(KINDS)}")
        self.kind, self.paired = kind, paired
        self.rows = array("q")
        self.upto = 0                             # events up to this version are placed
        self.results: dict[int, StepResult] = {}  # request version -> how it ended
        self.request_of: dict[int, int] = {}      # result version -> request version
        self.expanded: set[int] = set()           # request versions shown as two rows
        self._open: dict[str, int] = {}           # call id -> request awaiting its result
        self.partial = False                      # only the last events paired (`tail`)

    @classmethod
    def unpaired(cls, head: int) -> StreamView:
        """Every event on its own row: what the stream shows until a view is built."""
        view = cls(paired=False)
        view.rows.extend(range(1, head + 1))
        view.upto = head
        return view

    @classmethod
    def around(cls, store: EventStore, run_id: str, head: int, version: int,
               events: int) -> StreamView:
        """The view of every event with only the `events` events either side of `version`
        paired (and a few more after, where their steps end): what a run opened at `version`
        shows until the whole view is built (`build`), read in a few milliseconds whatever
        the run's length. Its rows there are the whole view's, and so is their number, if each
        step's result follows its request (which the writer ensures); the rows before and
        after stand in for the other events, unread."""
        start = max(0, version - events)
        stop = min(head, version + events + LOOKAHEAD)
        view = cls()
        view.partial = True
        results = f"type IN ({', '.join('?' * (len(STEP_TYPES) - 1))})"  # a step's end

        def ended(after: int, upto: int) -> int:
            return int(store.conn.execute(
                f"SELECT count(*) FROM events WHERE run_id = ? AND run_version > ? AND "
                f"run_version <= ? AND {results}", (run_id, after, upto, *STEP_TYPES[1:])
            ).fetchone()[0])

        before, after = ended(0, start), ended(stop, head)
        view.rows.extend(range(1, start - before + 1))
        view._pair(store, run_id, start, stop)
        folded = {v for (v,) in store.conn.execute(
            f"SELECT run_version FROM events WHERE run_id = ? AND run_version > ? AND "
            f"run_version <= ? AND {results}", (run_id, start, stop, *STEP_TYPES[1:]))}
        view.rows.extend(v for v in range(start + 1, stop + 1) if v not in folded)
        view.rows.extend(range(head - (head - stop - after) + 1, head + 1))
        view.upto = head
        return view

    @classmethod
    def build(cls, store: EventStore, run_id: str, kind: str, head: int) -> StreamView:
        view = cls(kind)
        view.grow(store, run_id, head)
        return view

    # --- growing -----------------------------------------------------------------------------

    def grow(self, store: EventStore, run_id: str, head: int) -> set[int]:
        """Place the events after `upto` up to `head`. Returns the versions of rows whose
        line changed (a running step whose result came)."""
        after, self.upto = self.upto, max(self.upto, head)
        if head <= after:
            return set()
        if not self.paired:
            self.rows.extend(range(after + 1, head + 1))
            return set()
        changed = self._pair(store, run_id, after, head)
        if self.kind == "all":
            versions: Iterable[int] = range(after + 1, head + 1)
        else:
            versions = [v for (v,) in store.conn.execute(
                f"SELECT run_version FROM events WHERE run_id = ? AND run_version > ? AND "
                f"run_version <= ? AND ({KINDS[self.kind]}) ORDER BY run_version",
                (run_id, after, head))]
        for v in versions:
            self._place(self.request_of.get(v, v))
        return changed

    def _pair(self, store: EventStore, run_id: str, after: int, head: int) -> set[int]:
        changed = set()
        for v, type_, call_id, ok, duration in store.conn.execute(
                "SELECT run_version, type, json_extract(payload, '$.call_id'), "
                "json_extract(payload, '$.ok'), json_extract(payload, '$.duration_s') "
                "FROM events WHERE run_id = ? AND run_version > ? AND run_version <= ? AND "
                f"type IN ({', '.join('?' * len(STEP_TYPES))}) ORDER BY run_version",
                (run_id, after, head, *STEP_TYPES)):
            if type_ == "tool.requested":
                self._open[call_id] = v
                continue
            request = self._open.pop(call_id, None)
            if request is None:               # a result without its request: its own row
                continue
            self.results[request] = StepResult(v, type_, bool(ok), duration)
            self.request_of[v] = request
            changed.add(request)
        return changed

    def _place(self, version: int) -> None:
        rows = self.rows
        if not rows or version > rows[-1]:
            rows.append(version)
            return
        i = bisect.bisect_left(rows, version)
        if rows[i] != version:
            rows.insert(i, version)

    # --- rows --------------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.rows)

    def row_of(self, version: int) -> int:
        """The row showing event `version`, or the last row before it (0 when none)."""
        return max(0, bisect.bisect_right(self.rows, version) - 1)

    def shows(self, version: int) -> bool:
        i = bisect.bisect_left(self.rows, version)
        return i < len(self.rows) and self.rows[i] == version

    def shown_as(self, version: int) -> int | None:
        """The row version an event is shown on: its own, or its step's request when the
        step is folded; None when the filter leaves it out."""
        if self.shows(version):
            return version
        request = self.request_of.get(version)
        if request is not None and request not in self.expanded and self.shows(request):
            return request
        return None

    def toggle(self, request: int) -> bool:
        """Show a step as two rows, or fold it back into one; False if it is not a step
        with a result."""
        result = self.results.get(request)
        if result is None or not self.shows(request):
            return False
        if request in self.expanded:
            self.expanded.discard(request)
            i = bisect.bisect_left(self.rows, result.version)
            if i < len(self.rows) and self.rows[i] == result.version:
                del self.rows[i]
        else:
            self.expanded.add(request)
            self._place(result.version)
        return True


# --- search -------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SearchQuery:
    """What was typed: `phase:N` words narrow to a phase, the rest is one plain,
    case-insensitive substring of an event's type or payload (never a pattern)."""

    text: str
    phases: tuple[int, ...] = ()

    @classmethod
    def parse(cls, typed: str) -> SearchQuery:
        words, phases = [], []
        for word in typed.split():
            m = _PHASE_TOKEN.match(word)
            if m:
                phases.append(int(m.group(1)))
            else:
                words.append(word)
        return cls(" ".join(words).lower(), tuple(phases))

    @property
    def empty(self) -> bool:
        return not self.text and not self.phases


def find(store: EventStore, run_id: str, query: SearchQuery, after: int, upto: int) -> list[int]:
    """Versions of the run's events in (after, upto] that match `query`, oldest first."""
    if query.empty:
        return []
    where, args = "", [run_id, after, upto]
    if query.phases:
        where += f" AND phase IN ({', '.join('?' * len(query.phases))})"
        args.extend(query.phases)
    if query.text:
        # Payloads are stored as ASCII JSON: a quote or an accent in the text is escaped
        # there, so the escaped form of the text is looked for too.
        escaped = json.dumps(query.text)[1:-1]
        where += " AND (instr(lower(type), ?) OR instr(lower(payload), ?)" + (
            " OR instr(lower(payload), ?))" if escaped != query.text else ")")
        args.extend([query.text, query.text] + ([escaped] if escaped != query.text else []))
    return [v for (v,) in store.conn.execute(
        f"SELECT run_version FROM events WHERE run_id = ? AND run_version > ? AND "
        f"run_version <= ?{where} ORDER BY run_version", args)]
