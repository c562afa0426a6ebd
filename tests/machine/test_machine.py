"""The phase machine and the conductor (issue 6), with the fake pipeline of
tests/fake_pipeline.py and a real SQLite store."""

from __future__ import annotations

import os

import pytest
from fake_pipeline import make
from paths import ROOT

from npu_deploy.events import RUN_FINISHED, DeploymentState
from npu_deploy.events.payloads import AgentMessage, PhaseExited, RunFinished, ToolRequested
from npu_deploy.machine import (
    Conductor,
    DeploymentMachine,
    IllegalTransition,
    Policy,
    RunEnded,
    fork,
    mermaid,
    resume,
    state_of,
)
from npu_deploy.store import EventStore, RunLocked

DOCS = ROOT / "docs" / "machine.md"


@pytest.fixture
def store(tmp_path):
    with EventStore.open(tmp_path / "runs.db") as s:
        yield s



def types(store, run_id):
    return [(e.type, e.phase) for e in store.events(run_id)]


# --- the machine ---------------------------------------------------------------------------

def test_an_illegal_trigger_raises_instead_of_being_ignored():
    m = DeploymentMachine()
    pre = DeploymentState()
    with pytest.raises(IllegalTransition):
        m.fire("enter_p0", pre, {}, 0)                      # no run.started yet
    m.fire("start", pre, {}, None)
    assert m.state == "ready"
    for trigger, payload, phase in (("enter_p1", {}, 1), ("gate_p0", {"passed": True}, 0),
                                    ("finish", {}, None), ("no_such_trigger", {}, None)):
        with pytest.raises(IllegalTransition):
            m.fire(trigger, pre, payload, phase)
        assert m.state == "ready"


def test_a_phase_is_left_only_after_a_passing_gate_and_a_decision(store, fake):
    c = Conductor.start(store, fake(), Policy(), model="tiny")
    halt = c.run(wait=False)
    assert halt.reason == "awaiting_human" and c.machine.state == "running.p0.awaiting_human"
    pre = c.state
    # leaving without the decision is refused by the guard
    assert not c.machine.allows("exit_p0", pre, {"outcome": "passed"}, 0)
    with pytest.raises(IllegalTransition):
        c._record(PhaseExited(outcome="passed"), phase=0, attempt=1)
    assert c.state.version == pre.version                   # nothing was committed
    c.close()


def test_the_machine_state_is_a_function_of_the_folded_log(store, fake):
    c = Conductor.start(store, fake(fail="1:1"), Policy(auto_approve=True), model="tiny")
    seen = []
    c.on_event = lambda e: seen.append((c.machine.state, state_of(c.state)))
    assert c.run().reason == "finished"
    assert seen and all(a == b for a, b in seen)
    c.close()
    # every prefix of the log rebuilds a machine where the conductor was
    for version in range(1, store.fold(c.run_id).version + 1, 7):
        folded = store.fold(c.run_id, version)
        assert DeploymentMachine(at=folded).state == state_of(folded)


def test_the_committed_diagram_is_drawn_from_the_machine():
    text = DOCS.read_text()
    assert mermaid() in text, "docs/machine.md is stale: run `python -m npu_deploy.machine.diagram`"


# --- the conductor -------------------------------------------------------------------------

def test_auto_approve_runs_every_phase_with_a_decision_each(store, fake):
    c = Conductor.start(store, fake(), Policy(auto_approve=True), model="tiny")
    assert c.run().reason == "finished"
    c.close()
    s = store.fold(c.run_id)
    assert s.status == "finished" and s.verdict == "PASS"
    decisions = [e for e in store.events(c.run_id) if e.type == "human.decision"]
    assert [e.phase for e in decisions] == list(range(8))
    assert all(e.payload["author"].startswith("policy:auto-approve") for e in decisions)
    for ph in s.phases:
        assert ph.outcome == "passed" and ph.backend_time_s > 0 and ph.wall_time_s > 0
    assert store.verify(c.run_id).ok


