"""Snapshots of the TUI (pytest-textual-snapshot): the run browser, a live run, the
decision dialog in its three situations, the override confirmation, a failed gate and the
replay scrubber. The runs come from tests/tui_runs.py: the real conductor and the fake
pipeline under a fake clock, so every screen is the same on every run.

Regenerate after a deliberate change to the screens:
    .venv/bin/python -m pytest tests/test_tui_snapshots.py --snapshot-update
and look at the SVGs (tests/__snapshots__/test_tui_snapshots/) before committing them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

import pytest
import tui_runs
from textual.pilot import Pilot
from textual.widgets import Button, Input

from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.decision import DecisionDialog
from npu_deploy.tui.screens.dialogs import Confirm
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.widgets.scrubber import Scrubber

SIZE = (140, 40)
DB = Path("runs.db")       # relative: the runs screen prints the path, the same everywhere


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One store with every fixture run, written once for the module (the tests only read
    it, or leave inbox commands in copies of it)."""
    path = tmp_path_factory.mktemp("tui-runs") / "runs.db"
    ids = tui_runs.build_store(path, *tui_runs.ALL_RUNS)
    assert ids == ["done-pass", "stopped-p2", "debug-p1", "live-p0", "work-p1"]
    # a day older than the others: the bottom row of the run browser
    with EventStore.open(path) as store, tui_runs.deterministic(tui_runs.FakeClock(
            tui_runs.EPOCH - timedelta(days=1))):
        tui_runs.wide_gate_run(store)
        tui_runs.checker_run(store)
        tui_runs.stopped_autopilot_run(store)
    return path


