"""What every command prints: Rich tables at the terminal's width, JSON, and one-line errors
with an exit code that says what kind of failure it was."""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, NoReturn

import click

if TYPE_CHECKING:
    from rich.console import Console

EXIT_FAILED = 1   # the command ran and found a problem (bad input, broken chain)
EXIT_USAGE = 2    # a wrong flag or argument
EXIT_UNANCHORED = 4   # verify: intact, but not anchored by this user's key: nothing more proven


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    """One line, whatever the message quotes: an agent's exit reason may hold line breaks
    or escape sequences (events/describe.py `one_line`; a caller that quotes long text cuts
    it, `cut`)."""
    say_error(message)
    sys.exit(code)


def say_error(message: str) -> None:
    """`fail`'s line, for a caller that leaves by another way (the TUI, cli/tui.py)."""
    from npu_deploy.events.describe import error_line

    click.echo(error_line(message), err=True)


def console() -> Console:
    """Rich output at the terminal's width; 160 columns when piped (not rich's 80)."""
    from rich.console import Console

    return Console() if sys.stdout.isatty() else Console(width=160)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))
