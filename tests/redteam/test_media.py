"""Red team, area "media" (issue 39, points 1 and 6): the store on a disk that fills up, on
read-only media, and copied without the files SQLite keeps beside it.

The filesystems are real: a tmpfs of a few megabytes that the test fills with a file of
zeros, a read-only bind mount, a tmpfs remounted read-only, and a file chmod'ed 0444 read
by a process without CAP_DAC_OVERRIDE (root reads and writes past permissions otherwise).
They need root (mount, setpriv): without it, the tests say so and skip."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import struct
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import closing, contextmanager, suppress
from pathlib import Path

import pytest
from cli_stores import checkpoint  # everything into the main file, no -wal or -shm
from click.testing import Result
from conftest import ERROR_PREFIX, STARTED

from npu_deploy.events import NewEvent
from npu_deploy.store import DiskFull, EventStore, export_run

AREA = "media"
TESTS = Path(__file__).resolve().parent.parent
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
FULL = "is full: nothing was lost"
READ_ONLY = "nothing was written"
#: The reading commands the issue names, and writing ones, each given RUN and a scratch dir.
READS = {
    "runs": lambda run, d: ["runs"],
    "runs-json": lambda run, d: ["runs", "--json"],
    "show": lambda run, d: ["show", run],
    "verify": lambda run, d: ["verify", run],
    "verify-all": lambda run, d: ["verify", "--all"],
    "export": lambda run, d: ["export", run, "-o", d / "run.jsonl"],
    "report": lambda run, d: ["report", run, "-o", d / "report"],
}
WRITES = {
    "decide": lambda run, d: ["decide", run, "pause"],
    "resume": lambda run, d: ["resume", run, "--no-wait"],
    "fork": lambda run, d: ["fork", run, "--at", "2"],
    "import": lambda run, d: ["import", d / "other.jsonl"],
    "deploy": lambda run, d: ["deploy", "tiny", "--headless", "--pipeline",
                              "fake_pipeline:make"],
}


def redteam(case: str, before: str) -> pytest.MarkDecorator:
    return pytest.mark.redteam(area=AREA, case=case, before=before)


needs_root = pytest.mark.skipif(not IS_ROOT, reason="mounting a tmpfs or a read-only bind "
                                "mount needs root")


# --- the media ----------------------------------------------------------------------------

def _mount(*args: str | Path) -> None:
    done = subprocess.run(["mount", *map(str, args)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount here (mount {' '.join(map(str, args))}): "
                    f"{done.stderr.strip()}")


def _umount(where: Path) -> None:
    if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


@contextmanager
def tmpfs(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` for the block."""
    where.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size}", "tmpfs", where)
    try:
        yield where
    finally:
        _umount(where)


@contextmanager
def read_only_view(source: Path, where: Path) -> Iterator[Path]:
    """`source` bind-mounted read-only at `where` for the block."""
    where.mkdir(parents=True, exist_ok=True)
    _mount("--bind", source, where)
    try:
        _mount("-o", "remount,bind,ro", where)
        yield where
    finally:
        _umount(where)


