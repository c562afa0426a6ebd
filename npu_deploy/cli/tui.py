"""The terminal UI's commands: tui, attach, replay (and deploy without --headless), and the
driver that runs a conductor in a worker thread of the TUI's process."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import click

from npu_deploy import loading as loading_line
from npu_deploy.deploy_request import DeployRequest, checked, code_version, resume_run
from npu_deploy.events.describe import printable
from npu_deploy.store import EventStore
from npu_deploy.store.medium import why_unwritable

from .options import db_option, db_path, open_existing
from .output import EXIT_USAGE, fail, say_error

#: After the TUI quits, how long a conductor of this process may take to record the pause
#: it was left (it looks at its inbox every machine.conductor.POLL_S while it waits).
QUIT_GRACE_S = 0.25
Loading = Callable[[str], None]        # npu_deploy.tui.app.Loading (imported lazily there)


def _quiet(what: str) -> None:
    """A driver's `loading` when no one shows it."""


class Left(Exception):
    """What a driver's `deploy` raises instead of making its run once the TUI has quit."""


@dataclass
class ConductorDriver:
    """Runs a conductor for the TUI. Each call opens its own store connection: it runs in
    a worker thread, and SQLite connections stay in the thread that opened them."""

    store_path: Any
    pipeline_spec: str = ""
    policy: Any = None
    model: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    # Making a run and quitting exclude each other: a quit waits for the run being made
    # (then leaves it a pause), or the run is not made at all.
    _gate: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _made: set[str] = field(default_factory=set, init=False, repr=False)
    _left: bool = field(default=False, init=False, repr=False)

    def deploy(self, run_id: str, loading: Loading = _quiet) -> str:
        """Load and check what `deploy` checks before a headless run (the pipeline, the
        model), then start the run: a ValueError here means no run was created."""
        from npu_deploy.deploy_request import check_model, checks_model
        from npu_deploy.machine import Conductor, load_pipeline

        loading(f"loading the pipeline {self.pipeline_spec} …")
        pipeline = load_pipeline(self.pipeline_spec)
        if checks_model(self.pipeline_spec):
            loading(f"checking the model {self.model} …")
            check_model(self.model)            # Refused (a ValueError): no run is made
        loading("starting the conductor …")
        store = EventStore.open(self.store_path)
        try:
            with self._gate:
                if self._left:
                    raise Left(f"run {run_id}: the TUI quit before it was started")
                conductor = Conductor.start(store, pipeline,
                                            self.policy, model=self.model,
                                            code_version=code_version(), run_id=run_id,
                                            config=self.config,
                                            backend=self.config.get("backend", "emulator"))
                self._made.add(run_id)
            loading("")
            return self._drive(conductor)
        finally:
            store.close()

    def deploying(self, request: DeployRequest) -> ConductorDriver:
        """A driver that deploys `request` as a new run, or Refused with every problem the
        command line would refuse it for (deploy_request.py). It reads the model's weights'
        headers (and builds it into the cache the first time): call it from a worker."""
        deployment = checked(request)
        return ConductorDriver(self.store_path, deployment.pipeline, deployment.policy(),
                               request.model, deployment.config)

    def resume(self, run_id: str, loading: Loading = _quiet) -> str:
        """Resume the run as `npu-deploy resume` does (deploy_request.resume_run: refused
        unless its pipeline is registered, Claude's key and the NPU are here, before any
        event), then drive it."""
        store = EventStore.open(self.store_path)
        try:
            conductor = resume_run(store, run_id, loading=loading)
            loading("")
            return self._drive(conductor)
        finally:
            store.close()

    def leave(self, run_id: str) -> bool:
        with self._gate:
            self._left = True
            return run_id in self._made

    def fork(self, run_id: str, at_version: int, note: str | None) -> str:
        from npu_deploy.machine import fork

        store = EventStore.open(self.store_path)
        try:
            return fork(store, run_id, at_version, note)
        finally:
            store.close()

    @staticmethod
    def _drive(conductor: Any) -> str:
        """Drive the run until it ends or is paused. Where the headless CLI exits at a phase
        stopped for a person, the TUI's conductor waits for that person, so that a decision
        taken in the window goes on at once, in this process."""
        from npu_deploy.machine.conductor import POLL_S

        try:
            halt = conductor.run(wait=True)
            while halt.reason == "needs_human":
                time.sleep(POLL_S)
                halt = conductor.run(wait=True)
        finally:
            conductor.close()
        return f"{halt.reason} {halt.detail}".strip()


def needs_terminal(what: str) -> None:
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        fail(f"{what} opens the terminal UI, which needs a terminal; "
             "use --headless (deploy) or `npu-deploy show RUN` here", EXIT_USAGE)


