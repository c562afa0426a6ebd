"""Moving around the TUI (issue 38 point 7), under Pilot on a real store: the run screen's
tabs by key (1-4, binding ids run.tab_*) and from the palette, digits typed into a field
staying text; and what a key shows is whole in the frame after it: the tab bar's underline
(no slide), the footer as the focus moves (relabelled in place, nothing mounted), a run
opened from the browser (focused, laid out for the width, its footer filled). How long
each takes is benchmarks/tui_bench.py --latency's to say, measured on the CPU."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import tui_runs
from textual.app import App
from textual.widgets import Footer, Input, TabbedContent
from textual.widgets._footer import FooterKey
from textual.widgets._tabs import Underline
from textual.widgets.tabbed_content import ContentTab, ContentTabs
from tui_pilot import until

from npu_deploy.cli.tui import ConductorDriver
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.dialogs import GotoDialog
from npu_deploy.tui.screens.new_deployment import NewDeployment
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.screens.runs import RunsScreen
from npu_deploy.tui.widgets.panels import AgentPanel, PlanPanel

SIZE = (160, 48)
RUN = "plan-done"
PANES = ("tab-gates", "tab-perf", "tab-agent", "tab-plan")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tui-nav") / "runs.db"
    assert tui_runs.build_store(path, tui_runs.planned_run) == [RUN]
    return path


@pytest.fixture
def db(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return tui_runs.private_copy(built, tmp_path, monkeypatch, chdir=True)


@contextmanager
def at_each_frame(probe: Callable[[App[Any]], None]) -> Iterator[None]:
    """`probe(app)` as each frame is handed to the terminal (App._display, wrapped)."""
    original = App._display

    def display(self: Any, screen: Any, renderable: Any) -> None:
        if renderable is not None:
            probe(self)
        original(self, screen, renderable)

    App._display = display  # type: ignore[method-assign]
    try:
        yield
    finally:
        App._display = original  # type: ignore[method-assign]


async def textuals_keys(pilot: Any, screen: RunScreen) -> list[tuple[str, str]]:
    """The keys Textual's own footer shows on `screen` now: one is mounted, asked, removed."""
    reference = Footer(id="reference")
    await screen.mount(reference)
    screen.refresh_bindings()
    await until(pilot, lambda: reference.query(FooterKey))
    keys = [(k.key_display, k.description) for k in reference.query(FooterKey)
            if not k.has_class("-command-palette")]
    await reference.remove()
    return keys


def tabs_of(app: DeployApp) -> TabbedContent:
    return app.screen.query_one(TabbedContent)


# --- the tabs by key and from the palette ------------------------------------------------------

async def test_keys_1_to_4_show_the_tabs_named_with_their_keys(db):
    app = DeployApp(db, run_id=RUN, live=False)
    async with app.run_test(size=SIZE) as pilot:
        tabs = tabs_of(app)
        assert [str(t.label) for t in tabs.query(ContentTab)] == [
            "1 Gates", "2 Performance", "3 Agent", "4 Plan"]
        for key, pane in zip("2341", (*PANES[1:], PANES[0]), strict=True):
            await pilot.press(key)
            assert tabs.active == pane
            if pane == "tab-agent":                       # the tab shown is drawn at once
                assert app.screen.query_one(AgentPanel).text


async def test_the_palette_shows_each_tab(db):
    app = DeployApp(db, run_id=RUN, live=False)
    async with app.run_test(size=SIZE) as pilot:
        commands = {c.title: c for c in app.get_system_commands(app.screen)}
        for n, (pane, name) in enumerate(zip(PANES, ("Gates", "Performance", "Agent", "Plan"),
                                             strict=True), 1):
            command = commands[f"Show the {name} tab"]
            assert command.help.endswith(f"(key {n})")
            command.callback()
            await pilot.pause()
            assert tabs_of(app).active == pane
        assert app.screen.query_one(PlanPanel).text


async def test_a_keymap_file_moves_a_tab_key_by_its_binding_id(db, tmp_path, monkeypatch):
    keymap = tmp_path / "keymap.toml"
    keymap.write_text('[keymap]\n"run.tab_plan" = "p"\n')
    monkeypatch.setenv("NPU_DEPLOY_KEYMAP", str(keymap))
    app = DeployApp(db, run_id=RUN, live=False)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        assert tabs_of(app).active == "tab-gates"
        await pilot.press("p")
        assert tabs_of(app).active == "tab-plan"


