"""The TUI and Python's garbage collector.

Textual's objects and the modules are many, and live as long as the app: a full collection
walks them all (80,000 objects, 70-90 ms on the CPU of the 2-core development machine) and
stalls the UI loop wherever it falls, in the middle of drawing a screen just opened, say. So
the app collects once its first screen is drawn, then freezes what survived (`gc.freeze`:
the collector no longer walks it; a frozen object is still freed when its last reference
goes), and does it again whenever a screen closed (DeployApp.pop_screen, switch_screen),
once the screen beneath is drawn: the full collections Python makes on its own then walk
only what was made since, a few milliseconds, not 50-100 ms in the next screen's first frame
(benchmarks/tui_bench.py --latency). The run screen freezes what it makes as it goes
(screens/run.py); when it closes it gives everything back to the collector first, so that
its cycles can go. The app gives everything back when it ends."""

from __future__ import annotations

import gc

from textual.app import App


def settle(app: App[object]) -> None:
    """Collect, then freeze what survived; nothing once the app has stopped."""
    if app.is_running:
        gc.collect()
        gc.freeze()
