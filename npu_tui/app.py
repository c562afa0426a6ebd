"""The npu-deploy terminal UI. It reads the store and writes only inbox commands; the log,
not any widget, is the truth. A conductor may run in this process (a worker thread, given
as a `Driver`), or in another one (attach)."""

from __future__ import annotations

import contextlib
import gc
import getpass
import os
import threading
import tomllib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rich.text import Text
from textual.app import App, ComposeResult, SystemCommand
from textual.await_complete import AwaitComplete
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.theme import Theme
from textual.widgets import Static

from npu_deploy.deploy_request import DeployRequest, Refused
from npu_deploy.events import uuid7
from npu_deploy.events.decisions import queued
from npu_deploy.events.describe import error_line, printable
from npu_deploy.store import EventStore
from npu_deploy.store.medium import why_unwritable

from .matrices import node_holding
from .memory import settle
from .read_only import refusal
from .screens.run import RunScreen
from .screens.runs import RunsScreen
from .settings import SettingsError, keymap_path, read_settings, settings_path, write_setting
from .standing import returned_words

#: What a driver calls while it loads (the pipeline, torch, the model) before its conductor's
#: first event; "" when that is done.
Loading = Callable[[str], None]
EXIT_REFUSED = 1             # the app's return code when `deploy` was refused before its run
#: How long a notice stays, by severity, in seconds: long enough to read it once.
NOTICE_S: dict[str, float] = {"information": 3.0, "warning": 5.0, "error": 8.0}


class Driver(Protocol):
    """What runs a conductor for the TUI (supplied by the CLI, which may import `machine`).
    `deploy` and `resume` block until the conductor halts and return why it halted; they
    run in a worker thread, after the first frame, and say what they load."""

    def deploy(self, run_id: str, loading: Loading) -> str: ...

    def resume(self, run_id: str, loading: Loading) -> str: ...

    def fork(self, run_id: str, at_version: int, note: str | None) -> str: ...

    def leave(self, run_id: str) -> bool:
        """The TUI is quitting: from now on `deploy` makes no run (it raises instead of
        starting one). Whether it had made `run_id`'s run; waits while it makes it."""
        ...

    def deploying(self, request: DeployRequest) -> Driver:
        """A driver whose `deploy` starts `request` as a new run; raises
        deploy_request.Refused with every problem, before anything is stored."""
        ...


def read_keymap(path: Path) -> dict[str, str]:
    """`[keymap]` of a TOML file: binding id = keys, e.g. "run.decide" = "ctrl+d"."""
    if not path.exists():
        return {}
    try:
        data = tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as e:
        raise ValueError(f"{path}: not a keymap ({e}); fix or remove it") from None
    keymap = data.get("keymap", {})
    if not isinstance(keymap, dict) or not all(isinstance(v, str) for v in keymap.values()):
        raise ValueError(f"{path}: [keymap] must map binding ids to key strings, "
                         'e.g. "run.decide" = "ctrl+d"')
    return {str(k): v for k, v in keymap.items()}


