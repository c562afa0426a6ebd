"""Reading a store: its runs (listed, resolved from a prefix, their writer locks probed),
a run's events in order, the tail a watcher polls, and the fold into a `DeploymentState`
(from the newest usable snapshot, snapshots.py)."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from dataclasses import dataclass

from npu_deploy.events import DeploymentState, Event
from npu_deploy.events import fold as fold_events
from npu_deploy.events.envelope import RUN_ID_RE

from .errors import UnknownRun
from .rows import EVENT_COLUMNS, event_from_row
from .snapshots import Snapshots
from .storefile import StoreFile


@dataclass(frozen=True)
class RunSummary:
    run_id: str
    created_ts: str
    model: str
    backend: str
    agent: str
    events: int
    head_type: str
    head_ts: str
    status: str          # running (lock held), crashed, paused, needs_human, finished, aborted
    current_phase: int | None
    phase_reached: int | None
    verdict: str | None
    input_tokens: int
    output_tokens: int
    cost_usd: float
    parent_run_id: str | None

_RUNS = ("SELECT run_id, created_ts, model, backend, agent, head_version, head_type, head_ts, "
         "status, current_phase, phase_reached, verdict, input_tokens, output_tokens, "
         "cost_usd, parent_run_id FROM runs ORDER BY created_ts")


class Reader:
    """The runs of `file` and their events, as `EventStore` gives them."""

    def __init__(self, file: StoreFile, snapshots: Snapshots) -> None:
        self.file = file
        self.snapshots = snapshots
        self._tail_bound: dict[str, tuple[int, int]] = {}

    # --- runs ----------------------------------------------------------------

    def is_locked(self, run_id: str) -> bool:
        """True while some process holds this run's writer lock.

        The writer takes it with filelock, which on Linux is `flock(2)` on the lock file;
        this asks the kernel the same question without filelock's bookkeeping (a FileLock
        made and acquired per run cost 0.25 ms: 2.5 s of `runs` over 10,000 runs): a
        non-blocking exclusive flock on a descriptor of our own, released at once."""
        try:
            fd = os.open(self.file.lock_path(run_id), os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:              # no lock file: never written, or not ours to read
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return False
        finally:
            os.close(fd)             # closing the descriptor releases a lock we took
        return False

    def live_status(self, run_id: str, folded_status: str) -> str:
        """The folded status, corrected by the lock: a run whose state says running
        but whose writer lock is free has crashed (resume it)."""
        if self.is_locked(run_id):
            return "running"
        return "crashed" if folded_status in ("running", "new") else folded_status

    def resolve_run(self, ref: str) -> str:
        """A full run id from an id or a unique prefix of one: never from an empty prefix
        (which every run has) or from text no run id can start with (a space, a newline)."""
        if not RUN_ID_RE.match(ref):
            what = "is empty" if not ref else "is not a run id or the start of one"
            raise UnknownRun(f"run {ref!r} {what}: give a run's id or the first characters "
                             "of it (letters, digits, '.', '_', '-'); `npu-deploy runs` lists "
                             "them")
        rows = [r[0] for r in self.file.conn.execute(
            "SELECT run_id FROM runs WHERE run_id = ? OR run_id LIKE ? ESCAPE '\\' LIMIT 3",
            (ref, ref.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"))]
        if ref in rows:
            return ref
        if len(rows) == 1:
            return rows[0]
        if not rows:
            raise UnknownRun(f"no run {ref!r} in {self.file.path}; `npu-deploy runs` lists "
                             "them")
        raise UnknownRun(f"{ref!r} matches several runs ({', '.join(rows[:2])}, ...); "
                         "give more of the id")

    def run_ids(self) -> list[str]:
        return [r[0] for r in self.file.conn.execute(
            "SELECT run_id FROM runs ORDER BY created_ts")]

    def runs(self) -> list[RunSummary]:
        """Every run, oldest first: one query of the `runs` table (the writer keeps each
        run's listing columns there, in the transaction of each append) and a probe of each
        run's lock; no run's events are read."""
        out = []
        for r in self.file.conn.execute(_RUNS):
            out.append(RunSummary(
                run_id=r[0], created_ts=r[1], model=r[2] or "", backend=r[3] or "",
                agent=r[4] or "", events=r[5], head_type=r[6] or "", head_ts=r[7] or "",
                status=self.live_status(r[0], r[8]), current_phase=r[9], phase_reached=r[10],
                verdict=r[11], input_tokens=r[12] or 0, output_tokens=r[13] or 0,
                cost_usd=r[14] or 0.0, parent_run_id=r[15]))
        return out

    # --- events ----------------------------------------------------------------

    def events(self, run_id: str, *, after_version: int = 0,
               upto_version: int | None = None, phase: int | None = None,
               types: tuple[str, ...] = ()) -> Iterator[Event]:
        """A run's events in order, from the oldest (or after a version); only those of
        one phase, or of some types, when asked."""
        upto = upto_version if upto_version is not None else 2**62
        where, args = "", [run_id, after_version, upto]
        if phase is not None:
            where += " AND phase = ?"
            args.append(phase)
        if types:
            where += f" AND type IN ({', '.join('?' * len(types))})"
            args.extend(types)
        cur = self.file.conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? AND run_version > ? "
            f"AND run_version <= ?{where} ORDER BY run_version", args)
        while rows := cur.fetchmany(512):
            for row in rows:
                yield event_from_row(row)

    def event_at(self, run_id: str, version: int) -> Event | None:
        row = self.file.conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? "
                                     "AND run_version = ?", (run_id, version)).fetchone()
        return event_from_row(row) if row else None

    def tail(self, run_id: str, after_seq: int, limit: int = 10_000) -> list[Event]:
        """Events of a run with `seq > after_seq`, in order.

        Cheap to poll: while `PRAGMA data_version` says no other connection has
        committed since this run was last found to have nothing past the same
        point, no query runs at all.
        """
        conn = self.file.conn
        data_version = conn.execute("PRAGMA data_version").fetchone()[0]
        known = self._tail_bound.get(run_id)
        if known is not None and known[0] == data_version and after_seq >= known[1]:
            return []
        # `+run_id` keeps the planner off the run_id index: a rowid range scan from
        # the cursor reads only what is new, however long the run already is.
        rows = conn.execute(
            f"SELECT {EVENT_COLUMNS} FROM events WHERE seq > ? AND +run_id = ? "
            "ORDER BY seq LIMIT ?", (after_seq, run_id, limit)).fetchall()
        if not rows:
            self._tail_bound[run_id] = (data_version, after_seq)
        return [event_from_row(r) for r in rows]

    # --- folding ---------------------------------------------------------------

    def fold(self, run_id: str, upto_version: int | None = None, *,
             use_snapshots: bool = True) -> DeploymentState:
        """The run's state after `upto_version` (default: all events)."""
        state = DeploymentState()
        if use_snapshots:
            state = self.snapshots.load(run_id, upto_version) or state
        return fold_events(self.events(run_id, after_version=state.version,
                                       upto_version=upto_version), state)
