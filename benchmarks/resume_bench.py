"""How long resuming and replaying a long run take, against folding it from its first event,
in the same run on this machine's CPU.

A run of N agent messages (100,000 by default) is written once. Then, each repeat:
* replay to any event: the state at version N - 1000, folded from the newest snapshot at or
  before it (the store snapshots every 1,000 events);
* resume: `RunWriter.attach` (take the lock, verify the chain from the newest snapshot, fold);
* the full fold: every event from the first, without snapshots (what a store without
  snapshots would do).

Targets (issue 6): replay and resume of a 100k-event run each under a second. Each figure is
timed in wall time and in this process's CPU time (which other processes' load cannot
stretch); the verdict reads the CPU time, and the ratios say what the snapshots save.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.host import cpu_name, emit
from npu_deploy.events import NewEvent
from npu_deploy.store import EventStore, RunWriter

TARGET_S = 1.0
BATCH = 10_000


def write_run(store: EventStore, n: int) -> str:
    writer = RunWriter.create(store, {"model": "m", "backend": "emulator", "agent": "bench",
                                      "code_version": "bench"})
    for start in range(0, n, BATCH):
        writer.append_batch([NewEvent("agent.message",
                                      {"role": "assistant", "text": f"step {i}"},
                                      actor="agent")
                             for i in range(start, min(n, start + BATCH))])
    writer.close()
    return writer.run_id


def timed(fn: Any) -> tuple[float, float, Any]:
    """(wall s, CPU s of this process, result) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory() as tmp, EventStore.open(Path(tmp) / "runs.db") as store:
        run_id = write_run(store, args.events)
        head = args.events + 1                                  # run.started is v1
        at = max(1, head - 1000)
        figures: dict[str, dict[str, list[float]]] = {
            name: {"wall_s": [], "cpu_s": []} for name in ("replay", "resume", "full_fold")}
        for _ in range(args.repeats):
            wall, cpu, state = timed(lambda: store.fold(run_id, at))
            assert state.version == at
            figures["replay"]["wall_s"].append(wall)
            figures["replay"]["cpu_s"].append(cpu)

            def resume() -> int:
                with RunWriter.attach(store, run_id) as w:
                    return int(w.state.version)
            wall, cpu, version = timed(resume)
            assert version == head
            figures["resume"]["wall_s"].append(wall)
            figures["resume"]["cpu_s"].append(cpu)
            wall, cpu, state = timed(lambda: store.fold(run_id, use_snapshots=False))
            assert state.version == head
            figures["full_fold"]["wall_s"].append(wall)
            figures["full_fold"]["cpu_s"].append(cpu)

    medians = {name: {k: statistics.median(v) for k, v in f.items()}
               for name, f in figures.items()}
    full = medians["full_fold"]["cpu_s"]
    report = {
        "source": "measured-cpu", "cpu": cpu_name(), "events": args.events,
        "repeats": args.repeats, "medians": medians,
        "ratios": {"full_fold_over_replay": full / max(medians["replay"]["cpu_s"], 1e-9),
                   "full_fold_over_resume": full / max(medians["resume"]["cpu_s"], 1e-9)},
        "targets": [{"target": f"{name} of a {args.events:,}-event run < {TARGET_S:g} s "
                               "(CPU time, median)",
                     "measured": medians[name]["cpu_s"], "unit": "s", "limit": TARGET_S,
                     "passed": medians[name]["cpu_s"] < TARGET_S}
                    for name in ("replay", "resume")],
    }

    def show(r: dict[str, Any]) -> None:
        print(f"resume and replay of a {r['events']:,}-event run (measured on the CPU: "
              f"{r['cpu']}), median of {r['repeats']}")
        for name, m in r["medians"].items():
            print(f"  {name:10s} wall {m['wall_s'] * 1e3:8.1f} ms   cpu {m['cpu_s'] * 1e3:8.1f} ms")
        print(f"  the full fold takes {r['ratios']['full_fold_over_replay']:.1f}x the replay "
              f"and {r['ratios']['full_fold_over_resume']:.1f}x the resume")
        for t in r["targets"]:
            print(f"  {'PASS' if t['passed'] else 'FAIL'} {t['target']}: "
                  f"{t['measured'] * 1e3:.1f} ms")
    return emit(report, args.json, show)


if __name__ == "__main__":
    sys.exit(main())
