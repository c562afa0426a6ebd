"""The `npu-deploy` command line, through click's CliRunner and (once) the installed
console script: listing, showing, verifying, exporting and importing runs, and where the
store is. Every kind of bad input: test_cli_bad_input.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cli_stores
import pytest
from cli_stores import RUN_A, RUN_B, Untouched, checkpoint
from conftest import ERROR_PREFIX, STARTED, assert_one_error

from npu_deploy.store import EventStore


@pytest.fixture(autouse=True)
def no_default_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    yield from cli_stores.no_default_store(tmp_path, monkeypatch)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return cli_stores.store_of_two_runs(tmp_path)


@pytest.fixture
def export_file(tmp_path: Path, db: Path, cli) -> Path:
    return cli_stores.exported(tmp_path, db, cli)


# --- listing and showing ---------------------------------------------------------------

@pytest.mark.parametrize("kind", ["missing", "empty"])
def test_runs_and_verify_all_on_a_store_without_runs(cli, tmp_path, kind):
    path = tmp_path / "nowhere" / "runs.db"
    if kind == "empty":
        EventStore.open(path).close()
    for args in (["runs"], ["verify", "--all"]):
        result = cli("--db", path, *args)
        assert result.exit_code == 0, result.stderr
        assert "no runs" in result.stdout and result.stderr == ""
    result = cli("--db", path, "runs", "--json")
    assert result.exit_code == 0 and json.loads(result.stdout) == []
    if kind == "missing":   # reading never creates a store
        assert not path.parent.exists()


def test_runs_lists_the_runs(cli, db):
    result = cli("--db", db, "runs")
    assert result.exit_code == 0, result.stderr
    assert RUN_A in result.stdout and RUN_B in result.stdout
    assert "tiny-llama" in result.stdout


def test_runs_json(cli, db):
    result = cli("--db", db, "runs", "--json")
    assert result.exit_code == 0, result.stderr
    runs = json.loads(result.stdout)
    assert isinstance(runs, list)
    assert [r["run_id"] for r in runs] == [RUN_A, RUN_B]
    by_id = {r["run_id"]: r for r in runs}
    assert by_id[RUN_A]["events"] == 5
    assert by_id[RUN_B]["events"] == 3
    assert by_id[RUN_B]["model"] == "other"
    assert by_id[RUN_A]["status"] == "crashed"   # folded "running", but nobody holds the lock


@pytest.mark.parametrize("ref", [RUN_A, RUN_A[:17], "20260101T000000"])
def test_show_by_id_and_prefix(cli, db, ref):
    result = cli("--db", db, "show", ref)
    assert result.exit_code == 0, result.stderr
    assert RUN_A in result.stdout
    assert RUN_B not in result.stdout
    assert "tiny-llama" in result.stdout
    assert "hello 3" in result.stdout


def test_show_json(cli, db):
    result = cli("--db", db, "show", "--json", RUN_A[:17])
    assert result.exit_code == 0, result.stderr
    shown = json.loads(result.stdout)
    assert shown["state"]["run_id"] == RUN_A
    assert shown["state"]["version"] == 5
    assert shown["state"]["model"] == "tiny-llama"
    assert shown["state"]["live_status"] == "crashed"
    assert [e["run_version"] for e in shown["events"]] == [1, 2, 3, 4, 5]
    assert shown["events"][-1]["payload"] == {"role": "assistant", "text": "hello 3"}


def test_show_limits_the_events(cli, db):
    result = cli("--db", db, "show", "--json", "--events", "2", RUN_A)
    assert result.exit_code == 0, result.stderr
    assert [e["run_version"] for e in json.loads(result.stdout)["events"]] == [4, 5]


def test_an_ambiguous_prefix_is_refused(cli, db):
    untouched = Untouched(db.parent, db)
    assert_one_error(cli("--db", db, "show", "2026"), "several runs")
    untouched.check(allow_wal=True)


# --- verifying -----------------------------------------------------------------------

def test_verify_a_run(cli, db):
    untouched = Untouched(db.parent, db)
    result = cli("--db", db, "verify", RUN_A)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip().startswith(f"{RUN_A}: OK, 5 events")
    assert result.stderr == ""
    untouched.check(allow_wal=True)


def test_verify_all(cli, db):
    result = cli("--db", db, "verify", "--all")
    assert result.exit_code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(f"{RUN_A}: OK, 5 events")
    assert lines[1].startswith(f"{RUN_B}: OK, 3 events")


def test_verify_json(cli, db):
    result = cli("--db", db, "verify", "--all", "--json")
    assert result.exit_code == 0, result.stderr
    reports = json.loads(result.stdout)
    assert [(r["run_id"], r["ok"], r["events"]) for r in reports] == [
        (RUN_A, True, 5), (RUN_B, True, 3)]


# --- export and import ---------------------------------------------------------------

def test_export_import_verify_round_trip(cli, db, tmp_path):
    out = tmp_path / "a.jsonl"
    result = cli("--db", db, "export", RUN_A[:17], "-o", out)
    assert result.exit_code == 0, result.stderr
    assert f"exported {RUN_A}: 5 events" in result.stdout
    lines = out.read_text().splitlines()
    assert json.loads(lines[0])["run_id"] == RUN_A
    assert len(lines) == 6

    other = tmp_path / "other" / "other.db"
    result = cli("import", out, "--db", other)
    assert result.exit_code == 0, result.stderr
    assert f"imported {RUN_A}: 5 events" in result.stdout

    result = cli("--db", other, "verify", RUN_A)
    assert result.exit_code == 0, result.stderr
    assert f"{RUN_A}: OK, 5 events" in result.stdout
    result = cli("--db", other, "verify", "--all")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.splitlines() == [line for line in result.stdout.splitlines()
                                          if line.startswith(f"{RUN_A}: OK")]
    # The same chain, head and all, on both sides.
    with EventStore.open(db, readonly=True) as a, EventStore.open(other, readonly=True) as b:
        assert [e.hash for e in a.events(RUN_A)] == [e.hash for e in b.events(RUN_A)]
        assert a.verify(RUN_A).head_hash == b.verify(RUN_A).head_hash


def test_importing_the_same_file_twice(cli, export_file, tmp_path):
    other = tmp_path / "other.db"
    first = cli("--db", other, "import", export_file)
    assert first.exit_code == 0, first.stderr
    assert "imported" in first.stdout
    second = cli("--db", other, "import", export_file)
    assert second.exit_code == 0, second.stderr
    assert "already" in second.stdout
    assert second.stderr == ""
    with EventStore.open(other, readonly=True) as s:
        assert s.run_ids() == [RUN_A]
        report = s.verify(RUN_A)
        assert report.ok and report.events == 5


def test_importing_over_a_different_run_of_the_same_id_is_refused(cli, export_file, tmp_path):
    other = tmp_path / "o" / "other.db"
    other.parent.mkdir()
    with EventStore.open(other) as s:
        s.create_run({**STARTED, "model": "impostor"}, run_id=RUN_A).close()
    checkpoint(other)
    untouched = Untouched(other.parent, other)
    assert_one_error(cli("--db", other, "import", export_file), RUN_A, "already exists")
    untouched.check(allow_wal=True)


# --- where the store is --------------------------------------------------------------

@pytest.mark.parametrize("where", ["before", "after"])
def test_db_option_before_or_after_the_subcommand(cli, db, where):
    for args in (["runs", "--json"], ["verify", "--all"], ["show", "--json", RUN_B]):
        full = ["--db", db, *args] if where == "before" else [*args, "--db", db]
        result = cli(*full)
        assert result.exit_code == 0, (full, result.stderr)
        assert RUN_B in result.stdout


def test_npu_deploy_db_environment_variable(cli, db, export_file, tmp_path):
    result = cli("runs", "--json", env={"NPU_DEPLOY_DB": str(db)})
    assert result.exit_code == 0, result.stderr
    assert [r["run_id"] for r in json.loads(result.stdout)] == [RUN_A, RUN_B]
    result = cli("verify", RUN_A, env={"NPU_DEPLOY_DB": str(db)})
    assert result.exit_code == 0, result.stderr
    other = tmp_path / "env-import.db"
    result = cli("import", export_file, env={"NPU_DEPLOY_DB": str(other)})
    assert result.exit_code == 0, result.stderr
    assert other.exists()


def test_db_option_wins_over_the_environment(cli, db, tmp_path):
    elsewhere = tmp_path / "elsewhere.db"
    result = cli("--db", db, "runs", "--json", env={"NPU_DEPLOY_DB": str(elsewhere)})
    assert result.exit_code == 0, result.stderr
    assert len(json.loads(result.stdout)) == 2
    assert not elsewhere.exists()


# --- the installed console script -------------------------------------------------------

def test_installed_console_script(db, tmp_path):
    script = shutil.which("npu-deploy", path=str(Path(sys.executable).parent))
    assert script, f"npu-deploy is not installed next to {sys.executable}"
    env = {**os.environ, "NPU_DEPLOY_DB": str(db)}

    def run(*args: object, **kw) -> subprocess.CompletedProcess[str]:
        return subprocess.run([script, *map(str, args)], capture_output=True, text=True,
                              timeout=60, **kw)

    done = run("--db", db, "runs", "--json")
    assert done.returncode == 0, done.stderr
    assert [r["run_id"] for r in json.loads(done.stdout)] == [RUN_A, RUN_B]

    done = run("verify", "--all", env=env)
    assert done.returncode == 0, done.stderr
    assert f"{RUN_A}: OK" in done.stdout and f"{RUN_B}: OK" in done.stdout

    done = run("--version")
    assert done.returncode == 0 and "npu-deploy" in done.stdout

    garbage = tmp_path / "garbage.db"
    garbage.write_text("not a database\n" * 20)
    done = run("--db", garbage, "runs")
    assert done.returncode == 1
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith(ERROR_PREFIX)
