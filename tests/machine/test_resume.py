"""Crash safety of the conductor, the run-control commands, and snapshots (issue 6).

The crash test kills a real `npu-deploy` process with SIGKILL at 30 random points and
resumes it each time; the fake pipeline (tests/fake_pipeline.py) keeps it fast.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from paths import TESTS

from npu_deploy.events import NewEvent
from npu_deploy.store import EventStore, RunWriter, StoreError

VOLATILE = {"duration_s", "wall_s", "agent_s", "backend_s", "waiting_s", "paused_s", "command_id"}


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(TESTS), "FAKE_STEP_S": "0.04", "FAKE_STEPS": "8",
           "FAKE_FAIL": "2:1,5:1"}
    env.pop("NPU_DEPLOY_DB", None)
    return {**env, **extra}


def _cli(db: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "npu_deploy", "--db", str(db), *args]


DEPLOY = ("deploy", "tiny", "--headless", "--auto-approve", "--pause-at", "4,6",
          "--pipeline", "fake_pipeline:make", "--run-id")


def _normalized(db: Path, run_id: str) -> list[tuple]:
    """The run's events without resumes, timestamps, ids, hashes and measured durations."""
    def clean(value):
        if isinstance(value, dict):
            return tuple(sorted((k, clean(v)) for k, v in value.items() if k not in VOLATILE))
        if isinstance(value, list):
            return tuple(clean(v) for v in value)
        return value

    with EventStore.open(db, readonly=True) as store:
        return [(e.type, e.phase, e.attempt, e.actor, e.idempotency_key, clean(e.payload))
                for e in store.events(run_id) if e.type != "run.resumed"]


def _state(db: Path, run_id: str):
    if not db.exists():
        return None
    try:
        store = EventStore.open(db, readonly=True)
    except StoreError:             # being created by the first process
        return None
    with store:
        if run_id not in store.run_ids():
            return None
        return store.fold(run_id)


def _awaiting(state, phase: int) -> bool:
    return (state is not None and state.current_phase == phase
            and state.phases[phase].pending_checkpoint is not None)


def _approve(db: Path, run_id: str, state, phase: int) -> None:
    """Approve phase's checkpoint by its id; at phase 6, first a stale approve that names
    phase 4's (already approved) checkpoint: it must be refused, never applied to phase 6's."""
    with EventStore.open(db) as store:
        if phase == 6:
            store.post_command(run_id, "approve", {"checkpoint_id": "p4.a1"})
        store.post_command(run_id, "approve",
                           {"checkpoint_id": state.phases[phase].pending_checkpoint})