@pytest.fixture
def db(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A private copy of the store as ./runs.db, and no user keymap."""
    (tmp_path / DB).write_bytes(built.read_bytes())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NPU_DEPLOY_KEYMAP", "no-keymap.toml")     # relative: help names it
    yield DB


@pytest.fixture
def hold(db: Path) -> Iterator[Callable[[str], None]]:
    """hold(run_id): this process takes the run's writer lock until the test ends, so the
    TUI sees the run as running (a conductor at work in another process)."""
    with ExitStack() as stack:
        store = stack.enter_context(EventStore.open(db))

        def take(run_id: str) -> None:
            stack.enter_context(tui_runs.held(store, run_id))

        yield take


def settle(*keys: str) -> Callable[[Pilot[None]], Awaitable[None]]:
    """A run_before: press `keys`, let the screens settle, stop every cursor blinking."""
    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.pause()
        await folded(pilot)
        if keys:
            await pilot.press(*keys)
        await pilot.pause()
        still(pilot)
    return run_before


async def folded(pilot: Pilot[None]) -> None:
    """Wait for every event stream's folded view (a worker builds it after the first paint)."""
    from npu_deploy.tui.widgets.event_stream import EventStream

    for _ in range(200):
        if all(s.building is None for screen in pilot.app.screen_stack
               for s in screen.query(EventStream)):
            return
        await pilot.pause(0.02)
    raise AssertionError("the event stream's view was not built")


def still(pilot: Pilot[None]) -> None:
    for screen in pilot.app.screen_stack:
        for box in screen.query(Input):
            box.cursor_blink = False


# --- the run browser -----------------------------------------------------------------------

# --- a live run ----------------------------------------------------------------------------

def test_live_run_mid_phase(snap_compare, db, hold):
    """work-p1 live: phase 0 passed, phase 1 working with a step requested and not yet
    completed; the title says LIVE and running, no banner (nobody is waited for)."""
    hold("work-p1")

    async def run_before(pilot: Pilot[None]) -> None:
        await settle()(pilot)
        screen = pilot.app.screen
        assert isinstance(screen, RunScreen) and screen.follow
        assert not screen.query_one("#banner").display

    assert snap_compare(DeployApp(db, run_id="work-p1", live=True), terminal_size=SIZE,
                        run_before=run_before)


def test_live_run_at_checkpoint(snap_compare, db, hold):
    """live-p0 live: phase 0 passed its gate; the banner asks for a decision."""
    hold("live-p0")

    async def run_before(pilot: Pilot[None]) -> None:
        await settle()(pilot)
        assert pilot.app.screen.query_one("#banner").display

    assert snap_compare(DeployApp(db, run_id="live-p0", live=True), terminal_size=SIZE,
                        run_before=run_before)


# --- the decision dialog -------------------------------------------------------------------

def test_decision_checkpoint(snap_compare, db, hold):
    """d on a run waiting at a checkpoint: the passing gate, the instruction box, Approve
    (focused), Redirect, Cancel."""
    hold("live-p0")

    async def run_before(pilot: Pilot[None]) -> None:
        await settle("d")(pilot)
        dialog = pilot.app.screen
        assert isinstance(dialog, DecisionDialog) and dialog.kind == "checkpoint"
        assert pilot.app.focused is dialog.query_one("#approve", Button)

    assert snap_compare(DeployApp(db, run_id="live-p0", live=True), terminal_size=SIZE,
                        run_before=run_before)


def test_decision_debug_proposal(snap_compare, db, hold):
    """d on a failed gate with debug directions: the failing check, the two directions
    (the first highlighted), Pick, Approve anyway…, Cancel."""
    hold("debug-p1")

    async def run_before(pilot: Pilot[None]) -> None:
        await settle("d")(pilot)
        dialog = pilot.app.screen
        assert isinstance(dialog, DecisionDialog) and dialog.kind == "proposal"
        assert dialog.query("#override") and not dialog.query("#approve")

    assert snap_compare(DeployApp(db, run_id="debug-p1", live=True), terminal_size=SIZE,
                        run_before=run_before)


def test_decision_stopped_run(snap_compare, db):
    """d on a run stopped for a person (budget spent; no conductor runs it, so no lock):
    why it stopped, the redirect instruction box, Redirect, Approve anyway…, Cancel; no
    plain Approve."""
    async def run_before(pilot: Pilot[None]) -> None:
        await settle("d")(pilot)
        dialog = pilot.app.screen
        assert isinstance(dialog, DecisionDialog) and dialog.kind == "stopped"
        assert dialog.query("#override") and not dialog.query("#approve")

    assert snap_compare(DeployApp(db, run_id="stopped-p2", live=True), terminal_size=SIZE,
                        run_before=run_before)


def test_override_confirmation(snap_compare, db):
    """Approve anyway… on the stopped run asks again, naming the gate, the phase and the
    consequence; Cancel is focused, nothing is in the inbox yet."""
    async def run_before(pilot: Pilot[None]) -> None:
        await settle("d")(pilot)
        pilot.app.screen.query_one("#override", Button).focus()
        await pilot.press("enter")
        await pilot.pause()
        still(pilot)
        assert isinstance(pilot.app.screen, Confirm)
        with EventStore.open(db, readonly=True) as store:
            assert store.pending_commands("stopped-p2") == []

    assert snap_compare(DeployApp(db, run_id="stopped-p2", live=True), terminal_size=SIZE,
                        run_before=run_before)


# --- replay --------------------------------------------------------------------------------

def test_failed_gate_in_replay(snap_compare, db):
    """done-pass in replay from its first event; f jumps to phase 3's failed gate and the
    Gates tab shows the failing check."""
    async def run_before(pilot: Pilot[None]) -> None:
        await settle("f")(pilot)
        screen = pilot.app.screen
        assert isinstance(screen, RunScreen) and not screen.follow
        line = screen.timeline.line(screen.cursor)
        assert line is not None and line.type == "gate.evaluated" and line.tone == "fail"

    assert snap_compare(DeployApp(db, run_id="done-pass", live=False), terminal_size=SIZE,
                        run_before=run_before)


def test_scrubber_after_seek(snap_compare, db):
    """done-pass in replay: a click on the scrubber seeks to the middle of the run; the
    phase bands, the failure and decision marks, and the cursor with its version."""
    async def run_before(pilot: Pilot[None]) -> None:
        await settle()(pilot)
        screen = pilot.app.screen
        assert isinstance(screen, RunScreen)
        scrubber = screen.query_one(Scrubber)
        await pilot.click(Scrubber, offset=(scrubber.size.width // 2, 0))
        await pilot.pause()
        head = screen.timeline.head
        assert screen.cursor == 1 + (scrubber.size.width // 2) * head // scrubber.size.width

    assert snap_compare(DeployApp(db, run_id="done-pass", live=False), terminal_size=SIZE,
                        run_before=run_before)


# --- the decision dialog fits the terminal -------------------------------------------------

@pytest.mark.parametrize(("run_id", "size"), [
    ("live-p0", SIZE), ("debug-p1", SIZE), ("stopped-p2", SIZE),
    ("live-p0", (80, 24)), ("stopped-p2", (80, 24)), ("debug-p1", (80, 24)),
    ("wide-gate", SIZE), ("wide-gate", (160, 50)),
])
async def test_decision_buttons_are_on_screen(db, run_id, size):
    """Every button of the decision dialog is drawn whole inside the dialog: a person can
    see what they are about to press."""
    app = DeployApp(db, run_id=run_id, live=True)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        await pilot.press("d")
        await pilot.pause()
        dialog = app.screen
        assert isinstance(dialog, DecisionDialog)
        inside = dialog.query_one("#decision").content_region
        clipped = [b.id for b in dialog.query(Button)
                   if not (b.region.height == 3 and inside.contains_region(b.region))]
    assert clipped == []


# --- a live run opens on its newest event ----------------------------------------------------

async def test_a_live_run_opens_scrolled_to_its_newest_event(db):
    """Attaching to a run longer than the stream is tall shows its newest events, with the
    cursor line (the head) on screen."""
    from npu_deploy.tui.widgets.event_stream import EventStream

    app = DeployApp(db, run_id="done-pass", live=True)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await folded(pilot)
        await pilot.pause()
        stream = app.screen.query_one(EventStream)
        assert stream.cursor == 127 and stream.size.height < len(stream.view)
        top = stream.scroll_offset.y
        assert top <= stream.cursor_row < top + stream.size.height


# --- the run screen in each state, narrow and wide -------------------------------------------

#: state: (run, whether a conductor holds it). checker-p1's failed gate carries the
#: constraint checker's finding, shown under its row.
STATES = {"failed": ("checker-p1", True), "finished": ("done-pass", False)}


@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("state", list(STATES))
def test_run_screen_by_state_and_size(snap_compare, db, hold, state, size):
    """The run screen live at 80x24 (the stream over the tabs) and 160x48 (side by side):
    the title with status and verdict, the gates table with its six columns."""
    run_id, held = STATES[state]
    if held:
        hold(run_id)

    async def run_before(pilot: Pilot[None]) -> None:
        await settle()(pilot)
        title = str(pilot.app.screen.query_one("#run-title").render())
        assert title.startswith(run_id) and "verdict" in title

    assert snap_compare(DeployApp(db, run_id=run_id, live=True), terminal_size=size,
                        run_before=run_before)


# --- the Plan and Gates tabs of a run with plans ---------------------------------------------

@pytest.fixture(scope="module")
def planned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of its own with plan-done (tests/tui_runs.py planned_run): the runs above
    keep their run browser as it is."""
    path = tmp_path_factory.mktemp("tui-plan") / "runs.db"
    assert tui_runs.build_store(path, tui_runs.planned_run) == ["plan-done"]
    return path


def at_tab(tab: str, version: int | None = None) -> Callable[[Pilot[None]], Awaitable[None]]:
    """A run_before: the tab shown and, in replay, the cursor at `version`."""
    async def run_before(pilot: Pilot[None]) -> None:
        from textual.widgets import TabbedContent

        await settle()(pilot)
        screen = pilot.app.screen
        assert isinstance(screen, RunScreen)
        screen.query_one(TabbedContent).active = tab
        if version is not None:
            screen.seek(version)
        await pilot.pause()
        still(pilot)
    return run_before


@pytest.mark.parametrize("size", [(120, 40), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_plan_tab_of_a_finished_run(snap_compare, planned, tmp_path, monkeypatch, size):
    """plan-done at its end: the recipe, the MODELED prefill and decode times across the
    transforms as sparklines, the transforms tried per mode, and the prefill plan's
    dispatches with their kernels, launches, MODELED time and share."""
    (tmp_path / DB).write_bytes(planned.read_bytes())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NPU_DEPLOY_KEYMAP", "no-keymap.toml")     # relative: help names it
    assert snap_compare(DeployApp(DB, run_id="plan-done", live=True), terminal_size=size,
                        run_before=at_tab("tab-plan"))


@pytest.mark.parametrize(("tab", "version"), [("tab-plan", 62), ("tab-gates", 106)])
def test_tabs_in_replay_mid_phase_4(snap_compare, planned, tmp_path, monkeypatch, tab,
                                    version):
    """plan-done in replay at 160x48: at v62 the Plan tab shows the three prefill transforms
    tried so far and the plan as it is then (not profiled yet); at v106, phase 4's third
    gate, the Gates tab's check has a sparkline of its three attempts beside their values."""
    (tmp_path / DB).write_bytes(planned.read_bytes())
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("NPU_DEPLOY_KEYMAP", "no-keymap.toml")     # relative: help names it
    assert snap_compare(DeployApp(DB, run_id="plan-done", live=False), terminal_size=(160, 48),
                        run_before=at_tab(tab, version))


# --- themes ----------------------------------------------------------------------------------

@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
@pytest.mark.parametrize("screen", ["checkpoint", "help"])
def test_themes(snap_compare, db, hold, screen, theme):
    """The run at a checkpoint, and help over it, in a dark and a light built-in theme at
    120x40: every colour is the theme's (tests/tui/test_tui_theme.py), and the tones read
    on the light background too."""
    hold("live-p0")
    app = DeployApp(db, run_id="live-p0", live=True)
    app.theme = theme

    async def run_before(pilot: Pilot[None]) -> None:
        await settle(*(["question_mark"] if screen == "help" else []))(pilot)
        assert pilot.app.current_theme.name == theme

    assert snap_compare(app, terminal_size=(120, 40), run_before=run_before)


# --- every screen a person works in, at 80x24, 120x40 and 200x60 ------------------------------

def screen_text(pilot: Pilot[None]) -> str:
    """What the terminal shows, as text (the screen in front, over those under it)."""
    update = pilot.app.screen._compositor.render_full_update()
    return "\n".join("".join(seg.text for strip in chops for seg in strip)
                     for chops in update.strips)


async def _refused_redirect(pilot: Pilot[None]) -> None:
    await pilot.press("r", *"make it faster", "enter")
    await pilot.pause()


#: screen: (the run it opens on, or None for the browser; the run a conductor holds; the keys
#: pressed; what else is done; words each size must show).
SCREENS = {
    "browser": (None, "work-p1", (), None, ("running", "needs_human", "finished", "PASS")),
    "live": ("work-p1", "work-p1", (), None, ("run running", "compute i=2")),
    "crashed": ("work-p1", None, (), None, ("crashed", "npu-deploy resume work-p1", "cut")),
    "checkpoint-dialog": ("live-p0", "live-p0", ("d",), None, ("Approve", "Redirect")),
    "stopped-refused": ("stopped-ap", None, ("d",), _refused_redirect,
                        ("Not sent", "make it faster")),
    "help": ("live-p0", "live-p0", ("question_mark",), None, ("Decide",)),
    "form": (None, "work-p1", ("n",), None, ("Deploy", "Cancel", "seq-len")),
}


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screens_at_three_sizes(snap_compare, db, hold, screen, size):
    """The browser, a live run, a crashed run, the decision dialog at a checkpoint and
    stopped for a person with a refused redirect answered in it, help and the new-deployment
    form: each at 80x24, 120x40 and 200x60, showing the words that say what each row is."""
    from npu_deploy.cli.tui import ConductorDriver

    run_id, held, keys, then, words = SCREENS[screen]
    if held:
        hold(held)

    async def run_before(pilot: Pilot[None]) -> None:
        await settle(*keys)(pilot)
        if then is not None:
            await then(pilot)
        still(pilot)
        text = " ".join(screen_text(pilot).split())
        for word in words:
            assert word in text, (word, text)

    app = DeployApp(db, run_id=run_id, live=True, driver=ConductorDriver(db))
    assert snap_compare(app, terminal_size=size, run_before=run_before)
