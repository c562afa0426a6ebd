"""Red team, area "imported" (issue 39, open points): a run moved between stores with
`export` and `import` keeps what stands behind each person's decision, the inbox command it
recorded, signed by the key of the person who left it; a command edited in the file is
refused like an edited event; and an export from before commands were carried says so."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from npu_deploy.store import EventStore, export_run, import_run
from redteam.test_writers import log_checks, waiting_run

AREA = "imported"


def redteam(case: str, before: str) -> pytest.MarkDecorator:
    return pytest.mark.redteam(area=AREA, case=case, before=before)


def decided_run(db: Path, fake: Any, cli: Any) -> str:
    """A fake-pipeline run with a person's approval left with `decide` and recorded by the
    conductor from its inbox command (so the decision stands), then waiting again."""
    from npu_deploy.machine import resume

    run_id = waiting_run(db, fake)
    assert cli("--db", db, "decide", run_id, "approve").exit_code == 0
    with EventStore.open(db) as store:
        c = resume(store, run_id, fake())
        c.run(wait=False)
        c.close()
        assert store.unbacked_decisions(run_id) == {}
        assert any(store.events(run_id, types=("human.decision",)))
    return run_id


def exported(tmp_path: Path, fake: Any, cli: Any) -> tuple[str, Path]:
    """A decided run of tmp/a.db, exported to tmp/run.jsonl."""
    run_id = decided_run(tmp_path / "a.db", fake, cli)
    with EventStore.open(tmp_path / "a.db", readonly=True) as store:
        export_run(store, run_id, tmp_path / "run.jsonl")
    return run_id, tmp_path / "run.jsonl"


def imported(db: Path, path: Path) -> dict[int, str]:
    """Import `path` into the store `db`; the run's unbacked decisions there."""
    with EventStore.open(db) as store:
        result = import_run(store, path)
        return store.unbacked_decisions(result.run_id)


@redteam("a run with a person's decision exported and imported into a store of the same key",
         before="every person's decision read 'no inbox command ... is behind it': the "
                "independent evaluator failed the run for no fault of its own")
def test_an_imported_runs_decisions_stand_as_they_did(tmp_path, fake, cli):
    run_id, path = exported(tmp_path, fake, cli)
    assert imported(tmp_path / "b.db", path) == {}
    assert log_checks(tmp_path / "b.db", run_id) == []


def only_decision(db: Path, run_id: str) -> tuple[int, str]:
    """The version of the run's one person's decision, and the command it recorded."""
    with EventStore.open(db, readonly=True) as store:
        (e,) = store.events(run_id, types=("human.decision",))
    return e.run_version, e.payload["command_id"]


@redteam("the same export imported into a store of another user's key, and with no key",
         before="'no inbox command ... is behind it', as if the decision had been forged, "
                "where `verify` says the run is anchored by another key")
def test_a_decision_imported_under_another_key_says_whose_key_signed_it(tmp_path, fake, cli,
                                                                        monkeypatch):
    from npu_deploy.store.anchor import key_id, signing_key, user_key

    run_id, path = exported(tmp_path, fake, cli)
    version, command_id = only_decision(tmp_path / "a.db", run_id)
    theirs = key_id(user_key(create=False) or b"")
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(tmp_path / "colleague-key"))
    ours = key_id(signing_key())
    assert imported(tmp_path / "c.db", path) == {
        version: f"its inbox command {command_id} was signed by another key (key id "
                 f"{theirs}) than this user's (key id {ours})"}
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(tmp_path / "no-key-here"))
    assert imported(tmp_path / "d.db", path) == {
        version: f"its inbox command {command_id} was signed by key {theirs}, and there is no "
                 f"key at {tmp_path / 'no-key-here'} to check it (put that key file back "
                 "there, or point NPU_DEPLOY_KEY_FILE at it)"}
    assert not (tmp_path / "no-key-here").exists()     # importing made no key


