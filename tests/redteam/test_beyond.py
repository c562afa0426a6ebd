"""Red team beyond issue 39's list: the key file, copied stores, racing decisions and odd
--db paths, tried as an attacker and a careless user would. Each test is a case where the
message named the wrong cause, or something stored was changed by a refused command."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_one_error

from npu_deploy.store import EventStore
from redteam.test_writers import waiting_run


def redteam(area: str, case: str, before: str) -> pytest.MarkDecorator:
    return pytest.mark.redteam(area=area, case=case, before=before)


def new_key(path: Path) -> bytes:
    """Another user's key file at `path` (32 random bytes, mode 0600)."""
    key = secrets.token_bytes(32)
    path.write_bytes(key)
    path.chmod(0o600)
    return key


@redteam("key", "the key file replaced between `decide` and `resume --adopt`",
         before="the approve was refused as 'its MAC does not check with this user's key, so "
                "no person's npu-deploy (decide, the TUI) wrote it': a person's npu-deploy did "
                "write it, under the key that was there then")
def test_a_command_left_under_a_key_since_replaced_says_whose_key_signed_it(
        tmp_path, fake, cli, monkeypatch):
    from npu_deploy.machine import resume
    from npu_deploy.store.anchor import key_id, user_key

    db = tmp_path / "runs.db"
    run_id = waiting_run(db, fake)
    assert cli("--db", db, "decide", run_id, "approve").exit_code == 0
    theirs = key_id(user_key(create=False) or b"")
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(tmp_path / "new-key"))
    ours = key_id(new_key(tmp_path / "new-key"))
    with EventStore.open(db) as store:
        c = resume(store, run_id, fake(), adopt=True)
        c.run(wait=False)
        c.close()
        (refused,) = [e for e in store.events(run_id, types=("error",))]
    assert refused.payload["message"] == (
        f"approve refused: the command was signed by another key (key id {theirs}) than this "
        f"user's (key id {ours}); leave it again with `decide` or the TUI under this user's key")


@redteam("key", "a key file of 4 KiB (a certificate, a config file pointed at by mistake)",
         before="'the key ... holds 33 bytes, not 32': the size read, not the file's")
def test_a_key_file_too_long_is_said_at_its_size(tmp_path, fake, cli, monkeypatch):
    run_id = waiting_run(tmp_path / "runs.db", fake)
    key = tmp_path / "key"
    key.write_bytes(b"-" * 4096)
    key.chmod(0o600)
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(key))
    assert_one_error(cli("--db", tmp_path / "runs.db", "decide", run_id, "abort"),
                     f"the key {key} holds 4096 bytes, not 32")


@pytest.mark.parametrize("command", [("runs",), ("verify", "r1"), ("decide", "r1", "abort"),
                                     ("resume", "r1"), ("fork", "r1", "--at", "1")])
@redteam("db", "an empty file as --db (a `touch`, a copy that failed)",
         before="read commands: 'has store schema 0; run any writing command once to "
                "migrate it': an empty file is no old store; decide, resume and fork: 'no run "
                "r1', and the empty file was made a 64 KiB store by the refused command")
def test_an_empty_file_is_said_to_hold_no_store_and_left_empty(tmp_path, cli, command):
    db = tmp_path / "runs.db"
    db.touch()
    assert_one_error(cli("--db", db, *command),
                     f"{db} is an empty file: no store was ever written there")
    assert db.stat().st_size == 0 and sorted(p.name for p in tmp_path.iterdir()) == ["runs.db"]


@redteam("racing", "`decide approve` while the run is aborted by another process",
         before="exit 0, 'approve left for run ...; its conductor records it once': the "
                "approve was left in the inbox of an aborted run, which no conductor reads")
def test_a_decision_for_a_run_that_ended_meanwhile_is_refused_and_not_left(
        tmp_path, fake, cli, monkeypatch):
    from npu_deploy.cli import deploy
    from npu_deploy.machine import resume

    db = tmp_path / "runs.db"
    run_id = waiting_run(db, fake)
    real = deploy.open_decisions
    raced: list[bool] = []

    def then_aborted(state: Any) -> Any:
        """`decide` has folded the run: now another process aborts it."""
        legal = real(state)
        if not raced:
            raced.append(True)
            with EventStore.open(db) as store:
                store.post_command(run_id, "abort")
                c = resume(store, run_id, fake())
                c.run(wait=False)
                c.close()
        return legal

    monkeypatch.setattr(deploy, "open_decisions", then_aborted)
    assert_one_error(cli("--db", db, "decide", run_id, "approve"),
                     f"run {run_id} is aborted", "nothing was left")
    with EventStore.open(db, readonly=True) as store:
        assert store.fold(run_id).status == "aborted"
        assert store.pending_commands(run_id) == []


@redteam("key", "`verify` after the key file was replaced by another user's",
         before="'its anchor was made by another key than this user's (key id K)', K being "
                "this user's id: the key that anchored the run, the one to find, was unnamed")
