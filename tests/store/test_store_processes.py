"""The store across real OS processes: a writer in a child process while this
process tails the run; a writer killed with SIGKILL in the middle of its batches;
the per-run writer lock held by another process.

The children are the venv's Python running small `-c` programs; they talk back
through lines on stdout, so the test knows what they have committed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import STARTED
from paths import ROOT

from npu_deploy.events import NewEvent
from npu_deploy.store import EventStore, RunLocked
from npu_deploy.store import writer as writer_module

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="needs POSIX signals")


# --- child programs ---------------------------------------------------------------

#: argv: db, run_id, count, seed. Appends `count` agent messages "msg <i>", as single
#: appends and small batches with tiny random pauses; prints "DONE <head version>".
TAIL_WRITER = """
import random, sys, time
from npu_deploy.events import NewEvent
from npu_deploy.store import EventStore
db, run_id, count, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rng = random.Random(seed)
def msg(i):
    return NewEvent("agent.message", {"role": "assistant", "text": f"msg {i}"},
                    actor="agent", phase=0, attempt=1)
with EventStore.open(db) as s:
    w = s.writer(run_id)
    print("READY", flush=True)
    i = 0
    while i < count:
        n = min(count - i, 1 if rng.random() < 0.5 else rng.randint(2, 5))
        if n == 1:
            w.append(msg(i))
        else:
            w.append_batch([msg(i + k) for k in range(n)])
        i += n
        if rng.random() < 0.5:
            time.sleep(rng.random() * 0.002)
    print(f"DONE {w.version}", flush=True)
    w.close()
"""

#: argv: db, run_id, iteration, K. Appends batches of K events forever, printing
#: "COMMITTED <batch>" after each commit, until it is killed.
CRASH_WRITER = """
import sys
from npu_deploy.events import NewEvent
from npu_deploy.store import EventStore
db, run_id, it, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
s = EventStore.open(db)
w = s.writer(run_id)
print("READY", flush=True)
b = 0
while True:
    w.append_batch([NewEvent("agent.message",
                             {"role": "assistant", "text": f"iter {it} batch {b} item {i} of {k}"},
                             actor="agent", phase=0, attempt=1) for i in range(k)])
    print(f"COMMITTED {b}", flush=True)
    b += 1
"""

#: argv: db, run_id. Holds the run's writer until stdin is closed.
LOCK_HOLDER = """
import sys
from npu_deploy.store import EventStore
with EventStore.open(sys.argv[1]) as s:
    w = s.writer(sys.argv[2])
    print("READY", flush=True)
    sys.stdin.read()
    w.close()
