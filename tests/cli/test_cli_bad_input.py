"""The `npu-deploy` command line given every kind of bad input (a bad or unreadable store, a
tampered log, a damaged export file): each ends as one error line on stderr with the store
untouched.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import cli_stores
import pytest
from cli_stores import (
    IS_ROOT,
    RUN_A,
    RUN_B,
    Untouched,
    build_store,
    checkpoint,
    mentions_version,
)
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


# --- bad stores: every command refuses them with one line, untouched ------------------------

def make_garbage(path: Path) -> None:
    path.write_text("this is not an SQLite database, just some text\n" * 50)


def make_truncated(path: Path) -> None:
    build_store(path)
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(size // 2)


def make_newer_schema(path: Path) -> None:
    build_store(path)
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA user_version = 99")
    finally:
        conn.close()
    checkpoint(path)


def make_foreign_sqlite(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute("CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO customers (name) VALUES ('x')")
        conn.commit()
    finally:
        conn.close()


BAD_STORES: dict[str, tuple[Callable[[Path], None], str]] = {
    # name: (maker, a word the error line must contain)
    "garbage": (make_garbage, "not an SQLite database"),
    "truncated": (make_truncated, "truncated"),
    "newer-schema": (make_newer_schema, "newer"),
    "foreign-sqlite": (make_foreign_sqlite, "not an npu-deploy store"),
}

COMMANDS: dict[str, Callable[[Path, Path], list[object]]] = {
    # name: (export file, scratch dir) -> arguments after --db
    "runs": lambda f, d: ["runs"],
    "runs-json": lambda f, d: ["runs", "--json"],
    "show": lambda f, d: ["show", RUN_A],
    "show-json": lambda f, d: ["show", "--json", RUN_A[:17]],
    "verify": lambda f, d: ["verify", RUN_A],
    "verify-all": lambda f, d: ["verify", "--all"],
    "export": lambda f, d: ["export", RUN_A, "-o", d / "out.jsonl"],
    "import": lambda f, d: ["import", f],
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("kind", BAD_STORES)
def test_a_bad_store_is_refused_untouched(cli, export_file, tmp_path, kind, command):
    maker, needle = BAD_STORES[kind]
    bad_dir = tmp_path / "bad"
    bad_dir.mkdir()
    bad = bad_dir / "runs.db"
    maker(bad)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    untouched = Untouched(bad_dir, bad)
    line = assert_one_error(cli("--db", bad, *COMMANDS[command](export_file, scratch)), needle)
    assert str(bad) in line
    # A newer store is a sound WAL-mode file: a read-only open may add SQLite's
    # empty -wal/-shm companions. The others are refused before SQLite sees them.
    untouched.check(allow_wal=kind == "newer-schema")
    assert list(scratch.iterdir()) == [], "an export file was written"


@pytest.mark.parametrize("command", COMMANDS)
def test_a_directory_in_npu_deploy_db_is_refused(cli, export_file, tmp_path, command):
    directory = tmp_path / "a-directory"
    directory.mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    untouched = Untouched(directory)
    result = cli(*COMMANDS[command](export_file, scratch), env={"NPU_DEPLOY_DB": str(directory)})
    assert_one_error(result, str(directory), "directory")
    untouched.check()
    assert list(scratch.iterdir()) == []


@pytest.mark.parametrize("where", ["before", "after"])
def test_a_directory_as_db_option_is_refused_with_one_line(cli, tmp_path, where):
    directory = tmp_path / "a-directory"
    directory.mkdir()
    untouched = Untouched(directory)
    args = ["--db", directory, "runs"] if where == "before" else ["runs", "--db", directory]
    try:
        assert_one_error(cli(*args), str(directory))
    finally:
        untouched.check()


@pytest.mark.skipif(IS_ROOT, reason="root reads files whatever their mode")
@pytest.mark.parametrize("command", ["runs", "show", "verify-all", "import"])
def test_an_unreadable_store_in_npu_deploy_db_is_refused(cli, db, export_file, tmp_path,
                                                          command):
    untouched = Untouched(db.parent, None)
    db.chmod(0)
    try:
        result = cli(*COMMANDS[command](export_file, tmp_path),
                     env={"NPU_DEPLOY_DB": str(db)})
        assert_one_error(result, str(db))
    finally:
        db.chmod(0o644)
    untouched.check()


@pytest.mark.skipif(IS_ROOT, reason="root reads files whatever their mode")
def test_an_unreadable_store_as_db_option_is_refused_with_one_line(cli, db):
    untouched = Untouched(db.parent, None)
    db.chmod(0)
    try:
        assert_one_error(cli("--db", db, "runs"), str(db))
    finally:
        db.chmod(0o644)
        untouched.check()


def test_an_unknown_run(cli, db, tmp_path):
    untouched = Untouched(db.parent, db)
    for args in (["show", "no-such-run"], ["show", "--json", "no-such-run"],
                 ["verify", "no-such-run"], ["export", "no-such-run", "-o", tmp_path / "x"]):
        assert_one_error(cli("--db", db, *args), "no-such-run")
    assert not (tmp_path / "x").exists()
    untouched.check(allow_wal=True)


def test_a_store_of_a_newer_schema_is_not_migrated_or_written_by_import(cli, export_file,
                                                                          tmp_path):
    newer = tmp_path / "n" / "runs.db"
    newer.parent.mkdir()
    make_newer_schema(newer)
    untouched = Untouched(newer.parent, newer)
    for command in COMMANDS:
        assert_one_error(cli("--db", newer, *COMMANDS[command](export_file, tmp_path)),
                         "newer")
    untouched.check(allow_wal=True)
    conn = sqlite3.connect(f"{newer.as_uri()}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 99
        assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 8
    finally:
        conn.close()


# --- tampered logs: verify names the bad event -----------------------------------------------

def tamper(db: Path, *statements: tuple[str, tuple[object, ...]]) -> None:
    conn = sqlite3.connect(db)
    try:
        for sql, params in statements:
            conn.execute(sql, params)
        conn.commit()
    finally:
        conn.close()
    checkpoint(db)


def verify_broken(cli, db: Path, run_id: str) -> str:
    """`verify RUN` on a tampered store: exit 1, one line on stderr naming the run, the
    store untouched; returns that line."""
    untouched = Untouched(db.parent, db)
    result = cli("--db", db, "verify", run_id)
    assert result.exit_code == 1, result.stdout
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"{run_id}: BROKEN"), lines[0]
    untouched.check(allow_wal=True)
    return lines[0]


def test_verify_names_an_edited_event(cli, db, tmp_path):
    tamper(db, ("DROP TRIGGER events_append_only_update", ()),
           ("UPDATE events SET payload = ? WHERE run_id = ? AND run_version = 3",
            ('{"role":"assistant","text":"edited"}', RUN_A)))
    line = verify_broken(cli, db, RUN_A)
    assert mentions_version(line, 3), line
    assert "hash mismatch" in line

    # --all reports the broken run on stderr, the sound one on stdout, and fails.
    result = cli("--db", db, "verify", "--all")
    assert result.exit_code == 1
    assert result.stdout.splitlines() == [line for line in result.stdout.splitlines()
                                          if line.startswith(f"{RUN_B}: OK")]
    assert len(result.stdout.splitlines()) == 1
    assert len(result.stderr.splitlines()) == 1
    assert mentions_version(result.stderr, 3)

    result = cli("--db", db, "verify", "--json", RUN_A)
    assert result.exit_code == 1
    [report] = json.loads(result.stdout)
    assert report["ok"] is False and report["bad_version"] == 3

    # A broken run is not exported.
    out = tmp_path / "broken.jsonl"
    assert_one_error(cli("--db", db, "export", RUN_A, "-o", out), "v3")
    assert not out.exists()


def test_show_on_a_tampered_run_says_it_cannot_be_trusted(cli, db):
    tamper(db, ("DROP TRIGGER events_append_only_update", ()),
           ("UPDATE events SET payload = ? WHERE run_id = ? AND run_version = 3",
            ('{"role":"assistant","text":"edited"}', RUN_A)))
    for args in (["show", RUN_A], ["show", "--json", RUN_A]):
        result = cli("--db", db, *args)
        assert result.exit_code == 1
        line = assert_one_error(result, "BROKEN", "not to be trusted")
        assert mentions_version(line, 3), line
    assert json.loads(cli("--db", db, "show", "--json", RUN_A).stdout)["verified"] is False


def test_a_wrong_flag_or_missing_argument_is_one_line(cli, db):
    for args in (["verify"], ["runs", "--no-such-flag"], ["show"], ["no-such-command"],
                 ["show", RUN_A, "--events", "-3"]):
        result = cli("--db", db, *args)
        assert result.exit_code == 2, args
        assert_one_error(result, "--help")


def test_verify_names_a_deleted_middle_event(cli, db):
    tamper(db, ("DROP TRIGGER events_append_only_delete", ()),
           ("DELETE FROM events WHERE run_id = ? AND run_version = 3", (RUN_A,)))
    line = verify_broken(cli, db, RUN_A)
    assert mentions_version(line, 3), line
    assert "missing" in line


def test_verify_notices_a_deleted_last_event(cli, db):
    tamper(db, ("DROP TRIGGER events_append_only_delete", ()),
           ("DELETE FROM events WHERE run_id = ? AND run_version = 5", (RUN_A,)))
    line = verify_broken(cli, db, RUN_A)
    assert mentions_version(line, 5), line     # the head the runs table still records
    assert "removed" in line
    # The other run is unaffected.
    assert cli("--db", db, "verify", RUN_B).exit_code == 0


# --- damaged export files ------------------------------------------------------------------

def edit_one_byte(path: Path) -> None:
    """Change one character inside the text of event v3 ('hello 1' -> 'hello 7')."""
    lines = path.read_bytes().split(b"\n")
    assert b'"hello 1"' in lines[3]
    lines[3] = lines[3].replace(b'"hello 1"', b'"hello 7"')
    path.write_bytes(b"\n".join(lines))


def drop_last_event(path: Path) -> None:
    lines = path.read_text().splitlines()
    path.write_text("\n".join(lines[:-1]) + "\n")


def break_json(path: Path) -> None:
    data = bytearray(path.read_bytes())
    at = data.index(b'"hello 2"')
    data[at] = ord("{")
    path.write_bytes(bytes(data))


DAMAGES = {"one-byte-edited": (edit_one_byte, "v3"),
           "last-event-cut": (drop_last_event, "header says 5"),
           "not-json": (break_json, "not JSON")}


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_export_is_refused_and_no_store_is_created(cli, export_file, tmp_path,
                                                              damage):
    maker, needle = DAMAGES[damage]
    maker(export_file)
    target_dir = tmp_path / "target"
    target = target_dir / "new.db"
    assert_one_error(cli("--db", target, "import", export_file), needle)
    assert not target_dir.exists()


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_export_leaves_an_existing_store_unchanged(cli, export_file, tmp_path,
                                                              damage):
    maker, needle = DAMAGES[damage]
    maker(export_file)
    target = tmp_path / "t" / "target.db"
    target.parent.mkdir()
    with EventStore.open(target) as s:
        s.create_run(STARTED, run_id="someone-else").close()
    checkpoint(target)
    untouched = Untouched(target.parent, target)
    assert_one_error(cli("--db", target, "import", export_file), needle)
    untouched.check()
    with EventStore.open(target, readonly=True) as s:
        assert s.run_ids() == ["someone-else"]


def test_importing_a_missing_file(cli, tmp_path):
    target = tmp_path / "t" / "target.db"
    assert_one_error(cli("--db", target, "import", tmp_path / "no-such.jsonl"), "no file")
    assert not target.parent.exists()


@pytest.mark.skipif(not IS_ROOT or shutil.which("setpriv") is None,
                    reason="needs root and util-linux setpriv to drop the DAC capabilities")
def test_an_unreadable_store_is_refused_with_one_line_without_root_privileges(tmp_path):
    """Root reads any file. Without CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH it is bound
    by file modes like anyone else, so the CLI runs that way on a file it may not read."""
    db = build_store(tmp_path / "runs.db")
    os.chown(db, 65534, 65534)   # nobody's file, mode 000: no one else may read it
    db.chmod(0)
    before = (db.stat().st_size, db.stat().st_mtime_ns)
    script = Path(sys.executable).parent / "npu-deploy"
    result = subprocess.run(
        ["setpriv", "--bounding-set=-dac_override,-dac_read_search", "--", str(script),
         "--db", str(db), "runs"], capture_output=True, text=True, timeout=120)
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0
    assert len(lines) == 1 and lines[0].startswith(ERROR_PREFIX), result.stderr
    assert str(db) in lines[0] and "permission denied" in lines[0]
    assert (db.stat().st_size, db.stat().st_mtime_ns) == before
