"""Red team, area "writers" (issue 39, points 2, 7 and 8b): one writer per run whatever path
reaches the store file (a symbolic link, a linked folder, a relative path, a bind mount, a
hard link), with real `npu-deploy resume` processes racing; a refused command leaves no key,
lock, workspace or store behind; and a person's decision is recorded only from an inbox
command, by the writer and as the independent evaluator checks it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest
from paths import ROOT, TESTS

from npu_deploy.machine import Conductor, Policy
from npu_deploy.store import EventStore

AREA = "writers"
IS_ROOT = os.geteuid() == 0


def redteam(case: str, before: str) -> pytest.MarkDecorator:
    return pytest.mark.redteam(area=AREA, case=case, before=before)


def env() -> dict[str, str]:
    """This checkout's code (ROOT first) and the fake pipeline (TESTS) in the children."""
    path = [str(ROOT), str(TESTS), *filter(None, [os.environ.get("PYTHONPATH")])]
    out = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    out.pop("NPU_DEPLOY_DB", None)
    return out


def waiting_run(db: Path, fake: Callable[..., Any]) -> str:
    """A fake-pipeline run whose phase 0 passed its gate and waits for a person."""
    db.parent.mkdir(parents=True, exist_ok=True)
    with EventStore.open(db) as store:
        c = Conductor.start(store, fake(), Policy(), model="tiny-llama",
                            config={"pipeline": "fake_pipeline:make"})
        assert c.run(wait=False).reason == "awaiting_human"
        c.close()
    return c.run_id


def events_of(db: Path, run_id: str, type_: str) -> int:
    with EventStore.open(db, readonly=True) as store:
        return sum(1 for _ in store.events(run_id, types=(type_,)))


def digest(path: Path) -> str:
    return sha256(path.read_bytes()).hexdigest()


class Resume:
    """`npu-deploy --db DB resume RUN` as a process of its own: it waits for a person at the
    run's checkpoint, holding the run's writer, until it is stopped."""

    def __init__(self, db: str, run_id: str, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "npu_deploy", "--db", db, "resume", run_id], cwd=cwd,
            env=env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    def outcome(self) -> str:
        """'waiting' once it waits for a person with the run's writer, else 'exit N: stderr'."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("waiting at"):
                return "waiting"
        code = self.proc.wait(timeout=120)
        return f"exit {code}: {self.proc.stderr.read().strip() if self.proc.stderr else ''}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()


@contextmanager
def racing(*procs: tuple[str, Path], run_id: str) -> Iterator[list[str]]:
    """Start one `resume` per (db argument, working folder) at once; yield their outcomes;
    stop them all."""
    started = [Resume(db, run_id, cwd) for db, cwd in procs]
    try:
        yield [p.outcome() for p in started]
    finally:
        for p in started:
            p.stop()


@contextmanager
def bind(source: Path, target: Path) -> Iterator[None]:
    """`mount --bind source target` for the block (root only; skipped where it cannot be)."""
    if not IS_ROOT:
        pytest.skip("a bind mount needs root")
    if source.is_dir():
        target.mkdir()
    else:
        target.touch()
    done = subprocess.run(["mount", "--bind", str(source), str(target)], capture_output=True,
                          text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"mount --bind is not possible here: {done.stderr.strip()}")
    try:
        yield
    finally:
        subprocess.run(["umount", str(target)], check=True)


# --- point 2: one writer per run, per file --------------------------------------------

#: name -> how the second process reaches the store tmp/store/runs.db: (its --db, its cwd).
SAME_FILE: dict[str, Callable[[Path], tuple[str, Path]]] = {
    "a symbolic link to the file": lambda tmp: (_link(tmp / "alias.db", tmp / "store/runs.db"),
                                                tmp),
    "a symbolic link to its folder": lambda tmp: (
        str(Path(_link(tmp / "linked", tmp / "store")) / "runs.db"), tmp),
    "a relative path": lambda tmp: ("runs.db", tmp / "store"),
}


def _link(link: Path, target: Path) -> str:
    link.symlink_to(target)
    return str(link)


def one_writer(outcomes: list[str]) -> None:
    """Exactly one process has the run's writer; the other was refused in one line."""
    assert sorted(o == "waiting" for o in outcomes) == [False, True], outcomes
    refused = next(o for o in outcomes if o != "waiting")
    assert refused.startswith("exit 1: npu-deploy: error:"), refused
    assert "is being written by another process" in refused and "\n" not in refused, refused


