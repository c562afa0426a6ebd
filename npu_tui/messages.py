"""The messages the TUI's workers and widgets send up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from npu_deploy.deploy_request import DeployRequest
from npu_deploy.events import Event
from npu_deploy.store.progress import Progress


@dataclass
class EventsArrived(Message):
    """One poll of the store found new events of the run (oldest first)."""

    run_id: str
    events: list[Event]


@dataclass
class KeyframesWarm(Message):
    """The run's keyframes are all made: a seek folds at most KEYFRAME events from now."""

    run_id: str


@dataclass
class StepRead(Message):
    """The run's step in flight at its newest event, read from the store: its tool, phase
    and call id (None: no step runs), how long it took in earlier runs of the same model
    by (tool, phase), and what the step says it has done (store/progress.py)."""

    run_id: str
    step: tuple[str, int | None, str] | None
    estimates: dict[tuple[str, int | None], float]
    counted: Progress | None


@dataclass
class Seek(Message):
    """Move the replay cursor to event `version` (the scrubber was clicked, say)."""

    version: int


@dataclass
class CursorMoved(Message):
    """The event stream's cursor is on event `version`."""

    version: int


@dataclass
class ShowEvent(Message):
    """Show every field of event `version`."""

    version: int


@dataclass
class RunFinishedDriving(Message):
    """The conductor this process runs returned (finished, paused, waiting, or failed)."""

    run_id: str
    outcome: str


@dataclass
class FieldChecked(Message):
    """One field of the new-deployment form was checked at `value`: its refusal, or None."""

    field: str
    value: str
    message: str | None


@dataclass
class RequestChecked(Message):
    """The new-deployment form's request was checked: the problems by field, or none and
    the driver that deploys it."""

    request: DeployRequest
    problems: dict[str, str]
    driver: Any
