#!/usr/bin/env python3
"""Benchmark the npu-deploy event store against raw sqlite3 and `eventsourcing`.

One run, one disk: the three stores write their files side by side in a fresh
temporary directory (under /tmp, or under --dir), with the same event payloads,
and the timings of the three are interleaved (store A, B, C, then A, B, C...)
so that a slow patch of the disk does not land on one store only.

Measured, for each store:

* durable single appends: one durable transaction (fsync) per event;
* batched appends: one transaction per --batch-size events;
* replay: read a whole run back. Ours re-checks the SHA-256 hash chain and folds
  the run into a DeploymentState (`EventStore.verify`); eventsourcing rebuilds
  its aggregate (`repository.get`); raw sqlite3 only reads and json-decodes the
  rows (it has neither a chain to verify nor a state to fold);

and for our store the latency of an idle `tail()` poll by a read-only reader
(each poll timed on its own with perf_counter_ns, which adds ~0.1 us).

Every timing is repeated --repeats times; the reported figure is the MEDIAN of
the repeats (all samples are in the --json output). All figures are measured
on this machine's CPU and disk. A MISS against a target is a measurement, not
an error: the exit code is 0 unless something failed.

    .venv/bin/python -m benchmarks.store_bench [--single 2000] [--batch-events 20000]
        [--batch-size 100] [--repeats 3] [--polls 20000] [--dir DIR] [--keep] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Protocol

from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import InfrastructureFactory
from eventsourcing.utils import Environment

from benchmarks.host import cpu_name
from npu_deploy.events import NewEvent
from npu_deploy.events.keys import STEP, AttemptKey
from npu_deploy.store import EventStore

Workload = list[tuple[str, dict[str, Any]]]

STORES = ("ours", "raw", "es")
STORE_LABELS = {
    "ours": "ours (npu-deploy store)",
    "raw": "raw sqlite3",
    "es": "eventsourcing",
}
REPLAY_MEANING = {
    "ours": "verify: read + SHA-256 chain check + fold",
    "raw": "read + json.loads only (no verify, no fold)",
    "es": "repository.get: read + decode + fold (no verify)",
}

RUN_STARTED = {"model": "bench", "backend": "emulator", "agent": "autopilot",
               "code_version": "bench"}


# --- the workload ---------------------------------------------------------------------

_WORDS = ("the kernel tile buffer shape stride matmul layer norm attention softmax decode "
          "prefill cache token latency gate check passes fails retry compile lower dma "
          "vector scalar core column row memory bank accumulate quantize int8 bf16 error "
          "output input weight bias model block profile trace result expected measured").split()
_TOOLS = ("read_file", "write_file", "run_kernel", "compile_kernel", "run_tests", "bash")
#: Every event of the workload is one of phase 0's first attempt, as the store sees it.
_ATTEMPT = AttemptKey(0, 1)


def _text(rng: random.Random, length: int) -> str:
    words: list[str] = []
    size = 0
    while size < length:
        word = rng.choice(_WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)[:length]


def make_workload(n: int, seed: int) -> Workload:
    """`n` (type, payload) pairs, the same for every store: in each block of 20
    events, 14 agent.message (~200 chars of text, 70%), 3 tool.requested and
    3 tool.completed (each completing the request just before it)."""
    rng = random.Random(seed)
    out: Workload = []
    call: dict[str, str] = {}
    for i in range(n):
        slot = i % 20
        if slot in (4, 11, 17):
            call = {"call_id": str(_ATTEMPT.counted(STEP, i + 1)), "tool": rng.choice(_TOOLS)}
            out.append(("tool.requested", {
                **call,
                "arguments": {"path": f"kernels/mm_{rng.randrange(64)}.cc", "timeout_s": 60,
                              "flags": ["-O2", f"--tile={rng.choice((16, 32, 64))}"]},
            }))
        elif slot in (5, 12, 18):
            ok = rng.random() < 0.9
            out.append(("tool.completed", {
                **call, "ok": ok, "duration_s": round(rng.uniform(0.01, 30.0), 3),
                "result": {"exit_code": 0 if ok else 1, "stdout": _text(rng, 80),
                           "lines": rng.randrange(1, 500)},
            }))
        else:
            out.append(("agent.message", {"role": "assistant", "text": _text(rng, 200)}))
    return out


def batches(items: Workload, size: int) -> list[Workload]:
    return [items[i:i + size] for i in range(0, len(items), size)]


# --- results ---------------------------------------------------------------------------

@dataclass
class StoreResult:
    store: str
    label: str
    config: str                      # journal mode / synchronous, as queried
    single_eps: list[float] = field(default_factory=list)
    batch_eps: list[float] = field(default_factory=list)
    replay_eps: list[float] = field(default_factory=list)
    replay_events: int = 0
    replay_meaning: str = ""

    def median(self, name: str) -> float:
        samples: list[float] = getattr(self, name)
        return statistics.median(samples) if samples else float("nan")


@dataclass
class TailResult:
    polls: int
    median_us: list[float] = field(default_factory=list)   # one per repeat
    p99_us: list[float] = field(default_factory=list)


def _eps(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("inf")


def _pragmas(conn: sqlite3.Connection) -> str:
    mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    sync = conn.execute("PRAGMA synchronous").fetchone()[0]
    names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    return f"journal_mode={mode}, synchronous={names.get(sync, sync)}"


class StoreBench(Protocol):
    config: str     # journal mode and synchronous of its connection, as queried

    def appends(self, singles: Workload, batched: list[Workload]) -> tuple[float, float]:
        """Append to a new run: `singles` one durable transaction each, then `batched`
        one transaction per list. Returns (single seconds, batched seconds)."""
        ...

    def replay(self, expected: int) -> float:
        """Seconds to read back (and verify/fold, if the store can) the newest run."""
        ...

    def close(self) -> None: ...


# --- store 1: ours -------------------------------------------------------------------------

class OurStoreBench:
    """The project's store: `RunWriter.append` / `append_batch`, `EventStore.verify`."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.run_ids: list[str] = []
        store = EventStore.open(path)
        self.config = _pragmas(store.conn)
        store.close()
        # A long-lived read-only connection for replays, like the other two stores have.
        self.reader = EventStore.open(path, readonly=True)

    def appends(self, singles: Workload, batched: list[Workload]) -> tuple[float, float]:
        store = EventStore.open(self.path)
        writer = store.create_run(dict(RUN_STARTED))
        try:
            t0 = time.perf_counter()
            for type_, payload in singles:
                writer.append(NewEvent(type_, payload, actor="agent", phase=0, attempt=1))
            t1 = time.perf_counter()
            for chunk in batched:
                writer.append_batch([NewEvent(type_, payload, actor="agent", phase=0, attempt=1)
                                     for type_, payload in chunk])
            t2 = time.perf_counter()
            self.run_ids.append(writer.run_id)
        finally:
            writer.close()
            store.close()
        return t1 - t0, t2 - t1

    def replay(self, expected: int) -> float:
        t0 = time.perf_counter()
        report = self.reader.verify(self.run_ids[-1])
        seconds = time.perf_counter() - t0
        if not report.ok or report.events != expected or report.state is None:
            raise RuntimeError(f"our store: verify failed or short: {report.line()}")
        return seconds

    def tail_polls(self, polls: int) -> list[float]:
        """Microseconds per idle `tail()` poll, after catching up with the run."""
        run_id = self.run_ids[-1]
        with EventStore.open(self.path, readonly=True) as reader:
            last = 0
            while events := reader.tail(run_id, last):
                last = events[-1].seq or last
            samples = []
            clock = time.perf_counter_ns
            for _ in range(polls):
                t0 = clock()
                got = reader.tail(run_id, last)
                samples.append((clock() - t0) / 1000)
                if got:
                    raise RuntimeError("our store: an idle tail() poll returned events")
        return samples

    def close(self) -> None:
        self.reader.close()


