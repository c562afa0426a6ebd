"""What the run is doing now when that takes a while: loading (the pipeline, torch, the model)
before its first event, or a step in flight (a tool requested and not yet completed). A
Textual ProgressBar shows it: by the step's own count of what it has done (its stages, from
store/progress.py's file) when it counts, else against how long the same step took in earlier
runs of the same model when the store has them, else as an indeterminate bar. The time
estimate is shown beside the count when there is one."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal
from textual.widgets import ProgressBar, Static

from npu_deploy.events.describe import printable


class StepProgress(Horizontal):
    """One line: what runs, and a bar. Hidden when nothing slow runs."""

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