print("BYE", flush=True)
"""


# --- helpers --------------------------------------------------------------------------

class Child:
    """A child Python process with line-oriented stdout and a watchdog."""

    def __init__(self, code: str, *args: object, timeout: float = 30.0) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *map(str, args)], cwd=ROOT, env=env, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.watchdog = threading.Timer(timeout, self.kill)
        self.watchdog.daemon = True
        self.watchdog.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    def readline(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            err = self.proc.stderr.read() if self.proc.stderr else ""
            pytest.fail(f"child exited ({self.proc.returncode}) before saying enough:\n{err}")
        return line.strip()

    def expect(self, prefix: str) -> str:
        line = self.readline()
        assert line.startswith(prefix), f"expected {prefix!r} from the child, got {line!r}"
        return line

    def fail_if_failed(self) -> None:
        if self.proc.poll() not in (None, 0):
            err = self.proc.stderr.read() if self.proc.stderr else ""
            pytest.fail(f"child failed ({self.proc.returncode}):\n{err}")

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)

    def finish(self, timeout: float = 30.0) -> int:
        try:
            self.proc.wait(timeout)
        finally:
            self.watchdog.cancel()
            for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()
        return self.proc.returncode


@pytest.fixture
def children() -> Iterator[list[Child]]:
    """Every child a test starts is killed (by its own pid) and reaped at teardown."""
    started: list[Child] = []
    yield started
    for child in started:
        child.kill()
        try:
            child.finish(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def spawn(children: list[Child], code: str, *args: object) -> Child:
    child = Child(code, *args)
    children.append(child)
    return child


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, str]:
    """A store with one started run whose writer is closed: (db path, run id)."""
    db = tmp_path / "runs.db"
    with EventStore.open(db) as s:
        w = s.create_run(STARTED)
        run_id = w.run_id
        w.close()
    return db, run_id


def message(text: str) -> NewEvent:
    return NewEvent("agent.message", {"role": "assistant", "text": text},
                    actor="agent", phase=0, attempt=1)


# --- 1. a reader tails while another process writes -------------------------------------

def test_reader_tails_every_event_of_a_writer_in_another_process(run, children):
    db, run_id = run
    count = 300
    reader = EventStore.open(db, readonly=True)
    try:
        writer = spawn(children, TAIL_WRITER, db, run_id, count, 1234)
        seen = []
        growths = 0          # polls that returned something
        cursor = 0
        deadline = time.monotonic() + 30
        while len(seen) < count + 1:
            assert time.monotonic() < deadline, f"saw only {len(seen)} events in 30 s"
            writer.fail_if_failed()
            got = reader.tail(run_id, cursor)
            if got:
                growths += 1
                seen.extend(got)
                cursor = got[-1].seq
            else:
                time.sleep(0.0005)
        writer.expect("READY")
        done = writer.expect("DONE")
        assert writer.finish() == 0
        reported = int(done.split()[1])

        # Nothing more appears once the writer is gone.
        assert reader.tail(run_id, cursor) == []

        assert reported == count + 1 == len(seen)
        assert [e.run_version for e in seen] == list(range(1, count + 2))
        seqs = [e.seq for e in seen]
        assert all(a < b for a, b in zip(seqs, seqs[1:], strict=False)), "seq must increase"
        assert len({e.event_id for e in seen}) == len(seen), "an event was seen twice"
        assert seen[0].type == "run.started"
        assert [e.payload["text"] for e in seen[1:]] == [f"msg {i}" for i in range(count)]
        # Each event links to the one before it.
        assert all(b.prev_hash == a.hash for a, b in zip(seen, seen[1:], strict=False))
        # The reader really followed a growing run, not one finished read.
        assert growths >= 2

        report = reader.verify(run_id)
        assert report.ok, report.problem
        assert report.events == count + 1
        assert report.head_hash == seen[-1].hash
    finally:
        reader.close()


# --- 2. a writer killed with SIGKILL mid-loop leaves only whole batches -----------------

BATCH_RE = re.compile(r"^iter (\d+) batch (\d+) item (\d+) of (\d+)$")


def check_whole_batches(store: EventStore, run_id: str, k: int) -> dict[int, int]:
    """Assert the run holds only whole batches, contiguous from 0 in each iteration;
    returns iteration -> number of batches."""
    events = list(store.events(run_id))
    assert events[0].type == "run.started"
    groups: dict[tuple[int, int], list[int]] = defaultdict(list)
    order: list[tuple[int, int]] = []
    for e in events[1:]:
        m = BATCH_RE.match(e.payload["text"])
        assert m, e.payload["text"]
        it, batch, item, of = map(int, m.groups())
        assert of == k
        if (it, batch) not in groups:
            order.append((it, batch))
        groups[(it, batch)].append(item)
    for key, items in groups.items():
        assert items == list(range(k)), f"iteration {key[0]} batch {key[1]} is partial: {items}"
    assert order == sorted(order), "batches out of order"
    batches: dict[int, int] = defaultdict(int)
    for it, batch in order:
        assert batch == batches[it], f"iteration {it}: batch {batch} follows a gap"
        batches[it] += 1
    assert len(events) == 1 + k * sum(batches.values())
    return dict(batches)


def test_sigkill_mid_batch_leaves_only_whole_batches_and_frees_the_lock(run, children):
    db, run_id = run
    k = 20
    # (batches to see committed, extra pause before the kill): different moments.
    moments = [(3, 0.0), (4, 0.0007), (5, 0.003)]
    for it, (target, pause) in enumerate(moments):
        child = spawn(children, CRASH_WRITER, db, run_id, it, k)
        child.expect("READY")       # re-attaching also proves the last crash freed the lock
        committed = -1
        while committed + 1 < target:
            committed = int(child.expect("COMMITTED").split()[1])
        if pause:
            time.sleep(pause)
        os.kill(child.pid, signal.SIGKILL)
        assert child.finish() == -signal.SIGKILL

        with EventStore.open(db, readonly=True) as r:
            report = r.verify(run_id)
            assert report.ok, report.problem
            batches = check_whole_batches(r, run_id, k)
            assert batches[it] >= target, batches
            print(f"iteration {it}: killed after {batches[it]} batches (saw {target})")
            assert set(batches) == set(range(it + 1))
            assert report.events == 1 + k * sum(batches.values())
            # Nobody holds the lock: the folded "running" reads as crashed.
            assert not r.is_locked(run_id)
            assert [x.status for x in r.runs() if x.run_id == run_id] == ["crashed"]

    # The kernel released the dead writer's lock: this process can take over.
    with EventStore.open(db) as s:
        before = s.verify(run_id).events
        w = s.writer(run_id)
        try:
            e = w.append(message("after the crashes"))
            assert e.run_version == before + 1
        finally:
            w.close()
        report = s.verify(run_id)
        assert report.ok, report.problem
        assert report.events == before + 1


# --- 3. the writer lock is held across processes ------------------------------------------

@pytest.fixture
def short_lock_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """Writers wait a moment for a busy lock before RunLocked; keep that short here."""
    monkeypatch.setattr(writer_module, "LOCK_WAIT_S", 0.2, raising=False)


def test_writer_lock_is_exclusive_across_processes(run, children, short_lock_wait):
    db, run_id = run
    holder = spawn(children, LOCK_HOLDER, db, run_id)
    holder.expect("READY")
    with EventStore.open(db) as s:
        with pytest.raises(RunLocked, match=re.escape(run_id)) as info:
            s.writer(run_id)
        assert "another process" in str(info.value)
        with pytest.raises(RunLocked, match=re.escape(run_id)):
            s.writer(run_id[:12])          # a prefix resolves to the same locked run
        assert s.is_locked(run_id)
        assert [x.status for x in s.runs()] == ["running"]
        # The failed attempts wrote nothing.
        assert s.verify(run_id).events == 1

        assert holder.proc.stdin is not None
        holder.proc.stdin.close()           # let the holder close its writer and exit
        holder.expect("BYE")
        assert holder.finish() == 0

        assert not s.is_locked(run_id)
        w = s.writer(run_id)
        try:
            assert w.append(message("mine now")).run_version == 2
        finally:
            w.close()
        assert s.verify(run_id).ok


def test_lock_of_a_killed_holder_is_released(run, children, short_lock_wait):
    db, run_id = run
    holder = spawn(children, LOCK_HOLDER, db, run_id)
    holder.expect("READY")
    with EventStore.open(db) as s:
        with pytest.raises(RunLocked):
            s.writer(run_id)
        os.kill(holder.pid, signal.SIGKILL)
        assert holder.finish() == -signal.SIGKILL
        w = s.writer(run_id)
        try:
            w.append(message("after the kill"))
        finally:
            w.close()
        assert s.verify(run_id).events == 2


# --- 4. another process writes to the same file while a run is being appended ------------

def test_commands_posted_while_a_writer_appends_are_all_kept(run, children):
    """The TUI posts inbox commands from its own process while the conductor appends:
    two writers on one SQLite file. Neither may fail with 'database is locked'."""
    db, run_id = run
    writer = spawn(children, TAIL_WRITER, db, run_id, 400, 99)
    writer.expect("READY")
    posted = []
    with EventStore.open(db) as s:
        for i in range(40):
            posted.append(s.post_command(run_id, "redirect", {"instruction": f"try {i}"}))
            time.sleep(0.002)
        done = writer.expect("DONE")
        assert writer.finish() == 0
        assert int(done.split()[1]) == 401
        assert [c["command_id"] for c in s.pending_commands(run_id)] == posted
        report = s.verify(run_id)
        assert report.ok and report.events == 401


def test_reopening_a_store_in_the_writer_process_keeps_its_writes_visible(tmp_path):
    """Opening the same store again in the writing process must not drop SQLite's locks
    (POSIX drops a process's locks on a file when any descriptor of it closes): another
    process would then take the WAL over, and the writer's later commits would vanish."""
    db = tmp_path / "runs.db"
    store = EventStore.open(db)
    writer = store.create_run(STARTED)
    EventStore.open(db).close()                 # a second store, as the writer opens its own
    other = ("import sys; from npu_deploy.store import EventStore\n"
             "with EventStore.open(sys.argv[1]) as s:\n"
             "    s.post_command(sys.argv[2], 'pause')\n")
    subprocess.run([sys.executable, "-c", other, str(db), writer.run_id], check=True,
                   cwd=ROOT)
    for i in range(5):
        writer.append(NewEvent("agent.message", {"role": "assistant", "text": f"m{i}"},
                               actor="agent"))
    count = ("import sys, sqlite3\n"
             "print(sqlite3.connect(sys.argv[1]).execute('SELECT count(*) FROM events')"
             ".fetchone()[0])\n")
    seen = subprocess.run([sys.executable, "-c", count, str(db)], check=True,
                          capture_output=True, text=True).stdout.strip()
    assert int(seen) == writer.version == 6
    writer.close()
    store.close()
