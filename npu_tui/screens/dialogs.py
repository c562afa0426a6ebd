"""Small modal dialogs: confirm, go to event, an event's fields, resume, fork."""

from __future__ import annotations

import json
from typing import ClassVar

from rich.syntax import Syntax
from rich.table import Table
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from npu_deploy.events import Event

CANCEL: list[BindingType] = [Binding("escape", "cancel", "Cancel", id="dialog.cancel")]


class Confirm(ModalScreen[bool]):
    """A yes/no question; dismisses with True only on the confirming button."""

    BINDINGS: ClassVar[list[BindingType]] = CANCEL

    def __init__(self, question: str, yes: str = "Yes", no: str = "Cancel") -> None:
        super().__init__()
        self.question, self.yes, self.no = question, yes, no

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Static(self.question, classes="question")
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
            self.notify("type an event number", severity="error")
            return
        if not 1 <= version <= self.head:
            self.notify(f"no event {version}: the run has 1-{self.head}", severity="error")
            return
        self.dismiss(version)

    def action_cancel(self) -> None:
        self.dismiss(None)


class EventDetail(ModalScreen[None]):
    """Every field of one event: the envelope, then the payload as JSON."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,enter,q", "close", "Close", id="detail.close")]

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
        with VerticalScroll(classes="dialog wide"):
            yield Static(envelope)
            yield Static(Syntax(json.dumps(e.payload, indent=2, sort_keys=True,
                                           default=str), "json", word_wrap=True,
                                theme="ansi_dark"))

    def action_close(self) -> None:
        self.dismiss(None)


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
            yield Label(f"Resume run {self.run_id} ({self.status})?", classes="question")
            yield Static(f"Last completed phase: {self.last_phase}")
            yield Static("Unfinished step: " + (self.unfinished or "none") +
                         (" — it runs again under its key" if self.unfinished else ""))
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
            yield Label(f"Fork run {self.run_id}: keep events 1..N (N in 1-{self.head})")
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
            self.notify(f"N must be between 1 and {self.head}", severity="error")
            return
        self.dismiss((at, self.query_one("#note", Input).value.strip()))

    def action_cancel(self) -> None:
        self.dismiss(None)
