"""Colours come from the theme: every cell the TUI draws takes its colours from Textual's
theme variables, so the built-in themes (textual-dark, textual-light, ...) and a change of
theme from the command palette recolour everything, and what the tones mean stays readable.

How "from the theme" is checked, on the drawn screen and not on the source: each view is
drawn twice, under a theme and under a copy of it whose every colour is moved a little. A
cell whose colour stays the same was not derived from the theme: a named colour ("red"),
a hex code, or no colour at all (the terminal's default, which a light theme on a dark
terminal cannot read).

The runs are tests/tui_runs.py's: the real conductor and the fake pipeline under a fake
clock, so a view is the same cells in both drawings."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import pytest
import tui_runs
from rich.color import Color as RichColor
from textual.app import App
from textual.color import Color, ColorParseError
from textual.pilot import Pilot
from textual.scrollbar import ScrollBar, ScrollBarCorner
from textual.theme import BUILTIN_THEMES, Theme
from textual.widgets import TabbedContent

from npu_deploy.tui import DeployApp

SIZE = (120, 40)
#: The colours a Theme declares; the ones it leaves out Textual derives.
THEME_COLOURS = ("primary", "secondary", "warning", "error", "success", "accent",
                 "foreground", "background", "surface", "panel", "boost")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tui-theme") / "runs.db"
    ids = tui_runs.build_store(path, tui_runs.finished_run, tui_runs.stopped_run,
                               tui_runs.failed_gate_run, tui_runs.checkpoint_run)
    assert ids == ["done-pass", "stopped-p2", "debug-p1", "live-p0"]
    return path


@pytest.fixture
def db(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    path = tui_runs.private_copy(built, tmp_path, monkeypatch)
    monkeypatch.delenv("NPU_DEPLOY_THEME", raising=False)
    yield path


def resolved(theme: Theme) -> Theme:
    """`theme` with every colour it leaves to Textual written out, so that a copy can move
    them all (textual-dark leaves its background to Textual's default, for one)."""
    made = theme.to_color_system().generate()
    return dataclasses.replace(theme, name=f"{theme.name}-resolved",
                               **{c: made[c] for c in THEME_COLOURS})


def moved(theme: Theme, step: int = 10) -> Theme:
    """`resolved(theme)` with every colour moved by `step` in each channel (down, or up for a
    channel too dark to go down), its colour variables too (textual-light sets the footer's
    keys), so that whatever Textual derives from them (blends, lightened and darkened
    shades, the contrast text) moves too."""
    def move(value: str | None) -> str | None:
        if value is None:
            return None
        try:
            c = Color.parse(value)
        except ColorParseError:      # a variable that is not a colour ("bold")
            return value
        r, g, b = (v - step if v >= step else v + step for v in (c.r, c.g, c.b))
        return Color(r, g, b, c.a).hex
    base = resolved(theme)
    return dataclasses.replace(base, name=f"{theme.name}-moved",
                               variables={k: move(v) or v for k, v in base.variables.items()},
                               **{c: move(getattr(base, c)) for c in THEME_COLOURS})


Cell = tuple[int, int, str, RichColor | None, RichColor | None, str]


def drawn_cells(app: App[None], *, widgets: bool = True) -> list[Cell]:
    """Every cell of the screen as the terminal receives it (after Textual's filters, which
    turn named ANSI colours into the app's ANSI theme's): x, y, character, foreground,
    background, and the class of the widget it belongs to ("" without `widgets`: looking
    each cell's widget up is most of a drawing's cost)."""
    update = app.screen._compositor.render_full_update()
    cells: list[Cell] = []
    for y, chops in enumerate(update.strips):
        x = 0
        for strip in chops:
            for segment in strip:
                style = segment.style
                for ch in segment.text:
                    widget = type(app.screen.get_widget_at(x, y)[0]).__name__ if widgets else ""
                    cells.append((x, y, ch, style.color if style else None,
                                  style.bgcolor if style else None, widget))
                    x += 1
    return cells


async def tab(pilot: Pilot[None], pane: str) -> None:
    pilot.app.screen.query_one(TabbedContent).active = pane
    await pilot.pause()


#: view: (run or None for the run browser, live, what to do before looking)
VIEWS = {
    "run-checkpoint": ("live-p0", True, ()),
    "run-gates-failed": ("debug-p1", True, ()),
    "run-performance": ("done-pass", True, ("tab-perf",)),
    "run-agent": ("done-pass", True, ("tab-agent",)),
    "run-plan": ("done-pass", True, ("tab-plan",)),
    "help": ("live-p0", True, ("?",)),
    "decide-proposal": ("debug-p1", True, ("d",)),
    "decide-stopped": ("stopped-p2", True, ("d",)),
    "event-details": ("live-p0", True, ("enter",)),
    "runs": (None, True, ()),
}


async def draw(db: Path, view: str, theme: Theme, *, then: str | None = None) -> list[Cell]:
    """The view's cells under `theme`; with `then`, after switching to that theme."""
    run_id, live, steps = VIEWS[view]
    app = DeployApp(db, run_id=run_id, live=live)
    app.register_theme(theme)
    app.theme = theme.name
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await settled(pilot)
        await still(pilot)
        newest_at_the_bottom(pilot)
        for step in steps:
            if step.startswith("tab-"):
                await tab(pilot, step)
            else:
                await pilot.press(step)
            await pilot.pause()
        await settled(pilot)
        if then is not None:
            await still(pilot)
            app.theme = then
        return await still(pilot)


def newest_at_the_bottom(pilot: Pilot[None]) -> None:
    """A live stream scrolled to its end. Opening a live run leaves the stream's top one
    row further down now and then (the banner's line arrives after the first scroll), so
    two openings of one run may differ by that row: a drawing compares with another only
    once both are scrolled alike."""
    from npu_deploy.tui.widgets.event_stream import EventStream

    for stream in pilot.app.screen.query(EventStream):
        stream.scroll_to(y=stream.max_scroll_y, animate=False, immediate=True)


async def still(pilot: Pilot[None]) -> list[Cell]:
    """The screen's cells once two drawings a tick apart agree (a live screen beneath a
    dialog may still scroll its stream to the newest event when the dialog opens)."""
    cells = drawn_cells(pilot.app, widgets=False)
    for _ in range(50):
        await pilot.pause(0.05)
        again = drawn_cells(pilot.app, widgets=False)
        if again == cells:
            return drawn_cells(pilot.app)
        cells = again
    raise AssertionError("the screen did not settle")


async def settled(pilot: Pilot[None]) -> None:
    """The event stream's folded view built (a worker builds it after the first paint)."""
    from npu_deploy.tui.widgets.event_stream import EventStream

    for _ in range(200):
        if all(s.building is None for screen in pilot.app.screen_stack
               for s in screen.query(EventStream)):
            await pilot.pause()
            return
        await pilot.pause(0.02)
    raise AssertionError("the event stream's view was not built")


def not_from_theme(a: list[Cell], b: list[Cell]) -> list[str]:
    """The runs of cells whose colour did not move with the theme: a character's foreground,
    any cell's background. Textual's own scrollbars are left out: their background is
    $background-darken-1, black on a dark theme before and after the move."""
    assert [c[:3] for c in a] == [c[:3] for c in b], "the two drawings differ in their text"
    stuck: list[str] = []
    for (_x, y, ch, fg, bg, widget), (_, _, _, fg2, bg2, _) in zip(a, b, strict=True):
        if widget in (ScrollBar.__name__, ScrollBarCorner.__name__):
            continue
        if (ch.strip() and (fg is None or fg == fg2)) or bg is None or bg == bg2:
            what = f"{widget} row {y}: fg {fg and fg.name} bg {bg and bg.name}"
            if stuck and stuck[-1].startswith(what):
                stuck[-1] += ch
            else:
                stuck.append(f"{what}: {ch}")
    return stuck


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light"])
@pytest.mark.parametrize("view", list(VIEWS))
async def test_every_colour_comes_from_the_theme(db, view, theme):
    """Every character's colour and every cell's background on the run screen (each tab),
    help, the decide dialog, an event's details and the run browser move when the theme's
    colours move: none is a named colour, a hex code or the terminal's default."""
    base = BUILTIN_THEMES[theme]
    before = await draw(db, view, resolved(base))
    after = await draw(db, view, moved(base))
    stuck = not_from_theme(before, after)
    assert not stuck, "colours not from the theme:\n" + "\n".join(stuck)


@pytest.mark.parametrize("view", ["run-checkpoint", "run-agent", "run-plan", "help",
                                  "decide-proposal", "runs"])
async def test_a_theme_change_repaints_everything(db, view):
    """Switching from textual-dark to textual-light with the view open (as the command
    palette's "Change theme" does) draws exactly what opening it under textual-light
    draws: no panel, strip, kept line or dialog keeps a colour of the old theme."""
    switched = await draw(db, view, BUILTIN_THEMES["textual-dark"], then="textual-light")
    fresh = await draw(db, view, BUILTIN_THEMES["textual-light"])
    assert [c[:3] for c in switched] == [c[:3] for c in fresh]
    stale = [f"{w} row {y}: {ch!r}" for (_x, y, ch, fg, bg, w), (_, _, _, fg2, bg2, _)
             in zip(switched, fresh, strict=True) if (ch.strip() and fg != fg2) or bg != bg2]
    assert stale == []


#: WCAG 2's least contrast for large text and for the parts of an interface (1.4.11).
LEAST_CONTRAST = 3.0


def contrast(fg: RichColor, bg: RichColor) -> float:
    """WCAG 2's contrast ratio of two colours."""
    def luminance(c: RichColor) -> float:
        def channel(v: int) -> float:
            s = v / 255
            return s / 12.92 if s <= 0.03928 else ((s + 0.055) / 1.055) ** 2.4
        r, g, b = (channel(v) for v in c.get_truecolor())
        return 0.2126 * r + 0.7152 * g + 0.0722 * b
    hi, lo = sorted((luminance(fg), luminance(bg)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


@pytest.mark.parametrize("theme", ["textual-dark", "textual-light", "solarized-light",
                                   "catppuccin-latte", "nord"])
@pytest.mark.parametrize("view", ["run-checkpoint", "run-gates-failed", "run-agent", "runs"])
async def test_what_the_tones_say_reads_on_dark_and_light_themes(db, view, theme):
    """Every character our widgets draw (the stream, the strip, the panels, the scrubber,
    the titles) stands out from its background by at least 3:1 on dark and light built-in
    themes: a pass, a failure or a person's turn reads on textual-light too."""
    cells = await draw(db, view, BUILTIN_THEMES[theme])
    faint = sorted({f"{w} row {y} {ch!r}: {fg.name} on {bg.name} ({contrast(fg, bg):.1f}:1)"
                    for _x, y, ch, fg, bg, w in cells
                    if ch.strip() and not is_line(ch) and fg is not None and bg is not None
                    and w in OURS and contrast(fg, bg) < LEAST_CONTRAST})
    assert faint == []


def is_line(ch: str) -> bool:
    """A box-drawing or block character: a border or a bar, not text to read."""
    return "\u2500" <= ch <= "\u259f"


#: The widgets whose colours this project chooses (Textual's own are Textual's).
OURS = {"EventStream", "PhaseStrip", "GatesPanel", "PerformancePanel", "AgentPanel",
        "PlanPanel", "Scrubber", "Static", "Label", "Legend", "DataTable"}
