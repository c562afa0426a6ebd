"""Events on the command line read as events/describe.py says (`show` and the headless
deploy print the same summary), and what a run holds is data: a model name, an instruction
or a call id with brackets prints as written, where Rich markup would crash or swallow it."""

from __future__ import annotations

from fake_pipeline import make

from npu_deploy.events.describe import describe
from npu_deploy.machine import Conductor, Policy
from npu_deploy.store import EventStore

MODEL = "tiny[/]"                   # Rich markup: a closing tag with nothing to close
INSTRUCTION = "[b]fix[/b] it [/]"


def test_brackets_print_as_written_in_show_and_the_headless_deploy(cli, tmp_path,
                                                                   monkeypatch):
    db = tmp_path / "runs.db"
    monkeypatch.setenv("FAKE_FAIL", "")
    with EventStore.open(db) as store:
        c = Conductor.start(store, make(), Policy(), model=MODEL, run_id="r1",
                            config={"pipeline": "fake_pipeline:make"})
        assert c.run(wait=False).reason == "awaiting_human"
        c.close()
        store.post_command("r1", "redirect", {"instruction": INSTRUCTION})
    resumed = cli("--db", db, "resume", "r1", "--no-wait")
    assert resumed.exit_code == 3, resumed.stderr            # at the checkpoint again
    assert f"decision: redirect {INSTRUCTION} (by human)" in resumed.stdout
    assert f"  a person's instruction: {INSTRUCTION}" in resumed.stdout
    assert "phase 0 build CPU oracle (attempt 2)" in resumed.stdout
    shown = cli("--db", db, "show", "r1", "--events", "40")
    assert shown.exit_code == 0, shown.stderr
    assert f"r1  {MODEL} on emulator" in shown.stdout
    assert "compute [p0.a2.s2] ok" in shown.stdout           # a call id, not a style
    assert f"redirect {INSTRUCTION}" in shown.stdout
    deployed = cli("--db", db, "deploy", MODEL, "--headless", "--auto-approve", "--pipeline",
                   "fake_pipeline:make", "--run-id", "r2")
    assert deployed.exit_code == 0, deployed.stderr
    assert f"run r2: {MODEL}, policy auto-approve" in deployed.stdout
    assert "run finished: PASS: every phase passed its gate" in deployed.stdout


def test_show_and_the_headless_deploy_print_the_same_summary(cli, tmp_path, monkeypatch):
    db = tmp_path / "runs.db"
    monkeypatch.setenv("FAKE_FAIL", "1:1")
    deployed = cli("--db", db, "deploy", "tiny", "--headless", "--auto-approve", "--pipeline",
                   "fake_pipeline:make", "--run-id", "r1")
    assert deployed.exit_code == 0, deployed.stderr
    shown = cli("--db", db, "show", "r1", "--events", "500").stdout
    with EventStore.open(db) as store:
        events = list(store.events("r1"))
    moving = [e for e in events if e.type in ("gate.evaluated", "debug.proposed",
                                              "human.decision", "run.finished")]
    assert len(moving) == 9 + 1 + 9 + 1       # gates, the debug proposal, decisions, the end
    for e in moving:
        text = describe(e)
        assert text in deployed.stdout and text in shown, (e.type, text)
