"""The run browser's new-deployment form (`n`), under Pilot on real stores: a tiny model
deploys as a new run whose conductor runs in this process and whose screen opens live; every
refused field says why under itself, with the words `npu-deploy deploy` uses, and leaves the
store's runs as they were; esc cancels."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console
from textual.widgets import Button, Footer, Input, Select, Static, Switch
from tui_pilot import SIZE, start, until

from npu_deploy.cli.tui import ConductorDriver
from npu_deploy.machine.reopen import run_config
from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.help import HelpScreen
from npu_deploy.tui.screens.new_deployment import NewDeployment
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.screens.runs import RunsScreen
from npu_deploy.tui.widgets.scrubber import Scrubber


@pytest.fixture
def waiting_run(store: EventStore, fake) -> str:
    """A run in the store already, stopped at its first checkpoint: the form must not
    touch it."""
    c = start(store, fake())
    assert c.run(wait=False).reason == "awaiting_human"
    c.close()
    return "r1"


def browser(db_path: Path) -> DeployApp:
    """`npu-deploy tui`: the run browser, with the driver that deploys in this process."""
    return DeployApp(db_path, driver=ConductorDriver(db_path))


async def open_form(pilot, app: DeployApp) -> NewDeployment:
    await pilot.press("n")
    form = app.screen
    assert isinstance(form, NewDeployment)
    return form


def problem(form: NewDeployment, field: str) -> str:
    """The refusal shown under `field`, "" when none shows."""
    box = form.query_one(f"#{field}-problem", Static)
    return str(box.content) if box.display else ""


async def submitted(pilot, form: NewDeployment, field: str) -> str:
    """Press Deploy; the problem under `field` once the check has answered."""
    await pilot.click("#yes")
    await until(pilot, lambda: form.checking is None and problem(form, field), timeout=60)
    return problem(form, field)


# --- a run --------------------------------------------------------------------------------

@pytest.mark.slow
async def test_the_form_deploys_a_tiny_model_here_and_the_run_screen_opens_live(
        store, db_path, waiting_run):
    """tiny-qwen2 on the emulator, seq-len 64, auto-approve: the run is created with them,
    its conductor runs in this process, and the run screen follows it live; a pause from the
    run screen stops it resumable."""
    before = {r.run_id for r in store.runs()}
    app = browser(db_path)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(pilot, app)
        form.query_one("#tiny", Select).value = "tiny-qwen2"
        seq_len = form.query_one("#seq-len", Input)
        seq_len.value = ""
        seq_len.focus()
        await pilot.press("6", "4")
        form.query_one("#auto-approve", Switch).value = True
        await pilot.click("#yes")
        await until(pilot, lambda: isinstance(app.screen, RunScreen), timeout=120)
        screen = app.screen
        assert isinstance(screen, RunScreen) and screen.follow          # live
        [run_id] = app.driving
        assert screen.run_id == run_id and run_id not in before
        await until(pilot, lambda: screen.head_state.phases[0].attempts >= 1, timeout=60)
        assert store.is_locked(run_id)                   # its conductor is in this process
        # the scrubber follows the run from its first event: phase 0's band is drawn
        await pilot.pause(0.3)
        scrubber = screen.query_one(Scrubber)
        assert "0" in "".join(seg.text for seg in scrubber.render_line(0))
        await pilot.press("P")                           # pause it from the run screen
        await until(pilot, lambda: not app.driving, timeout=120)
    s = store.fold(run_id)
    assert (s.model, s.backend, s.agent) == ("tiny-qwen2", "emulator", "autopilot")
    assert s.status == "paused" and s.policy == "auto-approve"
    assert run_config(store, run_id)["seq_len"] == 64
    assert {r.run_id for r in store.runs()} == before | {run_id}


# --- refusals -----------------------------------------------------------------------------

def corrupt_copy(tmp_path: Path) -> Path:
    """tiny-llama's directory with its weights' header overwritten (as the red team's)."""
    from npu_deploy.models import resolve

    model = tmp_path / "damaged"
    shutil.copytree(resolve("tiny-llama").directory, model)
    weights = model / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[8:40] = b"not the JSON header of tensors!!"
    weights.write_bytes(bytes(data))
    return model


def local_path(tmp_path: Path, case: str) -> str:
    if case == "missing":
        return str(tmp_path / "no-such-model")
    if case == "no-config":
        (tmp_path / "empty").mkdir()
        return str(tmp_path / "empty")
    if case == "not-gguf":
        (tmp_path / "weights.bin").write_bytes(b"\0" * 64)
        return str(tmp_path / "weights.bin")
    if case == "bad-gguf":
        (tmp_path / "model.gguf").write_bytes(b"GGUF but not really" * 8)
        return str(tmp_path / "model.gguf")
    return str(corrupt_copy(tmp_path))


@pytest.mark.parametrize("case, says", [
    ("missing", "no model"),
    ("no-config", "has no config.json"),
    ("not-gguf", "is a file but not a .gguf"),
    ("bad-gguf", "is not a readable GGUF file"),
    ("corrupt", "model.safetensors is not a valid safetensors"),
])
async def test_a_local_path_that_cannot_deploy_is_refused_under_the_model(
        store, db_path, waiting_run, tmp_path, case, says):
    path = local_path(tmp_path, case)
    runs = store.runs()
    app = browser(db_path)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(pilot, app)
        form.query_one("#model-kind", Select).value = "path"
        await pilot.pause()
        box = form.query_one("#path", Input)
        assert box.display and not form.query_one("#tiny", Select).display
        box.value = path
        assert says in await submitted(pilot, form, "model")
        assert app.screen is form and not app.driving      # the form stays, no run starts
    assert store.runs() == runs


async def test_a_seq_len_out_of_bounds_is_refused_as_it_is_typed(store, db_path, waiting_run):
    runs = store.runs()
    app = browser(db_path)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(pilot, app)
        box = form.query_one("#seq-len", Input)
        box.value = ""
        box.focus()
        await pilot.press("4")
        assert problem(form, "seq_len") == "seq-len 4 is not in 8-2048 tokens"
        await pilot.press("enter", "x")                     # submitted: refused, no check
        assert form.checking is None and app.screen is form
        assert "not a whole number" in problem(form, "seq_len")
        await pilot.press("backspace", "backspace", "3", "2")
        assert problem(form, "seq_len") == ""               # 32 is in bounds
    assert store.runs() == runs


async def test_claude_without_a_key_is_refused_under_the_agent_when_chosen(
        store, db_path, waiting_run, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    runs = store.runs()
    app = browser(db_path)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(pilot, app)
        form.query_one("#agent", Select).value = "claude"
        await until(pilot, lambda: problem(form, "agent"), timeout=30)   # before Deploy
        assert "needs ANTHROPIC_API_KEY" in problem(form, "agent")
        assert "ANTHROPIC_API_KEY" in await submitted(pilot, form, "agent")
        assert app.screen is form
        form.query_one("#agent", Select).value = "autopilot"
        await until(pilot, lambda: not problem(form, "agent"), timeout=30)
    assert store.runs() == runs


async def test_the_xrt_backend_on_a_machine_without_the_npu_is_refused_under_it(
        store, db_path, waiting_run, monkeypatch):
    monkeypatch.delenv("NPU_DEPLOY_AIR_OBJECTS", raising=False)
    runs = store.runs()
    app = browser(db_path)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(pilot, app)
        form.query_one("#backend", Select).value = "xrt"
        await until(pilot, lambda: problem(form, "backend"), timeout=30)
        assert "--backend xrt: this machine lacks" in problem(form, "backend")
        assert "this machine lacks" in await submitted(pilot, form, "backend")
        assert app.screen is form
    assert store.runs() == runs


# --- the ways in and out -------------------------------------------------------------------

async def test_esc_and_cancel_close_the_form_and_store_nothing(store, db_path, waiting_run):
    runs = store.runs()
    app = browser(db_path)
    async with app.run_test(size=SIZE) as pilot:
        await open_form(pilot, app)
        await pilot.press("escape")
        assert isinstance(app.screen, RunsScreen)
        form = await open_form(pilot, app)
        form.query_one("#seq-len", Input).value = "64"
        await pilot.click(form.query_one("#no", Button))
        assert isinstance(app.screen, RunsScreen) and not app.driving
    assert store.runs() == runs


async def test_the_form_is_in_the_palette_and_in_help(db_path, waiting_run):
    app = browser(db_path)
    async with app.run_test(size=SIZE) as pilot:
        titles = [cmd.title for cmd in app.get_system_commands(app.screen)]
        assert "New deployment" in titles
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        shown = Console(width=200, file=io.StringIO(), record=True)
        shown.print(app.screen.keys())
        assert re.search(r"\bn +New deployment\n", shown.export_text())


async def test_a_tui_without_a_driver_says_how_to_deploy(db_path, waiting_run):
    """A TUI opened to watch only (no driver): n says to use the command line."""
    app = DeployApp(db_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("n")
        assert isinstance(app.screen, RunsScreen)
        assert any("npu-deploy deploy MODEL" in n.message for n in app._notifications)
        assert "New deployment" not in [c.title for c in app.get_system_commands(app.screen)]


async def test_ctrl_s_deploys_from_any_field_and_the_footer_has_the_forms_keys(
        store, db_path, waiting_run):
    """The Deploy button is seven Tabs away: ctrl+s submits from the field the focus is in
    (a Select here), and the footer under the form shows its keys, not the browser's."""
    app = browser(db_path)
    async with app.run_test(size=SIZE) as pilot:
        form = await open_form(pilot, app)
        footer = form.query_one(Footer)
        keys = {b.binding.description for b in form.active_bindings.values()
                if b.binding.show}
        assert footer.screen is form and {"Deploy", "Cancel"} <= keys
        assert "New deployment" not in keys and "Attach live" not in keys
        form.query_one("#model-kind", Select).value = "path"
        await pilot.pause()
        form.query_one("#path", Input).value = str(db_path.parent / "no-such-model")
        form.query_one("#backend", Select).focus()
        await pilot.press("ctrl+s")                               # submitted: checked
        await until(pilot, lambda: "no model" in problem(form, "model"), timeout=60)
        assert app.screen is form
    assert [r.run_id for r in store.runs()] == [waiting_run]
