"""The TUI under Pilot, on real stores written by the real conductor (fake pipeline): the
run browser, resume and deploy with the conductor in this process, what loads and the
step in flight, and the commands that need a terminal."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from tui_pilot import SIZE, start, until

from npu_deploy.cli.tui import ConductorDriver
from npu_deploy.machine import Policy
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.decision import DecisionDialog
from npu_deploy.tui.screens.dialogs import ResumeConfirm
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.screens.runs import RunsScreen

# --- the runs screen -----------------------------------------------------------------------------

async def test_runs_screen_shows_live_crashed_and_finished_runs_and_filters(store, db_path,
                                                                           fake):
    done = start(store, fake(), Policy(auto_approve=True), run_id="done")
    done.run()
    done.close()
    crashed = start(store, fake(), run_id="crashed")
    crashed.run(wait=False)
    crashed.close()                                       # lock free, log not ended
    live = start(store, fake(), run_id="live")
    live.run(wait=False)                                  # lock held
    app = DeployApp(db_path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        from textual.widgets import DataTable
        table = screen.query_one(DataTable)
        status = {str(k.value): table.get_cell(k, "status").plain for k in table.rows}
        assert status == {"done": "finished", "crashed": "crashed", "live": "running"}
        await pilot.press("slash", *"crash", "enter")
        assert [str(k.value) for k in table.rows] == ["crashed"]
        await pilot.press("escape")
        assert len(table.rows) == 3
        # open the live one: it attaches (follows the head)
        table.move_cursor(row=table.get_row_index("live"))
        await pilot.press("enter")
        assert isinstance(app.screen, RunScreen) and app.screen.follow
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)
    live.close()


async def test_resume_from_the_browser_runs_the_conductor_in_this_process(store, db_path, fake):
    c = start(store, fake(), Policy(auto_approve=True, pause_at=frozenset({1})))
    assert c.run(wait=False).reason == "awaiting_human"
    c.close()                                        # "crashed" while waiting at phase 1
    store.post_command("r1", "approve")
    app = DeployApp(db_path, driver=ConductorDriver(db_path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("r")
        dialog = app.screen
        assert isinstance(dialog, ResumeConfirm)
        assert dialog.last_phase.startswith("0 ") and dialog.unfinished is None
        await pilot.click("#yes")
        await until(pilot, lambda: isinstance(app.screen, RunScreen)
                    and app.screen.head_state.status == "finished", timeout=20)
    s = store.fold("r1")
    assert s.status == "finished" and s.resumes == 1


async def test_deploy_runs_the_conductor_in_a_worker_and_the_tui_approves(store, db_path,
                                                                         fake):
    fake()
    driver = ConductorDriver(db_path, "fake_pipeline:make",
                             Policy(auto_approve=True, pause_at=frozenset({2})), "tiny",
                             {"pipeline": "fake_pipeline:make"})
    app = DeployApp(db_path, run_id="dep", live=True, driver=driver, drive="deploy")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen.head_state.phases[2].pending_checkpoint, timeout=20)
        assert store.is_locked("dep")                     # the conductor is in this process
        await pilot.press("d")
        await pilot.press("enter")
        await until(pilot, lambda: screen.head_state.status == "finished", timeout=20)
        await until(pilot, lambda: not app.driving)
    s = store.fold("dep")
    assert s.verdict == "PASS"
    approvals = [e for e in store.events("dep") if e.type == "human.decision"
                 and e.payload["author"].endswith("@tui")]
    assert [e.phase for e in approvals] == [2]


async def test_a_decision_in_the_window_continues_a_stopped_run_in_this_process(
        store, db_path, fake):
    """deploy in the TUI: phase 1 stops for a person; the redirect typed in the dialog is
    recorded and the run goes on to the end in the same process, without pressing r."""
    fake(fail="1:9")
    driver = ConductorDriver(db_path, "fake_pipeline:make",
                             Policy(auto_approve=True, budget=1), "tiny",
                             {"pipeline": "fake_pipeline:make"})
    app = DeployApp(db_path, run_id="dep", live=True, driver=driver, drive="deploy")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await until(pilot, lambda: screen.head_state.status == "needs_human", timeout=20)
        assert app.driving == {"dep"}                 # its conductor waits for the person
        await pilot.press("d")
        dialog = app.screen
        assert isinstance(dialog, DecisionDialog) and dialog.kind == "stopped"
        dialog.query_one("#instruction").value = "fix it"
        await pilot.press("enter")
        await until(pilot, lambda: screen.head_state.status == "finished", timeout=20)
        await until(pilot, lambda: not app.driving)
    s = store.fold("dep")
    assert s.verdict == "PASS" and s.phases[1].instruction == "fix it"
    assert not [e for e in store.events("dep") if e.type == "error"]


async def test_a_decision_in_the_window_resumes_a_run_no_conductor_runs(store, db_path, fake):
    """attach (or tui) on a run a headless deploy left stopped: the decision resumes it
    here, and it goes on."""
    c = start(store, fake(fail="1:9"), Policy(auto_approve=True, budget=1))
    assert c.run().reason == "needs_human"
    c.close()
    app = DeployApp(db_path, run_id="r1", live=True, driver=ConductorDriver(db_path))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await pilot.press("d")
        app.screen.query_one("#instruction").value = "fix it"
        await pilot.press("enter")
        await until(pilot, lambda: screen.head_state.status == "finished", timeout=20)
    assert store.fold("r1").resumes == 1


@pytest.mark.e2e          # a whole deployment: 452 s of a busy machine's 21 min run
@pytest.mark.slow
async def test_deploy_a_tiny_model_approve_from_the_dialog_and_the_run_finishes(store,
                                                                               db_path):
    """The real autopilot on a tiny model, every checkpoint waiting for a person: each
    approve from the dialog starts the next phase, in this process, to the end."""
    from npu_deploy.cli.deploy import DEFAULT_PIPELINE

    driver = ConductorDriver(db_path, DEFAULT_PIPELINE, Policy(), "tiny-llama",
                             {"pipeline": DEFAULT_PIPELINE, "seq_len": 32, "steps": 8})
    app = DeployApp(db_path, run_id="dep", live=True, driver=driver, drive="deploy")
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        for k in range(8):
            await until(pilot, lambda k=k: screen.head_state.phases[k].pending_checkpoint,
                        timeout=300)
            await pilot.press("d")
            assert isinstance(app.screen, DecisionDialog) and app.screen.phase == k
            await pilot.press("enter")                     # Approve has the focus
            if k < 7:
                await until(pilot, lambda k=k: screen.head_state.current_phase == k + 1,
                            timeout=60)
        await until(pilot, lambda: screen.head_state.status == "finished", timeout=120)
        await until(pilot, lambda: not app.driving)
    s = store.fold("dep")
    assert s.verdict == "PASS"
    approvals = [e.payload["checkpoint_id"] for e in store.events("dep")
                 if e.type == "human.decision"]
    assert approvals == [f"p{k}.a1" for k in range(8)]


# --- the commands -------------------------------------------------------------------------------

def test_tui_commands_refuse_clearly_without_a_terminal(cli, db_path: Path, store):
    r = cli("attach", "nope", "--db", str(db_path))
    assert r.exit_code == 1 and "no run 'nope'" in r.output
    r = cli("tui", "--db", str(db_path))
    assert r.exit_code == 2 and "needs a terminal" in r.output
    r = cli("deploy", "tiny", "--pipeline", "fake_pipeline:make", "--db", str(db_path))
    assert r.exit_code == 2 and "needs a terminal" in r.output
    assert store.run_ids() == []                          # nothing was created


async def test_the_header_and_what_loads_paint_before_the_driver_has_loaded(store, db_path):
    """deploy: the first frame shows the run's title and "loading" while the conductor's
    worker is still loading (here held until the test lets it go); then the run starts."""
    import threading

    from textual.widgets import ProgressBar

    from npu_deploy.tui.widgets.step_progress import StepProgress

    release, asked = threading.Event(), threading.Event()

    class SlowDriver(ConductorDriver):
        def deploy(self, run_id, loading=lambda _w: None):
            loading("loading the pipeline (held by the test) …")
            asked.set()
            release.wait(timeout=30)
            return "stopped: released"

    app = DeployApp(db_path, run_id="dep", live=True, driver=SlowDriver(db_path),
                    drive="deploy")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        title = str(app.screen.query_one("#run-title").render())
        assert "dep" in title and "not started" in title
        await until(pilot, asked.is_set)
        await pilot.pause(0.6)
        progress = app.screen.query_one(StepProgress)
        assert progress.display
        assert "loading the pipeline (held by the test)" in \
            str(progress.query_one("#step-label").render())
        assert progress.query_one(ProgressBar).total is None      # no estimate: indeterminate
        release.set()
        await until(pilot, lambda: not app.driving)
        await pilot.pause(0.6)
        assert not progress.display
    assert app.conducting["dep"].is_set()


async def test_a_long_step_shows_its_count_and_a_bar_filled_by_it(store, db_path):
    """A step that counts (events/progress.py) shows `tool (phase k): stage done/total`
    and a bar at its fraction while it runs; the bar goes when the step ends."""
    import threading

    from fake_pipeline import FakeGate, FakeMatcher
    from textual.widgets import ProgressBar

    from npu_deploy.events import progress
    from npu_deploy.machine import Pipeline
    from npu_deploy.tui.widgets.step_progress import StepProgress

    counted, release = threading.Event(), threading.Event()

    class Counting:
        name = "counting"

        def work(self, run):
            run.step("build_oracle", {}, self.count)

        def count(self):
            with progress.stage("greedy runs", 8, "token"):
                progress.advance("token", 2)
                progress.reach("token", 2)      # reach() at the last count is written
                counted.set()
                assert release.wait(timeout=30)
            return {}

    pipeline = Pipeline(Counting(), {k: FakeGate(0) for k in range(8)}, FakeMatcher())
    c = start(store, pipeline, Policy(auto_approve=True))
    worker = threading.Thread(target=lambda: c.run(wait=False), daemon=True)
    worker.start()
    try:
        app = DeployApp(db_path, run_id="r1", live=True)
        async with app.run_test(size=SIZE) as pilot:
            assert await asyncio.to_thread(counted.wait, 30)
            bar = app.screen.query_one(StepProgress)
            await until(pilot, lambda: bar.display)
            await until(pilot, lambda: "2/8" in str(bar.query_one("#step-label").render()))
            label = str(bar.query_one("#step-label").render())
            assert label.startswith("build_oracle (phase 0): greedy runs 2/8 tokens")
            assert bar.query_one(ProgressBar).percentage == pytest.approx(0.25)
            release.set()
            await until(pilot, lambda: not bar.display, timeout=20)
    finally:
        release.set()
        worker.join(timeout=30)
        c.close()
