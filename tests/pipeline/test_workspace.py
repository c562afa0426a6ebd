"""A run's workspace goes with the conductor that drives it: a run driven again in the same
process (the TUI continuing after a decision) never reads through a store closed before."""

from __future__ import annotations

from npu_deploy.machine import Conductor, Policy, resume
from npu_deploy.machine.phase_run import PhaseRun
from npu_deploy.pipeline.workspace import workspace_of
from npu_deploy.store import EventStore


def test_a_run_resumed_in_the_same_process_reads_its_artifacts_through_the_open_store(
        db_path, fake):
    pipeline = fake(fail="1:9")
    with EventStore.open(db_path) as store:
        c = Conductor.start(store, pipeline, Policy(auto_approve=True, budget=1),
                            model="tiny", run_id="r1")
        assert c.run(wait=False).reason == "needs_human"
        first = workspace_of(PhaseRun(c, 1, 1))
        assert first.latest("value") is not None
        c.close()
    # the first store is closed; a person decides and the run goes on in this process
    with EventStore.open(db_path) as store:
        store.post_command("r1", "redirect", {"instruction": "fix it"})
        c = resume(store, "r1", pipeline)
        ws = workspace_of(PhaseRun(c, 1, 1))
        assert ws.latest("value") is not None     # a closed connection would raise here
        assert ws is not first and ws.store is store
        assert c.run(wait=False).reason == "finished"
        c.close()