# --- store 2: raw sqlite3 ------------------------------------------------------------------

class RawSqliteBench:
    """The floor: plain sqlite3, same pragmas, one table, INSERT + commit."""

    INSERT = ("INSERT INTO events (run_id, run_version, type, actor, ts, payload) "
              "VALUES (?, ?, ?, ?, ?, ?)")

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path)       # Python's default: implicit BEGIN before DML
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.conn.execute(
            "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, run_id TEXT NOT NULL, "
            "run_version INTEGER NOT NULL, type TEXT NOT NULL, actor TEXT NOT NULL, "
            "ts REAL NOT NULL, payload TEXT NOT NULL)")
        self.conn.execute("CREATE UNIQUE INDEX IF NOT EXISTS events_run_version "
                          "ON events (run_id, run_version)")
        self.conn.commit()
        self.config = _pragmas(self.conn)
        self.run_ids: list[str] = []

    def appends(self, singles: Workload, batched: list[Workload]) -> tuple[float, float]:
        run_id = f"raw-{len(self.run_ids) + 1}"
        conn, insert = self.conn, self.INSERT
        conn.execute(insert, (run_id, 1, "run.started", "harness", time.time(),
                              json.dumps(RUN_STARTED)))
        conn.commit()
        version = 1
        t0 = time.perf_counter()
        for type_, payload in singles:
            version += 1
            conn.execute(insert, (run_id, version, type_, "agent", time.time(),
                                  json.dumps(payload)))
            conn.commit()
        t1 = time.perf_counter()
        for chunk in batched:
            rows = []
            for type_, payload in chunk:
                version += 1
                rows.append((run_id, version, type_, "agent", time.time(), json.dumps(payload)))
            conn.executemany(insert, rows)
            conn.commit()
        t2 = time.perf_counter()
        self.run_ids.append(run_id)
        return t1 - t0, t2 - t1

    def replay(self, expected: int) -> float:
        t0 = time.perf_counter()
        cur = self.conn.execute("SELECT seq, run_version, type, actor, ts, payload FROM events "
                                "WHERE run_id = ? ORDER BY run_version", (self.run_ids[-1],))
        decoded = [(row[2], json.loads(row[5])) for row in cur]
        seconds = time.perf_counter() - t0
        if len(decoded) != expected:
            raise RuntimeError(f"raw sqlite3: read {len(decoded)} events, expected {expected}")
        return seconds

    def close(self) -> None:
        self.conn.close()


