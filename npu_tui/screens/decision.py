"""The decision dialog: a modal over the live run (which keeps updating beneath it). It shows
the phase, the attempt and the gate, and leaves exactly one inbox command, or none."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar

from rich.style import Style
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, OptionList, Static
from textual.widgets.option_list import Option

from npu_deploy.deploy_request import autopilot_forms, autopilot_refusal, autopilot_understands
from npu_deploy.events import PHASE_NAMES, DeploymentState, Event
from npu_deploy.events.decisions import naming, open_decisions, queued, waiting_on
from npu_deploy.events.describe import (
    SHOWN_CHARS,
    change_lines,
    check_text,
    failing_checks,
    printable,
    settings_text,
)
from npu_deploy.events.state import GateSummary
from npu_deploy.store import StoreError

from ..legend import TONE_CLASSES, tone_styles
from ..matrices import node_holding
from ..timeline import gate_rows
from ..widgets.panels import GateTable, plural
from .dialogs import FULL_TEXT, FullText

if TYPE_CHECKING:
    from ..app import DeployApp

#: A button for each decision (events/decisions.py CHOICES): label, variant, and its key,
#: shown on the button so that every action is one key away.
BUTTONS: dict[str, tuple[str, Any, str]] = {
    "approve": ("Approve", "success", "a"), "redirect": ("Redirect", "primary", "r"),
    "pick": ("Pick", "primary", "enter"), "override": ("Approve anyway…", "error", "o"),
    "pause": ("Pause", "default", "p"), "abort": ("Abort", "error", "x")}
#: Actions the dialog offers by key alone (on its keys line), so that the buttons of the
#: decision itself fit one row of an 80-column terminal
KEY_ONLY = frozenset({"pause", "abort"})
#: What each decision would write, in the words of the notice that refuses it on a read-only
#: store (npu_tui/read_only.py): k is the phase, run the run.
WRITES = {"approve": "approve phase {k} of run {run}", "redirect": "redirect phase {k} of "
          "run {run}", "pick": "pick a direction for phase {k} of run {run}",
          "override": "override the gate of phase {k} of run {run}",
          "pause": "pause run {run}", "abort": "abort run {run}"}

#: A direction's fields the dialog lays out itself; any other field is evidence, shown as
#: "name: value" so that what a debug skill adds to its proposals reaches the person.
LAID_OUT = frozenset({"direction_id", "skill", "score", "title", "rationale", "evidence",
                      "change"})


def evidence_lines(direction: dict[str, Any]) -> list[str]:
    """A direction's other fields in words: a mapping as `name = value` pairs, a list
    joined."""
    out: list[str] = []
    for name, value in direction.items():
        if name in LAID_OUT or value in (None, "", [], {}):
            continue
        if isinstance(value, dict):
            value = settings_text(value)
        elif isinstance(value, list | tuple):
            value = ", ".join(map(str, value))
        out.append(f"{name.replace('_', ' ')}: {value}")
    return out


def shared_change(directions: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """The change every direction's retry makes, when there are two or more and it is the
    same one (a skill matcher gives each direction the retry's one change): said once."""
    changes = [d.get("change") for d in directions]
    if len(changes) > 1 and changes[0] and all(c == changes[0] for c in changes):
        return changes[0]
    return None


def direction_text(i: int, d: dict[str, Any], earlier: Sequence[dict[str, Any]],
                   shared: bool) -> Table:
    """Direction `i` in whole words, each line wrapping under itself after its number: its
    title and skill, what it matched in words (else the proposer's rationale), and what its
    retry changes unless every direction makes that change (`shared`, said above them) or
    an earlier one does (`earlier`: the directions before it). Text, never markup: a
    skill's or an agent's words are data."""
    body = Text.assemble((printable(str(d["title"])), "bold"),
                         printable(f"  ({d['skill']}, score {d['score']:.2f})"))
    why = [f"matched: {w}" for w in d.get("evidence") or ()] or (
        [str(d["rationale"])] if d.get("rationale") else [])
    change = d.get("change")
    same = next((n for n, e in enumerate(earlier, 1) if change and e.get("change") == change),
                None)
    if shared or not change:
        changes = []
    elif same is not None:
        changes = [f"changes: the same as direction {same}"]
    else:
        changes = change_lines(change)
    for line in [*why, *changes, *evidence_lines(d)]:
        body.append(f"\n{printable(line)}")
    grid = Table.grid(padding=(0, 1, 0, 0))
    grid.add_column(no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row(Text(f"{i}."), body)
    return grid


class DecisionDialog(ModalScreen[str | None]):
    """Approve, redirect with an instruction, or pick a debug direction. Cancel writes
    nothing. Dismisses with the id of the inbox command it left, or None."""

    COMPONENT_CLASSES: ClassVar[set[str]] = set(TONE_CLASSES)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="decision.cancel"),
        *(Binding(key, f"choose('{choice}')", BUTTONS[choice][0], show=False)
          for choice in ("approve", "redirect", "override", "pause", "abort")
          for key in (BUTTONS[choice][2],)),
        *(Binding(str(n), f"pick_number({n})", f"Pick {n}", show=False)
          for n in range(1, 10)),
        Binding(FULL_TEXT, "full_reason", "Full reason", show=False,
                id="decision.full_reason")]

    def __init__(self, run_id: str, state: DeploymentState, *, initial: str | None = None
                 ) -> None:
        super().__init__()
        self.run_id, self.state, self.initial = run_id, state, initial
        self.waiting = waiting_on(state)
        self.kind, self.waiting_id = self.waiting.kind, self.waiting.id
        self.open = open_decisions(state)
        self.phase = state.current_phase if state.current_phase is not None else 0
        self.ph = state.phases[self.phase]
        self.closed_by: str | None = None       # set when someone else decided first
        self._gate_more = ""

    @property
    def deploy_app(self) -> DeployApp:
        return self.app    # type: ignore[return-value]

    # --- building -------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        k, ph = self.phase, self.ph
        gate = ph.last_gate
        with Vertical(id="decision"):
            yield Label(f"Phase {k} — {PHASE_NAMES[k]} — attempt {ph.attempts}",
                        id="decision-title")
            yield from self._body(gate)
            yield Static(id="stale")
            yield Static(Text(self.keys_text()), id="decision-keys")
            with Horizontal(id="decision-buttons"):
                for choice in self.choices():
                    if choice in KEY_ONLY:
                        continue
                    label, variant, key = BUTTONS[choice]
                    yield Button(Text(f"{label} [{key}]"), id=choice, variant=variant)
                yield Button(Text("Cancel [esc]"), id="cancel")

    def choices(self) -> tuple[str, ...]:
        """The buttons: the decisions the run takes now."""
        return tuple(c for c in self.open.choices if c in BUTTONS)

    def keys_text(self) -> str:
        """Every action and its one key, on the dialog itself."""
        keys = [f"{BUTTONS[c][2]} {c}" for c in self.choices() if c != "pick"]
        if self.open.pick:
            keys.insert(0, f"1-{min(9, len(self.ph.pending_directions))} pick a direction")
        if self._reason_cut:
            keys.append(f"{FULL_TEXT} the whole reason")
        return "keys: " + " · ".join([*keys, "esc cancel"]) + (
            " (in the instruction: enter sends it, esc leaves it)"
            if self.open.allows("redirect") else "")

    def _body(self, gate: GateSummary | None) -> ComposeResult:
        """What the person reads and types: it scrolls, so the buttons always show."""
        ph = self.ph
        with VerticalScroll(id="decision-body"):
            yield Static(Text(self._why()), id="decision-why")     # an exit reason is data
            if gate is not None:
                rows = gate_rows(ph.gates)
                shown = rows[:12]
                more = f" (and {len(rows) - 12} more)" if len(rows) > 12 else ""
                self._gate_more = more
                yield Static(id="decision-gate-head")      # in the theme's tones: _paint
                yield Static(GateTable(shown, printable(gate.gate), partial(tone_styles, self)),
                             id="decision-gate")
                if failing_checks(gate.checks):
                    yield Static(id="decision-failing")
            if self.open.pick:
                directions = ph.pending_directions
                yield Label("Debug directions (from the debug skills that matched):")
                shared = shared_change(directions)
                if shared is not None:
                    said = change_lines(shared)
                    yield Static(Text("\n".join(
                        ["Whichever direction you pick, its retry changes "
                         f"{printable(said[0].removeprefix('changes: '))}",
                         *map(printable, said[1:])])), id="shared-change")
                yield OptionList(*(Option(direction_text(i, d, directions[:i - 1],
                                                         shared is not None),
                                          id=d["direction_id"])
                                   for i, d in enumerate(directions, 1)), id="directions")
            if self.open.allows("redirect"):
                yield Static(Text(self._understood()), id="instruction-help")
        if self.open.allows("redirect"):
            yield Input(placeholder=self._placeholder(), id="instruction")
            yield Static(id="instruction-answer")       # shown when an answer is refused

    def _placeholder(self) -> str:
        """What the run's agent follows, in the empty instruction field: seen before typing."""
        if self.state.agent == "autopilot":
            return f"r, then type: {autopilot_forms(self.phase)}"
        return f"r, then type an instruction for phase {self.phase}'s next attempt"

    def _understood(self) -> str:
        """What the run's agent does with an instruction, before the person types one."""
        if self.state.agent == "autopilot":
            return autopilot_understands(self.phase)
        agent = f"The {self.state.agent} agent" if self.state.agent else "The run's agent"
        return f"{agent} reads the instruction as written."

    def _why(self) -> str:
        s, ph = self.state, self.ph
        if self.kind == "checkpoint":
            return "The gate passed. Approve to go on, or redirect the phase with an instruction."
        if self.kind == "proposal":
            return ("The gate failed. Pick the debug direction the next attempt follows "
                    f"({ph.attempts - ph.budget_from} of the phase's budget used).")
        if self.kind == "stopped":
            # an agent's words: cut here, in full one key away (FULL_TEXT)
            return (f"The run stopped for a person: {printable(ph.exit_reason)}. Redirect the "
                    "phase with an instruction (a fresh budget), or override the gate.")
        return f"Run {self.run_id} is {s.status}: nothing waits for a decision."

    @property
    def _reason_cut(self) -> bool:
        return self.kind == "stopped" and len(self.ph.exit_reason or "") > SHOWN_CHARS

    def action_full_reason(self) -> None:
        if self.kind == "stopped":
            self.app.push_screen(FullText(f"phase {self.phase}: why the run stopped",
                                          self.ph.exit_reason or ""))

    def _paint(self, _theme: object = None) -> None:
        """What is drawn in the tones, in the theme's colours: on mount and after a theme
        change (the component classes are read when the theme's CSS has been applied)."""
        tones = tone_styles(self)
        gate = self.ph.last_gate
        if gate is not None and self.query("#decision-gate-head"):
            bold = Style(bold=True)
            self.query_one("#decision-gate-head", Static).update(Text.assemble(
                (f"gate {gate.gate}: ", "bold"),
                ("PASS", tones["pass"] + bold) if gate.passed else ("FAIL", tones["fail"] + bold),
                self._gate_more))
        if self.query("#decision-failing") and gate is not None:
            self.query_one("#decision-failing", Static).update(
                self._failing_text(failing_checks(gate.checks), tones))
        if self.closed_by is not None:
            self.query_one("#stale", Static).update(
                Text(self.closed_by, style=tones["human"] + Style(bold=True)))

    @staticmethod
    def _failing_text(failing: list[dict[str, Any]], tones: dict[str, Style]) -> Text:
        """The gate's failing checks, each with the checker's message: a gate's table shows
        the figures, this says in words what failed."""
        text = Text("Failing checks:", style="bold")
        for c in failing:
            text.append(f"\n  {printable(check_text(c))}", style=tones["fail"])
            if c.get("message"):
                text.append(f"\n    {printable(c['message'])}")
        return text

    def on_mount(self) -> None:
        self._paint()
        self.app.theme_changed_signal.subscribe(self, self._paint)
        if self.initial == "redirect" and self.kind == "checkpoint":
            self.query_one("#instruction", Input).focus()
        elif self.kind == "stopped" and self.query("#redirect"):
            # not the instruction: its letters would swallow the dialog's keys (r o p x)
            self.query_one("#redirect", Button).focus()
        elif self.open.pick:
            self.query_one(OptionList).focus()
            self.query_one(OptionList).highlighted = 0
        elif self.initial == "override" and self.query("#override"):
            self.query_one("#override", Button).focus()
        elif self.query("#approve"):
            self.query_one("#approve", Button).focus()

    # --- the live run beneath ---------------------------------------------------------------

    def saw(self, events: list[Event], head: DeploymentState) -> None:
        """The run moved on while the dialog was open: has the decision been taken?"""
        if self.closed_by is not None:
            return
        if waiting_on(head) == self.waiting:
            return
        decided = [e for e in events if e.type == "human.decision"]
        who = (f"{decided[-1].payload['decision']} by {decided[-1].payload['author']}"
               if decided else f"the run is now {head.status}")
        self._close_by(f"Another client decided first: {who}. Nothing was written.")

    def _close_by(self, text: str) -> None:
        self.closed_by = text
        self._paint()
        for b in self.query(Button):
            if b.id != "cancel":
                b.disabled = True
        self.query_one("#cancel", Button).label = "Close"

    # --- deciding ---------------------------------------------------------------------------

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        what = event.button.id
        if what == "cancel":
            self.dismiss(None)
        elif what == "approve":
            self._leave("approve", {"checkpoint_id": self.waiting_id})
        elif what == "redirect":
            self._redirect()
        elif what == "pick":
            self._pick()
        elif what == "override":
            self._override()
        elif what in ("pause", "abort"):
            self._leave_run(what)

    @on(Input.Submitted, "#instruction")
    def _submitted(self) -> None:
        self._redirect()

    @on(OptionList.OptionSelected, "#directions")
    def _selected(self) -> None:
        self._pick()

    def _redirect(self) -> None:
        text = self.query_one("#instruction", Input).value.strip()
        if not text:
            self.notify("Type the instruction first: what the next attempt should do "
                        "differently.", severity="error")
            self.query_one("#instruction", Input).focus()
            return
        if self.state.agent == "autopilot":
            understood = autopilot_refusal(text, self.phase)
            if understood is not None:           # answered here, where it was typed
                self.query_one("#decision").add_class("answered")
                self.query_one("#instruction-answer", Static).update(Text(
                    f"Not sent: {printable(understood)}.", style=tone_styles(self)["fail"]))
                self.query_one("#instruction", Input).focus()
                return
        payload: dict[str, Any] = {"instruction": text}
        if self.kind == "checkpoint":
            payload["checkpoint_id"] = self.waiting_id
        self._leave("redirect", payload)

    def _pick(self) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is None:
            self.notify("Choose a direction first (its number, or the arrows).",
                        severity="error")
            return
        option = options.get_option_at_index(options.highlighted)
        self._leave("pick", {"proposal_id": self.waiting_id, "direction_id": option.id})

    def _read_only(self, kind: str) -> bool:
        """Whether the store is read-only, so that the decision `kind` is refused (in a
        notice over the dialog, which stays open to be read or cancelled)."""
        return self.deploy_app.refuses_writing(WRITES[kind].format(k=self.phase,
                                                                   run=self.run_id))

    def _override(self) -> None:
        from .dialogs import Confirm

        if self._read_only("override"):
            return
        gate = self.ph.last_gate
        failing = sum(1 for r in gate_rows(self.ph.gates) if r.gating and not r.passed)
        name = gate.gate if gate else "?"

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._leave("approve", {"override": True})

        self.app.push_screen(Confirm(
            f"Gate {name} of phase {self.phase} FAILED ({plural(failing, 'gating check')}). "
            "Approving "
            "passes the phase anyway: the log records your override, and the independent "
            "evaluator (phase 7) will fail this run. Override the gate?", "Override"),
            confirmed)

    def _leave(self, kind: str, payload: dict[str, Any]) -> None:
        """Post the command, unless the decision was already taken by another client."""
        if self.closed_by is not None or self._read_only(kind):
            return
        store = self.deploy_app.store
        fresh = store.fold(self.run_id)
        if waiting_on(fresh) != self.waiting:
            self._close_by(f"Another client decided first: the run is now {fresh.status} "
                           f"at v{fresh.version}. Nothing was written.")
            return
        c = queued(store.pending_commands(self.run_id))
        if c is not None:
            self._close_by(f"Another client decided first: {c['kind']} by {c['author']} is "
                           "in the inbox, not yet recorded. Nothing was written.")
            return
        # Name what it answers, so that a stale answer is refused, never applied elsewhere.
        payload = {**{k: v for k, v in payload.items() if v is not None},
                   **naming(self.waiting)}
        try:
            command_id = store.post_command(self.run_id, kind, payload,
                                            author=self.deploy_app.author)
        except StoreError as e:     # refused by the store (another key's run, a full disk)
            self._close_by(f"{kind} refused: {e}")
            return
        done = self._done(kind, payload)
        node = node_holding(store, self.run_id)
        if store.is_locked(self.run_id) or self.run_id in self.deploy_app.driving:
            self.notify(f"{done}.")
        elif node is not None:
            self.notify(f"{done}, once {node}, which runs it, takes the command from this "
                        "store's inbox.")
        elif self.deploy_app.continue_run(self.run_id):
            self.notify(f"{done}; it goes on in this window.")
        else:
            self.notify(f"{done} once it runs again: nothing runs it now. Resume it with r "
                        f"in the runs list, or npu-deploy resume {self.run_id} in a shell.",
                        severity="warning")
        self.dismiss(command_id)

    def action_cancel(self) -> None:
        """esc: out of the instruction first (back to the dialog's keys), then cancel."""
        if isinstance(self.focused, Input):
            target = self.query("#redirect").results(Button)
            button = next(target, None)
            if button is not None:
                button.focus()
                return
        self.dismiss(None)

    def action_choose(self, choice: str) -> None:
        """A key for a button: press it, if the run takes that decision now. Pause and abort
        have keys only (KEY_ONLY)."""
        if choice in KEY_ONLY:
            if choice == "abort" and choice in self.choices():
                self._confirm_abort()
            elif choice in self.choices():
                self._leave_run(choice)
            else:
                self._not_open(choice)
            return
        buttons = self.query(f"#{choice}").results(Button)
        button = next(buttons, None)
        if button is None or button.disabled:
            self._not_open(choice)
            return
        if choice == "redirect" and not self.query_one("#instruction", Input).value.strip():
            self.query_one("#instruction", Input).focus()     # type it, then enter sends it
            return
        button.press()

    def action_pick_number(self, n: int) -> None:
        if not self.open.pick or self.closed_by is not None:
            return
        options = self.query_one(OptionList)
        if n > options.option_count:
            self.notify(f"There are {options.option_count} directions: press 1 to "
                        f"{options.option_count}.", severity="warning")
            return
        options.highlighted = n - 1
        self._pick()

    def _confirm_abort(self) -> None:
        """x: the run ends for good, so one question first (focus on keeping it)."""
        from .dialogs import confirm_abort

        if self._read_only("abort"):
            return

        def confirmed(yes: bool | None) -> None:
            if yes:
                self._leave_run("abort")

        self.app.push_screen(confirm_abort(self.run_id, self.state), confirmed)

    def _leave_run(self, kind: str) -> None:
        """Pause or abort: about the run, not what the dialog shows; refused if not open."""
        if self.closed_by is not None or self._read_only(kind):
            return
        store = self.deploy_app.store
        why = open_decisions(store.fold(self.run_id)).refused.get(kind)
        if why:
            self._close_by(f"{kind} refused: run {self.run_id} {why}. Nothing was written.")
            return
        try:
            command_id = store.post_command(self.run_id, kind, {},
                                            author=self.deploy_app.author)
        except StoreError as e:     # refused by the store (another key's run, a full disk)
            self._close_by(f"{kind} refused: {e}")
            return
        self.notify(f"{self._done(kind, {})}.")
        self.dismiss(command_id)

    def _done(self, kind: str, payload: dict[str, Any]) -> str:
        """What a command sent does to the run, in words, once the run's process reads it."""
        run, k = self.run_id, self.phase
        if kind == "approve" and payload.get("override"):
            return (f"Approved anyway: run {run} leaves phase {k} as passed, and the "
                    "evaluator will fail it")
        return {"approve": f"Approved: run {run} goes on after phase {k}",
                "redirect": f"Sent: run {run} runs phase {k} again with your instruction",
                "pick": f"Picked: run {run} runs phase {k} again following that direction",
                "pause": f"Pausing: run {run} stops when its current step ends",
                "abort": f"Aborting: run {run} ends when its current step ends",
                }.get(kind, f"Sent {kind} to run {run}")

    def _not_open(self, choice: str) -> None:
        why = self.open.refused.get(choice)
        self.notify(f"{BUTTONS[choice][0].rstrip('…')} is not possible here"
                    + (f": run {self.run_id} {why}." if why else "."), severity="warning")