def test_failed_gate_proposes_directions_and_the_policy_picks_the_best(store, fake):
    c = Conductor.start(store, fake(fail="2:1"), Policy(auto_approve=True), model="tiny")
    assert c.run().reason == "finished"
    c.close()
    events = list(store.events(c.run_id))
    proposed = [e for e in events if e.type == "debug.proposed"]
    assert len(proposed) == 1 and proposed[0].phase == 2
    pick = [e for e in events if e.type == "human.decision" and e.payload["decision"] == "pick"]
    assert pick[0].payload["direction_id"] == "tile"             # the higher score
    entered = [e for e in events if e.type == "phase.entered" and e.phase == 2]
    assert [e.attempt for e in entered] == [1, 2]
    assert entered[1].payload["debug_direction"] == "tile"


def test_budget_exhausted_stops_the_run_for_a_person_then_a_redirect_goes_on(store, fake):
    pipeline = fake(fail="3:9")
    c = Conductor.start(store, pipeline, Policy(auto_approve=True, budget=2), model="tiny")
    halt = c.run()
    assert halt.reason == "needs_human" and "gate failed 2 times" in halt.detail
    assert "block/rel_l2" in halt.detail
    c.close()
    assert store.fold(c.run_id).status == "needs_human"
    store.post_command(c.run_id, "redirect", {"instruction": "fix it"})
    c = resume(store, c.run_id, pipeline)
    assert c.run().reason == "finished"
    c.close()
    entered = [e for e in store.events(c.run_id) if e.type == "phase.entered" and e.phase == 3]
    assert entered[-1].payload["instruction"] == "fix it" and entered[-1].attempt == 3


def test_interactive_decisions_arrive_through_the_inbox_exactly_once(store, fake):
    c = Conductor.start(store, fake(fail="1:1"), Policy(), model="tiny")
    assert c.run(wait=False).reason == "awaiting_human"
    store.post_command(c.run_id, "redirect", {"instruction": "use smaller tiles"})
    assert c.run(wait=False).reason == "awaiting_human"          # phase 0, attempt 2
    entered = [e for e in store.events(c.run_id) if e.type == "phase.entered"]
    assert entered[-1].attempt == 2 and entered[-1].payload["instruction"] == \
        "use smaller tiles"
    cmd = store.post_command(c.run_id, "approve")
    assert c.run(wait=False).reason == "awaiting_pick"           # phase 1 failed once
    c.run(wait=False)
    recorded = [e for e in store.events(c.run_id) if e.type == "human.decision"
                and e.payload["command_id"] == cmd]
    assert len(recorded) == 1 and recorded[0].phase == 0
    # a pick by number: the CLI maps it to the direction id
    directions = c.state.phases[1].pending_directions
    store.post_command(c.run_id, "pick", {"direction_id": directions[1]["direction_id"]})
    assert c.run(wait=False).reason == "awaiting_human"
    assert c.state.phases[1].debug_direction == "bo"
    # a command the run cannot take now is consumed and refused, in the log
    store.post_command(c.run_id, "pick", {"direction_id": "tile"})
    c.run(wait=False)
    refused = [e for e in store.events(c.run_id) if e.type == "error"]
    assert refused and refused[-1].payload["kind"] == "command_refused"
    assert not store.pending_commands(c.run_id)
    c.close()


def test_pause_at_waits_for_a_person_at_those_phases_only(store, fake):
    c = Conductor.start(store, fake(), Policy(auto_approve=True, pause_at=frozenset({3})),
                        model="tiny")
    halt = c.run(wait=False)
    assert halt.reason == "awaiting_human" and c.state.current_phase == 3
    store.post_command(c.run_id, "approve")
    assert c.run(wait=False).reason == "finished"
    c.close()