async def test_digits_typed_into_the_search_and_the_go_to_dialog_stay_text(db):
    app = DeployApp(db, run_id=RUN, live=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        await pilot.press("slash", "2", "3")
        assert screen.query_one("#stream-search", Input).value == "23"
        assert tabs_of(app).active == "tab-gates"
        await pilot.press("escape", "g")
        assert isinstance(app.screen, GotoDialog)
        await pilot.press("4", "1")
        assert app.screen.query_one(Input).value == "41"
        await pilot.press("escape")
        assert app.screen is screen and tabs_of(app).active == "tab-gates"
        await pilot.press("3")                               # the stream has the focus again
        assert tabs_of(app).active == "tab-agent"


# --- what a key shows is whole in the frame after it ------------------------------------------

async def test_the_tab_bar_underline_moves_at_once_not_in_a_slide(db):
    """Every frame after a key that shows another tab (right in the tab bar, 1-4) has the
    underline under the tab before or the tab after, never between: Textual slides it for
    0.3 s, a frame at every step."""
    app = DeployApp(db, run_id=RUN, live=False)
    spans: list[tuple[int, int]] = []

    def probe(app: App[Any]) -> None:
        if isinstance(app.screen, RunScreen):
            line = app.screen.query_one(TabbedContent).query_one(Underline)
            spans.append((line.highlight_start, line.highlight_end))

    def span(tabs: TabbedContent, pane: str) -> tuple[int, int]:
        title = tabs.query_one(f"#{ContentTab.add_prefix(pane)}", ContentTab)
        start, end = title.virtual_region.shrink(title.styles.gutter).column_span
        return start, end

    async with app.run_test(size=SIZE) as pilot:
        tabs = tabs_of(app)
        tabs.query_one(ContentTabs).focus()
        await pilot.pause()
        with at_each_frame(probe):
            for key, pane in (("right", "tab-perf"), ("right", "tab-agent"), ("1", "tab-gates"),
                              ("4", "tab-plan")):
                before = span(tabs, tabs.active)
                spans.clear()
                await pilot.press(key)
                await pilot.pause(0.4)
                after = span(tabs, pane)
                assert spans and spans[-1] == after
                assert set(spans) <= {before, after}, (key, spans)


async def test_tab_moves_the_focus_and_the_footer_follows_without_a_key_mounted(db):
    """The footer shows the keys Textual's footer would for the focused widget, relabelled
    where they stand: the same key widgets throughout."""
    app = DeployApp(db, run_id=RUN, live=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        footer = screen.query_one(Footer)
        await pilot.pause()
        keys = set(footer.query(FooterKey))
        focused = []
        for _ in range(4):
            await pilot.press("tab")
            await pilot.pause()
            focused.append(type(screen.focused).__name__)
            assert set(footer.query(FooterKey)) == keys
            shown = [(k.key_display, k.description) for k in footer.query(FooterKey)
                     if k.display and not k.has_class("-command-palette")]
            assert shown == await textuals_keys(pilot, screen), focused[-1]
        assert focused == ["ContentTabs", "GatesPanel", "EventStream", "ContentTabs"]


@pytest.mark.parametrize(("size", "width_class"), [((160, 48), "-wide"), ((80, 24), "-narrow")])
async def test_a_run_opened_from_the_browser_is_whole_in_its_first_frame(db, size, width_class):
    """Its first frame has the stream focused, the layout of the terminal's width and the
    footer's keys: nothing follows a frame later."""
    app = DeployApp(db)
    first: dict[str, Any] = {}

    def probe(app: App[Any]) -> None:
        screen = app.screen
        if isinstance(screen, RunScreen) and not first:
            line = screen.query_one(TabbedContent).query_one(Underline)
            first.update(focused=type(screen.focused).__name__, classes=set(screen.classes),
                         keys=[k.description for k in screen.query_one(Footer).query(FooterKey)
                               if k.display],
                         underline=(line.highlight_start, line.highlight_end))

    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen) and app.screen.selected())
        with at_each_frame(probe):
            await pilot.press("enter")
            await until(pilot, lambda: bool(first))
        assert first["focused"] == "EventStream"
        assert width_class in first["classes"]
        assert {"Details", "Decide", "Runs"} <= set(first["keys"])
        await pilot.pause(0.3)
        gates = app.screen.query_one(f"#{ContentTab.add_prefix('tab-gates')}", ContentTab)
        assert first["underline"] == gates.virtual_region.shrink(gates.styles.gutter).column_span


async def test_the_app_keeps_its_long_lived_objects_out_of_the_collector(db, monkeypatch):
    """Once the browser is drawn, and again once a screen opened over it closed (a run, the
    new-deployment form): what survived is frozen, and given back when the app ends."""
    freezes = []
    freeze = gc.freeze
    monkeypatch.setattr(gc, "freeze", lambda: (freezes.append(1), freeze())[1])
    app = DeployApp(db, driver=ConductorDriver(db))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: isinstance(app.screen, RunsScreen)
                    and gc.get_freeze_count() > 0)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        run = app.screen
        await pilot.press("escape")
        await until(pilot, lambda: not run.is_attached and gc.get_freeze_count() > 0)
        for _ in range(2):
            await pilot.press("n")
            await until(pilot, lambda: isinstance(app.screen, NewDeployment))
            frozen = len(freezes)
            await pilot.press("escape")
            # frozen again once the form is gone (however many objects it left behind)
            await until(pilot, lambda frozen=frozen: isinstance(app.screen, RunsScreen)
                        and len(freezes) > frozen and gc.get_freeze_count() > 0)
    assert gc.get_freeze_count() == 0
