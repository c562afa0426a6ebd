"""The terminal UI's commands: tui, attach, replay (and deploy without --headless), and the
driver that runs a conductor in a worker thread of the TUI's process."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from typing import Any

import click

from npu_deploy.deploy_request import DeployRequest, checked
from npu_deploy.store import EventStore

from .group import code_version
from .options import db_option, db_path
from .output import EXIT_USAGE, fail


@dataclass
class ConductorDriver:
    """Runs a conductor for the TUI. Each call opens its own store connection: it runs in
    a worker thread, and SQLite connections stay in the thread that opened them."""

    store_path: Any
    pipeline_spec: str = ""
    policy: Any = None
    model: str = ""
    config: dict[str, Any] = field(default_factory=dict)

    def deploy(self, run_id: str) -> str:
        from npu_deploy.machine import Conductor

        from .deploy import load_pipeline_or_fail

        store = EventStore.open(self.store_path)
        try:
            conductor = Conductor.start(store, load_pipeline_or_fail(self.pipeline_spec),
                                        self.policy, model=self.model,
                                        code_version=code_version(), run_id=run_id,
                                        config=self.config,
                                        backend=self.config.get("backend", "emulator"))
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

    def resume(self, run_id: str) -> str:
        from npu_deploy.machine import resume, stored_pipeline

        from .deploy import load_pipeline_or_fail

        store = EventStore.open(self.store_path)
        try:
            spec = stored_pipeline(store, run_id)    # refused unless registered
            return self._drive(resume(store, run_id, load_pipeline_or_fail(spec)))
        finally:
            store.close()

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

    DeployApp(db_path(), run_id=run_id, live=live, driver=driver, drive=drive).run()


def _existing_run(run: str) -> str:
    store = EventStore.open(db_path())
    try:
        return store.resolve_run(run)
    finally:
        store.close()


@click.command("tui")
@db_option
def tui_cmd() -> None:
    """The run browser: every run in the store; open, attach, resume or fork one."""
    needs_terminal("tui")
    EventStore.open(db_path()).close()          # refuse a bad store before the screen opens
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
