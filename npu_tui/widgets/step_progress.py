"""What the run is doing now when that takes a while: loading (the pipeline, torch, the model)
before its first event, or a step in flight (a tool requested and not yet completed). A
Textual ProgressBar shows it: by the step's own count of what it has done (its stages, from
store/progress.py's file) when it counts, else against how long the same step took in earlier
runs of the same model when the store has them, else as an indeterminate bar. The time
estimate is shown beside the count when there is one."""

from __future__ import annotations

import time

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import ProgressBar, Static

from npu_deploy.events.describe import printable
from npu_deploy.store.progress import Progress

LONG_STEP_S = 1.0            # a step shows its bar when it takes (or took before) this long


class StepProgress(Horizontal):
    """One line: what runs, and a bar. Hidden when nothing slow runs. It keeps when it first
    saw each step requested: the stored time may be another clock's."""

    def __init__(self, *, opened: float | None = None, id: str | None = None) -> None:
        """`opened`: when the screen opened (time.monotonic), what loading is timed from."""
        super().__init__(id=id)
        self.opened = time.monotonic() if opened is None else opened
        self._seen: dict[str, float] = {}    # call id -> when this widget first saw it

    def show_loading(self, what: str) -> None:
        """The run's driver loads `what` before the run's first event."""
        self.show(f"loading: {what}", elapsed_s=time.monotonic() - self.opened)

    def step(self, step: tuple[str, int | None, str] | None,
             estimates: dict[tuple[str, int | None], float], counted: Progress | None
             ) -> None:
        """The step in flight (tool, phase, call id), or none; `estimates`: how long each
        (tool, phase) took in earlier runs; `counted`: what a step says it has done. A step
        shows when it counts, or when it takes (or took before) LONG_STEP_S or more."""
        if step is None:
            self.show(None)
            return
        tool, phase, call_id = step
        seen = self._seen.setdefault(call_id, time.monotonic())
        elapsed, estimate = time.monotonic() - seen, estimates.get((tool, phase))
        if counted is not None and (counted.call_id != call_id or not counted.stages):
            counted = None                # a step's that has ended, or not counting now
        if counted is None and (estimate if estimate is not None else elapsed) < LONG_STEP_S:
            self.show(None)               # not a long step: no bar flickers by
            return
        where = f" (phase {phase})" if phase is not None else ""
        self.show(f"{tool}{where}", elapsed_s=elapsed, estimate_s=estimate,
                  counts=counted.text() if counted else "",
                  fraction=counted.fraction() if counted else None)

    def compose(self) -> ComposeResult:
        yield Static(id="step-label")
        yield ProgressBar(total=None, show_eta=False, id="step-bar")

    def show(self, what: str | None, *, elapsed_s: float = 0.0,
             estimate_s: float | None = None, counts: str = "",
             fraction: float | None = None) -> None:
        """`what` runs since `elapsed_s`; `counts` and `fraction`: what it says it has done
        (`greedy runs 12/64 tokens`, 0.19); `estimate_s`: how long it took before, if known."""
        if what is None:
            self.display = False
            return
        bars = self.query(ProgressBar)
        if not bars:
            return                  # not composed yet: the screen asks again in STEP_S
        self.display = True
        bar = bars.first()
        if estimate_s:
            tail = f"  {elapsed_s:.0f} s of ~{estimate_s:.0f} s (earlier runs)"
        else:
            tail = f"  {elapsed_s:.0f} s" if elapsed_s >= 1 else ""
        if fraction is not None:
            bar.update(total=1.0, progress=min(fraction, 0.999))
        elif estimate_s:
            # never "done" while it still runs: the bar stops short of the end
            bar.update(total=estimate_s, progress=min(elapsed_s, 0.99 * estimate_s))
        else:
            bar.update(total=None)
        label = printable(what, 120) + (f": {printable(counts, 160)}" if counts else "")
        self.query_one("#step-label", Static).update(Text(label + tail))
