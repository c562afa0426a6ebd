"""What the conductor writes, byte for byte: runs already stored in users' databases are
read, verified, replayed and resumed by the code of today, and a resumed run finds its
earlier steps by their idempotency keys. So the same inputs must give the same events, the
same keys and the same hashes, whatever way the code builds them.

The runs below are written on the tests' fake clock with counted ids (tests/tui_runs.py)
and a counting `perf_counter`, so every byte of them is fixed; stored_runs.json holds each
event's type, idempotency key and hash as the code of fe523e2 wrote them. A refactoring
that changes one byte of one payload or key fails here, naming the first event that moved.

Only a deliberate change of what a run records (a new event, a new field) may rewrite the
file:  .venv/bin/python tests/machine/test_stored_bytes.py --write
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tui_runs import ALL_RUNS, MODEL, build_store, pipeline, wide_gate_run

from npu_deploy.machine import Conductor, Policy, conductor, fork, resume
from npu_deploy.store import EventStore

PINNED = Path(__file__).with_name("stored_runs.json")


class CountingTime:
    """The conductor's `time`: `perf_counter` advances an eighth of a second per reading
    (so every duration it records is fixed), and `sleep` returns at once."""

    def __init__(self) -> None:
        self.readings = 0

    def perf_counter(self) -> float:
        self.readings += 1
        return self.readings / 8

    def sleep(self, seconds: float) -> None:
        pass


def the_long_way(store: EventStore, run_id: str = "long-way") -> str:
    """A run through most of what a person can do: a refused command, a pick, a budget
    spent, a redirect, a pause and a resume, an approve, an abort."""
    pipe = pipeline("0:9")
    c = Conductor.start(store, pipe, Policy(budget=2), model=MODEL, run_id=run_id)
    try:
        assert c.run(wait=False).reason == "awaiting_pick"
        store.post_command(run_id, "approve", author="ada@tui")          # refused: an error
        store.post_command(run_id, "pick", {"direction_id": "bo"}, author="ada@tui")
        assert c.run(wait=False).reason == "needs_human"                  # the budget is spent
        store.post_command(run_id, "redirect", {"instruction": "fix it"}, author="ada@tui")
        assert c.run(wait=False).reason == "awaiting_human"
        store.post_command(run_id, "pause", author="ada@tui")
        assert c.run(wait=False).reason == "paused"
    finally:
        c.close()
    c = resume(store, run_id, pipe)
    try:
        store.post_command(run_id, "approve", author="ada@tui")
        assert c.run(wait=False).reason == "awaiting_human"
        store.post_command(run_id, "abort", author="ada@tui")
        assert c.run(wait=False).reason == "aborted"
    finally:
        c.close()
    return run_id


def a_fork(store: EventStore) -> str:
    """A fork of the long way at its first checkpoint."""
    at = next(e.run_version for e in store.events("long-way")
              if e.type == "checkpoint.requested")
    return fork(store, "long-way", at, "try again", new_run_id="forked")


RUNS = (*ALL_RUNS, wide_gate_run, the_long_way, a_fork)


def written(path: Path) -> dict[str, list[list[Any]]]:
    """Every run of RUNS written into a new store at `path`: run id -> [version, type,
    idempotency key, hash] of each event."""
    saved = conductor.time
    conductor.time = CountingTime()      # type: ignore[assignment]
    try:
        run_ids = build_store(path, *RUNS)
    finally:
        conductor.time = saved
    with EventStore.open(path, readonly=True) as store:
        return {run_id: [[e.run_version, e.type, e.idempotency_key, e.hash]
                         for e in store.events(run_id)] for run_id in run_ids}


def test_the_same_inputs_write_the_same_events_keys_and_hashes(tmp_path):
    pinned = json.loads(PINNED.read_text())
    got = written(tmp_path / "runs.db")
    assert list(got) == list(pinned)
    for run_id, events in pinned.items():
        for old, new in zip(events, got[run_id], strict=False):
            assert new == old, f"run {run_id}: v{old[0]} {old[1]} [{old[2]}] changed"
        assert len(got[run_id]) == len(events), run_id


def test_the_pinned_runs_cover_every_kind_of_key_and_event():
    pinned = json.loads(PINNED.read_text())
    types = {e[1] for events in pinned.values() for e in events}
    assert {"run.started", "run.forked", "run.resumed", "run.finished", "phase.entered",
            "phase.exited", "agent.message", "tool.requested", "tool.completed",
            "gate.evaluated", "checkpoint.requested", "human.decision", "debug.proposed",
            "error"} <= types


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit(__doc__)
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        runs = written(Path(tmp) / "runs.db")
    # One event a line, so that a diff of the file names the events that moved.
    PINNED.write_text("{\n" + ",\n".join(
        f"{json.dumps(run_id)}: [\n" + ",\n".join(json.dumps(e) for e in events) + "\n]"
        for run_id, events in runs.items()) + "\n}\n")
    print(f"wrote {PINNED}")