def lines_of(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write_lines(path: Path, records: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def command_line(records: list[dict[str, Any]]) -> int:
    """The index of the (one) command record."""
    (i,) = [i for i, r in enumerate(records) if "command" in r]
    return i


def _edit(field: str, value: Any) -> Any:
    def edit(records: list[dict[str, Any]]) -> None:
        records[command_line(records)]["command"][field] = value(records) \
            if callable(value) else value
    return edit


def _flip_mac(records: list[dict[str, Any]]) -> None:
    command = records[command_line(records)]["command"]
    command["mac"] = command["mac"][:-1] + ("0" if command["mac"][-1] != "0" else "1")


def _other_event(records: list[dict[str, Any]]) -> str:
    return str(records[1]["event"]["event_id"])


#: name -> (how the export file is edited, what the one-line refusal says)
TAMPERS: dict[str, tuple[Any, str]] = {
    "its kind": (_edit("kind", "pause"), "says other than the decision"),
    "its payload": (_edit("payload", '{"override":true}'), "says other than the decision"),
    "its MAC": (_flip_mac, "carries a MAC of this user's key that does not match it"),
    "the event that consumed it": (_edit("consumed_event_id", _other_event),
                                   "which is no person's decision of this file naming it"),
    "its run": (_edit("run_id", "another-run"), "command: run_id: 'another-run'"),
    "its time": (_edit("created_ts", "2026-02-30T00:00:00.000000Z"),
                 "command: created_ts: '2026-02-30T00:00:00.000000Z' is no date"),
    "a second copy of it": (lambda r: r.append(r[command_line(r)]), "is carried twice"),
    "its line, removed": (lambda r: r.pop(command_line(r)),
                          "holds 0 inbox commands but its header says 1"),
}


@pytest.mark.parametrize("tamper", [pytest.param(t, id=t.replace(" ", "-"), marks=redteam(
    f"an export whose inbox command was edited: {t}", "(new: exports carried no commands)"))
    for t in TAMPERS])
def test_an_edited_command_in_an_export_is_refused_and_nothing_stored(tmp_path, fake, cli,
                                                                       tamper):
    from conftest import assert_one_error

    run_id, path = exported(tmp_path, fake, cli)
    records = lines_of(path)
    edit, says = TAMPERS[tamper]
    edit(records)
    write_lines(path, records)
    other = waiting_run(tmp_path / "b.db", fake)        # a store with a run of its own
    before = dump(tmp_path / "b.db")
    line = assert_one_error(cli("--db", tmp_path / "b.db", "import", path), says)
    assert f"{path} line " in line or f"{path} holds" in line, line
    assert dump(tmp_path / "b.db") == before and run_id != other


def dump(db: Path) -> list[str]:
    """Everything a store holds, as SQL."""
    import sqlite3

    conn = sqlite3.connect(db)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


@redteam("an export whose command differs (in what its MAC does not cover) from the same "
         "command in the store the run is imported back into",
         before="(new: exports carried no commands)")
def test_a_command_that_differs_from_the_stores_own_is_refused(tmp_path, fake, cli):
    from conftest import assert_one_error

    run_id, path = exported(tmp_path, fake, cli)
    records = lines_of(path)
    _edit("created_ts", "2026-01-01T00:00:00.000000Z")(records)
    write_lines(path, records)
    before = dump(tmp_path / "a.db")
    assert_one_error(cli("--db", tmp_path / "a.db", "import", path),
                     "is already in this store, and says or did something else there")
    assert dump(tmp_path / "a.db") == before


def format_1(path: Path, out: Path) -> None:
    """`path` as npu-deploy wrote exports before they carried commands (format 1)."""
    records = [r for r in lines_of(path) if "command" not in r]
    header = records[0]
    header["format_version"] = 1
    for name in ("commands", "uncarried_upto"):
        del header[name]
    write_lines(out, records)


@redteam("an export written before exports carried commands (format 1)",
         before="imported, and its decisions read 'no inbox command ... is behind it', as "
                "if forged: nothing said the export was the cause, nor what to do")
def test_a_format_1_export_imports_and_its_decisions_say_why_they_stand_on_nothing(
        tmp_path, fake, cli):
    run_id, path = exported(tmp_path, fake, cli)
    format_1(path, tmp_path / "old.jsonl")
    version, command_id = only_decision(tmp_path / "a.db", run_id)
    why = (f"it came through an export file written before exports carried decisions' "
           f"commands (format 1), without its inbox command {command_id}: export the run "
           "again from the store it was decided in, and import that file")
    assert imported(tmp_path / "b.db", tmp_path / "old.jsonl") == {version: why}
    # exported again from b, it still says so wherever it goes
    with EventStore.open(tmp_path / "b.db", readonly=True) as store:
        export_run(store, run_id, tmp_path / "again.jsonl")
    assert imported(tmp_path / "c.db", tmp_path / "again.jsonl") == {version: why}
    # the fix it names: the export from the run's own store brings the command
    result = cli("--db", tmp_path / "b.db", "import", path)
    assert result.exit_code == 0 and "added the 1 inbox commands" in result.stdout
    with EventStore.open(tmp_path / "b.db", readonly=True) as store:
        assert store.unbacked_decisions(run_id) == {}
