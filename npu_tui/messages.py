"""The messages the TUI's workers and widgets send up."""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from npu_deploy.events import Event


@dataclass
class EventsArrived(Message):
    """One poll of the store found new events of the run (oldest first)."""

    run_id: str
    events: list[Event]


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