def test_pause_then_resume_and_abort(store, fake):
    pipeline = fake()
    c = Conductor.start(store, pipeline, Policy(), model="tiny")
    c.run(wait=False)
    store.post_command(c.run_id, "pause")
    assert c.run(wait=False).reason == "paused"
    c.close()
    c = resume(store, c.run_id, pipeline)
    resumed = [e for e in store.events(c.run_id) if e.type == "run.resumed"]
    assert resumed[-1].payload["reason"] == "paused"
    assert c.run(wait=False).reason == "awaiting_human"
    store.post_command(c.run_id, "abort")
    assert c.run(wait=False).reason == "aborted"
    c.close()
    assert store.fold(c.run_id).verdict == "ABORTED"
    with pytest.raises(RunEnded, match="fork"):
        resume(store, c.run_id, pipeline)


def test_resume_is_refused_while_another_process_writes(store, fake):
    pipeline = fake()
    c = Conductor.start(store, pipeline, Policy(), model="tiny")
    c.run(wait=False)
    with pytest.raises(RunLocked, match="another process"):
        resume(store, c.run_id, pipeline)
    c.close()


def test_a_step_that_cannot_be_repeated_is_put_to_a_person(store, fake):
    from npu_deploy.machine import PhaseRun

    pipeline = fake()
    c = Conductor.start(store, pipeline, Policy(auto_approve=True), model="tiny")
    c._enter(0)
    run = PhaseRun(c, 0, 1)
    # a non-idempotent step that was requested and never completed (the process died)
    c._record(ToolRequested(call_id="p0.a1.s1", tool="flash", arguments={"idempotent": False}),
              phase=0, attempt=1, actor="agent", key="p0.a1.s1")
    c.close()

    class Once:
        name = "once"

        def work(self, r):
            r.step("flash", {}, lambda: {}, idempotent=False)

    pipeline.agent = Once()
    c = resume(store, c.run_id, pipeline)
    halt = c.run()
    assert halt.reason == "needs_human" and "cannot be repeated" in halt.detail
    assert run.phase == 0
    c.close()


def test_fork_keeps_the_source_and_continues_from_its_prefix(store, fake):
    pipeline = fake()
    c = Conductor.start(store, pipeline, Policy(), model="tiny")
    c.run(wait=False)                                         # at phase 0's checkpoint
    at = c.state.version
    store.post_command(c.run_id, "approve")
    c.run(wait=False)
    c.close()
    source_head = store.fold(c.run_id).last_hash
    new = fork(store, c.run_id, at, "try another instruction")
    assert store.fold(c.run_id).last_hash == source_head and store.verify(c.run_id).ok
    forked = store.fold(new)
    assert forked.forked_from == (c.run_id, at) and store.verify(new).ok
    assert forked.phases[0].pending_checkpoint == store.fold(c.run_id, at).phases[0] \
        .pending_checkpoint
    store.post_command(new, "redirect", {"instruction": "fix it"})
    c2 = resume(store, new, pipeline)
    assert c2.run(wait=False).reason == "awaiting_human"
    c2.close()
    entered = [e for e in store.events(new) if e.type == "phase.entered"]
    assert entered[-1].payload["instruction"] == "fix it"
    with pytest.raises(ValueError, match="versions 1"):
        fork(store, c.run_id, 10_000)


def test_fake_pipeline_reads_its_knobs(monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "2:4")
    assert make().gates[2].fails == 4 and os.environ["FAKE_FAIL"] == "2:4"


def test_resume_reruns_an_unfinished_idempotent_step_under_its_key(store, fake):
    pipeline = fake()
    c = Conductor.start(store, pipeline, Policy(auto_approve=True), model="tiny")
    c._enter(0)
    c._record(AgentMessage(role="assistant", text="phase 0 attempt 1: no instruction"),
              phase=0, attempt=1, actor="agent", key="p0.a1.m1")
    c._record(ToolRequested(call_id="p0.a1.s2", tool="compute",
                            arguments={"i": 0, "idempotent": True, "backend": False}),
              phase=0, attempt=1, actor="agent", key="p0.a1.s2")
    c.close()                                          # the process died inside the step
    c = resume(store, c.run_id, pipeline)
    assert c.run().reason == "finished"
    c.close()
    events = list(store.events(c.run_id))
    assert [e.payload["unfinished_step"] for e in events if e.type == "run.resumed"] == \
        ["p0.a1.s2"]
    requested = [e for e in events if e.idempotency_key == "p0.a1.s2"]
    done = [e for e in events if e.idempotency_key == "p0.a1.s2.done"]
    assert len(requested) == 1 and len(done) == 1 and done[0].payload["result"] == {"value": 0}


