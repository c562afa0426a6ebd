"""The `npu-deploy` group: every error a user can cause, click's usage errors included, ends
as one line on stderr and an exit code, never a traceback."""

from __future__ import annotations

import importlib
import logging
import sqlite3
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any, Final

import click

from npu_deploy.events.describe import one_line

from .options import db_option, db_path
from .output import EXIT_USAGE, fail

#: Every command, in the order it is registered (`--help` sorts them; docs/cli.md follows
#: this order): the module of npu_deploy/cli/ that defines it, the name of its click command
#: there, and the line `--help` shows for it, which is its docstring's first sentence
#: (tests/cli/test_startup.py checks that they agree). A command's module is imported when
#: the command runs, not before: `--help` and a command that only reads the store import
#: neither the model code nor numpy (issue 39; `python -X importtime`).
COMMANDS: Final[dict[str, tuple[str, str, str]]] = {
    # runs in the store
    "runs": ("runs", "runs_cmd", "List the runs in the store."),
    "show": ("runs", "show_cmd", "Show one run: its folded state, phases and newest events "
             "(RUN may be a prefix)."),
    "verify": ("runs", "verify_cmd", "Check a run: its hash chain, the blobs and snapshots "
               "it uses, its runs row, and the anchor your key made over them "
               "(docs/event-log.md)."),
    "export": ("runs", "export_cmd", "Write a verified run and its blobs to one JSONL file."),
    "import": ("runs", "import_cmd", "Add a run from an export file to the store, after "
               "checking every link."),
    # models and the hardware
    "models": ("models", "models_cmd", "List the bundled model and the target models "
               "(shapes, for planning)."),
    "oracle": ("models", "oracle_cmd", "Build the FP32 oracle of MODEL and run the Phase-0 "
               "gate against Hugging Face."),
    "kernels": ("kernels", "kernels_cmd", "Every kernel MODEL needs, the tile configuration "
                "chosen for it, and its findings."),
    "plan": ("kernels", "plan_cmd", "The dispatch plan of MODEL, its modeled profile on "
             "XDNA 2, and (with --optimize) the transforms that make it faster."),
    "doctor": ("kernels", "doctor_cmd", "Whether this machine can run deployments on a real "
               "NPU (`--backend xrt`): each requirement found (and where) or missing (and "
               "the fix), one line each."),
    "build-objects": ("kit", "build_objects_cmd", "Compile every AIE micro-kernel object "
                      "the programs of MODEL link (default: every model of the catalog) "
                      "with Peano, for XDNA 2 (aie2p), into DIR with a manifest."),
    "validate-hardware": ("hardware", "validate_hardware_cmd", "Run MODEL on this machine's "
                          "NPU and write a self-contained report: every program of its "
                          "prefill and decode plans compiled (one per structure: the layers' "
                          "programs differ only in their names), every kernel validated "
                          "against the FP32 reference and timed, layer 0 run against the "
                          "FP32 oracle, with the machine, the tools and their versions, and "
                          "every failure with aircc's log and the program's IR."),
    "import-measurements": ("hardware", "import_measurements_cmd", "Add the kernel times of "
                            "a validate-hardware REPORT to the kernel data, as rows measured "
                            "on NPU by validate-hardware on its host and date, beside "
                            "upstream's and never mixed with them."),
    # driving a run
    "deploy": ("deploy", "deploy_cmd", "Deploy MODEL through phases 0-7 as a new run in the "
               "store."),
    "tui": ("tui", "tui_cmd", "The run browser: every run in the store; open, attach, "
            "resume or fork one."),
    "attach": ("tui", "attach_cmd", "Watch RUN live while another process (e.g. a headless "
               "deploy) executes it."),
    "replay": ("tui", "replay_cmd", "Replay RUN from its first event: step, jump to failures "
               "and decisions, play."),
    "decide": ("deploy", "decide_cmd", "Leave a decision for a run: approve | redirect TEXT "
               "| pick N | pause | abort."),
    "resume": ("deploy", "resume_cmd", "Go on with a run that crashed, was paused, or "
               "stopped for a person."),
    "fork": ("deploy", "fork_cmd", "Start a new run from RUN's history up to --at (RUN "
             "itself is not changed)."),
    # many deployments, many hosts
    "matrix": ("matrix", "matrix_cmd", "Run a matrix of deployments (models x prompt "
               "lengths x backends x agents) as Ray tasks, one per NPU host at a time, every "
               "run gathered into this store and verified."),
    "node": ("matrix", "node_cmd", "This host's node key, and the head's keyring of the "
             "nodes whose runs it takes."),
    # using a deployment
    "generate": ("inference", "generate_cmd", "Answer PROMPT with RUN's deployed model on "
                 "the run's backend, streaming the tokens."),
    "chat": ("inference", "chat_cmd", "A conversation with RUN's deployed model; an empty "
             "line or end of input ends it."),
    "report": ("results", "report_cmd", "Write RUN's performance report, plots, lessons "
               "and evaluation to a directory."),
    "lessons": ("results", "lessons_cmd", "List RUN's lessons, or approve one (`lessons RUN "
                "approve ID`): its proposed trigger is added to the store's skill overlay, "
                "which the debug matcher reads from then on."),
}


