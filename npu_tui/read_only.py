"""A store the TUI cannot write (a read-only mount, a CD, a snapshot, a file whose permissions
let this user read it only): the TUI opens it read-only and works as a viewer. What it says
about that, in one place: on the browser's title line, on the run screen, and in the one
notice that refuses a key that would write.

Why the store cannot be written is store/medium.py `why_unwritable`'s answer, in its words,
so that the TUI and the command line's writing commands give the same reason."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.widgets import Static


def read_only_words(reason: str) -> str:
    """What the title line and the run screen say, once, of a read-only store."""
    return f"read-only: {reason}"


def refusal(path: Path, reason: str, what: str) -> str:
    """The one notice for a key that would write the store at `path`: what it would have
    done (`what`, e.g. "fork run r1"), why it cannot, and what to do instead (the words of
    store/medium.py `read_only_error`, which refuses the command line's writing commands)."""
    return (f"cannot {what}: {path} is read-only ({reason}); nothing was written. To write, "
            f"copy it (with its {path.name}-wal, if any) to a writable place and open that "
            "with --db")


class ReadOnlyLine(Static):
    """The run screen's line saying that its store is read-only, and why (app.tcss,
    `#read-only`); not shown when the store can be written."""

    def show(self, reason: str | None) -> None:
        self.display = reason is not None
        if reason is not None:
            # the reason may quote a folder's path: data, never markup
            self.update(Text(read_only_words(reason)))