@pytest.mark.e2e
@pytest.mark.parametrize("how", [pytest.param(
    name, id=name.replace(" ", "-"), marks=redteam(
        f"two resumes through {name} and the store's own path",
        "both took 'the' run lock (a folder named after the path given) and appended: two "
        "run.resumed events" if "link to the file" in name else
        "(held) the lock folder is beside the path given, which is the same folder"))
    for name in SAME_FILE])
def test_two_resumes_through_two_paths_get_one_writer(tmp_path, fake, how):
    db = tmp_path / "store" / "runs.db"
    run_id = waiting_run(db, fake)
    other = SAME_FILE[how](tmp_path)
    with racing((str(db), tmp_path), other, run_id=run_id) as outcomes:
        one_writer(outcomes)
        assert events_of(db, run_id, "run.resumed") == 1
    assert not (tmp_path / "alias.db.locks").exists()


@pytest.mark.e2e
@redteam("two resumes through a bind-mounted folder and the store's own path",
         before="(held) a bind-mounted folder holds the same lock files")
def test_a_bind_mounted_folder_gets_the_same_lock(tmp_path, fake):
    db = tmp_path / "store" / "runs.db"
    run_id = waiting_run(db, fake)
    with bind(tmp_path / "store", tmp_path / "bound"), racing(
            (str(db), tmp_path), (str(tmp_path / "bound" / "runs.db"), tmp_path),
            run_id=run_id) as outcomes:
        one_writer(outcomes)
        assert events_of(db, run_id, "run.resumed") == 1


def _hard_link(tmp: Path) -> Iterator[Path]:
    other = tmp / "elsewhere" / "hard.db"
    other.parent.mkdir()
    os.link(tmp / "store" / "runs.db", other)
    yield other


@contextmanager
def _file_bind(tmp: Path) -> Iterator[Path]:
    other = tmp / "elsewhere" / "mounted.db"
    other.parent.mkdir()
    with bind(tmp / "store" / "runs.db", other):
        yield other


SECOND_NAME: dict[str, Callable[[Path], Any]] = {
    "a hard link": contextmanager(_hard_link),
    "a bind mount of the file": _file_bind,
}


@pytest.mark.e2e
@pytest.mark.parametrize("how", [pytest.param(name, id=name.replace(" ", "-"), marks=redteam(
    f"two resumes through {name} and the store's own path",
    "both resumed, each with its own lock, its own -wal and -shm: the second name saw none "
    "of the first's WAL (SQLite: 'no such table') and a checkpoint through either corrupts "
    "it")) for name in SECOND_NAME])
def test_a_store_with_a_second_name_is_refused_by_every_process(tmp_path, fake, how):
    db = tmp_path / "store" / "runs.db"
    run_id = waiting_run(db, fake)
    before = digest(db)
    with SECOND_NAME[how](tmp_path) as other, racing(
            (str(db), tmp_path), (str(other), tmp_path), run_id=run_id) as outcomes:
        for outcome in outcomes:
            assert outcome.startswith("exit 1: npu-deploy: error:"), outcome
            assert "\n" not in outcome and "SQLite keeps a store's write-ahead log" in outcome
        assert digest(db) == before
        assert not (tmp_path / "elsewhere" / f"{other.name}.locks").exists()
        assert not (tmp_path / "elsewhere" / f"{other.name}-wal").exists()


# --- point 7: a refused command leaves nothing behind ------------------------------------

def listing(folder: Path) -> dict[str, str | None]:
    """Every entry under a folder: its path -> its bytes' digest (None for a folder)."""
    return {str(p.relative_to(folder)): (digest(p) if p.is_file() else None)
            for p in sorted(folder.rglob("*"))}


def ignoring_wal(entries: dict[str, str | None]) -> dict[str, str | None]:
    """Without SQLite's -wal and -shm, which a read-only look at a WAL store leaves (issue
    39's point 6, another helper's)."""
    return {k: v for k, v in entries.items() if not k.endswith(("-wal", "-shm"))}


@redteam("resume with the key file missing",
         before="refused ('not anchored by your key: its anchor was made by another key'), "
                "after making a new key at that path: from then on every old run read as "
                "made by another key")
