"""Key-to-frame latency of moving around the TUI, as a person at the keyboard sees it: from
a key (or a click) to the end of the last frame it makes the app draw.

    .venv/bin/python -m benchmarks.tui_bench --latency [--events 20000] [--repeats 10]
        [--json]

The app runs headless in this process (`App.run_test`, 160 x 45 cells) on a store holding
the benchmark's generated run (tui_bench.py; --events, cached in --cache-dir). What is timed:

- Tab: focus to the next widget of the run screen (the event stream, the tab bar, the tab's
  panel, round again), in replay of the generated run;
- tab switches: the keys 1-4 (2, 3, 4, 1 in turn), a click on a tab's title in the tab bar,
  and right in the tab bar when it has the focus;
- opening a run: Enter on the generated run's row of the run browser, until the run screen
  is current with its event lines drawn; esc back to the browser between repeats;
- the new-deployment form: `n` in the run browser (the form needs a driver: the command
  line's, npu_deploy/cli/tui.py, which deploys nothing until the form is sent); esc closes
  it between repeats.

A key goes in as the terminal driver hands one to the app (`driver.send_message` of a Key
event; a click as MouseDown and MouseUp at the tab's title, from which the app makes the
Click): nothing waits for the app. A frame is a compositor update the app hands to its
driver (`App._display`, wrapped for the duration). The headless driver writes nothing, so the
wrapper encodes each update to the terminal's bytes, as a terminal's driver would, and that
cost counts. Each update is also kept, and applied afterwards, outside the timing, to a model
of the terminal's cells (character and style): the figure is the time from just before the
key to the end of the frame after which the terminal shows what it shows once the app is
idle again, that is the first frame that shows the key's whole effect. Frames the app draws
after it that change no cell (Textual repaints a screen whole when, say, a screen beneath it
changes) do not count; the last frame of the burst is printed beside it. A burst ends when no
frame came for 0.1 s and what the key does has happened (the focus moved, the tab is active,
the screen is current with its event lines drawn). The run browser reloads its list every
second, and a reload may draw: each browser key is sent just after a reload.

"Cold" is the first time in the process (the first app, the first key of its kind); "warm"
the median and the max of the --repeats that follow. The target, 0.2 s warm, is judged on
the median. Figures are measured on the CPU of this machine, under whatever else runs on it.
"""

from __future__ import annotations

import asyncio
import os
import platform
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchmarks.tui_bench import RUN_ID, SIZE, cached_run, pct, stream_lines_drawn

TARGET_S = 0.2
QUIET_S = 0.1                 # a burst of frames ends when none follows for this long
POLL_S = 0.002
#: What is timed, in the order printed.
ACTIONS = ("Tab", "tab switch, keys 1-4", "tab switch, click on its title",
           "tab switch, right in the tab bar", "open a run from the browser (enter)",
           "open the new-deployment form (n)")


class Frames(list[tuple[float, Any]]):
    """(perf_counter at the end of the frame, the update) for each frame the app draws."""


@contextmanager
def frames_drawn() -> Iterator[Frames]:
    """Each frame the app draws, encoded to the terminal's bytes as its driver would
    (instrumentation only: App._display is wrapped for the duration)."""
    from textual.app import App

    drawn = Frames()
    original = App._display

    def display(self: Any, screen: Any, renderable: Any) -> None:
        original(self, screen, renderable)
        if renderable is not None and not self._batch_count:
            render = getattr(renderable, "render_segments", None)
            if render is not None:
                render(self.console)         # what a terminal's driver writes
                drawn.append((time.perf_counter(), renderable))

    App._display = display  # type: ignore[method-assign]
    try:
        yield drawn
    finally:
        App._display = original  # type: ignore[method-assign]


class Terminal:
    """The cells a terminal shows, written by the frames' updates (Textual's LayoutUpdate
    and ChopsUpdate: segments with cursor moves)."""

    def __init__(self, console: Any) -> None:
        self.console = console
        self.cells: dict[tuple[int, int], tuple[str, Any]] = {}
        self.applied = 0                       # frames of `Frames` applied so far

    def apply(self, update: Any) -> None:
        from rich.cells import cell_len
        from rich.segment import ControlType

        x = y = 0
        for segment in update.__rich_console__(self.console, self.console.options):
            if segment.control:
                for code in segment.control:
                    if code[0] == ControlType.CURSOR_MOVE_TO:
                        x, y = code[1], code[2]
                continue
            for char in segment.text:
                if char == "\n":
                    continue
                self.cells[x, y] = (char, segment.style)
                x += cell_len(char)

    def catch_up(self, frames: Frames) -> None:
        for _, update in frames[self.applied:]:
            self.apply(update)
        self.applied = len(frames)


def press(app: Any, key: str) -> None:
    """A key, as the terminal's driver sends one: no waiting for the app."""
    from textual import events

    char = {"tab": "\t", "enter": "\r", "escape": "\x1b"}.get(key, key if len(key) == 1
                                                              else None)
    app._driver.send_message(events.Key(key, char))


