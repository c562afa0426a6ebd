"""Small modal dialogs: confirm, go to event, an event's fields, a long text in full, resume,
fork. What they quote from a run (a run id, a step, a payload) is data: `Text`, never
markup, through events/describe.py `printable`."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pygments.token import Token, _TokenType
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.highlight import HighlightTheme, highlight
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from npu_deploy.events import PHASE_NAMES, DeploymentState, Event
from npu_deploy.events.describe import SHOWN_CHARS, cut, printable

CANCEL: list[BindingType] = [Binding("escape", "cancel", "Cancel", id="dialog.cancel")]
#: The key that opens what a dialog cut at SHOWN_CHARS in full (ctrl: the decision dialog's
#: instruction field takes the letters).
FULL_TEXT = "ctrl+t"


class Confirm(ModalScreen[bool]):
    """A yes/no question; dismisses with True only on the confirming button."""

    BINDINGS: ClassVar[list[BindingType]] = CANCEL

    def __init__(self, question: str, yes: str = "Yes", no: str = "Cancel") -> None:
        super().__init__()
        self.question, self.yes, self.no = question, yes, no

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(Text(printable(self.question)), classes="question")
            with Horizontal(classes="buttons"):
                yield Button(self.yes, id="yes", variant="error")
                yield Button(self.no, id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_cancel(self) -> None:
        self.dismiss(False)


def confirm_abort(run_id: str, state: DeploymentState) -> Confirm:
    """The one question before an abort: what it ends and that nothing brings it back; the
    focus starts on keeping the run."""
    where = ""
    if state.current_phase is not None:
        k = state.current_phase
        where = f" at phase {k} ({PHASE_NAMES[k]}, attempt {state.phases[k].attempts})"
    return Confirm(f"Abort run {run_id}{where}? It ends as ABORTED: the phase stops where it "
                   "is and the run cannot be resumed (a fork can start again from any "
                   "event). Nothing recorded so far is lost.", "Abort the run", "Keep it")


class GotoDialog(ModalScreen[int | None]):
    BINDINGS: ClassVar[list[BindingType]] = CANCEL

    def __init__(self, head: int) -> None:
        super().__init__()
        self.head = head

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Go to event (1-{self.head}):")
            yield Input(type="integer", id="version")

    @on(Input.Submitted)
    def _go(self, event: Input.Submitted) -> None:
        try:
            version = int(event.value)
        except ValueError:
            self.notify("Type an event number.", severity="error")
            return
        if not 1 <= version <= self.head:
            self.notify(f"No event {version}: this run has events 1-{self.head}.",
                        severity="error")
            return
        self.dismiss(version)

    def action_cancel(self) -> None:
        self.dismiss(None)


def cut_strings(value: Any, limit: int = SHOWN_CHARS) -> tuple[Any, bool]:
    """`value` (a payload) with every string longer than `limit` cut to it, and whether any
    was: what a dialog shows of a payload that holds 100 KB of someone's text."""
    if isinstance(value, str):
        return cut(value, limit), len(value) > limit
    if isinstance(value, dict):
        pairs = [(k, cut_strings(v, limit)) for k, v in value.items()]
        return {k: v for k, (v, _) in pairs}, any(c for _, (_, c) in pairs)
    if isinstance(value, list | tuple):
        items = [cut_strings(v, limit) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    return value, False


class FullText(ModalScreen[None]):
    """A text in full, scrolling: what another dialog showed cut at SHOWN_CHARS (an exit
    reason, an event's payload). Its control characters are shown, never sent."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "close", "Close", id="full.close")]

    def __init__(self, title: str, text: str) -> None:
        super().__init__()
        self.title_text, self.text = title, text

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog wide", id="full-text"):
            yield Static(Text(printable(self.title_text), style="bold"))
            yield Static(Text(printable(self.text, None)), id="full-text-body")

    def action_close(self) -> None:
        self.dismiss(None)


class PayloadColours(HighlightTheme):
    """Textual's highlighting, with the JSON's punctuation in the theme's text colour (not
    the plain black or white that contrasts with the background)."""

    STYLES: dict[_TokenType, str] = {
        **HighlightTheme.STYLES, Token.Punctuation: "$foreground", Token.Text: "$foreground"}


class EventDetail(ModalScreen[None]):
    """Every field of one event: the envelope, then the payload as JSON, its long strings
    cut (FULL_TEXT opens the payload in full)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,q", "close", "Close", id="detail.close"),
        Binding(FULL_TEXT, "full_text", "Full text", id="detail.full_text")]

    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event

    def compose(self) -> ComposeResult:
        e = self.event
        envelope = Table.grid(padding=(0, 2))
        for name in ("run_version", "seq", "type", "schema_version", "phase", "attempt",
                     "actor", "ts", "event_id", "causation_id", "correlation_id",
                     "idempotency_key", "prev_hash", "hash"):
            value = getattr(e, name)
            if value is not None:
                envelope.add_row(name, str(value))
        payload, self.cut = cut_strings(e.payload)
        with VerticalScroll(classes="dialog wide"):
            yield Static(envelope)
            # JSON escapes every control character: what a payload holds is shown, not sent;
            # Textual's highlighter colours it with the theme's variables ($text-success ...)
            yield Static(highlight(json.dumps(payload, indent=2, sort_keys=True, default=str),
                                   language="json", theme=PayloadColours), id="payload")
            if self.cut:
                yield Static(Text(f"long text is cut at {SHOWN_CHARS:,} characters: "
                                  f"{FULL_TEXT} shows the payload in full", style="dim"),
                             id="cut-note")

    def action_close(self) -> None:
        self.dismiss(None)

    def action_full_text(self) -> None:
        e = self.event
        self.app.push_screen(FullText(f"event {e.run_version} ({e.type}): the payload",
                                      json.dumps(e.payload, indent=2, sort_keys=True,
                                                 default=str)))