def _uninterrupted(db: Path, run_id: str) -> None:
    proc = subprocess.Popen(_cli(db, *DEPLOY, run_id), env=_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    approved: set[int] = set()
    deadline = time.monotonic() + 120
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            state = _state(db, run_id)
            for phase in (4, 6):
                if phase not in approved and _awaiting(state, phase):
                    _approve(db, run_id, state, phase)
                    approved.add(phase)
            time.sleep(0.05)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.wait() == 0


@pytest.mark.e2e
def test_kill_9_at_30_points_then_resume_gives_the_uninterrupted_run(tmp_path):
    reference_db, db, run_id = tmp_path / "ref.db", tmp_path / "runs.db", "crash-run"
    output = tmp_path / "process.out"         # the latest process's, for a failure's message
    _uninterrupted(reference_db, run_id)
    want = _normalized(reference_db, run_id)

    rng = random.Random(6)
    kills = kills_waiting = starts = 0
    # The checkpoints of phases 4 and 6 wait for a person; they are approved only after
    # 15 and then 30 kills, with a few kills while waiting, so every run is killed 30 times.
    approve_after = {4: 15, 6: 30}
    approved: set[int] = set()
    proc = None
    try:
        while True:
            state = _state(db, run_id)
            if state is not None and state.terminal:
                break
            cmd = _cli(db, *DEPLOY, run_id) if state is None else _cli(db, "resume", run_id)
            before = state.version if state is not None else 0
            with open(output, "w") as out:
                proc = subprocess.Popen(cmd, env=_env(), stdout=out, stderr=subprocess.STDOUT)
            starts += 1
            # the kill point is counted from the process's first event (its run.started or
            # run.resumed), not from its launch: how long Python takes to import varies (a
            # minute and more on two cores shared with the rest of the suite), so the limit
            # only tells a hang from a slow start
            started_by = time.monotonic() + 300
            while proc.poll() is None and ((s := _state(db, run_id)) is None
                                           or s.version == before):
                assert time.monotonic() < started_by, "the process records no start"
                time.sleep(0.01)
            deadline = time.monotonic() + (rng.uniform(0.1, 0.6) if kills < 30 else 60)
            while proc.poll() is None and time.monotonic() < deadline:
                state = _state(db, run_id)
                for phase, after in approve_after.items():
                    if (phase not in approved and _awaiting(state, phase) and kills >= after
                            and kills_waiting >= 3):
                        _approve(db, run_id, state, phase)
                        approved.add(phase)
                time.sleep(0.02)
            if proc.poll() is None:
                state = _state(db, run_id)
                waiting = any(_awaiting(state, p) and p not in approved for p in approve_after)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                kills += 1
                kills_waiting += waiting
            else:         # it stopped by itself: only the run's end may stop it
                tail = "\n".join(output.read_text().splitlines()[-15:])
                assert proc.returncode == 0, f"start {starts} exited {proc.returncode}:\n{tail}"
            assert starts < 200, "the run does not finish"
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
    assert kills >= 30 and kills_waiting >= 3

    assert _normalized(db, run_id) == want
    with EventStore.open(db, readonly=True) as store:
        assert store.verify(run_id).ok
        decisions = [e for e in store.events(run_id) if e.type == "human.decision"
                     and e.actor == "human"]
        assert len(decisions) == 2 and not store.pending_commands(run_id)
        assert [d.payload["checkpoint_id"] for d in decisions] == ["p4.a1", "p6.a1"]
        refused = [e for e in store.events(run_id) if e.type == "error"]
        assert [e.payload["kind"] for e in refused] == ["command_refused"]
        assert "p4.a1 is no longer open" in refused[0].payload["message"]
        resumed = [e for e in store.events(run_id) if e.type == "run.resumed"]
        assert len(resumed) == starts - 1          # every start after the first resumed it


# --- the commands ------------------------------------------------------------------------

def test_deploy_refuses_bad_options_and_models_before_creating_a_run(cli, tmp_path):
    from conftest import assert_one_error

    db = tmp_path / "runs.db"
    assert_one_error(cli("--db", db, "deploy", "tiny", "--pipeline", "fake_pipeline:make"),
                     "--headless")                   # the TUI needs a terminal
    assert_one_error(cli("--db", db, "deploy", "tiny", "--headless"), "tiny")
    assert_one_error(cli("--db", db, "deploy", "tiny", "--headless", "--pipeline", "nope"),
                     "module:function")
    assert_one_error(cli("--db", db, "deploy", "tiny", "--headless", "--pause-at", "9",
                         "--pipeline", "fake_pipeline:make"), "no phase 9")
    assert not db.exists() or EventStore.open(db, readonly=True).run_ids() == []


def test_decide_checks_the_run_before_leaving_a_command(cli, tmp_path, monkeypatch):
    from conftest import assert_one_error

    monkeypatch.setenv("FAKE_FAIL", "0:1")
    db = tmp_path / "runs.db"
    from fake_pipeline import make

    from npu_deploy.machine import Conductor, Policy

    with EventStore.open(db) as store:
        c = Conductor.start(store, make(), Policy(), model="tiny", run_id="r1")
        assert c.run(wait=False).reason == "awaiting_pick"
        c.close()
    assert_one_error(cli("--db", db, "decide", "r1", "approve"), "not waiting at a checkpoint")
    assert_one_error(cli("--db", db, "decide", "r1", "pick", "7"), "from 1 to 2")
    result = cli("--db", db, "decide", "r1", "pick", "2")
    assert result.exit_code == 0 and "pick left for run r1" in result.stdout
    with EventStore.open(db) as store:
        (cmd,) = store.pending_commands("r1")
        assert cmd["payload"] == {"direction_id": "bo", "proposal_id": "p0.a1"}
    assert_one_error(cli("--db", db, "decide", "no-such-run", "pause"), "no-such-run")


def test_a_decision_names_its_checkpoint_and_a_stale_one_is_never_applied(cli, tmp_path,
                                                                            monkeypatch):
    """An approve typed for one checkpoint is refused, not applied to the next one."""
    from conftest import assert_one_error
    from fake_pipeline import make

    from npu_deploy.machine import Conductor, Policy

    monkeypatch.setenv("FAKE_FAIL", "")
    db = tmp_path / "runs.db"
    with EventStore.open(db) as store:
        c = Conductor.start(store, make(), Policy(), model="tiny", run_id="r1")
        assert c.run(wait=False).reason == "awaiting_human"
        assert c.state.phases[0].pending_checkpoint == "p0.a1"
        assert cli("--db", db, "decide", "r1", "approve", "--checkpoint", "p0.a1").exit_code == 0
        (cmd,) = store.pending_commands("r1")
        assert cmd["payload"] == {"checkpoint_id": "p0.a1"}
        # a second answer typed while the first waits in the inbox names the same checkpoint
        assert cli("--db", db, "decide", "r1", "approve").exit_code == 0
        assert c.run(wait=False).reason == "awaiting_human"        # now at phase 1's
        (twice,) = [e for e in store.events("r1") if e.type == "error"]
        assert "not waiting at a checkpoint" in twice.payload["message"] or \
            "no longer open" in twice.payload["message"]
        before = store.fold("r1").version
        assert_one_error(cli("--db", db, "decide", "r1", "approve", "--checkpoint", "p0.a1"),
                         "p0.a1 is no longer open", "p1.a1")
        assert not store.pending_commands("r1") and store.fold("r1").version == before
        # the same race through the inbox (typed before phase 0's was recorded): refused
        store.post_command("r1", "approve", {"checkpoint_id": "p0.a1"})
        assert c.run(wait=False).reason == "awaiting_human"
        s = c.state
        assert s.current_phase == 1 and s.phases[1].pending_checkpoint == "p1.a1"
        refused = [e for e in store.events("r1") if e.type == "error"][-1]
        assert "p0.a1 is no longer open" in refused.payload["message"]
        # a plain approve answers the open checkpoint, and names it
        assert cli("--db", db, "decide", "r1", "approve").exit_code == 0
        assert store.pending_commands("r1")[0]["payload"] == {"checkpoint_id": "p1.a1"}
        c.run(wait=False)
        approved = [e.payload["checkpoint_id"] for e in store.events("r1")
                    if e.type == "human.decision"]
        assert approved == ["p0.a1", "p1.a1"]
        # nothing open: approve fails in one line, and nothing is left
        store.post_command("r1", "pause")
        assert c.run(wait=False).reason == "paused"
        c.close()
    with EventStore.open(db) as store:
        c = Conductor.start(store, make(), Policy(), model="tiny", run_id="r2")
        c.run(wait=False)
        store.post_command("r2", "abort")
        c.run(wait=False)
        c.close()
    assert_one_error(cli("--db", db, "decide", "r2", "approve"), "aborted")
    assert_one_error(cli("--db", db, "decide", "r2", "approve", "--checkpoint", "p0.a1"),
                     "no longer open", "nothing waits")
    assert_one_error(cli("--db", db, "decide", "r2", "pause", "--checkpoint", "p0.a1"),
                     "--checkpoint goes with")


def test_resume_and_fork_commands(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "")
    db = tmp_path / "runs.db"
    from conftest import assert_one_error
    from fake_pipeline import make

    from npu_deploy.machine import Conductor, Policy

    with EventStore.open(db) as store:
        c = Conductor.start(store, make(), Policy(), model="tiny", run_id="r1",
                            config={"pipeline": "fake_pipeline:make"})
        c.run(wait=False)
        at = c.state.version
        c.close()
        store.post_command("r1", "approve")
    result = cli("--db", db, "resume", "r1", "--no-wait")
    assert result.exit_code == 3 and "r1" in result.stderr        # waits at phase 1
    forked = cli("--db", db, "fork", "r1", "--at", str(at), "--note", "again")
    assert forked.exit_code == 0
    new = forked.stdout.strip()
    with EventStore.open(db, readonly=True) as store:
        first = store.event_at(new, 1)
        assert first.type == "run.forked" and first.payload["note"] == "again"
        assert store.fold(new).phases[0].pending_checkpoint is not None
    assert_one_error(cli("--db", db, "fork", "r1", "--at", "99999"), "versions 1..")


# --- snapshots ---------------------------------------------------------------------------

def _big_run(store: EventStore, n: int) -> str:
    w = RunWriter.create(store, {"model": "m", "backend": "emulator", "agent": "fake",
                                 "code_version": "test"})
    for start in range(0, n, 10_000):
        w.append_batch([NewEvent("agent.message", {"role": "assistant", "text": f"step {i}"},
                                 actor="agent") for i in range(start, min(n, start + 10_000))])
    w.close()
    return w.run_id


@pytest.mark.slow
def test_a_100k_event_run_replays_to_any_event_and_resumes_from_its_snapshots(tmp_path):
    """What a long run's replay and resume give (how long they take is
    benchmarks/resume_bench.py's: under a second each)."""
    with EventStore.open(tmp_path / "runs.db") as store:
        run_id = _big_run(store, 100_000)
        state = store.fold(run_id, 99_000)                # replay to any event
        assert state.version == 99_000
        assert state == store.fold(run_id, 99_000, use_snapshots=False)
        with RunWriter.attach(store, run_id) as w:        # resume: lock, verify, fold
            assert w.state.version == 100_001
            assert w.state == store.fold(run_id, use_snapshots=False)


def test_a_snapshot_of_another_reducer_is_ignored_and_rebuilt(tmp_path):
    from npu_deploy.events.state import REDUCER_VERSION

    with EventStore.open(tmp_path / "runs.db") as store:
        run_id = _big_run(store, 3000)
        good = store.fold(run_id, use_snapshots=False)
        # as an older npu-deploy wrote it, with this user's key (store/anchor.py)
        from npu_deploy.store.anchor import mac, signing_key, snapshot_fields
        version, hash_ = store.conn.execute("SELECT run_version, hash FROM snapshots WHERE "
                                            "run_id = ?", (run_id,)).fetchone()
        fields = snapshot_fields(run_id, version, REDUCER_VERSION - 1, hash_,
                                 '{"not": "a state"}')
        store.conn.execute("UPDATE snapshots SET reducer_version = ?, state = ?, mac = ? "
                           "WHERE run_id = ?", (REDUCER_VERSION - 1, fields[-1],
                                                mac(signing_key(), "snapshot", fields), run_id))
        store.conn.commit()
        assert store.load_snapshot(run_id) is None
        assert store.fold(run_id) == good
        with RunWriter.attach(store, run_id) as w:        # the next writer saves a new one
            w.append(NewEvent("agent.message", {"role": "assistant", "text": "resumed"},
                              actor="agent"))
        rows = store.conn.execute("SELECT reducer_version FROM snapshots WHERE run_id = ?",
                                  (run_id,)).fetchall()
        assert (REDUCER_VERSION,) in rows
        assert store.fold(run_id).version == good.version + 1

