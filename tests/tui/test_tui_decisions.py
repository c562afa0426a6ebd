"""The TUI under Pilot, on real stores written by the real conductor (fake pipeline): every
decision path ends in exactly the inbox rows it should, and the conductor applies them;
replay seeks and jumps land on the right events; the run browser's resume and fork work."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import npu_deploy.tui.timeline as timeline_module
from npu_deploy.cli.tui import ConductorDriver
from npu_deploy.machine import Conductor, Policy
from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.messages import EventsArrived
from npu_deploy.tui.screens.decision import DecisionDialog
from npu_deploy.tui.screens.dialogs import Confirm, ForkDialog, GotoDialog, ResumeConfirm
from npu_deploy.tui.screens.help import HelpScreen
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.screens.runs import RunsScreen
from npu_deploy.tui.timeline import EventLine, RunTimeline, row_of
from npu_deploy.tui.widgets.panels import GatesPanel, source_label

SIZE = (150, 45)



def start(store: EventStore, pipeline, policy: Policy | None = None, run_id: str = "r1"
          ) -> Conductor:
    return Conductor.start(store, pipeline, policy or Policy(), model="tiny", run_id=run_id,
                           config={"pipeline": "fake_pipeline:make"})


async def until(pilot, cond: Callable[[], object], timeout: float = 8.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not cond():
        if loop.time() > end:
            raise AssertionError("timed out waiting for the TUI")
        await pilot.pause(0.05)


def tui_commands(store: EventStore, run_id: str) -> list[dict]:
    return [c for c in store.pending_commands(run_id) if c["author"].endswith("@tui")]


# --- decisions ---------------------------------------------------------------------------------

async def test_approve_at_a_checkpoint_is_one_inbox_command_that_the_conductor_applies(
        store, db_path, fake):
    c = start(store, fake())
    assert c.run(wait=False).reason == "awaiting_human"
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        assert screen.query_one("#banner").display                 # a checkpoint waits
        await pilot.press("d")
        assert isinstance(app.screen, DecisionDialog)
        await pilot.press("enter")                                 # Approve has the focus
        await until(pilot, lambda: not isinstance(app.screen, DecisionDialog))
        [cmd] = tui_commands(store, "r1")
        assert cmd["kind"] == "approve" and cmd["payload"] == {"checkpoint_id": "p0.a1"}
        assert c.run(wait=False).reason == "awaiting_human"        # now at phase 1
        await until(pilot, lambda: screen.head_state.current_phase == 1
                    and screen.head_state.phases[1].pending_checkpoint)
        await until(pilot, lambda: screen.cursor == screen.timeline.head)   # live follows
    c.close()
    s = store.fold("r1")
    assert s.phases[0].status == "exited:passed" and s.phases[0].decision == "approve"
    assert not store.pending_commands("r1")


async def test_live_tabs_catch_up_when_the_repaint_runs_before_the_cursor_follows(
        store, db_path, fake):
    """Seen in CI under load: events arrived, the tabs' repaint timer fired before the live
    timer moved the cursor to them, drew at the old cursor, and the Gates tab stayed there."""
    c = start(store, fake(fail="0:1"))
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.follow
        await until(pilot, lambda: screen.cursor == screen.timeline.head)
        assert c.run(wait=False).reason == "awaiting_pick"       # phase 0's gate fails
        # no await in between, so no timer or poll runs: the arrival, then the repaint first
        screen.on_events_arrived(EventsArrived("r1", list(store.events("r1"))))
        screen._flush()
        head = store.fold("r1").version
        assert screen.cursor == head
        await until(pilot, lambda: "gate fake-0: FAIL" in screen.query_one(GatesPanel).text)
    c.close()


async def test_redirect_needs_an_instruction_and_records_it(store, db_path, fake):
    c = start(store, fake())
    c.run(wait=False)
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("d")
        await pilot.click("#redirect")                             # empty: refused
        assert isinstance(app.screen, DecisionDialog) and not tui_commands(store, "r1")
        app.screen.query_one("#instruction").value = "use smaller tiles"
        await pilot.pause(0.3)                          # a button ignores a second press
        await pilot.click("#redirect")                  # within its 0.2 s press effect
        await until(pilot, lambda: tui_commands(store, "r1"))
    [cmd] = tui_commands(store, "r1")
    assert cmd["kind"] == "redirect" and cmd["payload"]["instruction"] == "use smaller tiles"
    c.run(wait=False)
    c.close()
    entered = [e for e in store.events("r1") if e.type == "phase.entered"]
    assert entered[-1].attempt == 2 and entered[-1].payload["instruction"] == "use smaller tiles"


async def test_pick_a_debug_direction_by_its_skill(store, db_path, fake):
    c = start(store, fake(fail="0:1"))
    assert c.run(wait=False).reason == "awaiting_pick"
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("d")
        dialog = app.screen
        assert isinstance(dialog, DecisionDialog) and dialog.kind == "proposal"
        await pilot.press("down")                                  # the second direction
        await pilot.click("#pick")
        await until(pilot, lambda: tui_commands(store, "r1"))
    [cmd] = tui_commands(store, "r1")
    assert cmd["kind"] == "pick"
    assert cmd["payload"] == {"proposal_id": "p0.a1", "direction_id": "bo"}
    c.run(wait=False)
    c.close()
    assert store.fold("r1").phases[0].debug_direction == "bo"


@pytest.mark.parametrize("confirm", [True, False])
async def test_overriding_a_failed_gate_takes_a_second_confirmation(store, db_path, fake,
                                                                    confirm):
    c = start(store, fake(fail="0:9"))
    c.run(wait=False)
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("d")
        await pilot.click("#override")
        assert isinstance(app.screen, Confirm)
        await pilot.click("#yes" if confirm else "#no")
        await pilot.pause(0.2)
    cmds = tui_commands(store, "r1")
    if not confirm:
        assert cmds == []
        c.close()
        return
    [cmd] = cmds
    assert cmd["kind"] == "approve" and cmd["payload"] == {"override": True,
                                                           "proposal_id": "p0.a1"}
    c.run(wait=False)
    c.close()
    exited = [e for e in store.events("r1") if e.type == "phase.exited"]
    assert exited[0].payload["outcome"] == "passed" and "overrode" in exited[0].payload["reason"]


async def test_a_stopped_run_offers_redirect_and_override(store, db_path, fake):
    c = start(store, fake(fail="0:9"), Policy(auto_approve=True, budget=1))
    assert c.run().reason == "needs_human"
    c.close()
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("d")
        dialog = app.screen
        assert isinstance(dialog, DecisionDialog) and dialog.kind == "stopped"
        assert dialog.query("#redirect") and dialog.query("#override")
        assert not dialog.query("#approve")               # a plain approve cannot pass it
        dialog.query_one("#instruction").value = "fix it"
        await pilot.press("enter")
        await until(pilot, lambda: tui_commands(store, "r1"))
    assert tui_commands(store, "r1")[0]["payload"] == {"instruction": "fix it",
                                                       "checkpoint_id": "p0.a1.stopped"}


async def test_brackets_in_a_model_name_and_an_exit_reason_show_as_written(store, db_path,
                                                                            fake):
    """What a run holds is data: Rich markup in it neither crashes the screens nor styles."""
    class GivesUp:
        name = "gives-up"

        def work(self, run):
            from npu_deploy.machine import NeedsHuman
            raise NeedsHuman("stuck on [/] and [bold]this[/bold]")

    pipeline = fake()
    pipeline.agent = GivesUp()
    c = Conductor.start(store, pipeline, Policy(), model="tiny[/]", run_id="r1")
    assert c.run(wait=False).reason == "needs_human"
    c.close()
    app = DeployApp(db_path, run_id="r1", live=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        title = str(app.screen.query_one("#run-title").render())
        banner = str(app.screen.query_one("#banner").render())
        assert "r1  tiny[/]  emulator" in title
        assert "stuck on [/] and [bold]this[/bold]" in banner
        await pilot.press("d")
        assert isinstance(app.screen, DecisionDialog)
        assert "stuck on [/] and [bold]this[/bold]" in str(
            app.screen.query_one("#decision-why").render())
        app.screen.action_cancel()
        await pilot.pause()
        app.screen.action_back()
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)              # its preview drawn as well
        from textual.widgets import DataTable
        assert str(app.screen.query_one(DataTable).get_row("r1")[1]) == "tiny[/]"


async def test_cancel_writes_nothing(store, db_path, fake):
    c = start(store, fake())
    c.run(wait=False)
    c.close()
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("d")
        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)
        await pilot.press("d")
        await pilot.click("#cancel")
        assert isinstance(app.screen, RunScreen)
    assert store.pending_commands("r1") == []


async def test_when_another_client_decided_first_the_dialog_says_so(store, db_path, fake):
    c = start(store, fake())
    c.run(wait=False)
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=SIZE) as pilot:
        # a decision still in the inbox
        await pilot.press("d")
        store.post_command("r1", "redirect", {"instruction": "other"}, author="ana")
        await pilot.click("#approve")
        dialog = app.screen
        assert isinstance(dialog, DecisionDialog)
        assert dialog.closed_by and "redirect by ana" in dialog.closed_by
        assert dialog.query_one("#approve").disabled
        await pilot.click("#cancel")
        # a decision recorded while the dialog is open: the live run beneath moves on
        c.run(wait=False)                                  # records ana's redirect
        store.post_command("r1", "approve", author="ana")
        await until(pilot, lambda: app.screen.query("#banner")
                    and app.screen.head_state.phases[0].attempts == 2)
        await pilot.press("d")
        dialog = app.screen
        assert isinstance(dialog, DecisionDialog)
        c.run(wait=False)                                  # records ana's approve
        await until(pilot, lambda: dialog.closed_by is not None)
        assert "approve by ana" in dialog.closed_by
    c.close()
    assert tui_commands(store, "r1") == []
    assert not [e for e in store.events("r1") if e.type == "human.decision"
                and e.payload["author"].endswith("@tui")]


async def test_decide_is_refused_when_nothing_waits(store, db_path, fake):
    c = start(store, fake(), Policy(auto_approve=True))
    c.run()
    c.close()
    app = DeployApp(db_path, run_id="r1", live=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("d")
        assert isinstance(app.screen, RunScreen)
        assert not app.screen.query_one("#banner").display


async def test_the_palette_offers_what_applies_now(store, db_path, fake):
    c = start(store, fake())
    c.run(wait=False)
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=SIZE) as pilot:
        titles = [cmd.title for cmd in app.get_system_commands(app.screen)]
        assert "Approve phase 0" in titles and "Pick a debug direction for phase 0" not in titles
        store.post_command("r1", "approve")
        c.run(wait=False)
        await until(pilot, lambda: app.screen.head_state.phases[1].pending_checkpoint)
        titles = [cmd.title for cmd in app.get_system_commands(app.screen)]
        assert "Approve phase 1" in titles and "Approve phase 0" not in titles
    c.close()


# --- replay ------------------------------------------------------------------------------------

@pytest.fixture
def finished_run(store, fake):
    """A run through all phases: phase 2's gate fails once, the policy picks and retries."""
    c = start(store, fake(fail="2:1,5:1"), Policy(auto_approve=True))
    assert c.run().reason == "finished"
    c.close()
    return "r1"


