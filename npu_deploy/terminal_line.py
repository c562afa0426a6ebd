"""The one line a slow command writes before its imports (launch.py says what it opens) and
the TUI takes back off the terminal once it has left its screen (cli/tui.py, `run_app`):
the state both share, in a module of its own, so that neither imports the other.

The standard library only: launch.py imports it before anything else is loaded.
"""

from __future__ import annotations

import sys

#: Set when the line was written, for the TUI to erase it.
said = False


def say(line: str) -> None:
    """Write the line (the caller has checked that a terminal shows it)."""
    global said
    sys.stdout.write(line + "\n")
    sys.stdout.flush()
    said = True


def erase() -> None:
    """Take the loading line back off the terminal (the TUI has been and gone)."""
    global said
    if said and sys.stdout.isatty():
        sys.stdout.write("\x1b[1A\x1b[2K")          # up one line, and clear it
        sys.stdout.flush()
        said = False