# --- store 3: eventsourcing ----------------------------------------------------------------

class AgentRun(Aggregate):
    """One run as an eventsourcing aggregate, folding about what our reducer folds
    for these event types: a count of tool calls, the last event type."""

    def __init__(self, model: str, backend: str, agent: str, code_version: str) -> None:
        self.model = model
        self.backend = backend
        self.agent = agent
        self.code_version = code_version
        self.tool_calls = 0
        self.last_type = "run.started"

    @event("Recorded")
    def record(self, kind: str, actor: str, phase: int, attempt: int,
               payload: dict[str, Any]) -> None:
        if kind == "tool.requested":
            self.tool_calls += 1
        self.last_type = kind


class BenchApplication(Application):
    """An eventsourcing application on its SQLite module. With SQLITE_SYNCHRONOUS in
    its environment (not a library setting: the library has none), every connection
    its pool opens gets `PRAGMA synchronous` set to it."""

    def construct_factory(self, env: Environment) -> InfrastructureFactory:
        factory = super().construct_factory(env)
        synchronous = env.get("SQLITE_SYNCHRONOUS")
        if synchronous:
            if synchronous not in ("OFF", "NORMAL", "FULL", "EXTRA"):
                raise ValueError(f"SQLITE_SYNCHRONOUS={synchronous!r}")
            pool = factory.datastore.pool          # type: ignore[attr-defined]
            create = pool._create_connection

            def create_connection() -> Any:
                connection = create()
                connection._sqlite_conn.execute(f"PRAGMA synchronous = {synchronous}")
                return connection

            pool._create_connection = create_connection
        return factory