async def test_replay_jumps_to_failures_phases_decisions_and_event_numbers(store, db_path,
                                                                         finished_run):
    events = list(store.events(finished_run))
    fails = [e.run_version for e in events if e.type == "gate.evaluated"
             and not e.payload["passed"]]
    entered = [e.run_version for e in events if e.type == "phase.entered"]
    decisions = [e.run_version for e in events if e.type == "human.decision"]
    app = DeployApp(db_path, run_id=finished_run, live=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.cursor == 1 and not screen.follow
        await pilot.press("f")
        assert screen.cursor == fails[0]
        from textual.widgets import TabbedContent
        assert screen.query_one(TabbedContent).active == "tab-gates"
        gates = screen.query_one(GatesPanel).text
        failed = next(e for e in events if e.run_version == fails[0])
        assert f"Phase {failed.phase} " in gates and f"gate {failed.payload['gate']}: FAIL" \
            in gates and "rel_l2" in gates, gates
        await pilot.press("f")
        assert screen.cursor == fails[1]
        await pilot.press("F")
        assert screen.cursor == fails[0]
        # the phase strip and gates show the state at the cursor, not at the end
        assert screen.state_at_cursor().phases[2].status == "failed"
        assert screen.state_at_cursor().phases[3].attempts == 0
        await pilot.press("right_square_bracket")
        assert screen.cursor == min(v for v in entered if v > fails[0])
        await pilot.press("left_square_bracket")
        assert screen.cursor == max(v for v in entered if v < min(v for v in entered
                                                                  if v > fails[0]))
        before = screen.cursor
        await pilot.press("n")
        assert screen.cursor == min(v for v in decisions if v > before)
        await pilot.press("g")
        assert isinstance(app.screen, GotoDialog)
        await pilot.press(*"42", "enter")
        assert screen.cursor == 42
        await pilot.press("full_stop")
        assert screen.cursor == 43
        await pilot.press("comma", "comma")
        assert screen.cursor == 41
        await pilot.press("end")
        assert screen.cursor == len(events) and screen.follow


async def test_seeking_folds_the_same_state_as_the_store(store, db_path, finished_run):
    head = store.fold(finished_run).version
    timeline = RunTimeline(store, finished_run)
    for v in (1, 7, head // 2, head - 1, head, 3):
        assert timeline.state_at(v) == store.fold(finished_run, v, use_snapshots=False)
    assert timeline.line(head).type == "run.finished" and timeline.line(head + 1) is None
    bands = timeline.bands()
    assert [b.phase for b in bands] == list(range(8))
    assert bands[-1].last == head


async def test_what_seeks_keep_leaves_the_collector_each_second(store, db_path, finished_run):
    """The run screen freezes what survives a collection once a second after seeks made
    objects, so full collections (a stall in the frame after a seek) stay short; on close,
    everything is given back to the collector."""
    app = DeployApp(db_path, run_id=finished_run, live=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunScreen)
        await until(pilot, lambda: gc.get_freeze_count() > 0 and not screen._grown)
        head, frozen = screen.timeline.head, gc.get_freeze_count()
        for v in (head, 1, head // 2, head // 3):
            await pilot.pause(0)                      # the previous seek's frame is drawn
            screen.seek(v)
        assert screen._grown          # no await since the last seek: the timer cannot run
        await until(pilot, lambda: not screen._grown)
        assert gc.get_freeze_count() > frozen
    assert gc.get_freeze_count() == 0


def test_the_warm_up_steps_aside_while_the_ui_seeks(store, fake, monkeypatch):
    """A seek gives the UI thread the GIL: the warm-up folds nothing for UI_QUIET_S after it,
    then finishes with the same states."""
    c = start(store, fake(steps=700), Policy(auto_approve=True))   # phases > one keyframe
    assert c.run().reason == "finished"
    c.close()
    timeline = RunTimeline(store, "r1")
    reader = EventStore.open(store.path, readonly=True)
    folds: list[float] = []
    events = reader.events

    def timed_events(*args, **kwargs):
        folds.append(time.monotonic())
        return events(*args, **kwargs)

    monkeypatch.setattr(reader, "events", timed_events)
    timeline.seeking()
    quiet_until = time.monotonic() + 0.9 * timeline_module.UI_QUIET_S
    timeline.warm(reader)
    reader.close()
    assert folds and folds[0] >= quiet_until
    assert timeline._key_versions                     # keyframes were kept
    for v in (timeline._key_versions[-1], timeline.head):
        assert timeline.state_at(v) == store.fold("r1", v, use_snapshots=False)


async def test_play_advances_the_cursor_and_stops_at_the_end(store, db_path, finished_run):
    app = DeployApp(db_path, run_id=finished_run, live=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await pilot.press("plus", "minus", "minus")       # 16 events/s
        assert screen.speed == 2
        await pilot.press("space")
        await until(pilot, lambda: screen.cursor > 3)
        await pilot.press("space")
        stopped = screen.cursor
        await pilot.pause(0.4)
        assert screen.cursor == stopped and not screen.playing


async def test_event_details_open_on_enter(store, db_path, finished_run):
    app = DeployApp(db_path, run_id=finished_run, live=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("enter")
        from npu_deploy.tui.screens.dialogs import EventDetail
        assert isinstance(app.screen, EventDetail)
        assert app.screen.event.type == "run.started"
        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)


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


async def test_fork_from_the_browser(store, db_path, finished_run):
    app = DeployApp(db_path, driver=ConductorDriver(db_path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("k")
        assert isinstance(app.screen, ForkDialog)
        app.screen.query_one("#at").value = "20"
        app.screen.query_one("#note").value = "try again from phase 1"
        await pilot.click("#yes")
        await until(pilot, lambda: len(store.run_ids()) == 2)
    new = [r for r in store.run_ids() if r != finished_run][0]
    s = store.fold(new)
    assert s.forked_from == (finished_run, 20)


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


# --- keys ------------------------------------------------------------------------------------

def keymapped(store, db_path, fake, tmp_path, monkeypatch, text: str) -> DeployApp:
    """The app on a run at its checkpoint, with $NPU_DEPLOY_KEYMAP a file holding `text`."""
    c = start(store, fake())
    c.run(wait=False)
    c.close()
    keymap = tmp_path / "keymap.toml"
    keymap.write_text(text)
    monkeypatch.setenv("NPU_DEPLOY_KEYMAP", str(keymap))
    return DeployApp(db_path, run_id="r1", live=True)


async def test_a_keymap_file_rebinds_by_binding_id(store, db_path, fake, tmp_path, monkeypatch):
    app = keymapped(store, db_path, fake, tmp_path, monkeypatch,
                    '[keymap]\n"run.decide" = "ctrl+d"\n')
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("d")
        assert isinstance(app.screen, RunScreen)
        await pilot.press("ctrl+d")
        assert isinstance(app.screen, DecisionDialog)


async def test_a_broken_keymap_is_reported_and_the_defaults_stay(store, db_path, fake, tmp_path,
                                                                monkeypatch):
    app = keymapped(store, db_path, fake, tmp_path, monkeypatch, "[keymap\n")
    async with app.run_test(size=SIZE) as pilot:
        assert any("not a keymap" in n.message for n in app._notifications)
        await pilot.press("d")
        assert isinstance(app.screen, DecisionDialog)


async def test_help_opens_on_question_mark_and_f1(store, db_path, finished_run):
    app = DeployApp(db_path, run_id=finished_run, live=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, RunScreen)


# --- the commands -------------------------------------------------------------------------------

def test_tui_commands_refuse_clearly_without_a_terminal(cli, db_path: Path, store):
    r = cli("attach", "nope", "--db", str(db_path))
    assert r.exit_code == 1 and "no run 'nope'" in r.output
    r = cli("tui", "--db", str(db_path))
    assert r.exit_code == 2 and "needs a terminal" in r.output
    r = cli("deploy", "tiny", "--pipeline", "fake_pipeline:make", "--db", str(db_path))
    assert r.exit_code == 2 and "needs a terminal" in r.output
    assert store.run_ids() == []                          # nothing was created


async def test_fork_at_the_replay_cursor(store, db_path, finished_run):
    app = DeployApp(db_path, run_id=finished_run, live=False, driver=ConductorDriver(db_path))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("f")                              # the first gate failure
        at = app.screen.cursor
        await pilot.press("k")
        assert isinstance(app.screen, ForkDialog)
        assert app.screen.query_one("#at").value == str(at)
        await pilot.click("#yes")
        await until(pilot, lambda: len(store.run_ids()) == 2)
    new = [r for r in store.run_ids() if r != finished_run][0]
    assert store.fold(new).forked_from == (finished_run, at)
    assert store.fold(new).phases[2].status == "failed"


async def test_live_lines_extend_the_pages_they_belong_to(store, db_path, fake):
    c = start(store, fake(steps=200))                 # > one 256-event page per phase
    c.run(wait=False)
    timeline = RunTimeline(store, "r1")
    head = timeline.head
    assert timeline.line(head) is not None            # the head page is read and cached
    store.post_command("r1", "approve")
    c.run(wait=False)
    new = list(store.events("r1", after_version=head))
    timeline.extend(new[:5])
    timeline.extend(new[9:])                          # a gap: the head still follows
    assert timeline.head == new[-1].run_version
    for e in store.events("r1"):
        line = timeline.line(e.run_version)
        assert isinstance(line, EventLine) and tuple(line) == row_of(e)
        assert line.glyph and line.seq == e.seq
    # the kept lines are plain tuples, which one collection stops tracking: 16k of them
    # would otherwise lengthen every full collection (the frame after a seek)
    gc.collect()
    kept = [row for page in timeline._pages.values() for row in page]
    assert kept and not any(gc.is_tracked(row) for row in kept)
    c.close()


def test_a_measured_profile_says_its_runs_and_a_modeled_one_says_it_is_modeled():
    measured = {"source": "measured-npu", "total_s": 5e-3, "runs": [4.9e-3, 5e-3, 5.4e-3]}
    assert source_label(measured) == "MEASURED on the NPU: median of 3 runs, 4.90-5.40 ms"
    assert source_label({"source": "modeled", "total_s": 5e-3}).startswith("MODELED")


LONG_TITLE = ("re-select the tile config of flash_attention with a smaller tile_n so that the "
              "softmax accumulates over fewer elements per core, then rerun the kernel gate")


def shown_text(widget) -> str:
    """What a widget draws, line by line, as one string of words."""
    lines = [widget.render_line(y).text for y in range(widget.size.height)]
    return " ".join(" ".join(lines).replace("▊", " ").replace("▎", " ").split())


async def test_the_dialog_shows_one_key_per_action_and_directions_in_full_at_80_columns(
        store, db_path, fake, monkeypatch):
    """Issue 25 point 6: a person reads the whole direction, the failing check with the
    checker's message, and acts with one key each (1-9 picks)."""
    from fake_pipeline import FakeMatcher

    from npu_deploy.events.payloads import DebugDirection, GateCheck, GateEvaluated

    monkeypatch.setattr(FakeMatcher, "propose", lambda self, run, gate: [
        DebugDirection(direction_id="tile", skill="tile-divisibility", title=LONG_TITLE,
                       rationale="two elements of 16384 miss the tolerance", score=0.9),
        DebugDirection(direction_id="bo", skill="buffer-object-corruption",
                       title="check buffer reuse", rationale="stale buffers", score=0.4)])
    from fake_pipeline import FakeGate

    monkeypatch.setattr(FakeGate, "evaluate", lambda self, run: GateEvaluated(
        gate=f"fake-{run.phase}", passed=run.attempt > 1, checks=[GateCheck(
            subject="flash_attention", metric="within_frac",
            value=1.0 if run.attempt > 1 else 0.99988, threshold=1.0, comparison=">=",
            passed=run.attempt > 1, message="2 of 16384 elements exceed atol + rtol*|ref|")]))
    c = start(store, fake())
    assert c.run(wait=False).reason == "awaiting_pick"
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=(80, 40)) as pilot:
        await pilot.press("d")
        dialog = app.screen
        assert isinstance(dialog, DecisionDialog)
        await pilot.pause(0.2)
        keys = str(dialog.query_one("#decision-keys").render())
        for key in ("1-2 pick a direction", "p pause", "x abort", "esc cancel"):
            assert key in keys
        assert not dialog.query("#pause")            # by key only: the buttons fit 80 columns
        assert LONG_TITLE in shown_text(dialog.query_one("#directions"))   # wrapped, whole
        failing = shown_text(dialog.query_one("#decision-failing"))
        assert "within_frac = 0.9999 (needs >= 1)" in failing
        assert "2 of 16384 elements exceed atol + rtol*|ref|" in failing
        await pilot.press("2")                                     # one key: the second
        await until(pilot, lambda: tui_commands(store, "r1"))
    [cmd] = tui_commands(store, "r1")
    assert cmd["kind"] == "pick" and cmd["payload"]["direction_id"] == "bo"
    c.close()


async def test_one_key_approves_and_one_key_pauses(store, db_path, fake):
    c = start(store, fake())
    assert c.run(wait=False).reason == "awaiting_human"
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=(80, 40)) as pilot:
        await pilot.press("d")
        await pilot.press("a")
        await until(pilot, lambda: tui_commands(store, "r1"))
        [cmd] = tui_commands(store, "r1")
        assert cmd["kind"] == "approve" and cmd["payload"] == {"checkpoint_id": "p0.a1"}
        assert c.run(wait=False).reason == "awaiting_human"        # phase 1's checkpoint
        await until(pilot, lambda: app.screen.head_state.current_phase == 1)
        await pilot.press("d")
        await pilot.press("p")
        await until(pilot, lambda: tui_commands(store, "r1"))
    assert c.run(wait=False).reason == "paused"
    c.close()


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
    """A step that counts (npu_deploy/progress.py) shows `tool (phase k): stage done/total`
    and a bar at its fraction while it runs; the bar goes when the step ends."""
    import threading

    from fake_pipeline import FakeGate, FakeMatcher
    from textual.widgets import ProgressBar

    from npu_deploy import progress
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