class DeployApp(App[None]):
    """Open on the run browser (`run_id=None`), or on one run, live or in replay."""

    CSS_PATH = "app.tcss"
    TITLE = "npu-deploy"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("question_mark,f1", "help", "Help", id="app.help"),
        Binding("q", "quit", "Quit", id="app.quit"),
        Binding("R", "runs", "Runs", show=False, id="app.runs"),
    ]

    def __init__(self, store_path: str | os.PathLike[str], *, run_id: str | None = None,
                 live: bool = True, driver: Driver | None = None,
                 drive: str | None = None, opening: str | None = None) -> None:
        super().__init__()
        # The line the command wrote while Python imported (npu_deploy/loading.py): the
        # first frame shows it until the first screen is built (its styles, a run's events:
        # 0.1-0.5 s more), so that the terminal is never blank between the two.
        self.opening = opening
        self._opening_line: Static | None = None
        self.store_path = Path(store_path)
        self.start_run, self.start_live = run_id, live
        self.driver, self.drive = driver, drive       # drive: "deploy" | "resume" | None
        self.author = f"{getpass.getuser()}@tui"
        self.driving: set[str] = set()
        self.loading: dict[str, str] = {}     # run id -> what its driver loads now
        self.refused: str | None = None        # why `deploy` made no run, if it did not
        # deploys asked of a driver: run id -> its driver (each may not have made its run yet)
        self.deploys: dict[str, Driver] = {}
        if drive == "deploy" and run_id is not None and driver is not None:
            self.deploys[run_id] = driver
        # at quit: the deploys that had made no run (none will be), and the runs whose
        # conductor (in this process) was left a pause; run id -> why its conductor returned
        self.not_started: list[str] = []
        self.left_paused: list[str] = []
        self.halted: dict[str, str] = {}
        self.shown: str | None = None          # the run on screen (said when it quits)
        # run id -> set when its conductor (a worker thread of this process) has returned
        self.conducting: dict[str, threading.Event] = {}
        self.store: EventStore
        # why the store cannot be written (store/medium.py's words), or None: then the TUI
        # opened it read-only, and refuses every key that would write (`refuses_writing`)
        self.read_only: str | None = None

    def notify(self, message: str, *, title: str = "", severity: SeverityLevel = "information",
               timeout: float | None = None, markup: bool = True) -> None:
        """Every notice, from any screen: it quotes data (a run id, a store's error, a path),
        so it is never markup and shows its control characters (`markup` is ignored)."""
        super().notify(printable(message), title=printable(title), severity=severity,
                       timeout=NOTICE_S[severity] if timeout is None else timeout, markup=False)

    def compose(self) -> ComposeResult:
        if self.opening:
            self._opening_line = Static(Text(self.opening), id="opening")
            yield self._opening_line

    def on_mount(self) -> None:
        self.read_only = why_unwritable(self.store_path)
        self.store = EventStore.open(self.store_path, readonly=self.read_only is not None)
        try:
            self.set_keymap(read_keymap(keymap_path()))
        except ValueError as e:
            self.notify(f"Your keys are the usual ones: {e}", severity="error")
        self._restore_theme()
        if self.opening:
            self.call_after_refresh(self._open_first)       # after the line's frame
        else:
            self._open_first()

    def _open_first(self) -> None:
        if self.start_run is None:
            self.push_screen(RunsScreen())
            self.call_after_refresh(settle, self)       # npu_tui/memory.py
        else:
            if self.drive is not None:
                self.loading[self.start_run] = "starting …"
                # after the first frame: loading the pipeline and the model takes seconds
                self.call_after_refresh(self._drive, self.start_run, self.drive)
            self.open_run(self.start_run, live=self.start_live)
        if self._opening_line is not None:
            self._opening_line.remove()     # under the first screen: never shown again

    def on_unmount(self) -> None:
        for run_id, driver in self.deploys.items():
            if not driver.leave(run_id):
                # quit while it loaded (the pipeline, the model): no run, and none is made
                self.not_started.append(run_id)
                self.driving.discard(run_id)
        for run_id in list(self.driving):
            # The conductor runs in this process: leave it a pause so that it stops at
            # its next step boundary and the run is resumable, not cut mid-write.
            self.store.post_command(run_id, "pause", author=self.author)
            self.left_paused.append(run_id)
        self.store.close()
        gc.unfreeze()                  # what the screens froze (npu_tui/memory.py)

    def _restore_theme(self) -> None:
        """The theme chosen at an earlier launch (settings.py); each later choice is kept."""
        path = settings_path()
        try:
            theme = read_settings(path).get("theme")
        except SettingsError as e:
            self.notify(str(e), severity="warning")
            theme = None
        if isinstance(theme, str) and theme in self.available_themes:
            self.theme = theme
        elif theme is not None:
            self.notify(f"{path}: there is no theme {theme!r}; the TUI starts in {self.theme}",
                        severity="warning")
        self.theme_changed_signal.subscribe(self, self._keep_theme)

    def _keep_theme(self, theme: Theme) -> None:
        try:
            write_setting(settings_path(), "theme", theme.name)
        except OSError as e:
            self.notify(f"The theme is not kept for the next launch: {e}", severity="warning")

    # --- navigation ---------------------------------------------------------------------------

    def open_run(self, run_id: str, *, live: bool) -> None:
        screen = RunScreen(run_id, live=live)
        self.shown = run_id
        if isinstance(self.screen, RunScreen):
            self.switch_screen(screen)
        else:
            self.push_screen(screen)

    def show_runs(self) -> None:
        """The run browser, its cursor on the run a person comes back from."""
        came_from = self.screen.run_id if isinstance(self.screen, RunScreen) else None
        self.shown = None
        if any(isinstance(s, RunsScreen) for s in self.screen_stack):
            while not isinstance(self.screen, RunsScreen):
                self.pop_screen()
            runs = self.screen
        else:
            runs = RunsScreen()
            self.switch_screen(runs)
        if came_from is not None:
            runs.select(came_from)

    def pop_screen(self) -> AwaitComplete:
        done = super().pop_screen()
        self.call_after_refresh(settle, self)   # what the closed screen made, frozen or freed
        return done

    def switch_screen(self, screen: Screen[Any] | str) -> AwaitComplete:
        done = super().switch_screen(screen)
        self.call_after_refresh(settle, self)
        return done

    def action_runs(self) -> None:
        self.show_runs()

    def action_help(self) -> None:
        """Help over the screen in front: its keys and the legend (the help screen takes
        `?` and F1 itself to close)."""
        from .screens.help import HelpScreen

        self.push_screen(HelpScreen(self.screen))

    # --- driving a conductor in this process ----------------------------------------------------

    def refuses_writing(self, what: str) -> bool:
        """Whether the store is read-only, so that `what` (e.g. "fork run r1") would write
        where nothing can be: then a notice says so, why, and what to do, where the person
        is (a key pressed is never silent)."""
        if self.read_only is None:
            return False
        self.notify(refusal(self.store.path, self.read_only, what), severity="error")
        return True

    @property
    def can_drive(self) -> bool:
        """This window can run a conductor: it has a driver, and the store can be written."""
        return self.driver is not None and self.read_only is None

    def ask_resume(self, run_id: str, status: str) -> None:
        """Resume `run_id` (whose status is `status`) in this process, once a person has
        seen what it goes on from; the run screen opens live on it."""
        from npu_deploy.events import PHASE_NAMES

        from .screens.dialogs import ResumeConfirm
        from .timeline import unfinished_step

        if status in ("finished", "failed", "aborted", "running", "starting"):
            self.notify(f"run {run_id} is {status}: there is nothing to resume"
                        + (" (another process runs it; attach instead)"
                           if status == "running" else ""), severity="warning")
            return
        if self.refuses_writing(f"resume run {run_id}"):
            return
        if self.driver is None:
            self.notify(f"this window only watches: `npu-deploy resume {run_id}` in a shell "
                        "resumes it", severity="error")
            return
        s = self.store.fold(run_id)
        done = [ph for ph in s.phases if ph.status == "exited:passed"]
        last = f"{done[-1].phase} ({PHASE_NAMES[done[-1].phase]})" if done else "none"

        def go(yes: bool | None) -> None:
            if yes:
                self.drive_resume(run_id)

        self.push_screen(ResumeConfirm(run_id, last, unfinished_step(self.store, run_id),
                                       status), go)

    def drive_resume(self, run_id: str) -> None:
        self._drive(run_id, "resume")
        self.open_run(run_id, live=True)

    def drive_deploy(self, driver: Driver) -> str:
        """A new run, as `npu-deploy deploy` without --headless starts one: `driver` (a
        checked request's, `Driver.deploying`) runs its conductor in a worker of this
        process, and the run screen opens live on it."""
        run_id = uuid7()
        self.deploys[run_id] = driver
        self._drive(run_id, "deploy", driver)
        self.open_run(run_id, live=True)
        return run_id

    def continue_run(self, run_id: str) -> bool:
        """After a decision taken here: when no conductor runs the run (none in this
        process, no other process holding its lock), resume it in this process, so that the
        decision is recorded and the run goes on in this window. False when this app has
        no driver (it was opened to watch only) or its store is read-only. A run a node
        works for its matrix is that node's to go on with (its shipper fetches the command),
        never this process's too."""
        if not self.can_drive:
            return False
        if run_id not in self.driving and not self.store.is_locked(run_id) \
                and node_holding(self.store, run_id) is None:
            self._drive(run_id, "resume")
        return True

    def _drive(self, run_id: str, how: str, driver: Driver | None = None) -> None:
        self.driving.add(run_id)
        self.loading.setdefault(run_id, "starting …")
        self.conducting[run_id] = threading.Event()
        # A daemon thread, not a Textual thread worker: those run in asyncio's default
        # executor, which `App.run` joins as it returns, so quitting mid-step kept the
        # person's shell waiting for the step (seconds). The CLI gives it a moment to record
        # its pause after the terminal is restored (cli/tui.py, run_app).
        threading.Thread(target=self._conduct, args=(run_id, how, driver or self.driver),
                         daemon=True, name=f"conductor {run_id}").start()

    def _conduct(self, run_id: str, how: str, driver: Driver | None) -> None:
        assert driver is not None
        done = self.conducting[run_id]

        def loading(what: str) -> None:
            # What the screen does with it never stops the deployment: the app may have
            # closed meanwhile, or its screen not be mounted yet.
            with contextlib.suppress(Exception):
                self.call_from_thread(self._loading, run_id, what)

        try:
            outcome = (driver.deploy(run_id, loading) if how == "deploy"
                       else driver.resume(run_id, loading))
            self.halted[run_id] = outcome           # for the command line, after a quit
        except ValueError as e:
            outcome = f"stopped: {type(e).__name__}: {e}"
            if how == "deploy" and run_id == self.start_run and not self._created(run_id):
                # the command line's deploy (a form's run was checked before it was asked)
                done.set()
                with contextlib.suppress(RuntimeError):     # the app closed meanwhile
                    self.call_from_thread(self._refused, run_id, str(e))
                return
            if how == "resume" and isinstance(e, Refused):
                # refused before the run was touched, as `npu-deploy resume` refuses it
                # (deploy_request.resume_run: its pipeline, Claude's key, the NPU)
                done.set()
                with contextlib.suppress(RuntimeError):
                    self.call_from_thread(self._resume_refused, run_id, str(e))
                return
        except Exception as e:  # noqa: BLE001 - shown to the person, recorded by the conductor
            outcome = f"stopped: {type(e).__name__}: {e}"
        finally:
            done.set()
        if run_id in self.not_started or not self.is_running:
            return                        # the app closed meanwhile (quit while it loaded)
        try:
            self.call_from_thread(self._driven, run_id, outcome)
        except RuntimeError:              # the app closed meanwhile
            pass

    def _refused(self, run_id: str, why: str) -> None:
        """`deploy` refused before its run was made (the model, the pipeline): leave with
        the command line's one-line error, not a screen of a run that does not exist."""
        self.driving.discard(run_id)
        self.deploys.pop(run_id, None)
        self.loading.pop(run_id, None)
        self.refused = why
        self.exit(return_code=EXIT_REFUSED)

    def _resume_refused(self, run_id: str, why: str) -> None:
        """A resume refused before its conductor opened the run: the command line's error
        line, and the run as it was."""
        self.driving.discard(run_id)
        self._loading(run_id, "")
        self.notify(error_line(why), severity="error")

    def _created(self, run_id: str) -> bool:
        with EventStore.open(self.store.path, readonly=True) as store:
            return run_id in store.run_ids()

    def _loading(self, run_id: str, what: str) -> None:
        if what:
            self.loading[run_id] = what
        else:
            self.loading.pop(run_id, None)
        if isinstance(self.screen, RunScreen) and self.screen.run_id == run_id:
            self.screen.show_step()

    def _driven(self, run_id: str, outcome: str) -> None:
        self.driving.discard(run_id)
        self._loading(run_id, "")
        if queued(self.store.pending_commands(run_id)) is not None \
                and not self.store.fold(run_id).terminal:
            # a decision taken here while its conductor was returning (a pause): go on
            self.continue_run(run_id)
            return
        words, severity = returned_words(run_id, outcome, self.store.fold(run_id))
        self.notify(words, severity=severity)

    # --- the command palette -------------------------------------------------------------------

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        for command in super().get_system_commands(screen):
            if command.title == "Theme":     # found by "theme" and by "change theme"
                command = SystemCommand("Change theme", "the colours: dark, light, or the "
                                        "terminal's own (ANSI); kept for the next launch",
                                        self.action_change_theme)
            yield command
        commands = getattr(screen, "commands", None)
        if commands is not None:
            yield from commands()
        if not isinstance(screen, RunsScreen):
            yield SystemCommand("Runs", "every run in the store", self.show_runs)