class EventsourcingBench:
    """`app.save(aggregate)` per event (durable single), N events then one save
    (batched), `app.repository.get(id)` (replay + fold)."""

    def __init__(self, path: Path, synchronous: str | None) -> None:
        env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": str(path),
               "SQLITE_SYNCHRONOUS": synchronous or ""}
        self.app = BenchApplication(env=env)
        with self.app.factory.datastore.transaction(commit=False) as cursor:  # type: ignore
            cursor.execute("PRAGMA journal_mode")
            mode = cursor.fetchone()[0]
            cursor.execute("PRAGMA synchronous")
            sync = cursor.fetchone()[0]
        names = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
        self.config = f"journal_mode={mode}, synchronous={names.get(sync, sync)}"
        self.ids: list[Any] = []

    def appends(self, singles: Workload, batched: list[Workload]) -> tuple[float, float]:
        app = self.app
        run: AgentRun = AgentRun(**RUN_STARTED)
        app.save(run)
        t0 = time.perf_counter()
        for type_, payload in singles:
            run.record(type_, "agent", 0, 1, payload)
            app.save(run)
        t1 = time.perf_counter()
        for chunk in batched:
            for type_, payload in chunk:
                run.record(type_, "agent", 0, 1, payload)
            app.save(run)
        t2 = time.perf_counter()
        self.ids.append(run.id)
        return t1 - t0, t2 - t1

    def replay(self, expected: int) -> float:
        t0 = time.perf_counter()
        run: AgentRun = self.app.repository.get(self.ids[-1])
        seconds = time.perf_counter() - t0
        if run.version != expected:
            raise RuntimeError(f"eventsourcing: rebuilt version {run.version}, "
                               f"expected {expected}")
        return seconds

    def close(self) -> None:
        self.app.close()


# --- running ------------------------------------------------------------------------------

def _progress(quiet: bool, message: str) -> None:
    if not quiet:
        print(message, file=sys.stderr, flush=True)


def _sqlite_default_synchronous() -> str:
    conn = sqlite3.connect(":memory:")
    options = [r[0] for r in conn.execute("PRAGMA compile_options")]
    conn.close()
    wal = [o for o in options if o.startswith("DEFAULT_WAL_SYNCHRONOUS=")]
    plain = [o for o in options if o.startswith("DEFAULT_SYNCHRONOUS=")]
    names = {"0": "OFF", "1": "NORMAL", "2": "FULL", "3": "EXTRA"}
    chosen = (wal or plain or ["=2"])[0].split("=")[1]   # SQLite's own default is FULL
    return names.get(chosen, chosen)


def _mount_of(path: Path) -> str:
    """'mount point (fs type, device)' of the filesystem holding `path`, best effort."""
    best = ("?", "", "?")
    try:
        with open("/proc/mounts") as f:
            for line in f:
                device, mount, fstype = line.split()[:3]
                if path.is_relative_to(mount) and len(mount) >= len(best[1]):
                    best = (device, mount, fstype)
    except OSError:
        pass
    return f"{best[1]} ({best[2]}, {best[0]})"