class Commands(MutableMapping[str, click.Command]):
    """The group's commands by name (click.Group.commands): each loaded from its module on
    first use. Listing the names loads nothing."""

    def __init__(self) -> None:
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            if name not in COMMANDS:
                raise KeyError(name)
            module, attr, _ = COMMANDS[name]
            self._loaded[name] = getattr(
                importlib.import_module(f"{__package__}.{module}"), attr)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter({**dict.fromkeys(COMMANDS), **self._loaded})

    def __len__(self) -> int:
        return len({**dict.fromkeys(COMMANDS), **self._loaded})


def _loaded_class(module: str, name: str) -> type[BaseException] | None:
    """An exception class, if its module was imported by the command that ran (one that
    raises it has imported it): never imported just to be caught."""
    found = sys.modules.get(module)
    return getattr(found, name, None) if found is not None else None


class CLI(click.Group):
    """Turns every error, click's usage errors included, into one line and an exit code."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.commands = Commands()    # type: ignore[assignment]

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's list of commands, from COMMANDS' lines: no command's module imported."""
        rows = []
        limit = formatter.width - 6 - max(map(len, COMMANDS))
        for name in self.list_commands(ctx):
            if name in COMMANDS:       # cut as click cuts a command's own
                line = click.Command(name, help=COMMANDS[name][2]).get_short_help_str(limit)
            else:                      # added by a caller (add_command): already imported
                command = self.get_command(ctx, name)
                line = command.get_short_help_str(limit) if command is not None else ""
            rows.append((name, line))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

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
        except Exception as e:
            ours = tuple(c for c in (
                _loaded_class("npu_deploy.store.errors", "StoreError"),
                _loaded_class("npu_deploy.events.envelope", "InvalidEvent"),
                _loaded_class("npu_deploy.models.errors", "OracleError")) if c is not None)
            if isinstance(e, ours):
                fail(str(e))
            if isinstance(e, sqlite3.DatabaseError):
                from npu_deploy.store.medium import storage_error

                fail(str(storage_error(db_path(), e) or
                         f"the store could not be read ({e}); check the file with "
                         "`npu-deploy verify --all`"))
            if isinstance(e, OSError):
                from npu_deploy.store.medium import disk_full, is_disk_full

                if is_disk_full(e):
                    fail(str(disk_full(e.filename)))
                fail(f"{e.strerror or e}: {e.filename or ''}".rstrip(": "))
            raise


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    if value and not ctx.resilient_parsing:
        from npu_deploy.deploy_request import code_version

        click.echo(f"npu-deploy, version {code_version()}")
        ctx.exit()


class _Note(logging.Handler):
    """A notice of the store's (a key made: store/anchor.py) as one line on stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"npu-deploy: note: {one_line(record.getMessage())}", err=True)


def _notes_on_stderr() -> None:
    notes = logging.getLogger("npu_deploy.store.anchor")
    notes.handlers = [_Note(logging.WARNING)]
    notes.propagate = False


@click.group(cls=CLI, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_print_version, help="Show the version and exit.")
@db_option
def main() -> None:
    """Deploy LLMs onto spatial NPUs through eight gated, event-sourced phases.

    Every action of a deployment is an event in an append-only, hash-chained
    SQLite log; these commands list, inspect, verify and move runs.
    """