def click(app: Any, widget: Any) -> None:
    """A click on the middle of `widget`, as the terminal's driver sends one: the button
    down, then up (the app makes the Click)."""
    from textual import events

    region = widget.region
    x, y = region.x + region.width // 2, region.y + region.height // 2
    for cls in (events.MouseDown, events.MouseUp):
        app._driver.send_message(cls(None, x, y, 0, 0, 1, False, False, False,
                                     screen_x=x, screen_y=y))


async def key_to_frame(terminal: Terminal, frames: Frames, send: Callable[[], None],
                       done: Callable[[], bool], timeout: float = 30.0) -> tuple[float, float]:
    """Seconds from just before `send()` to the end of the frame that shows its whole
    effect, and to the end of the last frame of the burst it caused, once `done()` holds."""
    terminal.catch_up(frames)
    first = len(frames)
    t0 = time.perf_counter()
    send()
    while True:
        await asyncio.sleep(POLL_S)
        now = time.perf_counter()
        last = frames[-1][0] if frames else 0.0
        if last > t0 and now - last >= QUIET_S and done():
            break
        if now - t0 > timeout:
            raise TimeoutError(f"no settled frame {timeout} s after the key")
    burst = frames[first:]
    states = []
    for _, update in burst:
        terminal.apply(update)
        states.append(dict(terminal.cells))
    terminal.applied = len(frames)
    shown = next(i for i, state in enumerate(states) if state == states[-1])
    return burst[shown][0] - t0, burst[-1][0] - t0


async def quiet(frames: Frames) -> None:
    """Until no frame has come for QUIET_S."""
    while not frames or time.perf_counter() - frames[-1][0] < QUIET_S:
        await asyncio.sleep(POLL_S)


def summary(samples: list[tuple[float, float]]) -> dict[str, Any]:
    """Cold (the first sample) and the warm ones after it, in seconds: to the frame that
    shows the key's effect, and to the last frame of the burst."""
    shown, last = [s for s, _ in samples], [t for _, t in samples]
    return {"cold_s": shown[0], "warm_p50_s": pct(shown[1:], 50), "warm_max_s": max(shown[1:]),
            "warm_n": len(shown) - 1, "cold_last_frame_s": last[0],
            "warm_last_frame_p50_s": pct(last[1:], 50), "samples_s": shown,
            "last_frame_samples_s": last}


async def run_screen_actions(db: Path, repeats: int) -> dict[str, dict[str, Any]]:
    """Tab and the tab switches, on the run screen in replay of the generated run."""
    from textual.widgets import TabbedContent
    from textual.widgets.tabbed_content import ContentTab, ContentTabs

    from npu_deploy.tui import DeployApp
    from npu_deploy.tui.screens.run import RunScreen
    from npu_deploy.tui.widgets.run_tabs import TABS

    panes = [pane for pane, *_ in TABS]
    out: dict[str, list[tuple[float, float]]] = {a: [] for a in ACTIONS[:4]}
    app = DeployApp(db, run_id=RUN_ID, live=False)
    terminal = Terminal(app.console)
    with frames_drawn() as frames, stream_lines_drawn() as lines:
        async with app.run_test(size=SIZE) as pilot:
            while not (isinstance(app.screen, RunScreen) and lines):
                await pilot.pause(0.01)
            screen = app.screen
            tabs = screen.query_one(TabbedContent)
            await quiet(frames)
            for _ in range(repeats + 1):
                before = screen.focused
                out["Tab"].append(await key_to_frame(
                    terminal, frames, lambda: press(app, "tab"),
                    lambda before=before: screen.focused is not before))
                await quiet(frames)
            for n in range(repeats + 1):
                pane = panes[(n + 1) % 4]
                out["tab switch, keys 1-4"].append(await key_to_frame(
                    terminal, frames, lambda pane=pane: press(app, str(panes.index(pane) + 1)),
                    lambda pane=pane: tabs.active == pane))
            for n in range(repeats + 1):
                pane = panes[(n + 1) % 4]
                title = tabs.query_one(f"#{ContentTab.add_prefix(pane)}", ContentTab)
                out["tab switch, click on its title"].append(await key_to_frame(
                    terminal, frames, lambda title=title: click(app, title),
                    lambda pane=pane: tabs.active == pane))
            bar = tabs.query_one(ContentTabs)
            bar.focus()
            await quiet(frames)
            for _ in range(repeats + 1):
                pane = panes[(panes.index(tabs.active) + 1) % 4]
                out["tab switch, right in the tab bar"].append(await key_to_frame(
                    terminal, frames, lambda: press(app, "right"),
                    lambda pane=pane: tabs.active == pane))
    return {action: summary(samples) for action, samples in out.items()}