def run_benchmark(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    total = args.single + args.batch_events
    workload = make_workload(total, args.seed)
    singles = workload[:args.single]
    batched = batches(workload[args.single:], args.batch_size)
    run_length = 1 + total                 # the run.started / Created event, then the workload

    es_sync = None if args.es_library_sync else "FULL"
    ours = OurStoreBench(workdir / "ours.db")
    benches: dict[str, StoreBench] = {
        "ours": ours,
        "raw": RawSqliteBench(workdir / "raw.db"),
        "es": EventsourcingBench(workdir / "eventsourcing.db", es_sync),
    }
    results = {name: StoreResult(name, STORE_LABELS[name], benches[name].config,
                                 replay_events=run_length, replay_meaning=REPLAY_MEANING[name])
               for name in STORES}
    try:
        for rep in range(args.repeats):
            for name in STORES:
                _progress(args.quiet, f"[{rep + 1}/{args.repeats}] {name}: appending "
                                      f"{args.single} single + {args.batch_events} batched")
                single_s, batch_s = benches[name].appends(singles, batched)
                results[name].single_eps.append(_eps(args.single, single_s))
                results[name].batch_eps.append(_eps(args.batch_events, batch_s))
        for rep in range(args.repeats):
            for name in STORES:
                _progress(args.quiet, f"[{rep + 1}/{args.repeats}] {name}: replaying "
                                      f"{run_length} events")
                seconds = benches[name].replay(run_length)
                results[name].replay_eps.append(_eps(run_length, seconds))
        tail = TailResult(polls=args.polls)
        for rep in range(args.repeats):
            _progress(args.quiet, f"[{rep + 1}/{args.repeats}] ours: {args.polls} idle tail polls")
            samples = ours.tail_polls(args.polls)
            tail.median_us.append(statistics.median(samples))
            tail.p99_us.append(statistics.quantiles(samples, n=100)[98])
    finally:
        for bench in benches.values():
            bench.close()

    return summarize(args, workdir, results, tail)


def summarize(args: argparse.Namespace, workdir: Path, results: dict[str, StoreResult],
              tail: TailResult) -> dict[str, Any]:
    ours, raw, es = results["ours"], results["raw"], results["es"]
    tail_median = statistics.median(tail.median_us)
    tail_p99 = statistics.median(tail.p99_us)
    ratios = {
        "single_ours_vs_raw": ours.median("single_eps") / raw.median("single_eps"),
        "single_ours_vs_es": ours.median("single_eps") / es.median("single_eps"),
        "batch_ours_vs_raw": ours.median("batch_eps") / raw.median("batch_eps"),
        "batch_ours_vs_es": ours.median("batch_eps") / es.median("batch_eps"),
        "replay_ours_vs_raw": ours.median("replay_eps") / raw.median("replay_eps"),
        "replay_ours_vs_es": ours.median("replay_eps") / es.median("replay_eps"),
    }
    targets = [
        {"target": "our durable single append >= 0.8x raw sqlite3",
         "measured": ratios["single_ours_vs_raw"], "unit": "x", "limit": 0.8,
         "passed": ratios["single_ours_vs_raw"] >= 0.8},
        {"target": "our durable single append >= 1.5x eventsourcing",
         "measured": ratios["single_ours_vs_es"], "unit": "x", "limit": 1.5,
         "passed": ratios["single_ours_vs_es"] >= 1.5},
        {"target": "our replay+verify+fold >= 3x eventsourcing replay+fold",
         "measured": ratios["replay_ours_vs_es"], "unit": "x", "limit": 3.0,
         "passed": ratios["replay_ours_vs_es"] >= 3.0},
        {"target": "idle tail poll < 50 us (median)",
         "measured": tail_median, "unit": "us", "limit": 50.0, "passed": tail_median < 50.0},
    ]
    return {
        "source": "measured-cpu",
        "machine": {
            "cpu": cpu_name(), "cpus": os.cpu_count(), "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "eventsourcing": metadata.version("eventsourcing"),
            "sqlite_default_wal_synchronous": _sqlite_default_synchronous(),
            "load_average_at_end": list(os.getloadavg()),
        },
        "disk": {"dir": str(workdir), "filesystem": _mount_of(workdir)},
        "params": {"single": args.single, "batch_events": args.batch_events,
                   "batch_size": args.batch_size, "repeats": args.repeats,
                   "polls": args.polls, "seed": args.seed, "statistic": "median of repeats",
                   "eventsourcing_synchronous": "library default" if args.es_library_sync
                   else "forced FULL"},
        "stores": {name: {**asdict(r), "single_eps_median": r.median("single_eps"),
                          "batch_eps_median": r.median("batch_eps"),
                          "replay_eps_median": r.median("replay_eps")}
                   for name, r in results.items()},
        "tail_poll_us": {"polls_per_repeat": tail.polls, "median": tail_median,
                         "p99": tail_p99, "median_per_repeat": tail.median_us,
                         "p99_per_repeat": tail.p99_us},
        "ratios": ratios,
        "targets": targets,
    }


# --- printing ---------------------------------------------------------------------------

def print_report(report: dict[str, Any]) -> None:
    m, d, p = report["machine"], report["disk"], report["params"]
    stores = report["stores"]
    print("npu-deploy event store benchmark (measured on the CPU and disk of this machine)")
    print(f"  cpu:     {m['cpu']} ({m['cpus']} cpus), Python {m['python']}; load average "
          f"at the end {' '.join(f'{x:.2f}' for x in m['load_average_at_end'])}")
    print(f"  sqlite:  {m['sqlite']} (compiled default for WAL: "
          f"synchronous={m['sqlite_default_wal_synchronous']}); "
          f"eventsourcing {m['eventsourcing']}")
    print(f"  disk:    {d['dir']} on {d['filesystem']}")
    print(f"  load:    {p['single']} durable single appends + {p['batch_events']} batched "
          f"appends (batches of {p['batch_size']}) per run,")
    print(f"           replay of a {stores['ours']['replay_events']}-event run; "
          f"{p['repeats']} repeats, figures are the {p['statistic']}")
    print()
    for name in STORES:
        print(f"  {STORE_LABELS[name]:<24} {stores[name]['config']}")
    print("  (eventsourcing sets journal_mode=WAL itself but never sets synchronous: it gets")
    print(f"  SQLite's compiled default, {m['sqlite_default_wal_synchronous']} in this build; "
          f"this run: {p['eventsourcing_synchronous']})")
    print()
    header = (f"  {'store':<24} {'single/s':>10} {'batched/s':>11} {'replay/s':>11}  "
              "replay means")
    print(header)
    print("  " + "-" * (len(header) - 2 + 30))
    for name in STORES:
        s = stores[name]
        print(f"  {STORE_LABELS[name]:<24} {s['single_eps_median']:>10,.0f} "
              f"{s['batch_eps_median']:>11,.0f} {s['replay_eps_median']:>11,.0f}  "
              f"{s['replay_meaning']}")
    t = report["tail_poll_us"]
    print()
    print(f"  our idle tail() poll: median {t['median']:.2f} us, p99 {t['p99']:.2f} us "
          f"({t['polls_per_repeat']} polls per repeat, read-only reader, caught up)")
    print()
    r = report["ratios"]
    print("  ratios (ours / other):   single   batched    replay")
    for other, label, note in (("raw", "raw sqlite3", "raw replay does no verify/fold"),
                               ("es", "eventsourcing", "eventsourcing replay does no verify")):
        print(f"    vs {label:<18} {r[f'single_ours_vs_{other}']:>6.2f}x "
              f"{r[f'batch_ours_vs_{other}']:>8.2f}x {r[f'replay_ours_vs_{other}']:>8.2f}x   "
              f"({note})")
    print()
    print("  targets:")
    for target in report["targets"]:
        unit = "x" if target["unit"] == "x" else " us"
        verdict = "PASS" if target["passed"] else "MISS"
        print(f"    {verdict}  {target['target']:<56} measured {target['measured']:.2f}{unit}")


# --- command line -------------------------------------------------------------------------

def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Benchmark the npu-deploy event store against raw sqlite3 and the "
                    "eventsourcing library's SQLite store, on one disk in one run.")
    parser.add_argument("--single", type=_positive, default=2000,
                        help="durable single appends per repeat (default 2000)")
    parser.add_argument("--batch-events", type=_positive, default=20000,
                        help="batched appends per repeat (default 20000)")
    parser.add_argument("--batch-size", type=_positive, default=100,
                        help="events per batch transaction (default 100)")
    parser.add_argument("--repeats", type=_positive, default=3,
                        help="repeats of every timing; the median is reported (default 3)")
    parser.add_argument("--polls", type=_positive, default=20000,
                        help="idle tail() polls per repeat (default 20000)")
    parser.add_argument("--seed", type=int, default=1, help="workload random seed (default 1)")
    parser.add_argument("--dir", type=Path, default=None,
                        help="make the fresh working directory inside DIR (default /tmp); "
                             "all three stores write there")
    parser.add_argument("--keep", action="store_true",
                        help="keep the working directory and its database files")
    parser.add_argument("--es-library-sync", action="store_true",
                        help="leave eventsourcing's synchronous at the library default instead "
                             "of forcing FULL")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    if args.polls < 2:
        parser.error("--polls must be at least 2 (for a p99)")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    parent = args.dir if args.dir is not None else Path("/tmp")
    parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="store_bench-", dir=parent)).resolve()
    try:
        report = run_benchmark(args, workdir)
    finally:
        if args.keep:
            _progress(args.quiet, f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    emit: Callable[[dict[str, Any]], None] = (
        (lambda r: print(json.dumps(r, indent=2))) if args.json else print_report)
    emit(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
