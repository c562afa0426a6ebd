"""The new-deployment form (`n` in the run browser): the model, the backend, the agent, the
prompt length and auto-approve. Every field is checked by deploy_request.py, the checks
`npu-deploy deploy` makes, and a refusal is shown under its field; only a request with none
becomes a run, which the run browser starts in this process."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.screen import ModalScreen
from textual.validation import ValidationResult, Validator
from textual.widgets import Button, Input, Label, Select, Static, Switch

from npu_deploy.deploy_request import (
    AGENTS,
    AIR_OBJECTS_ENV,
    BACKENDS,
    BUNDLED,
    DEFAULT_SEQ_LEN,
    TINY_MODELS,
    DeployRequest,
    Refused,
    check_seq_len,
    claude_config,
    npu_config,
)
from npu_deploy.events.describe import printable

from ..messages import FieldChecked, RequestChecked
from ..widgets.footer import KeysFooter
from .dialogs import CANCEL

if TYPE_CHECKING:
    from ..app import Driver

#: The fields a refusal can name (deploy_request.Problem.field), top to bottom.
FIELDS = ("model", "backend", "agent", "seq_len")
#: Where the run's times come from on each backend, as the Performance tab labels them.
BACKEND_LABELS = {"emulator": "emulator, MODELED", "xrt": "xrt, MEASURED on NPU"}


class Checked(Validator):
    """One of deploy_request.py's checks as a Textual validator: its refusal is the message."""

    def __init__(self, check: object) -> None:
        super().__init__()
        self.check = check

    def validate(self, value: str) -> ValidationResult:
        try:
            self.check(value)    # type: ignore[operator]
        except Refused as e:
            return self.failure(str(e))
        return self.success()


