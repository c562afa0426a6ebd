"""The run screen's banner: what the run waits for from a person, while it waits, and the
key that answers it. Hidden while nobody is waited for."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from npu_deploy.events import DeploymentState
from npu_deploy.events.decisions import waiting_text
from npu_deploy.events.describe import one_line


class Banner(Static):
    """A line or two over the stream (app.tcss, `#banner`), drawn from the run's newest
    state, whatever event the cursor is on."""

    def show(self, head: DeploymentState, *, at_newest: bool) -> None:
        """What `head` (the run's state at its newest event) waits for; `at_newest`: the
        cursor is on that event (else the banner says it speaks of the newest)."""
        text = waiting_text(head)
        if text is None:
            self.display = False
            return
        self.display = True
        now = "" if at_newest else "at the newest event, "
        # an exit reason is an agent's words: data, never markup
        self.update(Text.assemble(f"⚠  {now}{one_line(text, 200)}  —  press ", ("d", "bold"),
                                  " to decide"))