def test_headless_deploy_shows_phases_steps_and_gate_metrics(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL", "1:1")
    result = cli("--db", tmp_path / "runs.db", "deploy", "tiny", "--headless",
                 "--auto-approve", "--pipeline", "fake_pipeline:make", "--run-id", "h1")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "phase 0 build CPU oracle" in out and "phase 7 independent evaluator" in out
    assert "gate fake-1: FAIL" in out and "block/rel_l2 = 0.3 (needs <= 0.001)" in out
    assert "1. check tile divisibility" in out and "run finished: PASS" in out
    assert "backend" in out and "step compute" in out


def test_a_fail_verdict_ends_the_run_as_failed(store, fake):
    c = Conductor.start(store, fake(fail="7:9"), Policy(auto_approve=True, budget=1),
                        model="tiny")
    assert c.run().reason == "needs_human" and c.state.current_phase == 7
    c._record(RunFinished(verdict="FAIL", summary="the evaluator failed"), key=RUN_FINISHED)
    assert c.machine.state == "failed" and c.state.status == "failed" and c.state.terminal
    assert c.run().reason == "failed"
    c.close()


def test_a_person_can_override_a_failed_gate_only_explicitly(store, fake, cli):
    c = Conductor.start(store, fake(fail="0:9"), Policy(budget=2), model="tiny")
    assert c.run(wait=False).reason == "awaiting_pick"           # phase 0 failed once
    # a plain approve never passes a failed gate: it is consumed and refused
    store.post_command(c.run_id, "approve")
    assert c.run(wait=False).reason == "awaiting_pick"
    assert [e for e in store.events(c.run_id) if e.type == "error"][-1].payload["kind"] == \
        "command_refused"
    store.post_command(c.run_id, "approve", {"override": True})
    assert c.run(wait=False).reason == "awaiting_human"          # phase 1's checkpoint
    exited = [e for e in store.events(c.run_id) if e.type == "phase.exited"]
    assert exited[0].phase == 0 and exited[0].payload["outcome"] == "passed"
    assert "overrode" in exited[0].payload["reason"]
    assert c.state.phases[0].last_gate.passed is False
    from npu_deploy.events.describe import describe
    override = [e for e in store.events(c.run_id) if e.type == "human.decision"][-1]
    assert "OVERRIDING THE FAILED GATE" in describe(override)
    c.close()
    # after the budget ran out (a stopped run), the CLI's --override passes the phase too
    c = Conductor.start(store, fake(fail="0:9"), Policy(auto_approve=True, budget=1),
                        model="tiny")
    assert c.run().reason == "needs_human"
    c.close()
    db = str(store.path)
    assert cli("decide", c.run_id, "approve", "--db", db).exit_code != 0   # no checkpoint
    assert cli("decide", c.run_id, "redirect", "x", "--override", "--db", db).exit_code != 0
    assert cli("decide", c.run_id, "approve", "--override", "--db", db).exit_code == 0
    c = resume(store, c.run_id, fake(fail="0:9"))
    assert c.run().reason == "finished"
    c.close()
    assert store.fold(c.run_id).phases[0].outcome == "passed"


def test_a_pipeline_named_before_the_namespace_move_still_loads():
    """Runs stored before the packages moved under `npu_deploy` name their pipeline by the
    old module path in `run.started`; resuming them must find it."""
    from npu_deploy.machine import Pipeline
    from npu_deploy.machine.pipelines import canonical_pipeline, load_pipeline

    assert canonical_pipeline("skills.autopilot:pipeline").startswith("npu_deploy.")
    pipeline = load_pipeline("skills.autopilot:pipeline")
    assert isinstance(pipeline, Pipeline) and pipeline.agent.name == "autopilot"