def fill(disk: Path) -> Path:
    """Fill the filesystem of `disk` to its last byte with a file of zeros."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        for chunk in (1 << 20, 4096, 1):
            with suppress(OSError):
                while os.write(fd, b"\0" * chunk) == chunk:
                    pass
    finally:
        os.close(fd)
    return filler


# --- stores ---------------------------------------------------------------------------------

def message(i: int, size: int = 0) -> NewEvent:
    return NewEvent("agent.message", {"role": "assistant", "text": f"message {i} " + "x" * size},
                    actor="agent", phase=0, attempt=1)


def make_run(db: Path, run_id: str = "r1", events: int = 4) -> str:
    """A run with `events` messages and a written report (what `report` prints)."""
    with EventStore.open(db) as s, s.create_run(STARTED, run_id=run_id) as w:
        for i in range(events):
            w.append(message(i))
        ref = s.put_blob(b"# the report\n")
        w.append(NewEvent("tool.completed", {"call_id": "p6.a1.s1", "tool": "write_report",
                                             "ok": True, "result": {"files": {"report.md": ref}}},
                          actor="agent", phase=6, attempt=1))
    return run_id


def short_by(db: Path) -> int:
    """How many bytes the main file lacks of what its header says (0: none)."""
    header = db.read_bytes()[:100]
    page = struct.unpack(">H", header[16:18])[0]
    pages = struct.unpack(">I", header[28:32])[0]
    return max(0, pages * (65536 if page == 1 else page) - db.stat().st_size)


def events_of(db: Path, run_id: str) -> list[str]:
    with EventStore.open(db, readonly=True) as s:
        return [e.payload.get("text", e.type) for e in s.events(run_id)]


def listing(directory: Path) -> dict[str, str | None]:
    return {str(p.relative_to(directory)): (hashlib.sha256(p.read_bytes()).hexdigest()
                                            if p.is_file() else None)
            for p in sorted(directory.rglob("*"))}


def npu_deploy(*args: object, prefix: tuple[str, ...] = (), timeout: float = 120
               ) -> subprocess.CompletedProcess[str]:
    """The command line in a process of its own (the environment is the test's: the
    session's key, cache and pipelines)."""
    program = "import sys; from npu_deploy.cli import main; sys.argv[0] = 'npu-deploy'; main()"
    return subprocess.run([*prefix, sys.executable, "-c", program, *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=_env())


def _env() -> dict[str, str]:
    """The test's environment, with tests/ importable (fake_pipeline)."""
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return {**os.environ, "PYTHONPATH": os.pathsep.join([*paths, str(TESTS)])}


def one_error(proc: subprocess.CompletedProcess[str] | Result, *needles: str) -> str:
    code = proc.returncode if isinstance(proc, subprocess.CompletedProcess) else proc.exit_code
    assert code != 0, proc.stdout
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(ERROR_PREFIX), lines[0]
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


# --- 1. a full disk -------------------------------------------------------------------------

@needs_root
@redteam("a write on a full disk",
         before="'the store could not be read (database or disk is full); check the file "
                "with `npu-deploy verify --all`': a write, named a read")
def test_a_write_on_a_full_disk_says_so_and_loses_nothing(tmp_path, cli):
    with tmpfs(tmp_path / "disk", "1m") as disk:
        db = disk / "runs.db"
        run_id = make_run(db)
        with EventStore.open(db) as s, s.writer(run_id) as w:
            filler = fill(disk)
            with pytest.raises(DiskFull, match=FULL):
                for i in range(10_000):      # the WAL may have room for a few
                    w.append(message(i, size=2000))
            stored = events_of(db, run_id)
            assert len(stored) == w.version              # nothing half-written
            # the person's commands say so in one line too, and leave the store as it was
            one_error(cli("--db", db, "decide", run_id, "pause"), FULL, str(db))
            assert events_of(db, run_id) == stored and not s.pending_commands(run_id)
            for args in (("verify", run_id), ("runs",), ("show", run_id)):
                r = cli("--db", db, *args)
                assert r.exit_code == 0, r.stderr       # readable while the disk is full
            filler.unlink()
            w.append(message(-1))                          # room again: the writer goes on
        assert cli("--db", db, "verify", run_id).exit_code == 0
        assert events_of(db, run_id) == [*stored, "message -1 "]


def _short_store(disk: Path, db: Path) -> str:
    """A store as a full disk leaves it: the last connection's checkpoint wrote the main
    file's header, then found no room for the pages, which stay in the -wal."""
    s = EventStore.open(db)
    w = s.create_run(STARTED, run_id="r1")
    for i in range(60):
        w.append(message(i, size=3000))
    filler = fill(disk)
    with suppress(DiskFull):
        w.close()                   # its snapshot may find no room
    s.close()                       # the last connection: SQLite checkpoints, as far as it can
    filler.unlink()
    return "r1"


@needs_root
@redteam("the -wal's pages after a full disk",
         before="every command, space freed or not: 'runs.db is truncated (155648 bytes, its "
                "header says 159744); restore it from a copy or an export', though SQLite's "
                "integrity_check says ok")
def test_pages_in_the_wal_are_part_of_the_store(tmp_path, cli):
    with tmpfs(tmp_path / "disk", "3m") as disk:
        db = disk / "runs.db"
        run_id = _short_store(disk, db)
        assert short_by(db) > 0, "the test did not leave the main file short"
        # SQLite finds it whole (read-only: a writing connection would checkpoint on close)
        with closing(sqlite3.connect(f"file:{db}?mode=ro", uri=True)) as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert short_by(db) > 0
        stored = events_of(db, run_id)
        for name, args in READS.items():
            if name != "report":
                r = cli("--db", db, *args(run_id, tmp_path))
                assert r.exit_code == 0, f"{name}: {r.stderr}"
        with EventStore.open(db) as s, s.writer(run_id) as w:
            w.append(message(-1))
        assert events_of(db, run_id) == [*stored, "message -1 "]
        checkpoint(db)                       # with room, the pages reach the main file
        assert short_by(db) == 0
        assert cli("--db", db, "verify", "--all").exit_code == 0


@needs_root
@redteam("a store copied without its -wal",
         before="'runs.db is truncated (4096 bytes, its header says ...); restore it from a "
                "copy or an export': no word of the -wal left behind")
def test_a_store_copied_without_its_wal_names_the_wal(tmp_path, cli):
    with tmpfs(tmp_path / "disk", "3m") as disk:
        _short_store(disk, disk / "runs.db")
        copy = tmp_path / "copy" / "runs.db"
        copy.parent.mkdir()
        shutil.copy(disk / "runs.db", copy)
    export_file(tmp_path)
    before = listing(copy.parent)
    for name, args in {**READS, **WRITES}.items():
        one_error(cli("--db", copy, *args("r1", tmp_path)), "runs.db-wal", "truncated")
        assert listing(copy.parent) == before, name


@redteam("a -wal without its store",
         before="runs: 'no runs yet'; show, verify: 'no store at ...; run a deployment "
                "first'; a writing command made a new empty store beside the -wal, and "
                "SQLite deleted the -wal with the pages it held")
def test_a_wal_without_its_store_is_kept(tmp_path, cli):
    db = tmp_path / "a" / "runs.db"
    db.parent.mkdir()
    with EventStore.open(db) as s, s.create_run(STARTED, run_id="r1") as w:
        w.append(message(1))
        wal = (db.parent / "runs.db-wal").read_bytes()  # while it is open: pages not yet moved
    alone = tmp_path / "b" / "runs.db"
    alone.parent.mkdir()
    (alone.parent / "runs.db-wal").write_bytes(wal)
    export_file(tmp_path)
    before = listing(alone.parent)
    for name, args in {**READS, **WRITES}.items():
        one_error(cli("--db", alone, *args("r1", tmp_path)), "runs.db-wal is beside it")
        assert listing(alone.parent) == before, name


# --- 6. read-only media ---------------------------------------------------------------------

def export_file(where: Path) -> Path:
    """other.jsonl in `where`: a run exported from a store elsewhere (to import)."""
    other = where / "other-store" / "runs.db"
    other.parent.mkdir(parents=True, exist_ok=True)
    make_run(other, "r2")
    with EventStore.open(other, readonly=True) as s:
        export_run(s, "r2", where / "other.jsonl")
    return where / "other.jsonl"


def _store_with(directory: Path, wal: bool) -> tuple[Path, str]:
    """A store; with `wal`, its newest event only in a -wal beside it (and no -shm): a store
    copied while a writer had it open."""
    db = directory / "runs.db"
    run_id = make_run(db)
    checkpoint(db)
    if wal:
        with EventStore.open(db) as s, s.writer(run_id) as w:
            w.append(message(99))
            shutil.copy(db, directory / "copy.db")
            shutil.copy(directory / "runs.db-wal", directory / "copy.db-wal")
        db.unlink()
        (directory / "copy.db").rename(db)
        (directory / "copy.db-wal").rename(directory / "runs.db-wal")
        (directory / "runs.db-shm").unlink(missing_ok=True)
        assert short_by(db) == 0 and (directory / "runs.db-wal").stat().st_size > 32
    return db, run_id


def _check_reads_and_writes(cli, db: Path, run_id: str, scratch: Path, newest: str) -> None:
    export_file(scratch)
    before = listing(db.parent)
    for name, args in READS.items():
        out = scratch / name
        out.mkdir(parents=True)
        r = cli("--db", db, *args(run_id, out))
        assert r.exit_code == 0, f"{name}: {r.stderr}"
        assert not r.stderr, f"{name}: {r.stderr}"
    assert newest in cli("--db", db, "show", run_id, "--json").stdout
    assert (scratch / "report" / "report" / "report.md").read_bytes() == b"# the report\n"
    for name, args in WRITES.items():
        one_error(cli("--db", db, *args(run_id, scratch)), READ_ONLY, "read-only")
        assert listing(db.parent) == before, name
    assert listing(db.parent) == before


@needs_root
@pytest.mark.parametrize("wal", [False, True], ids=["checkpointed", "with-wal"])
@redteam("a store on a read-only bind mount",
         before="runs, show, verify, export, report: 'cannot read .../runs.db (unable to "
                "open database file); check the path and its permissions'")
def test_a_store_on_a_read_only_bind_mount(tmp_path, cli, wal):
    source = tmp_path / "source"
    source.mkdir()
    db, run_id = _store_with(source, wal)
    with read_only_view(source, tmp_path / "ro") as view:
        _check_reads_and_writes(cli, view / db.name, run_id, tmp_path / "out",
                                "message 99" if wal else "write_report")


@needs_root
@pytest.mark.parametrize("wal", [False, True], ids=["checkpointed", "with-wal"])
@redteam("a store on a tmpfs remounted read-only",
         before="runs, show, verify, export, report: 'cannot read .../runs.db (unable to "
                "open database file); check the path and its permissions'")
def test_a_store_on_a_tmpfs_remounted_read_only(tmp_path, cli, wal):
    with tmpfs(tmp_path / "disk", "4m") as disk:
        db, run_id = _store_with(disk, wal)
        _mount("-o", "remount,ro", disk)
        _check_reads_and_writes(cli, db, run_id, tmp_path / "out",
                                "message 99" if wal else "write_report")


def _without_dac_override() -> tuple[str, ...]:
    """A process of root that file permissions bind: setpriv drops CAP_DAC_OVERRIDE."""
    setpriv = shutil.which("setpriv")
    if not IS_ROOT or setpriv is None:
        pytest.skip("needs root and setpriv (util-linux) to read as an unprivileged process")
    return (setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--")


@pytest.mark.parametrize("what", ["file", "folder"])
@redteam("a chmod'ed read-only store",
         before="file 0444: a writing command said 'the store could not be read (attempt to "
                "write a readonly database)'; folder 0555: every read said 'cannot read ... "
                "(attempt to write a readonly database)'")
@pytest.mark.slow         # 7 s in all on 2 busy cores: out of the fast core
def test_a_read_only_file_or_folder(tmp_path, what):
    prefix = _without_dac_override()
    folder = tmp_path / "store"
    folder.mkdir()
    db, run_id = _store_with(folder, wal=False)
    export_file(tmp_path)
    db.chmod(0o444)
    if what == "folder":
        folder.chmod(0o555)
    try:
        before = db.read_bytes()
        for name, args in READS.items():
            out = tmp_path / "out" / name
            out.mkdir(parents=True)
            done = npu_deploy("--db", db, *args(run_id, out), prefix=prefix)
            assert done.returncode == 0 and not done.stderr, f"{name}: {done.stderr}"
        for name, args in WRITES.items():
            done = npu_deploy("--db", db, *args(run_id, tmp_path), prefix=prefix)
            one_error(done, READ_ONLY, "cannot write")
            assert db.read_bytes() == before, name
        assert not (folder / "workspaces").exists()
    finally:
        folder.chmod(0o755)


@pytest.mark.parametrize("wal", [False, True], ids=["checkpointed", "with-wal"])
@redteam("a read of a chmod'ed read-only store in a writable folder",
         before="each read left files beside the 0444 store: an empty runs.db-wal and a "
                "runs.db-shm (checkpointed), a runs.db-shm (with its -wal)")
def test_reading_a_read_only_file_creates_nothing_beside_it(tmp_path, wal):
    prefix = _without_dac_override()
    folder = tmp_path / "store"
    folder.mkdir()
    db, run_id = _store_with(folder, wal=wal)
    db.chmod(0o444)
    before = listing(folder)
    for name in ("runs", "show", "verify"):
        done = npu_deploy("--db", db, *READS[name](run_id, tmp_path), prefix=prefix)
        assert done.returncode == 0 and not done.stderr, f"{name}: {done.stderr}"
        assert listing(folder) == before, name
    if wal:                                   # the -wal's newest event is read
        shown = npu_deploy("--db", db, "show", run_id, "--json", prefix=prefix)
        assert "message 99" in shown.stdout


# --- 1. a full disk at every phase of a deployment -------------------------------------------

DEPLOY = ("deploy", "tiny-llama", "--headless", "--auto-approve", "--seq-len", "32",
          "--steps", "8", "--run-id")


def _phase(db: Path, run_id: str) -> tuple[int | None, str | None]:
    """The run's current phase and status, from its runs row (None before it exists)."""
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            row = conn.execute("SELECT current_phase, status FROM runs WHERE run_id = ?",
                               (run_id,)).fetchone()
        finally:
            conn.close()
    except sqlite3.Error:
        return None, None
    return (row[0], row[1]) if row else (None, None)


def _without_slack(db: Path) -> None:
    """Move the -wal's pages into the main file and cut the -wal to nothing, as any process
    may (a TRUNCATE checkpoint): the run's next write then needs new room. Without this, a
    -wal reset by an earlier checkpoint keeps its length, and the run writes into that
    until it is used up, perhaps to the end of the run."""
    with closing(sqlite3.connect(db, timeout=30)) as conn:
        while conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]:
            time.sleep(0.05)        # busy: a reader of an older snapshot, or the writer


@needs_root
@pytest.mark.e2e
@pytest.mark.slow
@redteam("a full disk at every phase of a deployment, then resume",
         before="the first full disk: 'the store could not be read (database or disk is "
                "full)'; then every command: 'runs.db is truncated ...; restore it from a "
                "copy or an export'")
def test_a_full_disk_at_every_phase_then_resume(tmp_path):
    run_id = "full-disk"
    with tmpfs(tmp_path / "disk", "24m") as disk:
        db = disk / "runs.db"
        stops: dict[int, str] = {}           # the phase the disk filled in -> the error line
        command: tuple[object, ...] = (*DEPLOY, run_id)
        while True:
            proc = subprocess.Popen(
                [sys.executable, "-m", "npu_deploy", "--db", str(db), *map(str, command)],
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=_env())
            phase = None
            while proc.poll() is None:
                phase, _ = _phase(db, run_id)
                if phase is not None and phase not in stops:
                    break
                time.sleep(0.05)
            if proc.poll() is not None:
                assert proc.wait() == 0, proc.stderr.read() if proc.stderr else ""
                break
            _without_slack(db)
            filler = fill(disk)
            _, err = proc.communicate(timeout=600)
            assert proc.returncode != 0, f"phase {phase}: the run went on with the disk full"
            lines = err.splitlines()
            assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX), err
            assert FULL in lines[0] and f"npu-deploy resume {run_id}" in lines[0], lines[0]
            stops[phase] = lines[0]
            # readable while the disk is full, and intact
            done = npu_deploy("--db", db, "verify", run_id)
            assert done.returncode == 0, done.stderr
            filler.unlink()
            command = ("resume", run_id)
        assert sorted(stops) == list(range(8)), stops
        done = npu_deploy("--db", db, "verify", run_id)
        assert done.returncode == 0, done.stderr
        with EventStore.open(db, readonly=True) as s:
            state = s.fold(run_id)
            assert state.status == "finished" and state.verdict == "PASS"
            assert s.integrity_problem() is None
            assert sum(e.type == "run.resumed" for e in s.events(run_id)) == len(stops)