def test_verify_names_both_keys_when_another_anchored_the_run(tmp_path, fake, monkeypatch):
    from npu_deploy.store.anchor import key_id, user_key

    db = tmp_path / "runs.db"
    run_id = waiting_run(db, fake)
    theirs = key_id(user_key(create=False) or b"")
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(tmp_path / "new-key"))
    ours = key_id(new_key(tmp_path / "new-key"))
    with EventStore.open(db, readonly=True) as store:
        report = store.verify(run_id)
    assert report.unanchored == (f"its anchor was made by another key (key id {theirs}) than "
                                 f"this user's (key id {ours})")


@redteam("key", "NPU_DEPLOY_KEY_FILE pointed at the store file (mode 0644) by mistake",
         before="'the key .../runs.db can be read by others (mode 644); `chmod 600 "
                ".../runs.db`': the advice was to chmod the store, not that it is no key")
def test_a_key_path_at_a_file_that_is_no_key_says_so_before_its_mode(tmp_path, fake, cli,
                                                                      monkeypatch):
    db = tmp_path / "runs.db"
    run_id = waiting_run(db, fake)
    db.chmod(0o644)
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(db))
    assert_one_error(cli("--db", db, "decide", run_id, "abort"),
                     f"the key {db} holds {db.stat().st_size} bytes, not 32")
    assert db.stat().st_mode & 0o777 == 0o644


@redteam("key", "`decide` with another key file than the one that anchored the run",
         before="exit 0, 'approve left for run ...; its conductor records it once': its "
                "conductor then refused it, and `resume` refused the run")
def test_a_decision_under_another_key_than_the_runs_is_refused_at_once(tmp_path, fake, cli,
                                                                       monkeypatch):
    from npu_deploy.store.anchor import key_id, user_key

    db = tmp_path / "runs.db"
    run_id = waiting_run(db, fake)
    theirs = key_id(user_key(create=False) or b"")
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(tmp_path / "new-key"))
    ours = key_id(new_key(tmp_path / "new-key"))
    assert_one_error(cli("--db", db, "decide", run_id, "approve"),
                     f"run {run_id} was anchored by key {theirs}",
                     f"is another (key id {ours})", "nothing was left")
    with EventStore.open(db, readonly=True) as store:
        assert store.pending_commands(run_id) == []


@redteam("key", "the TUI's Decide dialog and pause under another key than the run's",
         before="(with the refusal above) Unanchored raised out of the dialog's handler; "
                "before it, the approve was left for its conductor to refuse")
async def test_the_tui_shows_a_decision_refused_for_another_key(store, db_path, fake,
                                                                tmp_path, monkeypatch):
    from tui_pilot import SIZE, start

    from npu_deploy.tui import DeployApp
    from npu_deploy.tui.screens.decision import DecisionDialog

    c = start(store, fake())
    assert c.run(wait=False).reason == "awaiting_human"
    c.close()
    monkeypatch.setenv("NPU_DEPLOY_KEY_FILE", str(tmp_path / "new-key"))
    new_key(tmp_path / "new-key")
    app = DeployApp(db_path, run_id="r1", live=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("d")
        assert isinstance(app.screen, DecisionDialog)
        await pilot.click("#approve")
        dialog = app.screen
        assert isinstance(dialog, DecisionDialog)
        assert dialog.closed_by and "approve refused: run r1 was anchored by key" in \
            dialog.closed_by, dialog.closed_by
    assert store.pending_commands("r1") == []


@redteam("db", "--db a loop of symbolic links",
         before="`runs`: 'no runs yet (no store at loop.db)', exit 0, as if the path were free")
def test_a_loop_of_links_as_the_store_is_named_by_runs_too(tmp_path, cli):
    (tmp_path / "a.db").symlink_to(tmp_path / "b.db")
    (tmp_path / "b.db").symlink_to(tmp_path / "a.db")
    for command in (("runs",), ("verify", "--all"), ("decide", "r1", "abort")):
        assert_one_error(cli("--db", tmp_path / "a.db", *command),
                         "Too many levels of symbolic links")


@redteam("db", "--db a symbolic link into a folder that does not exist",
         before="decide: 'cannot open x.db (unable to open database file); check the path and "
                "its permissions'; import, the same: neither a permission nor the path given")
def test_a_link_to_nowhere_as_the_store_says_where_it_leads(tmp_path, fake, cli):
    from npu_deploy.store import export_run

    run_id = waiting_run(tmp_path / "a.db", fake)
    with EventStore.open(tmp_path / "a.db", readonly=True) as store:
        export_run(store, run_id, tmp_path / "run.jsonl")
    link, target = tmp_path / "x.db", tmp_path / "gone" / "runs.db"
    link.symlink_to(target)
    assert_one_error(cli("--db", link, "decide", run_id, "abort"),
                     f"no store at {link}, a symbolic link to {target}, where there is nothing")
    assert_one_error(cli("--db", link, "import", tmp_path / "run.jsonl"),
                     f"{link} is a symbolic link to {target}, and the folder {target.parent} "
                     "does not exist")
    assert f"a symbolic link to {target}" in cli("--db", link, "runs").stdout
    assert not target.parent.exists()