def run_app(run_id: str | None, *, live: bool, driver: Any = None,
            drive: str | None = None) -> None:
    from npu_deploy.tui import DeployApp

    # the line that said what was loading (npu_deploy/loading.py) stays on the screen until
    # the TUI's first screen is drawn, and is taken off the terminal after it
    app = DeployApp(db_path(), run_id=run_id, live=live, driver=driver, drive=drive,
                    opening=loading_line.said)
    try:
        app.run()
    finally:
        loading_line.erase()
    # The terminal is restored. What is left is slow and loses nothing if cut: a conductor
    # of this process mid-step (it has a pause in its inbox; a step cut short is re-run by
    # `npu-deploy resume` under its idempotency key, as after a crash), readers' threads,
    # torch and the interpreter's teardown. Give a waiting conductor the time to record its
    # pause, then leave at once.
    for run in app.not_started:
        click.echo(f"run {printable(run)} was not started: quit while it loaded (the pipeline "
                   "and the model); nothing was stored", err=True)
    end = time.monotonic() + QUIT_GRACE_S
    cut = set(app.not_started)            # runs said already (none said twice)
    for run in app.left_paused:
        returned = app.conducting[run].wait(timeout=max(0.0, end - time.monotonic()))
        shown = printable(run)
        if returned and app.halted.get(run, "").startswith("paused"):
            cut.add(run)
            click.echo(f"run {shown} is paused; `npu-deploy resume {shown}` goes on", err=True)
        elif not returned and app.loading.get(run):
            cut.add(run)
            click.echo(f"run {shown}: quit while it loaded; `npu-deploy resume {shown}` goes "
                       "on", err=True)
        elif not returned:
            cut.add(run)
            if say_where_it_stands(app, run, here=True):
                continue        # it waited for a person, not in a step
            click.echo(f"run {shown}: quit mid-step; `npu-deploy resume {shown}` goes on "
                       "(the step is run again)", err=True)
    say_where_runs_stand(app, cut)
    if app.refused is not None:
        say_error(app.refused)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(app.return_code or 0)


def say_where_runs_stand(app: Any, cut: set[str]) -> None:
    """After the TUI quit: a line for each run it ran or showed last that waits for a
    person or is paused, with the command that goes on (`cut`: runs whose conductor did not
    return in time, said already)."""
    runs = [r for r in app.conducting if r not in cut]
    if app.shown is not None and app.shown not in runs and app.shown not in cut:
        runs.append(app.shown)
    for run in runs:
        say_where_it_stands(app, run, here=False)


def say_where_it_stands(app: Any, run: str, *, here: bool) -> bool:
    """`here`: its conductor is still this process's (which is ending). Whether a line was
    written."""
    from npu_deploy.tui.standing import quit_line

    line = quit_line(app.store_path, run, here=here)
    if line is not None:
        click.echo(line, err=True)
    return line is not None


def _open_store(*, create: bool) -> EventStore:
    """The store as the TUI opens it (npu_tui/app.py): for writing, or read-only where it
    cannot be written (a read-only mount, a file this user may only read), to browse and
    replay. Refuses a bad store in one line before the screen opens. Not `create`: a
    missing store is refused, not made."""
    if why_unwritable(db_path()) is not None:
        return EventStore.open(db_path(), readonly=True)
    return EventStore.open(db_path()) if create else open_existing()


def _existing_run(run: str) -> str:
    store = _open_store(create=False)
    try:
        return store.resolve_run(run)
    finally:
        store.close()


@click.command("tui")
@db_option
def tui_cmd() -> None:
    """The run browser: every run in the store; open, attach, resume or fork one."""
    needs_terminal("tui")
    _open_store(create=True).close()           # refuse a bad store before the screen opens
    run_app(None, live=False, driver=ConductorDriver(db_path()))


def _open_run(run: str, *, live: bool, command: str) -> None:
    """The TUI on an existing run: live (attach), or from its first event (replay)."""
    run_id = _existing_run(run)
    needs_terminal(command)
    run_app(run_id, live=live, driver=ConductorDriver(db_path()))


@click.command("attach")
@db_option
@click.argument("run")
def attach_cmd(run: str) -> None:
    """Watch RUN live while another process (e.g. a headless deploy) executes it."""
    _open_run(run, live=True, command="attach")


@click.command("replay")
@db_option
@click.argument("run")
def replay_cmd(run: str) -> None:
    """Replay RUN from its first event: step, jump to failures and decisions, play."""
    _open_run(run, live=False, command="replay")
