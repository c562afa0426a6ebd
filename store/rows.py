"""The stored form of an event: the columns read back, a row as an `Event` (its payload
upcast to its type's current schema), and which run ids and opening events a chain may
have. Shared by the reading, the verification, the writer and the transfer of runs."""

from __future__ import annotations

import json
from typing import Any

from npu_deploy.events import EVENT_TYPES, Event, InvalidEvent, upcast
from npu_deploy.events.envelope import RUN_ID_RE, STORED_COLUMNS

EVENT_COLUMNS = ", ".join(STORED_COLUMNS)

#: The events a run's chain may begin with.
RUN_OPENERS = ("run.started", "run.forked")


def event_from_row(row: tuple[Any, ...], payload: Any = None) -> Event:
    """A stored row as an `Event`; `payload` is upcast to its type's current schema."""
    if payload is None:
        payload = json.loads(row[13])
    type_, schema_version = row[4], row[5]
    if schema_version != EVENT_TYPES.get(type_, (None, schema_version))[1]:
        payload = upcast(type_, schema_version, payload)
    return Event._make((*row, payload))


def validate_run_id(run_id: str) -> str:
    if not isinstance(run_id, str) or not RUN_ID_RE.match(run_id):
        raise InvalidEvent(f"run_id: {run_id!r} must be 1-64 letters, digits, '.', '_' or '-'")
    return run_id