class NewDeployment(ModalScreen["Driver | None"]):
    """Dismisses with a driver of the checked request (`Driver.deploying`), or None."""

    #: ctrl+s deploys from any field (a Select or the Switch takes enter for itself; in a
    #: text field enter deploys too); the form's footer shows only the form's keys.
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "submit", "Deploy", priority=True, id="form.deploy"), *CANCEL]

    def __init__(self, driver: Driver) -> None:
        super().__init__()
        self.driver = driver
        self.checking: DeployRequest | None = None

    def compose(self) -> ComposeResult:
        with VerticalScroll(classes="dialog", id="new-deployment"):
            yield Label(Text("New deployment", style="bold"), classes="question")
            with Horizontal(classes="field"):
                yield Label("model", classes="field-name")
                yield Select([(f"bundled {BUNDLED}", "bundled"), ("tiny random", "tiny"),
                              ("local path", "path")], value="tiny", allow_blank=False,
                             id="model-kind")
                yield Select([(name, name) for name in TINY_MODELS], value="tiny-llama",
                             allow_blank=False, id="tiny")
                yield Input(placeholder="a Hugging Face directory or a .gguf file",
                            id="path")
            yield Static(id="model-problem", classes="problem")
            with Horizontal(classes="field"):
                yield Label("backend", classes="field-name")
                yield Select([(BACKEND_LABELS.get(b, b), b) for b in BACKENDS],
                             value="emulator", allow_blank=False, id="backend")
                yield Label("agent", classes="field-name")
                yield Select([(a, a) for a in AGENTS], value="autopilot", allow_blank=False,
                             id="agent")
            yield Static(id="backend-problem", classes="problem")
            yield Static(id="agent-problem", classes="problem")
            with Horizontal(classes="field"):
                yield Label("seq-len", classes="field-name")
                yield Input(str(DEFAULT_SEQ_LEN), validators=[Checked(check_seq_len)],
                            id="seq-len")
                yield Label("auto-approve", classes="field-name long")
                yield Switch(False, id="auto-approve")
            yield Static(id="seq_len-problem", classes="problem")
            yield Static(id="new-status")       # what the check is doing
            with Horizontal(classes="buttons"):
                yield Button("Deploy (ctrl+s)", id="yes", variant="primary")
                yield Button("Cancel (esc)", id="no")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#path", Input).display = False
        self.show_status("")
        for name in FIELDS:
            self.show_problem(name, None)

    # --- the request -------------------------------------------------------------------------

    def model_spec(self) -> str:
        kind = self.query_one("#model-kind", Select).value
        if kind == "bundled":
            return BUNDLED
        if kind == "tiny":
            return str(self.query_one("#tiny", Select).value)
        return self.query_one("#path", Input).value.strip()

    def request(self) -> DeployRequest | None:
        """The request the form holds, or None while the prompt length is refused (no
        other check can run without it)."""
        try:
            seq_len = check_seq_len(self.query_one("#seq-len", Input).value)
        except Refused as e:
            self.show_problem("seq_len", str(e))
            return None
        return DeployRequest(
            self.model_spec(), backend=str(self.query_one("#backend", Select).value),
            agent=str(self.query_one("#agent", Select).value), seq_len=seq_len,
            auto_approve=self.query_one("#auto-approve", Switch).value,
            air_objects=os.environ.get(AIR_OBJECTS_ENV))

    def show_status(self, text: str) -> None:
        status = self.query_one("#new-status", Static)
        status.update(Text(printable(text), style="italic"))
        status.display = bool(text)

    def show_problem(self, name: str, message: str | None) -> None:
        box = self.query_one(f"#{name}-problem", Static)
        box.update(Text(printable(message or "")))      # a path someone typed is data
        box.display = bool(message)

    # --- checks as the fields change ----------------------------------------------------------

    @on(Select.Changed, "#model-kind")
    def _model_kind(self, event: Select.Changed) -> None:
        self.query_one("#tiny", Select).display = event.value == "tiny"
        self.query_one("#path", Input).display = event.value == "path"
        self.show_problem("model", None)

    @on(Select.Changed, "#tiny")
    @on(Input.Changed, "#path")
    def _model_changed(self) -> None:
        self.show_problem("model", None)

    @on(Select.Changed, "#backend")
    @on(Select.Changed, "#agent")
    def _choice_changed(self, event: Select.Changed) -> None:
        field = str(event.select.id)
        self.show_problem(field, None)
        self._check_field(field, str(event.value))

    @work(thread=True, group="field-check")
    def _check_field(self, field: str, value: str) -> None:
        """The backend's or the agent's own check (importing the agent takes a second)."""
        try:
            if field == "agent":
                claude_config(value, None, "")
            else:
                npu_config(value, os.environ.get(AIR_OBJECTS_ENV), None)
            message = None
        except Refused as e:
            message = str(e)
        self.post_message(FieldChecked(field, value, message))

    @on(FieldChecked)
    def _field_checked(self, event: FieldChecked) -> None:
        if self.query_one(f"#{event.field}", Select).value == event.value:   # not stale
            self.show_problem(event.field, event.message)

    @on(Input.Changed, "#seq-len")
    def _seq_len_changed(self, event: Input.Changed) -> None:
        result = event.validation_result
        self.show_problem("seq_len", None if result is None or result.is_valid
                          else result.failure_descriptions[0])

    # --- submit ---------------------------------------------------------------------------

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "yes":
            self.submit()
        else:
            self.dismiss(None)

    @on(Input.Submitted)
    def submit(self) -> None:
        if self.checking is not None:
            return
        request = self.request()
        if request is None:
            return
        self.checking = request
        self.query_one("#yes", Button).disabled = True
        self.show_status(f"checking {request.model}: its config and its weights' headers "
                         "(the first time, it is built or de-quantized into the cache)")
        self._check_request(request)

    @work(thread=True, exclusive=True, group="request-check")
    def _check_request(self, request: DeployRequest) -> None:
        try:
            driver = self.driver.deploying(request)
        except Refused as e:
            self.post_message(RequestChecked(request, e.by_field(), None))
            return
        except Exception as e:  # noqa: BLE001 - shown in the form, nothing was stored
            self.post_message(RequestChecked(request, {"model": f"{type(e).__name__}: {e}"},
                                             None))
            return
        self.post_message(RequestChecked(request, {}, driver))

    @on(RequestChecked)
    def _request_checked(self, event: RequestChecked) -> None:
        self.checking = None
        self.query_one("#yes", Button).disabled = False
        self.show_status("")
        if event.request != self.request():
            return                          # the form changed meanwhile: check it again
        for name in FIELDS:
            self.show_problem(name, event.problems.get(name))
        others = [m for name, m in event.problems.items() if name not in FIELDS]
        if others:
            self.show_status(others[0])
        if event.driver is not None and not event.problems:
            self.dismiss(event.driver)

    def action_submit(self) -> None:
        self.submit()

    def action_cancel(self) -> None:
        self.dismiss(None)