class ResumeConfirm(ModalScreen[bool]):
    """Resume a run in this process: what it will go on from."""

    BINDINGS: ClassVar[list[BindingType]] = CANCEL

    def __init__(self, run_id: str, last_phase: str, unfinished: str | None, status: str
                 ) -> None:
        super().__init__()
        self.run_id, self.last_phase, self.unfinished, self.status = (
            run_id, last_phase, unfinished, status)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(printable(f"Resume run {self.run_id} ({self.status})?")),
                        classes="question")
            yield Static(Text(printable(f"Last completed phase: {self.last_phase}")))
            # a step is named with its call id, "compute [p0.a2.s3]": data, not a style
            yield Static(Text(printable("Unfinished step: " + (self.unfinished or "none") + (
                " — it runs again under its key" if self.unfinished else ""))))
            with Horizontal(classes="buttons"):
                yield Button("Resume", id="yes", variant="primary")
                yield Button("Cancel", id="no")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")

    def action_cancel(self) -> None:
        self.dismiss(False)


class ForkDialog(ModalScreen[tuple[int, str] | None]):
    """Fork a run at an event: the new run keeps events 1..N and goes on from there."""

    BINDINGS: ClassVar[list[BindingType]] = CANCEL

    def __init__(self, run_id: str, head: int, at: int) -> None:
        super().__init__()
        self.run_id, self.head, self.at = run_id, head, at

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(printable(f"Fork run {self.run_id}: keep events 1..N "
                                       f"(N in 1-{self.head})")))
            yield Input(str(self.at), type="integer", id="at")
            yield Input(placeholder="why (recorded in the fork's first event)", id="note")
            with Horizontal(classes="buttons"):
                yield Button("Fork", id="yes", variant="primary")
                yield Button("Cancel", id="no")

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id != "yes":
            self.dismiss(None)
            return
        self._submit()

    @on(Input.Submitted)
    def _submit(self) -> None:
        try:
            at = int(self.query_one("#at", Input).value)
        except ValueError:
            at = 0
        if not 1 <= at <= self.head:
            self.notify(f"Fork at an event from 1 to {self.head}.", severity="error")
            return
        self.dismiss((at, self.query_one("#note", Input).value.strip()))

    def action_cancel(self) -> None:
        self.dismiss(None)