def test_a_refused_resume_makes_no_key_and_names_the_missing_one(tmp_path, fake, cli,
                                                                  monkeypatch, anchor_key):
    from conftest import assert_one_error

    db = tmp_path / "store" / "runs.db"
    run_id = waiting_run(db, fake)
    missing = tmp_path / "conf" / "npu-deploy" / "key"
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(missing))
    before = ignoring_wal(listing(tmp_path))
    for args in (("resume", run_id), ("resume", run_id, "--no-wait"),
                 ("decide", run_id, "approve")):
        line = assert_one_error(cli("--db", db, *args), f"there is no key at {missing}",
                                "put that key file back", "no key was made")
        assert "another key than this user's" not in line
        assert not missing.parent.parent.exists(), "a refused command made a key"
    assert ignoring_wal(listing(tmp_path)) == before
    assert events_of(db, run_id, "run.resumed") == 0
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(anchor_key))    # the key is back: all is well
    assert cli("--db", db, "verify", run_id).exit_code == 0


@redteam("resume of a copied store (no locks folder) with the key missing",
         before="refused, after making the store's locks folder and the run's lock file "
                "(and a new key)")
def test_a_refused_resume_of_a_copied_store_makes_no_lock(tmp_path, fake, cli, monkeypatch):
    import shutil
    import sqlite3

    from conftest import assert_one_error

    run_id = waiting_run(tmp_path / "orig" / "runs.db", fake)
    conn = sqlite3.connect(tmp_path / "orig" / "runs.db")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    (tmp_path / "copy").mkdir()
    db = tmp_path / "copy" / "runs.db"
    shutil.copyfile(tmp_path / "orig" / "runs.db", db)
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(tmp_path / "conf" / "key"))
    assert_one_error(cli("--db", db, "resume", run_id, "--no-wait"), "there is no key at")
    assert not (tmp_path / "copy" / "runs.db.locks").exists()
    assert not (tmp_path / "conf").exists()


@redteam("a key made: is the person told?",
         before="no: a new key appeared silently, and old runs read as 'made by another key' "
                "with nothing saying why")
def test_a_new_key_is_announced_once_where_and_why(tmp_path, fake, cli, monkeypatch):
    db = tmp_path / "runs.db"
    run_id = waiting_run(db, fake)
    new = tmp_path / "conf" / "key"
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(new))
    first = cli("--db", db, "resume", run_id, "--no-wait", "--adopt")
    notes = [line for line in first.stderr.splitlines() if "note:" in line]
    assert len(notes) == 1 and f"made a new key at {new}" in notes[0], first.stderr
    assert f"to anchor run {run_id}" in notes[0] and "back it up" in notes[0]
    assert (new.stat().st_mode & 0o777) == 0o600
    again = cli("--db", db, "resume", run_id, "--no-wait")
    assert "made a new key" not in again.stderr and "resumed" in again.output


#: Commands about a run that must already be there, with --db naming no store.
ABOUT_A_RUN = {
    "resume": ("resume", "r1"), "fork": ("fork", "r1", "--at", "1"),
    "decide": ("decide", "r1", "approve"), "lessons approve": ("lessons", "r1", "approve", "L"),
    "attach": ("attach", "r1"), "replay": ("replay", "r1"),
}


@pytest.mark.parametrize("name", [pytest.param(name, id=name.replace(" ", "-"), marks=redteam(
    f"{name} with --db naming no store",
    "an empty store (and its folder) was created, then 'no run r1'" if name != "resume" else
    "an empty store and its folder were created, then 'no run r1': the next command found "
    "a store with no runs")) for name in ABOUT_A_RUN])
def test_a_command_about_a_run_creates_no_store(tmp_path, cli, name):
    from conftest import assert_one_error

    db = tmp_path / "nowhere" / "runs.db"
    assert_one_error(cli("--db", db, *ABOUT_A_RUN[name]), f"no store at {db}")
    assert listing(tmp_path) == {}


#: A key file npu-deploy cannot use, and the words that name why.
BAD_KEYS: dict[str, tuple[Callable[[Path], None], str, str]] = {
    "a symbolic link": (lambda k: k.symlink_to(k.parent / "elsewhere"), "is a symbolic link",
                        "(Too many levels of symbolic links); fix its permissions"),
    "a directory": (lambda k: k.mkdir(), "is a directory, not a file",
                    "'Is a directory: 6'"),
    "a FIFO": (lambda k: os.mkfifo(k), "is a FIFO (named pipe), not a file",
               "(held) 'is not a regular file'"),
    "a path through a file": (lambda k: None, "goes through something that is not a folder",
                              "(Not a directory); fix its permissions"),
}


