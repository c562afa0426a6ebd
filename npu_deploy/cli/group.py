"""The `npu-deploy` group: every error a user can cause, click's usage errors included, ends
as one line on stderr and an exit code, never a traceback."""

from __future__ import annotations

import logging
import sqlite3
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import click

from npu_deploy.events import InvalidEvent
from npu_deploy.events.describe import one_line
from npu_deploy.models import OracleError
from npu_deploy.store import StoreError
from npu_deploy.store.medium import disk_full, is_disk_full, storage_error

from .options import db_option, db_path
from .output import EXIT_USAGE, fail


def code_version() -> str:
    try:
        return version("npu-deploy")
    except PackageNotFoundError:
        return "0+unknown"


class CLI(click.Group):
    """Turns every error, click's usage errors included, into one line and an exit code."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs["standalone_mode"] = False
        _notes_on_stderr()
        try:
            code = super().main(*args, **kwargs)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx else "npu-deploy"
            fail(f"{e.format_message()} (see `{where} --help`)", EXIT_USAGE)
        except click.ClickException as e:
            fail(e.format_message(), e.exit_code)
        except click.Abort:
            fail("interrupted", 130)
        sys.exit(code or 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (StoreError, InvalidEvent, OracleError) as e:
            fail(str(e))
        except sqlite3.DatabaseError as e:
            fail(str(storage_error(db_path(), e) or
                     f"the store could not be read ({e}); check the file with "
                     "`npu-deploy verify --all`"))
        except OSError as e:
            if is_disk_full(e):
                fail(str(disk_full(e.filename)))
            fail(f"{e.strerror or e}: {e.filename or ''}".rstrip(": "))


class _Note(logging.Handler):
    """A notice of the store's (a key made: store/anchor.py) as one line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"npu-deploy: note: {one_line(record.getMessage())}", err=True)


def _notes_on_stderr() -> None:
    notes = logging.getLogger("npu_deploy.store.anchor")
    notes.handlers = [_Note(logging.WARNING)]
    notes.propagate = False


@click.group(cls=CLI, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(code_version(), prog_name="npu-deploy")
@db_option
def main() -> None:
    """Deploy LLMs onto spatial NPUs through eight gated, event-sourced phases.

    Every action of a deployment is an event in an append-only, hash-chained
    SQLite log; these commands list, inspect, verify and move runs.
    """