async def browser_actions(db: Path, repeats: int) -> dict[str, dict[str, Any]]:
    """Opening a run and the new-deployment form from the run browser."""
    from npu_deploy.cli.tui import ConductorDriver
    from npu_deploy.tui import DeployApp
    from npu_deploy.tui.screens.new_deployment import NewDeployment
    from npu_deploy.tui.screens.run import RunScreen
    from npu_deploy.tui.screens.runs import RunsScreen

    reloads: list[float] = []
    original = RunsScreen.poll

    def reload(self: Any) -> None:
        original(self)
        reloads.append(time.perf_counter())

    async def after_reload() -> None:
        """Just after the browser's next one-second poll (which reloads the list when a run
        changed) has been handled and drawn."""
        seen = len(reloads)
        while len(reloads) == seen:
            await asyncio.sleep(POLL_S)
        await asyncio.sleep(0.03)

    opened: list[tuple[float, float]] = []
    formed: list[tuple[float, float]] = []
    app = DeployApp(db, driver=ConductorDriver(db))
    terminal = Terminal(app.console)
    RunsScreen.poll = reload  # type: ignore[method-assign]
    try:
        with frames_drawn() as frames, stream_lines_drawn() as lines:
            async with app.run_test(size=SIZE) as pilot:
                while not (isinstance(app.screen, RunsScreen) and app.screen.selected()):
                    await pilot.pause(0.01)
                for _ in range(repeats + 1):
                    await after_reload()
                    lines.clear()
                    opened.append(await key_to_frame(
                        terminal, frames, lambda: press(app, "enter"),
                        lambda: isinstance(app.screen, RunScreen) and bool(lines)))
                    press(app, "escape")
                    while not isinstance(app.screen, RunsScreen):
                        await asyncio.sleep(POLL_S)
                for _ in range(repeats + 1):
                    await after_reload()
                    formed.append(await key_to_frame(
                        terminal, frames, lambda: press(app, "n"),
                        lambda: isinstance(app.screen, NewDeployment)))
                    press(app, "escape")
                    while not isinstance(app.screen, RunsScreen):
                        await asyncio.sleep(POLL_S)
    finally:
        RunsScreen.poll = original  # type: ignore[method-assign]
    return {ACTIONS[4]: summary(opened), ACTIONS[5]: summary(formed)}


def run_latency(events: int, seed: int, cache_dir: Path, repeats: int,
                progress: Callable[[str], None]) -> dict[str, Any]:
    import textual

    from benchmarks.host import cpu_name

    progress(f"the {events}-event run (generated in a child process, or cached) ...")
    db, info, cached = cached_run(cache_dir, events, seed)
    progress(f"the run screen: Tab and the tab switches, {repeats + 1} times each ...")
    actions = asyncio.run(run_screen_actions(db, repeats))
    progress(f"the run browser: opening the run and the form, {repeats + 1} times each ...")
    actions.update(asyncio.run(browser_actions(db, repeats)))
    return {
        "source": "measured-cpu",
        "machine": {"cpu": cpu_name(), "cpus": os.cpu_count(),
                    "python": platform.python_version(), "textual": textual.__version__},
        "params": {"events": info["events"], "cached": cached, "repeats": repeats,
                   "size": list(SIZE), "quiet_s": QUIET_S},
        "actions": actions,
        "targets": [{"target": f"{a}: key to frame <= {TARGET_S} s warm (median)",
                     "measured": r["warm_p50_s"], "limit": TARGET_S, "unit": "s",
                     "passed": r["warm_p50_s"] <= TARGET_S} for a, r in actions.items()],
    }


def print_latency(r: dict[str, Any]) -> None:
    m, p = r["machine"], r["params"]
    print("npu-deploy TUI key-to-frame latency (measured on the CPU of this machine)")
    print(f"  cpu:     {m['cpu']} ({m['cpus']} cpus), Python {m['python']}, Textual "
          f"{m['textual']}")
    print(f"  app:     headless run_test, {p['size'][0]} x {p['size'][1]} cells, a run of "
          f"{p['events']:,} events; from the key to the end of the frame that shows its whole "
          f"effect ({p['quiet_s']:g} s without a frame ends a burst)")
    print()
    print(f"    {'':<40} {'cold':>8} {'warm p50':>9} {'warm max':>9}   {'last frame':>10}")
    for action, a in r["actions"].items():
        print(f"    {action:<40} {a['cold_s'] * 1e3:>5.0f} ms {a['warm_p50_s'] * 1e3:>6.0f} ms "
              f"{a['warm_max_s'] * 1e3:>6.0f} ms   {a['warm_last_frame_p50_s'] * 1e3:>7.0f} ms"
              f"   ({a['warm_n']} warm)")
    print("    (to the frame that shows the key's whole effect; last frame: the warm median to the"
          " last frame drawn, which changed nothing more)")
    print()
    print("  targets (measured on the CPU of this machine):")
    for t in r["targets"]:
        print(f"    {'PASS' if t['passed'] else 'FAIL'}  {t['target']}: measured "
              f"{t['measured']:.3f} s")
