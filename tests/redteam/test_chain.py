"""Issue 26, points 3 and 4: a log nobody can rewrite quietly, decisions only a person's tools
can leave, and imported runs that execute nothing they bring.

Each test plays someone who can write the store file (the agent's sandbox before it was
confined, a careless script) but cannot read the key: they edit rows with plain sqlite3,
recompute every hash of the SHA-256 chain (which needs no secret) and fix the run's head."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import zlib
from collections.abc import Callable
from hashlib import sha256
from pathlib import Path
from typing import Any

import pytest
from conftest import STARTED, assert_one_error

from npu_deploy.events import NewEvent, canonical_json
from npu_deploy.events.envelope import hash_preimage
from npu_deploy.store import EventStore, export_run, import_run

TESTS = Path(__file__).resolve().parent.parent
COLUMNS = ("event_id", "run_id", "run_version", "type", "schema_version", "phase", "attempt",
           "actor", "ts", "causation_id", "correlation_id", "idempotency_key", "payload",
           "prev_hash", "hash")
Rows = list[dict[str, Any]]


def msg(text: str) -> NewEvent:
    return NewEvent("agent.message", {"role": "assistant", "text": text}, actor="agent")


def raw(db: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(db, isolation_level=None)
    for trigger in ("events_append_only_update", "events_append_only_delete",
                    "runs_head_advances", "blobs_immutable"):
        conn.execute(f"DROP TRIGGER IF EXISTS {trigger}")
    return conn


def rewrite(db: Path, run_id: str, edit: Callable[[Rows], Rows]) -> None:
    """Edit a run's events, then recompute the whole chain and the head: the unkeyed
    SHA-256 chain needs no secret to forge."""
    conn = raw(db)
    rows = [dict(zip(COLUMNS, r, strict=True)) for r in conn.execute(
        f"SELECT {', '.join(COLUMNS)} FROM events WHERE run_id = ? ORDER BY run_version",
        (run_id,))]
    rows = edit(rows)
    prev = "0" * 64
    for version, row in enumerate(rows, 1):
        row.update(run_version=version, prev_hash=prev)
        row["hash"] = prev = sha256(hash_preimage(*(row[c] for c in COLUMNS[:-1]))
                                    .encode()).hexdigest()
    conn.execute("BEGIN")
    conn.execute("DELETE FROM events WHERE run_id = ?", (run_id,))
    for row in rows:   # the events_advance_head trigger moves the head to the last one
        conn.execute(f"INSERT INTO events ({', '.join(COLUMNS)}) VALUES "
                     f"({', '.join('?' * len(COLUMNS))})", [row[c] for c in COLUMNS])
    conn.execute("COMMIT")
    conn.close()


def set_text(version: int, text: str) -> Callable[[Rows], Rows]:
    def edit(rows: Rows) -> Rows:
        rows[version - 1]["payload"] = canonical_json({"role": "assistant", "text": text})
        return rows
    return edit


def inserted(rows: Rows) -> Rows:
    extra = {**rows[2], "event_id": "0190f0f0-0000-7000-8000-000000000001",
             "payload": canonical_json({"role": "assistant", "text": "never said"})}
    return [*rows[:3], extra, *rows[3:]]


def edit_blob(db: Path, ref: str) -> None:
    raw(db).execute("UPDATE blobs SET codec = 'zlib', data = ? WHERE sha256 = ?",
                    (zlib.compress(b"forged content"), ref.removeprefix("sha256:")))


def edit_snapshot(db: Path, run_id: str) -> None:
    conn = raw(db)
    state = json.loads(conn.execute("SELECT state FROM snapshots WHERE run_id = ?",
                                    (run_id,)).fetchone()[0])
    state["model"] = "forged-model"
    conn.execute("UPDATE snapshots SET state = ? WHERE run_id = ?",
                 (canonical_json(state), run_id))


def edit_runs_row(db: Path, run_id: str) -> None:
    raw(db).execute("UPDATE runs SET model = 'forged-model', verdict = 'PASS' WHERE run_id = ?",
                    (run_id,))


def make_run(db: Path) -> tuple[str, str]:
    """A run of nine events, one of which references a blob in a tool's result, and the
    last a gate's inputs, which its schema declares a blob (a BlobRef); closed (so
    snapshotted)."""
    with EventStore.open(db) as store, store.create_run(STARTED) as w:
        ref = store.put_blob(b"a dispatch plan")
        w.append_batch([msg(f"step {i}") for i in range(5)])
        w.append(NewEvent("tool.completed", {"call_id": "c1", "tool": "plan", "ok": True,
                                             "result": {"plan": ref}}, actor="harness"))
        w.append(msg("done"))
        w.append(NewEvent("gate.evaluated", {"gate": "g", "passed": True, "checks": [
            {"subject": "s", "metric": "m", "value": 1.0, "threshold": 1.0,
             "comparison": ">=", "passed": True}],
                                             "inputs": store.put_blob(b"the gate's inputs")},
                          actor="harness"))
        return w.run_id, ref


def delete_inputs(db: Path, run_id: str) -> None:
    conn = raw(db)
    payload = conn.execute("SELECT payload FROM events WHERE run_id = ? AND type = "
                           "'gate.evaluated'", (run_id,)).fetchone()[0]
    digest = json.loads(payload)["inputs"].removeprefix("sha256:")
    conn.execute("DELETE FROM blobs WHERE sha256 = ?", (digest,))


TAMPERS: dict[str, Callable[[Path, str, str], None]] = {
    "edited event, chain recomputed": lambda db, run, ref: rewrite(db, run, set_text(3, "x")),
    "event cut out, head fixed": lambda db, run, ref: rewrite(db, run, lambda r: r[:3] + r[4:]),
    "tail truncated, head fixed": lambda db, run, ref: rewrite(db, run, lambda r: r[:-2]),
    "event inserted, chain recomputed": lambda db, run, ref: rewrite(db, run, inserted),
    "blob bytes edited": lambda db, run, ref: edit_blob(db, ref),
    "declared blob deleted": lambda db, run, ref: delete_inputs(db, run),
    "snapshot edited": lambda db, run, ref: edit_snapshot(db, run),
    "runs row edited": lambda db, run, ref: edit_runs_row(db, run),
}


def verify(db: Path, run_id: str) -> Any:
    with EventStore.open(db, readonly=True) as store:
        return store.verify(run_id)


def each_tamper(case: str, before: str) -> list[Any]:
    return [pytest.param(kind, marks=pytest.mark.redteam(area="tamper", case=case.format(kind),
                                                         before=before), id=kind)
            for kind in TAMPERS]


@pytest.mark.parametrize("kind", each_tamper(
    "verify with the key: {}", "`verify` said OK: the unkeyed chain recomputes, and blobs, "
    "snapshots and the runs row were not checked"))
def test_verify_with_the_key_finds_every_tamper_kind(tmp_path, kind):
    db = tmp_path / "runs.db"
    run_id, ref = make_run(db)
    assert verify(db, run_id).status == "ok"
    TAMPERS[kind](db, run_id, ref)
    report = verify(db, run_id)
    assert report.status == "broken" and not report.trusted, report.line()
    assert "BROKEN" in report.line()


@pytest.mark.parametrize("kind", each_tamper(
    "verify without the key: {}", "`verify` said OK, claiming it 'proves the run untouched' "
    "with nothing a forger lacks"))
def test_without_the_key_verify_says_what_it_cannot_prove(tmp_path, monkeypatch, kind, cli):
    db = tmp_path / "runs.db"
    run_id, ref = make_run(db)
    TAMPERS[kind](db, run_id, ref)
    for elsewhere in ("missing", "another"):
        monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(tmp_path / elsewhere))
        if elsewhere == "another":
            from npu_deploy.store.anchor import signing_key
            signing_key()
        report = verify(db, run_id)
        assert report.status != "ok" and not report.trusted
        if report.status == "unanchored":   # the blob check needs no key: still broken
            assert "cannot be told from the original" in report.line()
        result = cli("--db", db, "verify", run_id)
        assert result.exit_code != 0 and ": OK," not in result.output


@pytest.mark.redteam(area="tamper", case="the key: created on first use, 0600, overridable",
                     before="no key: nothing outside the database anchored a run")
def test_the_key_is_created_once_private_and_where_the_env_says(tmp_path, monkeypatch):
    from npu_deploy.store.anchor import KeyUnusable, key_path, signing_key, user_key

    path = tmp_path / "conf" / "key"
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(path))
    assert key_path() == path and user_key(create=False) is None
    run_id, _ = make_run(tmp_path / "runs.db")
    assert (path.stat().st_mode & 0o777) == 0o600 and len(path.read_bytes()) == 32
    assert signing_key() == path.read_bytes()
    assert verify(tmp_path / "runs.db", run_id).trusted
    path.chmod(0o644)
    with pytest.raises(KeyUnusable, match="chmod 600"):
        user_key(create=False)


@pytest.mark.redteam(area="tamper", case="export/import carries the anchor only to its key",
                     before="an export carried no anchor; any recomputed file imported as "
                            "intact")
def test_an_import_keeps_the_anchor_only_where_the_key_can_check_it(tmp_path, monkeypatch):
    run_id, _ = make_run(tmp_path / "a.db")
    with EventStore.open(tmp_path / "a.db", readonly=True) as store:
        export_run(store, run_id, tmp_path / "run.jsonl")
    with EventStore.open(tmp_path / "b.db") as store:
        import_run(store, tmp_path / "run.jsonl")
    assert verify(tmp_path / "b.db", run_id).status == "ok"
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(tmp_path / "colleague-key"))
    with EventStore.open(tmp_path / "c.db") as store:
        import_run(store, tmp_path / "run.jsonl")
    report = verify(tmp_path / "c.db", run_id)
    assert report.status == "unanchored" and "no anchor" in report.line()


@pytest.mark.redteam(area="tamper", case="decide folds from an edited snapshot",
                     before="`decide RUN approve` was accepted for a run that waits for nothing: "
                            "its fold started from a snapshot edited to say it waits")
def test_decide_never_folds_from_an_edited_snapshot(tmp_path, cli, fake):
    db = tmp_path / "runs.db"
    waiting = awaiting_approval(db, fake)     # a run that does wait at a checkpoint
    run_id, _ = make_run(db)                  # and one that does not
    conn = raw(db)
    state = json.loads(conn.execute("SELECT state FROM snapshots WHERE run_id = ? ORDER BY "
                                    "run_version DESC", (waiting,)).fetchone()[0])
    mine = json.loads(conn.execute("SELECT state FROM snapshots WHERE run_id = ?",
                                   (run_id,)).fetchone()[0])
    forged = {**state, **{k: mine[k] for k in ("run_id", "version", "last_hash")}}
    conn.execute("UPDATE snapshots SET state = ? WHERE run_id = ?",
                 (canonical_json(forged), run_id))
    with EventStore.open(db, readonly=True) as store:
        assert store.fold(run_id) == store.fold(run_id, use_snapshots=False)
    assert_one_error(cli("--db", db, "decide", run_id, "approve"), run_id, "not waiting")
    with EventStore.open(db, readonly=True) as store:
        assert store.pending_commands(run_id) == []


@pytest.mark.redteam(area="tamper", case="fork of a tampered run",
                     before="`fork` copied the rewritten history into a new run that "
                            "verified OK")
def test_fork_refuses_a_run_that_does_not_verify(tmp_path, cli):
    db = tmp_path / "runs.db"
    run_id, _ = make_run(db)
    rewrite(db, run_id, set_text(3, "rewritten"))
    before = sha256(db.read_bytes()).hexdigest()
    assert_one_error(cli("--db", db, "fork", run_id, "--at", 4), run_id, "verif")
    assert sha256(db.read_bytes()).hexdigest() == before
    with EventStore.open(db, readonly=True) as store:
        assert store.run_ids() == [run_id]


def awaiting_approval(db: Path, fake: Callable[..., Any]) -> str:
    """A fake-pipeline run whose phase 0 passed its gate and waits for a person."""
    from npu_deploy.machine import Conductor, Policy

    with EventStore.open(db) as store:
        c = Conductor.start(store, fake(), Policy(), model="tiny-llama",
                            config={"pipeline": "fake_pipeline:make"})
        halt = c.run(wait=False)
        c.close()
    assert halt.reason == "awaiting_human", halt
    return c.run_id


def forge_inbox(db: Path, run_id: str) -> None:
    """What a process that can write the store, but not read the key, leaves."""
    raw(db).execute("INSERT INTO inbox (command_id, run_id, kind, payload, author, "
                    "created_ts) VALUES ('forged-1', ?, 'approve', '{}', 'human', "
                    "'2026-01-01T00:00:00.000000Z')", (run_id,))


@pytest.mark.redteam(area="tamper", case="forged decision in the inbox",
                     before="the conductor recorded the forged approve as the person's "
                            "human.decision and passed phase 0")
def test_the_conductor_refuses_a_command_without_a_valid_mac(tmp_path, fake):
    from npu_deploy.machine import resume

    db = tmp_path / "runs.db"
    run_id = awaiting_approval(db, fake)
    forge_inbox(db, run_id)
    with EventStore.open(db) as store:
        c = resume(store, run_id, fake())
        c.run(wait=False)
        c.close()
        events = list(store.events(run_id))
    decisions = [e for e in events if e.type == "human.decision"]
    assert not decisions
    refused = [e for e in events if e.type == "error" and "forged-1" not in e.payload["message"]
               and e.payload["kind"] == "command_refused"]
    assert refused and "MAC" in refused[-1].payload["message"]
    with EventStore.open(db, readonly=True) as store:
        assert store.fold(run_id).phases[0].status != "done"


def run_evaluator(db: Path, run_id: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "npu_deploy.pipeline.evaluator", str(db),
                           run_id, "--json"], capture_output=True, text=True, check=False,
                          timeout=300)


@pytest.mark.slow
@pytest.mark.redteam(area="tamper", case="evaluator: forged human.decision in the log",
                     before="the evaluator's log check passed the forged approval "
                            "(hash_chain_intact 1, exit_after_passing_gate_and_decision 1)")
def test_the_evaluator_refuses_a_log_with_a_forged_decision(tmp_path, fake):
    db = tmp_path / "runs.db"
    run_id = awaiting_approval(db, fake)

    def approve_and_pass(rows: Rows) -> Rows:
        last = rows[-1]
        forged = [{**last, "event_id": f"0190f0f0-0000-7000-8000-00000000000{i}", "type": t,
                   "actor": a, "idempotency_key": None, "causation_id": None,
                   "payload": canonical_json(p)} for i, (t, a, p) in enumerate([
                       ("human.decision", "human", {"decision": "approve",
                                                     "command_id": "forged", "author": "human"}),
                       ("phase.exited", "harness", {"outcome": "passed"})])]
        return rows + forged

    rewrite(db, run_id, approve_and_pass)
    done = run_evaluator(db, run_id)
    assert done.returncode == 2, done.stdout[:500]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "head MAC" in lines[0] and "Traceback" not in done.stderr


@pytest.mark.slow
@pytest.mark.redteam(area="tamper", case="evaluator: edited recipe blob",
                     before="Traceback: StoreCorrupt 'blob ... does not match its hash' "
                            "out of recipes_at_gates")
def test_the_evaluator_refuses_an_edited_recipe_blob_in_one_line(tmp_path):
    from npu_deploy.pipeline.recipe import Recipe

    db = tmp_path / "runs.db"
    with EventStore.open(db) as store, store.create_run(
            {**STARTED, "config": {"seq_len": 32, "steps": 4}}) as w:
        ref = store.put_blob(Recipe().to_json())
        w.append(NewEvent("tool.completed", {"call_id": "c1", "tool": "select_tiles",
                                             "ok": True, "result": {"recipe": ref}},
                          actor="harness", phase=0, attempt=1))
        w.append(NewEvent("gate.evaluated", {"gate": "oracle", "passed": True, "checks": [
            {"subject": "logits", "metric": "rel", "value": 0.0, "threshold": 1e-4,
             "comparison": "<=", "passed": True}]}, phase=0, attempt=1))
        run_id = w.run_id
    edit_blob(db, ref)
    done = run_evaluator(db, run_id)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and "does not match its digest" in lines[0]


@pytest.mark.slow
@pytest.mark.redteam(area="tamper", case="evaluator: logged verdicts are not trusted",
                     before="(already so) the evaluator re-runs every gate from stored "
                            "inputs; a run whose logged gates say PASS for nothing fails")
def test_the_evaluator_recomputes_the_gates_it_is_shown(tmp_path, fake):
    """The fake pipeline's gates log PASS for anything, and the run verifies: the evaluator
    computes the gates again from the stored artifacts and finds nothing behind them."""
    from npu_deploy.machine import Conductor, Policy

    db = tmp_path / "runs.db"
    with EventStore.open(db) as store:
        c = Conductor.start(store, fake(), Policy(auto_approve=True), model="tiny-llama",
                            config={"seq_len": 32, "steps": 4})
        assert c.run().reason == "finished"
        c.close()
    assert verify(db, c.run_id).trusted
    done = run_evaluator(db, c.run_id)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "FAIL"
    assert any(not c["passed"] and c["metric"] == "stored_oracle_run_reproduced"
               for c in report["checks"])


PAYLOAD = '''\
import os, pathlib
pathlib.Path(os.environ["REDTEAM_MARKER"]).write_text("code from an imported run ran")
def make():
    pathlib.Path(os.environ["REDTEAM_MARKER"]).write_text("code from an imported run ran")
'''


@pytest.mark.parametrize("spec", [
    pytest.param("redteam_payload:make", id="module", marks=pytest.mark.redteam(
        area="import", case="imported run names a module's pipeline",
        before="`resume` imported the module named by the file's config.pipeline and called "
               "it: the marker file was written")),
    pytest.param("os:system", id="os.system", marks=pytest.mark.redteam(
        area="import", case="imported run names os:system",
        before="`resume` called os.system(): a TypeError traceback (missing 'command'), one "
               "argument short of running a shell command"))])
def test_resume_runs_no_pipeline_an_imported_file_names(tmp_path, monkeypatch, cli, spec):
    (tmp_path / "redteam_payload.py").write_text(PAYLOAD)
    marker = tmp_path / "marker"
    monkeypatch.setenv("REDTEAM_MARKER", str(marker))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "redteam_payload", raising=False)
    with EventStore.open(tmp_path / "theirs.db") as store, store.create_run(
            {**STARTED, "config": {"pipeline": spec}}) as w:
        run_id = w.run_id
    with EventStore.open(tmp_path / "theirs.db", readonly=True) as store:
        export_run(store, run_id, tmp_path / "run.jsonl")
    ours = tmp_path / "ours.db"
    assert cli("--db", ours, "import", tmp_path / "run.jsonl").exit_code == 0
    before = sha256(ours.read_bytes()).hexdigest()
    assert_one_error(cli("--db", ours, "resume", run_id), spec, "not a registered pipeline")
    assert not marker.exists()
    assert "redteam_payload" not in sys.modules
    assert sha256(ours.read_bytes()).hexdigest() == before
    # a person may still name one on the command line: their choice, not the file's
    assert os.environ.get("NPU_DEPLOY_PIPELINES") == "fake_pipeline:make"


@pytest.mark.redteam(area="tamper", case="rewritten chain stripped of its anchor, then resumed",
                     before="`resume` extended the rewritten chain, and `verify` said OK "
                            "afterwards: the next append vouched for the forgery")
def test_a_writer_extends_an_unanchored_run_only_when_told_to(tmp_path, cli, fake):
    db = tmp_path / "runs.db"
    run_id = awaiting_approval(db, fake)

    def edit(rows: Rows) -> Rows:
        said = next(r for r in rows if r["type"] == "agent.message")
        said["payload"] = canonical_json({"role": "assistant", "text": "rewritten"})
        return rows

    rewrite(db, run_id, edit)
    raw(db).execute("UPDATE runs SET head_mac = NULL WHERE run_id = ?", (run_id,))
    assert verify(db, run_id).status == "unanchored"
    before = sha256(db.read_bytes()).hexdigest()
    assert_one_error(cli("--db", db, "resume", run_id, "--no-wait"), run_id,
                     "not anchored by your key", "--adopt")
    assert sha256(db.read_bytes()).hexdigest() == before
    # a person who trusts it says so, and from then on their key vouches for it
    result = cli("--db", db, "resume", run_id, "--no-wait", "--adopt")
    assert "resumed" in result.output, result.output
    assert verify(db, run_id).status == "ok"
