"""The run screen: one screen for watching a run live and for replaying it (live is replay
pinned to the newest event). Everything on it is drawn from the log at the cursor.

The screen holds the cursor, the run's newest state and the timeline, runs the workers
that read the store (new events, keyframes, the step in flight), and takes the keys. Its
widgets draw what it gives them and send up what the person does: the title
(widgets/run_title.py), the phase strip, the banner (widgets/banner.py), the step in
flight (widgets/step_progress.py), the event stream, the tabs (widgets/run_tabs.py) and
the scrubber; the replay's play state is a `Player` (player.py)."""

from __future__ import annotations

import gc
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, ClassVar

from textual import events, on, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import TabbedContent
from textual.worker import Worker, get_current_worker

from npu_deploy.events import DeploymentState
from npu_deploy.events import fold as fold_events
from npu_deploy.events.decisions import open_decisions, refusal
from npu_deploy.store import EventStore, StoreError, progress

from ..legend import TONE_CLASSES
from ..matrices import node_holding
from ..memory import settle
from ..messages import CursorMoved, EventsArrived, KeyframesWarm, Seek, ShowEvent, StepRead
from ..player import Player
from ..read_only import ReadOnlyLine
from ..timeline import RunTimeline, step_estimates, step_in_flight
from ..widgets.banner import Banner
from ..widgets.event_stream import EventPane, EventStream
from ..widgets.footer import KeysFooter
from ..widgets.phase_strip import PhaseStrip
from ..widgets.run_tabs import TAB_BINDINGS, RunTabs, tab_commands
from ..widgets.run_title import ALIVE, RunTitle, fit_title, unique_prefix
from ..widgets.scrubber import Scrubber
from ..widgets.step_progress import StepProgress

if TYPE_CHECKING:
    from ..app import DeployApp

POLL_S = 0.1                 # how often the live worker looks at the store
LIVE_S = 0.1                 # new events reach the stream, strip and title this often
REPAINT_S = 0.25             # heavy panels repaint at most this often while events stream in
FREEZE_S = 1.0               # what the screen made and kept leaves the collector this often
STATUS_S = 1.0               # whether anything writes the run, this often
STEP_S = 0.5                 # the step in flight and its progress bar, this often
#: The palette's decisions about a phase (k): title and help.
DECISION_COMMANDS = {
    "approve": ("Approve phase {k}", "phase {k} passed its gate"),
    "redirect": ("Redirect phase {k}", "retry it with an instruction"),
    "pick": ("Pick a debug direction for phase {k}", "{n} proposed"),
    "override": ("Override the failed gate of phase {k}", "approve although the gate failed"),
}
#: The title's functions are named here too, where they were first (widgets/run_title.py).
__all__ = ["DECISION_COMMANDS", "RunScreen", "fit_title", "unique_prefix"]