@pytest.mark.parametrize("kind", [pytest.param(kind, id=kind.replace(" ", "-"), marks=redteam(
    f"the key file is {kind}", f"the error named another cause: {BAD_KEYS[kind][2]}"))
    for kind in BAD_KEYS])
def test_a_key_file_that_cannot_be_used_is_named_for_what_it_is(tmp_path, fake, cli,
                                                                monkeypatch, kind):
    from conftest import assert_one_error

    db = tmp_path / "runs.db"
    run_id = waiting_run(db, fake)
    key = tmp_path / "conf" / "key"
    key.parent.mkdir()
    if kind == "a path through a file":
        (tmp_path / "conf" / "file").touch()
        key = tmp_path / "conf" / "file" / "key"
    make, words, _ = BAD_KEYS[kind]
    make(key)
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(key))
    before = ignoring_wal(listing(tmp_path))
    for args in (("verify", run_id), ("resume", run_id, "--no-wait")):
        assert_one_error(cli("--db", db, *args), str(key), words, "NPU_DEPLOY_KEY_FILE")
    assert ignoring_wal(listing(tmp_path)) == before


@redteam("two approves of one checkpoint, racing",
         before="the second was refused as 'the run is not waiting at a checkpoint (phase 0: "
                "awaiting_human)': a state that contradicts itself, not the cause")
def test_a_racing_second_answer_is_refused_for_what_happened(tmp_path, fake):
    from npu_deploy.machine import resume

    db = tmp_path / "runs.db"
    run_id = waiting_run(db, fake)
    with EventStore.open(db) as store:
        for _ in range(2):
            store.post_command(run_id, "approve", {"checkpoint_id": "p0.a1"})
        store.post_command(run_id, "approve", {})
        c = resume(store, run_id, fake())
        c.run(wait=False)
        c.close()
        refused = [e.payload["message"] for e in store.events(run_id, types=("error",))]
    assert len(refused) == 2, refused
    assert "p0.a1 is no longer open (it was answered" in refused[0], refused[0]
    assert "phase 0 was answered already: approve" in refused[1], refused[1]
    assert not any("awaiting_human" in m for m in refused)


@redteam("lessons approve while the run is being written",
         before="refused ('being written by another process') after the trigger was already "
                "written into the skill catalog's overlay: the matcher used an approval the "
                "log never recorded")
def test_a_refused_lesson_approval_leaves_the_catalog_alone(tmp_path, cli):
    from conftest import STARTED, assert_one_error

    from npu_deploy.events import NewEvent

    db = tmp_path / "runs.db"
    with EventStore.open(db) as store, store.create_run(STARTED) as w:
        w.append(NewEvent("lesson.recorded", {
            "symptom": "s", "root_cause": "r", "fix": "f", "target_skill": "k",
            "lesson_id": "L1", "proposes": {"kind": "trigger", "skill": "k",
                                            "trigger": {"id": "t1", "when": "x"}}},
            actor="agent"))
        run_id = w.run_id
    with EventStore.open(db) as store, store.writer(run_id):      # another writer holds it
        assert_one_error(cli("--db", db, "lessons", run_id, "approve", "L1"),
                         "being written by another process")
    assert not (tmp_path / "skills").exists()
    assert events_of(db, run_id, "lesson.approved") == 0


# --- point 8b: a person's decision has an inbox command behind it ------------------------

def approve(command_id: str = "forged", **fields: Any) -> Any:
    from npu_deploy.events import NewEvent

    return NewEvent("human.decision", {"decision": "approve", "command_id": command_id,
                                       "author": "human", "checkpoint_id": "p0.a1", **fields},
                    actor="human", phase=0, attempt=1)


@redteam("a human.decision appended through the writer with no inbox command",
         before="accepted and recorded: the run's phase 0 counted as approved by a person")
