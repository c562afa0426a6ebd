"""`npu-deploy matrix` and `node` as a user types them, without Ray: every bad input is one
line, a usage error where it is one, and nothing is stored (the runs of a matrix are tested
on Ray in test_ray_matrix.py)."""

from __future__ import annotations

import pytest
from conftest import assert_one_error

from npu_deploy.cluster.spec import MatrixSpec, from_toml


@pytest.mark.parametrize(("args", "needle"), [
    (["--model", "tiny-llama", "--seq-len", "16,x"], "prompt lengths are numbers"),
    (["--model", "tiny-llama", "--pause-at", "1,x"], "expected phase numbers"),
    (["--model", "tiny-llama", "--pause-at", "9"], "no phase 9"),
    (["--model", "tiny-llama", "--backend", "gpu"], "backend 'gpu'"),
    (["--model", "tiny-llama", "--agent", "bard"], "agent 'bard'"),
    (["--model", "no-such-model", "--seq-len", "16"], "no-such-model"),
    (["--model", "tiny-llama", "--seq-len", "1"], "cell tiny-llama 1"),
    (["--model", "tiny-llama", "--name", "a b"], "matrix name 'a b'"),
    ([], "the matrix has no model"),
])
def test_a_bad_matrix_is_refused_in_one_line_before_ray_or_the_store(cli, tmp_path, args,
                                                                     needle):
    db = tmp_path / "head.db"
    result = cli("--db", db, "matrix", *args)
    assert result.exit_code == 2
    assert needle in assert_one_error(result)
    assert not db.exists()


def test_a_spec_file_is_read_and_its_mistakes_named(cli, tmp_path):
    good = tmp_path / "nightly.toml"
    good.write_text('models = ["tiny-llama", "tiny-qwen2"]\nseq_lens = [16, 100]\n'
                    '[options]\npause_at = [1]\nsteps = 8\n')
    spec = from_toml(good)
    assert spec == MatrixSpec(name="nightly", models=("tiny-llama", "tiny-qwen2"),
                              seq_lens=(16, 100), pause_at=(1,), steps=8)
    assert [c.run_id("nightly") for c in spec.cells()][:2] == [
        "nightly.tiny-llama.s16.emulator.autopilot", "nightly.tiny-llama.s100.emulator.autopilot"]
    for text, needle in [("models = [", "is not TOML"),
                         ('models = ["tiny-llama"]\ncolour = 1\n', "unknown key 'colour'"),
                         ('models = "tiny-llama"\n', "models must be a list"),
                         ('models = ["tiny-llama"]\n[options]\nsteps = true\n',
                          "steps must be a int")]:
        bad = tmp_path / "bad.toml"
        bad.write_text(text)
        result = cli("--db", tmp_path / "head.db", "matrix", "-f", bad)
        assert result.exit_code == 2 and needle in assert_one_error(result)
    result = cli("--db", tmp_path / "head.db", "matrix", "-f", good, "--model", "tiny-llama")
    assert "not both" in assert_one_error(result)
    assert not (tmp_path / "head.db").exists()


def test_a_long_cell_name_still_makes_a_run_id():
    cell = MatrixSpec(name="n" * 24, models=("x" * 60,), seq_lens=(16,)).cells()[0]
    run_id = cell.run_id("n" * 24)
    assert len(run_id) == 64 and run_id != cell.run_id("m" * 24)


def test_node_commands(cli):
    key = cli("node", "key")
    assert key.exit_code == 0 and len(key.stdout.strip()) == 64
    assert cli("node", "key").stdout == key.stdout          # made once
    enrolled = cli("node", "enroll", "npu-1", key.stdout.strip())
    assert enrolled.exit_code == 0 and "enrolled node npu-1" in enrolled.stdout
    assert "already" in assert_one_error(cli("node", "enroll", "npu-2", key.stdout.strip()))
    assert "not a node's public key" in assert_one_error(cli("node", "enroll", "x", "abc"))
    listed = cli("node", "list", "--json")
    assert '"name": "npu-1"' in listed.stdout and '"revoked": null' in listed.stdout
    assert cli("node", "revoke", "npu-1").exit_code == 0
    assert "no enrolled node" in assert_one_error(cli("node", "revoke", "npu-1"))
    assert "revoked" in cli("node", "list").stdout


def test_resume_at_the_head_refuses_a_run_its_node_works(cli, tmp_path):
    """A second writer at the head would split the run from its node (its next shipment
    would no longer continue the head's copy): `resume` says who works it and changes
    nothing; once the cell has ended, the run resumes as any other."""
    from tui_runs import checkpoint_run

    from npu_deploy.store import EventStore
    from npu_deploy.store.matrix import note_cell, record_matrix

    db = tmp_path / "head.db"
    with EventStore.open(db) as store:
        run_id = checkpoint_run(store, "m.tiny-llama.s16.emulator.autopilot")
        record_matrix(store, "m", {"name": "m"})
        note_cell(store, "m", run_id, {"model": "tiny-llama"}, "running", node="npu-a")
        before = store.fold(run_id).version
    result = cli("--db", db, "resume", run_id, "--no-wait")
    assert result.exit_code == 1
    assert f"run {run_id} is worked by npu-a for its matrix" in assert_one_error(result)
    with EventStore.open(db) as store:
        assert store.fold(run_id).version == before
        note_cell(store, "m", run_id, {"model": "tiny-llama"}, "needs_human")
    resumed = cli("--db", db, "resume", run_id, "--no-wait")
    assert f"run {run_id} resumed at v" in resumed.stdout, resumed.stderr
    assert resumed.exit_code == 3            # it waits at its checkpoint again, here
