"""The `npu-deploy` command's entry point. Importing the command line takes about half a
second (click, the store's sqlite-utils, which imports numpy) and the TUI as much again
(Textual); loading a pipeline imports torch, seconds. A command that opens the TUI or drives
a run first says, on one line, what it opens and that it is loading, so the terminal is
never blank while Python imports; the TUI erases the line once it has left its screen
(cli/tui.py, `run_app`).

Nothing here may import more than the standard library: its point is to write before that.
"""

from __future__ import annotations

import os
import sys

#: The commands that open the TUI (deploy without --headless), and those that load a
#: pipeline before their first line; what each says it loads.
LOADING = {
    "tui": "opening the TUI (loading Textual and the store)",
    "attach": "opening the TUI (loading Textual and the store)",
    "replay": "opening the TUI (loading Textual and the store)",
    "deploy": "opening the TUI (loading Textual and the store; then the pipeline and the "
              "model)",
    "resume": "loading the store and the run's pipeline",
}
#: Set when the line was written, for the TUI to erase it.
said = False


def plain(text: str, limit: int = 48) -> str:
    """An argument as the line shows it: printable characters only, cut to `limit` (what a
    person typed is data, not terminal control: events/describe.py holds the same rule,
    which this module may not import)."""
    shown = "".join(c if c.isprintable() else "?" for c in text)
    return shown if len(shown) <= limit else shown[:limit - 1] + "…"


def loading_line(argv: list[str]) -> str | None:
    """What `npu-deploy ARGV` says before it imports, or None (a command that answers at
    once, help, a headless deploy)."""
    if len(argv) < 2 or argv[1] not in LOADING or {"-h", "--help"} & set(argv):
        return None
    command = argv[1]
    if command == "deploy" and "--headless" in argv:
        return None
    # the run or the model, when it comes first (what follows an option may be its value)
    subject = argv[2] if len(argv) > 2 and not argv[2].startswith("-") else ""
    head = f"npu-deploy {command}" + (f" {plain(subject)}" if subject else "")
    return f"{head}: {LOADING[command]} …"


def main() -> None:
    global said
    line = loading_line(sys.argv)
    if line is not None and sys.stdout.isatty() and os.environ.get("TERM") != "dumb":
        sys.stdout.write(line + "\n")
        sys.stdout.flush()
        said = True
    from npu_deploy.cli import main as cli

    cli()


def erase() -> None:
    """Take the loading line back off the terminal (the TUI has been and gone)."""
    global said
    if said and sys.stdout.isatty():
        sys.stdout.write("\x1b[1A\x1b[2K")          # up one line, and clear it
        sys.stdout.flush()
        said = False
