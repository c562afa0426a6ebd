"""The offline autopilot through all eight phases with the real gates, through the API and
the command line (test_defaults_pass.py deploys each tiny model and checks what a whole
deployment records); a seeded fault caught by a gate and repaired by the debug skill it
proposes; the independent evaluator refusing a run whose gates said PASS without the work
behind them; the runner; the report; the optimization memory and the lessons.

SmolLM2-135M itself takes minutes: benchmarks/deploy_smollm2.py runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import assert_one_error
from paths import TESTS

from npu_deploy.agents.autopilot import pipeline
from npu_deploy.events import NewEvent
from npu_deploy.machine import Conductor, Policy
from npu_deploy.store import EventStore, RunWriter

FAST = {"seq_len": 32, "steps": 12}


def deploy(db: Path, model: str, **config: object) -> tuple[str, list]:
    with EventStore.open(db) as store:
        c = Conductor.start(store, pipeline(), Policy(auto_approve=True), model=model,
                            config={**FAST, **config})
        halt = c.run()
        c.close()
        assert halt.reason == "finished", halt
        return c.run_id, list(store.events(c.run_id))


def gates_of(events: list) -> dict[int, list[bool]]:
    out: dict[int, list[bool]] = {}
    for e in events:
        if e.type == "gate.evaluated":
            out.setdefault(e.phase, []).append(e.payload["passed"])
    return out


@pytest.mark.e2e
def test_a_seeded_tile_fault_fails_phase_1_and_the_debug_skill_repairs_it(tmp_path):
    run_id, events = deploy(tmp_path / "runs.db", "tiny-llama", fault="gemm-tile")
    assert gates_of(events)[1] == [False, True]
    failed = next(e for e in events if e.type == "gate.evaluated" and e.phase == 1)
    bad = [c for c in failed.payload["checks"] if c["gating"] and not c["passed"]]
    assert bad and all("gemm" in c["subject"] for c in bad)
    assert any("not divisible by tile_n" in c.get("message", "") for c in bad)
    # the emulator wrote what the hardware writes: a corrupt output, not a correct one
    within = [c for c in failed.payload["checks"] if c["metric"] == "within_frac"
              and not c["passed"]]
    assert within and within[0]["value"] < 0.5
    proposed = next(e for e in events if e.type == "debug.proposed")
    assert proposed.payload["directions"][0]["skill"] == "silent-gemm-corruption"
    retry = [e for e in events if e.type == "phase.entered" and e.phase == 1][-1]
    assert retry.payload["debug_direction"] == "silent-gemm-corruption"
    assert events[-1].payload["verdict"] == "PASS"
    lessons = [e.payload for e in events if e.type == "lesson.recorded"]
    assert len(lessons) == 1 and lessons[0]["target_skill"] == "silent-gemm-corruption"
    assert lessons[0]["draft"] and len(lessons[0]["event_refs"]) == 4


@pytest.mark.e2e
def test_the_evaluator_fails_a_run_whose_gates_passed_without_the_work(tmp_path):
    """The fake pipeline's gates say PASS for anything; the evaluator, in its own process,
    re-runs them from what is stored and finds nothing behind them."""
    sys.path.insert(0, str(TESTS))
    from fake_pipeline import make

    with EventStore.open(tmp_path / "runs.db") as store:
        c = Conductor.start(store, make(), Policy(auto_approve=True), model="tiny-llama",
                            config=FAST)
        assert c.run().reason == "finished"
        c.close()
    done = subprocess.run([sys.executable, "-m", "npu_deploy.pipeline.evaluator",
                           str(tmp_path / "runs.db"), c.run_id, "--json"],
                          capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "FAIL"
    failed = {(c["subject"], c["metric"]) for c in report["checks"]
              if c["gating"] and not c["passed"]}
    assert ("capital", "stored_oracle_run_reproduced") in failed
    assert any(m == "configured" for _, m in failed)
    assert any(m == "written" for _, m in failed)


@pytest.mark.e2e
def test_the_command_line_deploys_answers_reports_and_lists_lessons(tmp_path, cli, deployed):
    """On the session's tiny-llama deployment (tests/conftest.py: `deploy tiny-llama
    --headless --auto-approve --seq-len 32 --steps 8`, made once for the tests that read
    it), copied here."""
    db = deployed.db
    assert "run finished: PASS" in deployed.stdout
    run_id = EventStore.open(db, readonly=True).run_ids()[0]
    assert run_id == deployed.run_id
    r = cli("--db", db, "generate", run_id, "The capital of France is", "--max-tokens", 5)
    assert r.exit_code == 0, r.stderr
    with EventStore.open(db, readonly=True) as store:
        ws_answer = next(e.payload["result"] for e in store.events(run_id)
                         if e.type == "tool.completed" and e.payload["tool"] == "generate")
    assert ws_answer["tokens"] >= 1
    r = cli("--db", db, "report", run_id, "-o", tmp_path / "report")
    assert r.exit_code == 0, r.stderr
    names = {p.name for p in (tmp_path / "report").iterdir()}
    assert {"report.md", "roofline.png", "timeline.png", "lessons.md",
            "evaluation.md"} <= names
    text = (tmp_path / "report" / "report.md").read_text()
    assert "modeled" in text and "not measured" in text
    assert (tmp_path / "report" / "roofline.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    r = cli("--db", db, "lessons", run_id)
    assert r.exit_code == 0 and "nothing to learn" in r.stdout


def test_the_command_line_refuses_an_unknown_model_and_a_run_without_deployment(tmp_path,
                                                                                cli):
    db = tmp_path / "runs.db"
    r = cli("--db", db, "deploy", "no-such-model", "--headless")
    assert_one_error(r, "no-such-model")
    assert not db.exists() or EventStore.open(db, readonly=True).run_ids() == []
    with EventStore.open(db) as store:
        RunWriter.create(store, {"model": "tiny-llama", "backend": "emulator",
                                 "agent": "autopilot", "code_version": "t"}).close()
        run_id = store.run_ids()[0]
    assert_one_error(cli("--db", db, "generate", run_id, "hi"), "no deployment yet")
    assert_one_error(cli("--db", db, "report", run_id, "-o", tmp_path / "r"), "no report")


@pytest.mark.e2e
def test_the_optimization_memory_orders_the_next_deployment(tmp_path, deployed):
    from npu_deploy.skills.experience import transform_order

    db = tmp_path / "runs.db"
    with EventStore.open(db) as store:
        with RunWriter.create(store, {"model": "m", "backend": "emulator", "agent": "a",
                                      "code_version": "t"}) as w:
            for name, outcome in (("merge_dispatches", "worked"), ("align_layouts", "failed")):
                w.append(NewEvent("experience.recorded", {
                    "topic": name, "summary": "", "outcome": outcome, "transform": name,
                    "model": "m", "shape": "prefill L=32", "speedup": 2.0,
                    "source": "modeled"}, actor="agent", phase=4, attempt=1))
        order, why = transform_order(store, ("align_layouts", "last_token_lm_head",
                                             "merge_dispatches"), "prefill")
        assert order == ["merge_dispatches", "last_token_lm_head", "align_layouts"]
        assert "worked in 1 of 1" in why["merge_dispatches"]
        # decode experiences do not reorder prefill, and a run can leave itself out
        order, _ = transform_order(store, ("align_layouts", "merge_dispatches"), "decode")
        assert order == ["align_layouts", "merge_dispatches"]
    # a deployment in the same store as an earlier one reads its memory: the second run's
    # order names the first's (the first: the session's tiny-llama deployment, copied here)
    with EventStore.open(deployed.db, readonly=True) as store:
        assert store.run_ids() == [deployed.run_id]
        assert any(e.type == "experience.recorded" for e in store.events(deployed.run_id))
    _, events = deploy(deployed.db, "tiny-llama")
    said = [e.payload["text"] for e in events if e.type == "agent.message"
            and e.phase == 4 and "optimization memory" in e.payload["text"]]
    assert said and "worked in 1 of 1 earlier tries" in said[0]


def test_an_approved_lesson_adds_its_trigger_to_the_matcher(tmp_path, cli):
    from npu_deploy.skills.catalog import load_catalog, overlay_dir
    from npu_deploy.skills.matcher import SkillMatcher

    db = tmp_path / "runs.db"
    with EventStore.open(db) as store:
        with RunWriter.create(store, {"model": "m", "backend": "emulator", "agent": "a",
                                      "code_version": "t"}) as w:
            w.append(NewEvent("lesson.recorded", {
                "lesson_id": "L1", "symptom": "layer lens", "root_cause": "r", "fix": "f",
                "target_skill": "buffer-object-corruption", "proposes": {
                    "kind": "trigger", "skill": "buffer-object-corruption", "trigger": {
                        "id": "learned-layer-cosine", "kind": "gate_metric",
                        "metric": "layer_cosine", "below": 0.5, "weight": 0.6}}},
                actor="agent", phase=6, attempt=1))
        run_id = w.run_id
    gate = {"checks": [{"subject": "L3", "metric": "layer_cosine", "value": 0.1,
                        "threshold": 0.99, "comparison": ">=", "passed": False}]}
    assert SkillMatcher(load_catalog()).propose(None, gate)[0].skill == "none"
    assert_one_error(cli("--db", db, "lessons", run_id, "approve", "L9"), "no lesson L9")
    r = cli("--db", db, "lessons", run_id, "approve", "L1")
    assert r.exit_code == 0, r.stderr
    catalog = load_catalog(overlay=overlay_dir(db))
    assert SkillMatcher(catalog).propose(None, gate)[0].skill == "buffer-object-corruption"
    assert_one_error(cli("--db", db, "lessons", run_id, "approve", "L1"), "approved already")
    with EventStore.open(db, readonly=True) as store:
        assert store.verify(run_id).ok
        assert [e.type for e in store.events(run_id)][-1] == "lesson.approved"
