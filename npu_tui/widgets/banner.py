"""The run screen's banner: what the run waits for from a person, while it waits, and the
key that answers it. Hidden while nobody is waited for."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from npu_deploy.events import DeploymentState
from npu_deploy.events.decisions import waiting_text
from npu_deploy.events.describe import one_line

#: What a run nothing writes is, in the banner's words, by its status.
STOPPED = {"crashed": "crashed", "paused": "is paused"}


class Banner(Static):
    """A line or two over the stream (app.tcss, `#banner`), drawn from the run's newest
    state, whatever event the cursor is on."""

    def show(self, head: DeploymentState, status: str, short_id: str, *, at_newest: bool,
             here: bool, writable: bool = True) -> None:
        """What `head` (the run's state at its newest event) waits for, or, when nothing
        runs it (`status` crashed or paused), how it goes on: `r` here (`here`: this window
        can run a conductor), `npu-deploy resume SHORT_ID` from a shell. `at_newest`: the
        cursor is on that event (else the banner says it speaks of the newest). Not
        `writable` (a read-only store, npu_tui/read_only.py): `d` shows the decision, and
        going on needs a writable copy of the store."""
        now = "" if at_newest else "at the newest event, "
        text = waiting_text(head)
        short = one_line(short_id, 40)
        if status in STOPPED and text is None:
            keys: list[str | tuple[str, str]] = \
                [("r", "bold"), " resumes it here, or "] if here else []
            self.display = True
            self.update(Text.assemble(f"■  {now}run {STOPPED[status]}  —  ", *keys,
                                      (f"npu-deploy resume {short}", "bold"),
                                      "" if writable else " on a writable copy of the store"))
            return
        if text is None:
            self.display = False
            return
        self.display = True
        # nothing runs it now: a decision taken here resumes it in this window (app.py
        # continue_run); from a shell, `npu-deploy decide` then `resume`
        after = ("" if status not in STOPPED else " (nothing runs the run now: deciding "
                 "resumes it here)" if here else f" (nothing runs it: npu-deploy resume {short})")
        if not writable:
            self.update(Text.assemble(f"⚠  {now}{one_line(text, 200)}  —  press ",
                                      ("d", "bold"), " to see it; deciding needs a writable "
                                      "copy of the store"))
            return
        # an exit reason is an agent's words: data, never markup
        self.update(Text.assemble(f"⚠  {now}{one_line(text, 200)}  —  press ", ("d", "bold"),
                                  " to decide", after))
