"""The TUI under Pilot, on real stores written by the real conductor (fake pipeline): every
decision path ends in exactly the inbox rows it should, and the conductor applies them;
the Decide dialog at 80 columns, one key per action; a keymap file rebinds by binding id."""

from __future__ import annotations

import pytest
from tui_pilot import SIZE, start, tui_commands, until

from npu_deploy.machine import Conductor, Policy
from npu_deploy.tui import DeployApp
from npu_deploy.tui.messages import EventsArrived
from npu_deploy.tui.screens.decision import DecisionDialog
from npu_deploy.tui.screens.dialogs import Confirm
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.screens.runs import RunsScreen
from npu_deploy.tui.widgets.panels import GatesPanel

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



# --- a person's keys in the stopped-for-a-person dialog (issue 38) ---------------------------

def _stopped(store, fake, agent: str = "fake") -> Conductor:
    pipeline = fake(fail="0:9")
    pipeline.agent.name = agent
    c = start(store, pipeline, Policy(auto_approve=True, budget=1))
    assert c.run().reason == "needs_human"
    return c


async def _decide(app, pilot) -> DecisionDialog:
    """`d`, and the dialog once it has mounted (its focus set)."""
    await pilot.press("d")
    await until(pilot, lambda: isinstance(app.screen, DecisionDialog))
    await pilot.pause()
    return app.screen


async def test_the_stopped_dialogs_keys_act_and_do_not_type_into_the_instruction(
        store, db_path, fake):
    _stopped(store, fake).close()
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        dialog = await _decide(app, pilot)
        assert isinstance(dialog, DecisionDialog) and dialog.kind == "stopped"
        field = dialog.query_one("#instruction")
        assert dialog.focused is dialog.query_one("#redirect")     # not the text field
        await pilot.press("o")                                      # override asks first
        assert isinstance(app.screen, Confirm) and field.value == ""
        await pilot.press("escape")
        assert app.screen is dialog
        await pilot.press("r")                                      # into the instruction
        assert dialog.focused is field
        await pilot.press("o", "k")                                 # letters type there now
        assert field.value == "ok"
        await pilot.press("escape")                                 # out of it, not away
        assert app.screen is dialog and dialog.focused is dialog.query_one("#redirect")
        await pilot.press("p")                                      # and the keys act again
        await until(pilot, lambda: tui_commands(store, "r1"))
    assert [c["kind"] for c in tui_commands(store, "r1")] == ["pause"]


@pytest.mark.parametrize("keep", [True, False])
async def test_x_asks_once_what_an_abort_ends_and_keeping_the_run_writes_nothing(
        store, db_path, fake, keep):
    _stopped(store, fake).close()
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await _decide(app, pilot)
        await pilot.press("x")
        confirm = app.screen
        assert isinstance(confirm, Confirm)
        assert "Abort run r1 at phase 0" in confirm.question
        assert "cannot be resumed" in confirm.question
        assert confirm.focused is confirm.query_one("#no")         # enter keeps the run
        if keep:
            await pilot.press("enter")
            assert isinstance(app.screen, DecisionDialog)
            await pilot.pause(0.2)
            assert not tui_commands(store, "r1")
            return
        confirm.query_one("#yes").press()
        await until(pilot, lambda: tui_commands(store, "r1"))
    assert [c["kind"] for c in tui_commands(store, "r1")] == ["abort"]


async def test_the_instruction_field_says_what_the_autopilot_follows_and_answers_a_refusal_there(
        store, db_path, fake):
    _stopped(store, fake, agent="autopilot").close()
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        dialog = await _decide(app, pilot)
        help_text = shown_text(dialog.query_one("#instruction-help"))
        assert "The autopilot follows no instruction at phase 0" in help_text
        assert "retry with seed N" in help_text
        await pilot.press("r", *"make it faster", "enter")
        await pilot.pause(0.1)
        assert app.screen is dialog                                 # still open, answered
        answer = shown_text(dialog.query_one("#instruction-answer"))
        assert answer == "Not sent: the autopilot does not understand 'make it faster'."
        assert "follows no instruction at phase 0" in dialog.query_one("#instruction").placeholder
        assert dialog.focused is dialog.query_one("#instruction")
        assert not tui_commands(store, "r1")
