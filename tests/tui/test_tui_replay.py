"""The TUI under Pilot in replay, on a finished run written by the real conductor (fake
pipeline): seeks and jumps land on the right events and fold the state the store folds,
what seeks keep leaves the collector, play stops at the end; forks from the replay cursor
and from the run browser; help; live lines join their pages."""

from __future__ import annotations

import gc
import time

import pytest
from tui_pilot import SIZE, start, until

import npu_deploy.tui.timeline as timeline_module
from npu_deploy.cli.tui import ConductorDriver
from npu_deploy.machine import Policy
from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.dialogs import ForkDialog, GotoDialog
from npu_deploy.tui.screens.help import HelpScreen
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.timeline import EventLine, RunTimeline, row_of
from npu_deploy.tui.widgets.panels import GatesPanel, source_label

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


async def test_help_opens_on_question_mark_and_f1(store, db_path, finished_run):
    app = DeployApp(db_path, run_id=finished_run, live=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        await pilot.press("f1")
        await pilot.pause()
        assert isinstance(app.screen, RunScreen)


# --- forks ------------------------------------------------------------------------------------

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