class RunScreen(Screen[None]):
    """A run, live or in replay."""

    #: The screen's class by width (app.tcss): narrow stacks the stream over the tabs.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    COMPONENT_CLASSES: ClassVar[set[str]] = set(TONE_CLASSES)
    #: The stream has the focus from the first frame (Textual's default, the first focusable
    #: widget, was the hidden search bar: the stream then took the focus a frame later).
    AUTO_FOCUS = "EventStream"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("d", "decide", "Decide", id="run.decide"),
        Binding("comma", "step(-1)", "Step back", show=False, id="replay.step_back"),
        Binding("full_stop", "step(1)", "Step fwd", show=False, id="replay.step_forward"),
        Binding("left_square_bracket", "phase(-1)", "Prev phase", id="replay.prev_phase"),
        Binding("right_square_bracket", "phase(1)", "Next phase", id="replay.next_phase"),
        Binding("f", "failure(1)", "Next fail", id="replay.next_failure"),
        Binding("F", "failure(-1)", "Prev fail", show=False, id="replay.prev_failure"),
        Binding("n", "next_decision", "Next decision", show=False, id="replay.next_decision"),
        Binding("space", "play", "Play/pause", id="replay.play"),
        Binding("plus", "speed(1)", "Faster", show=False, id="replay.faster"),
        Binding("minus", "speed(-1)", "Slower", show=False, id="replay.slower"),
        Binding("g", "goto", "Go to", id="replay.goto"),
        # priority: the event stream would otherwise take `end` as "scroll to the bottom"
        Binding("end", "follow", "Live", id="run.follow", priority=True),
        Binding("P", "pause_run", "Pause run", show=False, id="run.pause"),
        Binding("r", "resume", "Resume", id="run.resume"),
        Binding("k", "fork", "Fork here", show=False, id="run.fork"),
        Binding("escape", "back", "Runs", id="run.back"),
        *TAB_BINDINGS,
    ]

    def __init__(self, run_id: str, *, live: bool) -> None:
        super().__init__()
        self.run_id = run_id
        self.follow = live
        self.player = Player()
        self._dirty = self._live_dirty = False
        self._grown = False          # objects were made since the last _freeze
        self.cursor = 0
        self._opened = time.monotonic()
        self._estimates: dict[tuple[str, int | None], float] | None = None
        self._step_reader: Worker[None] | None = None
        self._resumed = False

    @property
    def playing(self) -> bool:
        return self.player.playing

    @property
    def speed(self) -> int:
        """The replay's speed, an index into SPEEDS."""
        return self.player.speed

    @property
    def deploy_app(self) -> DeployApp:
        return self.app    # type: ignore[return-value]

    @property
    def store(self) -> EventStore:
        return self.deploy_app.store

    # --- building -----------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        # The width's class before anything is styled: Textual sets it at the first resize,
        # after the first frame, and then styles and lays out the whole screen again.
        width = self.app.size.width
        self.add_class(next(c for w, c in reversed(self.HORIZONTAL_BREAKPOINTS) if width >= w),
                       update=False)
        self.timeline = RunTimeline(self.store, self.run_id)
        self.head_state = self.timeline.state_at(self.timeline.head)
        self.cursor = self.timeline.head if self.follow else min(1, self.timeline.head)
        store, run_id = self.store, self.run_id
        self.short_id = unique_prefix(run_id, store.run_ids())
        yield RunTitle(run_id, self.short_id, self._live_status, id="run-title")
        yield ReadOnlyLine(id="read-only")
        yield PhaseStrip(id="phases")
        yield Banner(id="banner")
        yield StepProgress(opened=self._opened, id="step-progress")
        with Horizontal(id="run-body"):
            yield EventPane(self.timeline, opened_at=self.cursor, id="stream-pane")
            yield RunTabs(self.timeline, initial="tab-gates", id="tabs")
        with Vertical(id="replay-bar"):
            yield Scrubber(self.timeline, id="scrubber")
        yield KeysFooter()

    def on_mount(self) -> None:
        stream = self.query_one(EventStream)
        stream.set_cursor(self.cursor)
        stream.focus()
        self.query_one(ReadOnlyLine).show(self.deploy_app.read_only)
        self.update_all()
        # a theme change: every panel drawn again in its colours (the widgets drop what they
        # kept laid out in their notify_style_update; the signal comes after the new CSS)
        self.app.theme_changed_signal.subscribe(self, lambda _theme: self.update_all())
        self.set_interval(LIVE_S, self._show_live)
        self.set_interval(REPAINT_S, self._flush)
        self.set_interval(FREEZE_S, self._freeze_grown)
        self.set_interval(STEP_S, self.show_step)
        self.set_interval(STATUS_S, self._show_status)
        self._show_status()
        self.show_step()
        self._poll()
        self._warm()
        # Textual's own objects are many and long-lived: a full collection of them stalls
        # the UI loop for ~60 ms (benchmarks/tui_bench.py). Move them out of the collector.
        self.call_after_refresh(self._freeze)

    def _freeze(self) -> None:
        """Collect, then move the survivors out of the collector (`gc.freeze`). Done after
        mount, after the warm-up and each second in which seeks or events made objects (lines
        and parts kept for the panels, keyframes, Textual's strips): full collections then
        walk one second's objects, not everything kept, and the frame after a seek stays
        short. A frozen object is still freed when its last reference goes; only cycles wait
        for the screen to close."""
        self._grown = False
        if self.is_attached:
            gc.collect()
            gc.freeze()

    def _freeze_grown(self) -> None:
        if self._grown:
            self._freeze()

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        # The first resume follows the compose, which styled every widget: Textual would
        # style the whole screen again (20-35 ms before the first frame; tui_bench --latency)
        if not self._resumed:
            self._resumed = True
            event.refresh_styles = False

    def on_unmount(self) -> None:
        gc.unfreeze()         # what this screen kept alive can be collected again, and
        self.app.call_after_refresh(settle, self.app)   # the rest frozen again (memory.py)

    def _live_status(self, folded: str) -> str:
        """The run's status as its writer's lock says; "starting" while this window's own
        driver loads it or starts its conductor (no lock taken yet: not a crash); running
        while a node works it for its matrix (its lock is the node's, matrices.py)."""
        status = self.store.live_status(self.run_id, folded)
        app = self.deploy_app
        if status == "crashed" and (self.run_id in app.driving or self.run_id in app.loading):
            return "starting"
        if status == "crashed" and node_holding(self.store, self.run_id) is not None:
            return "running"
        return status

    @property
    def status(self) -> str:
        """running, starting, crashed, paused, needs_human, finished, aborted (probed at
        most once a second, widgets/run_title.py)."""
        return self.query_one(RunTitle).run_status(self.head_state)

    @property
    def alive(self) -> bool:
        """Something writes the run: a conductor, or this window's driver starting one."""
        return self.status in ALIVE

    def _show_status(self) -> None:
        """What depends on whether anything writes the run: a step with no result is cut
        short, not running; no clock ticks; the banner says how to go on."""
        stopped = not self.alive
        if stopped != self.query_one(EventStream).stopped:
            self.query_one(EventStream).set_stopped(stopped)
            self.refresh_bindings()          # r (resume) shows in the footer, or not
        self._show_banner()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """r (resume) only while nothing writes the run and it has not ended."""
        if action == "resume":
            return self.status in ("crashed", "paused")
        return True

    # --- workers ------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="poll")
    def _poll(self) -> None:
        """Tail the store from its own connection; one message per poll that found events."""
        worker = get_current_worker()
        store = EventStore.open(self.store.path, readonly=True)
        try:
            # start after what the screen has already read (nothing, for a run not yet begun)
            seen = store.event_at(self.run_id, self.timeline.head)
            cursor = seen.seq if seen is not None and seen.seq is not None else 0
            while not worker.is_cancelled:
                events = store.tail(self.run_id, cursor)
                if events:
                    cursor = events[-1].seq or cursor
                    self.post_message(EventsArrived(self.run_id, events))
                else:
                    time.sleep(POLL_S)
        finally:
            store.close()

    @work(thread=True, exclusive=True, group="warm")
    def _warm(self) -> None:
        """Keyframes for the whole run, so that any seek folds at most KEYFRAME events."""
        worker = get_current_worker()
        store = EventStore.open(self.store.path, readonly=True)
        try:
            self.timeline.warm(store, cancelled=lambda: worker.is_cancelled)
        finally:
            store.close()
        if not worker.is_cancelled:
            self.post_message(KeyframesWarm(self.run_id))

    def on_keyframes_warm(self, _message: KeyframesWarm) -> None:
        self._freeze()

    @work(thread=True, group="step")
    def _read_step(self) -> None:
        """The step in flight at the newest event and what it says it has done; how long
        steps took in earlier runs of the model, read once. One message. One read at a
        time: `show_step` starts none while one runs."""
        worker = get_current_worker()
        estimates = self._estimates
        store = EventStore.open(self.store.path, readonly=True)
        try:
            step = step_in_flight(store, self.run_id)
            if step is not None and estimates is None:
                estimates = step_estimates(store, self.run_id)
            counted = progress.read(store.progress_path(self.run_id)) if step else None
        finally:
            store.close()
        if not worker.is_cancelled:
            self.post_message(StepRead(self.run_id, step, estimates or {}, counted))

    # --- live events ----------------------------------------------------------------------

    def on_events_arrived(self, message: EventsArrived) -> None:
        events = [e for e in message.events if e.run_version > self.head_state.version]
        if message.run_id != self.run_id or not events:
            return
        # Only fold and index here: at 1,000 events/s the drawing waits for the timers
        # (`_show_live` ten times a second, the tabs four times), not for every poll.
        self.timeline.extend(events)
        if events[0].run_version == self.head_state.version + 1:
            self.head_state = fold_events(events, self.head_state)
        else:
            self.head_state = self.timeline.state_at(events[-1].run_version)
        self._live_dirty = self._dirty = self._grown = True
        from .decision import DecisionDialog

        if isinstance(self.app.screen, DecisionDialog):
            self.app.screen.saw(events, self.head_state)

    def _show_live(self) -> None:
        """What new events change at once: the stream's length, and when following, the
        cursor, strip, title and scrubber; the banner always. A cursor that moves makes the
        tabs stale: `_flush` draws them at it."""
        if not self._live_dirty:
            return
        self._live_dirty = False
        stream = self.query_one(EventStream)
        stream.sync_head()
        if self.follow:
            if self.cursor != self.timeline.head:
                self.cursor, self._dirty = self.timeline.head, True
            stream.set_cursor(self.cursor)
            self.query_one(PhaseStrip).show(self.head_state)
            self._show_title(self.head_state)
        self.query_one(Scrubber).show(self.cursor)
        self._show_banner()

    def show_step(self) -> None:
        """What loads, or the step in flight at the newest event, with what it says it has
        done and how long it took in earlier runs of the same model (a live run only: a
        replay shows the past). The step is read by a worker (`_read_step`)."""
        widget = self.query_one(StepProgress)
        loading = self.deploy_app.loading.get(self.run_id)
        if loading:
            widget.show_loading(loading)
        elif self.follow and not self.head_state.terminal and self.alive:
            if self._step_reader is None or self._step_reader.is_finished:
                self._step_reader = self._read_step()
        else:
            widget.show(None)

    @on(StepRead)
    def _step_read(self, message: StepRead) -> None:
        if message.run_id != self.run_id or self.deploy_app.loading.get(self.run_id):
            return                        # loading is drawn at once by show_step
        if message.step is not None and self._estimates is None:
            self._estimates = message.estimates
        following = self.follow and not self.head_state.terminal and self.alive
        self.query_one(StepProgress).step(message.step if following else None,
                                          message.estimates, message.counted)

    def _flush(self) -> None:
        if self.player.playing:
            self._advance_play()
        self._show_live()             # when following, the tabs are drawn at the newest event
        if self._dirty:
            self._dirty = False
            self.update_all()

    # --- the cursor -------------------------------------------------------------------------

    def seek(self, version: int, *, follow: bool = False) -> None:
        """Move the cursor to event `version` and bring every panel to that point."""
        head = self.timeline.head
        self.cursor = max(1 if head else 0, min(version, head))
        self.follow = follow
        self.timeline.seeking()
        self.query_one(EventStream).set_cursor(self.cursor)
        self.update_all()

    @on(CursorMoved)
    def _cursor_moved(self, message: CursorMoved) -> None:
        self.cursor = message.version
        self.follow = False
        self.timeline.seeking()
        self.update_all()

    @on(Seek)
    def _seek(self, message: Seek) -> None:
        self.seek(message.version)

    def state_at_cursor(self) -> DeploymentState:
        if self.cursor >= self.head_state.version:
            return self.head_state
        return self.timeline.state_at(self.cursor)

    # --- drawing ---------------------------------------------------------------------------

    def update_all(self) -> None:
        self._grown = True
        state = self.state_at_cursor()
        self.query_one(PhaseStrip).show(state)
        self.query_one(Scrubber).show(self.cursor)
        self._show_title(state)
        self._show_banner()
        self.query_one(RunTabs).show(state, self.cursor)

    def _show_title(self, state: DeploymentState) -> None:
        self.query_one(RunTitle).show(state, self.head_state, self.cursor, self.timeline.head,
                                      self.player.mode(self.follow))

    def on_resize(self) -> None:
        self._show_title(self.state_at_cursor())

    def _show_banner(self) -> None:
        self.query_one(Banner).show(self.head_state, self.status, self.short_id,
                                    at_newest=self.cursor >= self.timeline.head,
                                    here=self.deploy_app.can_drive,
                                    writable=self.deploy_app.read_only is None)

    # --- replay actions ----------------------------------------------------------------------

    def action_step(self, delta: int) -> None:
        self.seek(self.cursor + delta)

    def _jump(self, kind: str, direction: int, none: str,
              severity: SeverityLevel = "information") -> bool:
        """Seek to the next (or previous) mark of `kind`; say so when there is none."""
        m = self.timeline.next_mark(self.cursor, (kind,), forward=direction > 0)
        if m is None:
            self.notify(f"No {none} {'after' if direction > 0 else 'before'} this event.",
                        severity=severity)
            return False
        self.seek(m.version)
        return True

    def action_phase(self, direction: int) -> None:
        self._jump("phase", direction, "phase starts", "warning")

    def action_failure(self, direction: int) -> None:
        if self._jump("gate_fail", direction, "gate failure"):
            self.query_one(TabbedContent).active = "tab-gates"

    def action_next_decision(self) -> None:
        self._jump("decision", 1, "decision")

    def action_play(self) -> None:
        player = self.player
        player.playing = not player.playing
        if player.playing:
            if self.cursor >= self.timeline.head:
                self.seek(1)
            player.start(self.cursor)
            self.follow = False
        self.update_all()

    def action_speed(self, step: int) -> None:
        self.player.faster(step, self.cursor)
        self.notify(f"Replay at {self.player.rate} events a second.", timeout=2)
        self._show_title(self.state_at_cursor())

    def _advance_play(self) -> None:
        target = self.player.due(self.timeline.head)
        if target != self.cursor:
            self.seek(target)

    def action_goto(self) -> None:
        from .dialogs import GotoDialog

        def go(version: int | None) -> None:
            if version is not None:
                self.seek(version)

        self.app.push_screen(GotoDialog(self.timeline.head), go)

    def action_follow(self) -> None:
        self.player.playing = False
        self.seek(self.timeline.head, follow=True)

    def action_fork(self) -> None:
        """A new run that keeps this run's events up to the cursor."""
        from .dialogs import ForkDialog

        driver = self.deploy_app.driver
        if self.deploy_app.refuses_writing(f"fork run {self.run_id}"):
            return
        if driver is None:
            self.notify("This window cannot fork: in a shell, "
                        f"npu-deploy fork {self.run_id} --at {self.cursor}", severity="warning")
            return

        def go(answer: tuple[int, str] | None) -> None:
            if answer is None:
                return
            try:
                new = driver.fork(self.run_id, answer[0], answer[1] or None)
            except ValueError as e:
                self.notify(str(e), severity="error")
                return
            self.notify(f"Forked at event {answer[0]} as run {new}. To run it: esc, "
                        "then r on it in the runs list.")

        self.app.push_screen(ForkDialog(self.run_id, self.timeline.head, self.cursor), go)

    def action_back(self) -> None:
        self.deploy_app.show_runs()

    def action_show_tab(self, pane: str) -> None:
        self.query_one(RunTabs).active = pane

    @on(ShowEvent)
    def _show_event(self, message: ShowEvent) -> None:
        from .dialogs import EventDetail

        event = self.timeline.event(message.version)
        if event is not None:
            self.app.push_screen(EventDetail(event))

    # --- decisions ----------------------------------------------------------------------

    def action_decide(self, initial: str | None = None) -> None:
        from .decision import DecisionDialog

        state = self.store.fold(self.run_id)
        if not open_decisions(state).decides_a_phase:
            self.notify(f"Nothing to decide: run {self.run_id} is "
                        f"{self.store.live_status(self.run_id, state.status)}.",
                        severity="warning")
            return
        self.app.push_screen(DecisionDialog(self.run_id, state, initial=initial))

    def action_resume(self) -> None:
        self.deploy_app.ask_resume(self.run_id, self.status)

    def action_pause_run(self) -> None:
        state = self.store.fold(self.run_id)
        why = refusal(state, {"decision": "pause"}, state.current_phase)
        if why is not None:
            self.notify(f"Nothing to pause: run {self.run_id} {why}.", severity="warning")
            return
        if self.deploy_app.refuses_writing(f"pause run {self.run_id}"):
            return
        if self._post("pause"):
            self.notify("Pausing: the run stops when its current step ends.")

    def _post(self, kind: str) -> bool:
        """Leave a pause or abort; a refusal by the store (another key's run, a full disk)
        is shown, not raised out of the app."""
        try:
            self.store.post_command(self.run_id, kind, author=self.deploy_app.author)
        except StoreError as e:
            self.notify(f"{kind} refused: {e}", severity="error")
            return False
        return True

    def action_abort_run(self) -> None:
        from .dialogs import confirm_abort

        if self.deploy_app.refuses_writing(f"abort run {self.run_id}"):
            return

        def abort(yes: bool | None) -> None:
            if yes and self._post("abort"):
                self.notify("Aborting: the run ends when its current step ends.")

        self.app.push_screen(confirm_abort(self.run_id, self.head_state), abort)

    def decision_commands(self) -> Iterable[SystemCommand]:
        """A command for each decision the run takes now (events/decisions.py), and only
        those."""
        s = self.head_state
        k = s.current_phase
        proposed = len(s.phases[k].pending_directions) if k is not None else 0
        for choice in open_decisions(s).choices:
            if choice == "pause":
                yield SystemCommand("Pause the run", "after its current step",
                                    self.action_pause_run)
            elif choice == "abort":
                yield SystemCommand("Abort the run", "ends it as ABORTED", self.action_abort_run)
            else:
                title, why = DECISION_COMMANDS[choice]
                if choice == "redirect" and s.status == "needs_human":
                    why = "it stopped for a person"
                yield SystemCommand(title.format(k=k), why.format(k=k, n=proposed),
                                    lambda choice=choice: self.action_decide(choice))

    def commands(self) -> Iterable[SystemCommand]:
        """The palette's commands for this run, as they apply right now."""
        yield from self.decision_commands()
        yield SystemCommand("Go to event…", "by its number", self.action_goto)
        yield SystemCommand(f"Fork the run at v{self.cursor}", "a new run from this prefix",
                            self.action_fork)
        yield SystemCommand("Next gate failure", "replay", lambda: self.action_failure(1))
        yield SystemCommand("Previous gate failure", "replay", lambda: self.action_failure(-1))
        yield SystemCommand("Next decision", "replay", self.action_next_decision)
        yield SystemCommand("Follow the newest event", "live", self.action_follow)
        yield SystemCommand("Play / pause the replay", "", self.action_play)
        for pane, title, about in tab_commands():
            yield SystemCommand(title, about, lambda pane=pane: self.action_show_tab(pane))