def test_the_writer_records_a_persons_decision_only_from_their_command(tmp_path, fake):
    from npu_deploy.events import InvalidEvent

    db = tmp_path / "runs.db"
    run_id = waiting_run(db, fake)
    with EventStore.open(db) as store:
        pause = store.post_command(run_id, "pause")
        head = store.fold(run_id).version
        with store.writer(run_id) as w:
            with pytest.raises(InvalidEvent, match="none is consumed by this one"):
                w.append(approve())
            with pytest.raises(InvalidEvent, match="none is consumed by this one"):
                w.append_batch([approve()])
            # consuming a command that says something else is no better
            with pytest.raises(InvalidEvent, match="says other than its inbox command"):
                w.append(approve(pause), consumes=pause)
        assert store.fold(run_id).version == head
        assert [c["command_id"] for c in store.pending_commands(run_id)] == [pause]


@redteam("a 'policy:' approval appended through the writer in an interactive run",
         before="accepted: any author 'policy:...' passed as the run's own policy, which "
                "never approves for a person in an interactive run")
def test_the_writer_takes_a_policys_decision_only_where_the_policy_decides(tmp_path, fake):
    from npu_deploy.events import InvalidEvent

    db = tmp_path / "runs.db"
    run_id = waiting_run(db, fake)                  # Policy(): interactive
    with EventStore.open(db) as store, store.writer(run_id) as w:
        with pytest.raises(InvalidEvent, match="takes no approve at phase 0"):
            w.append(approve(author="policy:auto-approve"))


def forge_decision(db: Path, run_id: str, **fields: Any) -> None:
    """What code holding the key can still do past the writer: insert an approval with
    no command behind it, and anchor the head over it (the run then verifies OK)."""
    import sqlite3

    from npu_deploy.store.anchor import anchor_head, signing_key
    from npu_deploy.store.writer import insert_row, prepare

    conn = sqlite3.connect(db, isolation_level=None)
    version, head = conn.execute("SELECT head_version, head_hash FROM runs WHERE run_id = ?",
                                 (run_id,)).fetchone()
    conn.execute("BEGIN IMMEDIATE")
    insert_row(conn, prepare(approve(**fields), run_id=run_id, run_version=version + 1,
                             prev_hash=head))
    anchor_head(conn, signing_key(), run_id)
    conn.execute("COMMIT")
    conn.close()


def log_checks(db: Path, run_id: str) -> list[dict[str, Any]]:
    import json

    done = subprocess.run([sys.executable, "-m", "npu_deploy.pipeline.evaluator", str(db),
                           run_id, "--json"], capture_output=True, text=True, check=False,
                          env=env(), timeout=300)
    assert done.returncode == 1, done.stderr      # evaluated, and failed
    return [c for c in json.loads(done.stdout)["checks"]
            if c["metric"] == "decision_has_its_command_or_policy"]


FORGED = {"a person's": ({}, "no inbox command forged"),
          "a policy's": ({"author": "policy:auto-approve"}, "takes no approve at phase 0")}


@pytest.mark.parametrize("whose", [pytest.param(whose, id=whose[2:-2], marks=redteam(
    f"evaluator: an anchored approval as {whose} with nothing behind it",
    "passed the independent evaluator's log checks: the forged approval counted for "
    "exit_after_passing_gate_and_decision")) for whose in FORGED])
def test_the_evaluator_fails_a_decision_with_nothing_behind_it(tmp_path, fake, whose):
    db = tmp_path / "runs.db"
    run_id = waiting_run(db, fake)
    fields, why = FORGED[whose]
    forge_decision(db, run_id, **fields)
    with EventStore.open(db, readonly=True) as store:
        assert store.verify(run_id).status == "ok"          # the anchor alone cannot tell
    failed = log_checks(db, run_id)
    assert len(failed) == 1 and not failed[0]["passed"] and failed[0]["gating"], failed
    assert why in failed[0]["message"]


@redteam("evaluator: a person's decision left with `decide`",
         before="(held) a decision recorded from its command passes")
def test_the_evaluator_passes_a_decision_recorded_from_its_command(tmp_path, fake, cli):
    from npu_deploy.machine import fork, resume

    db = tmp_path / "runs.db"
    run_id = waiting_run(db, fake)
    assert cli("--db", db, "decide", run_id, "approve").exit_code == 0
    with EventStore.open(db) as store:
        c = resume(store, run_id, fake())
        c.run(wait=False)
        c.close()
        decided = next(store.events(run_id, types=("human.decision",))).run_version
        forked = fork(store, run_id, decided + 1)      # the copy stands as the original
        assert store.unbacked_decisions(run_id) == {} == store.unbacked_decisions(forked)
    assert log_checks(db, run_id) == []
