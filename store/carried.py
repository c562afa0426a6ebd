"""The inbox commands an export carries (format 2): the ones its persons' decisions recorded.

Every person's `human.decision` is the record of an inbox command signed by their key
(store/inbox.py); without the command, a run moved to another store would have decisions
nothing stands behind, and the independent evaluator would fail it. So an export writes
each command a decision of the run consumed, as stored (its MAC included), and import
checks each one as the inbox checks a command left with `decide` and as the writer checks
one it records: a valid command of this run, consumed by a decision of the file that says
the same, and, when its MAC is of this user's key, a MAC that matches. A command signed by
another key is kept: the decision then reads as signed by another key, as `verify` reads
the run's anchor.
"""

from __future__ import annotations

import json
import re
import sqlite3
from collections.abc import Iterable
from dataclasses import astuple, dataclass, fields
from typing import Any

from npu_deploy.events import Event, InvalidEvent, canonical_json, check_ts
from npu_deploy.events.envelope import EVENT_ID_RE, shown

from .anchor import check, command_fields, user_key
from .errors import ImportRefused
from .inbox import check_command, is_policys, says_other, signature_problem

#: A stored MAC: the key id, a colon, the HMAC-SHA256 in hex (store/anchor.py `mac`).
MAC_RE = re.compile(r"[0-9a-f]{16}:[0-9a-f]{64}\Z")


@dataclass(frozen=True)
class CarriedCommand:
    """An inbox row as the store holds it (the `inbox` table's columns)."""

    command_id: str
    run_id: str
    kind: str
    payload: str          # the command's payload as stored: the text its MAC covers
    author: str
    created_ts: str
    mac: str | None
    consumed_event_id: str
    consumed_ts: str

    @property
    def fields(self) -> list[Any]:
        """What its MAC covers (store/anchor.py `command_fields`)."""
        return command_fields(self.run_id, self.command_id, self.kind, self.payload,
                              self.author)


COLUMNS = tuple(f.name for f in fields(CarriedCommand))
_SELECT = f"SELECT {', '.join(COLUMNS)} FROM inbox"


def consumed_commands(conn: sqlite3.Connection, run_id: str,
                      events: Iterable[Event]) -> list[CarriedCommand]:
    """The inbox commands of `run_id` that these events (its persons' decisions) recorded.
    A decision with none here (a fork's copy of its parent's, or one that came in a
    format-1 export) carries nothing, and reads as it did."""
    out = []
    for e in events:
        if e.type != "human.decision" or is_policys(e.payload):
            continue
        row = conn.execute(f"{_SELECT} WHERE command_id = ? AND run_id = ? AND "
                           "consumed_event_id = ?",
                           (e.payload.get("command_id"), run_id, e.event_id)).fetchone()
        if row is not None:
            out.append(CarriedCommand(*row))
    return out


def command_record(command: CarriedCommand) -> str:
    """A command's line in an export file."""
    return canonical_json({"command": dict(zip(COLUMNS, astuple(command), strict=True))})


def command_from_record(record: Any, run_id: str, where: str) -> CarriedCommand:
    """A command line checked field by field, as `decide` checks a command it leaves."""
    if not isinstance(record, dict) or set(record) != set(COLUMNS):
        raise ImportRefused(f"{where}: a command needs exactly the fields {', '.join(COLUMNS)}")
    try:
        for name in ("command_id", "consumed_event_id"):
            if type(record[name]) is not str or not EVENT_ID_RE.match(record[name]):
                raise InvalidEvent(f"{name}: {shown(record[name])} is not an id (a UUID in "
                                   "lowercase hex, as npu-deploy writes them)")
        if record["run_id"] != run_id:
            raise InvalidEvent(f"run_id: {shown(record['run_id'])}, the header says {run_id}")
        payload = _payload(record["payload"])
        check_command(record["kind"], payload, record["command_id"], record["author"])
        check_ts("created_ts", record["created_ts"])
        check_ts("consumed_ts", record["consumed_ts"])
        if record["mac"] is not None and (type(record["mac"]) is not str
                                          or not MAC_RE.match(record["mac"])):
            raise InvalidEvent(f"mac: {shown(record['mac'])} is not a MAC as npu-deploy "
                               "stores one (16 hex digits, ':', 64 hex digits)")
    except InvalidEvent as e:
        raise ImportRefused(f"{where}: command: {e}") from None
    return CarriedCommand(**record)


def _payload(text: Any) -> dict[str, Any]:
    """A command's payload: the canonical JSON text of an object, as the inbox stores it."""
    try:
        value = json.loads(text) if type(text) is str else None
    except ValueError:
        value = None
    if not isinstance(value, dict) or canonical_json(value) != text:
        raise InvalidEvent(f"payload: {shown(text)} is not the JSON text of an object as "
                           "npu-deploy stores a command's")
    return value


def check_consumed(commands: dict[str, tuple[CarriedCommand, str]],
                   events: list[Event]) -> None:
    """Each command (by id, with where it is in the file) stands behind the decision of the
    file that consumed it, as the writer checked when it recorded that decision: the
    decision names it and says the same, and no MAC of this user's key on it was altered."""
    decisions = {e.event_id: e for e in events if e.type == "human.decision"}
    key = user_key(create=False)
    for command_id, (command, where) in commands.items():
        event = decisions.get(command.consumed_event_id)
        if event is None or is_policys(event.payload) \
                or event.payload.get("command_id") != command_id:
            raise ImportRefused(f"{where}: command {command_id} was consumed by event "
                                f"{command.consumed_event_id}, which is no person's decision "
                                "of this file naming it: the file was edited")
        if says_other(command.kind, command.payload, command.author, event.payload):
            raise ImportRefused(f"{where}: command {command_id} says other than the decision "
                                f"v{event.run_version} that recorded it: the file was edited")
        if check(key, command.mac, "command", command.fields) == "bad":
            raise ImportRefused(f"{where}: command {command_id} "
                                f"{signature_problem(key, command.mac, command.fields)}")


def restore_commands(conn: sqlite3.Connection,
                     commands: dict[str, tuple[CarriedCommand, str]]) -> int:
    """Put the carried commands back in the inbox (in the import's transaction); returns
    how many were new. One already there as carried is left; one there that differs is
    refused (the transaction then stores nothing)."""
    added = 0
    for command, where in commands.values():
        row = conn.execute(f"{_SELECT} WHERE command_id = ?", (command.command_id,)).fetchone()
        if row is not None and CarriedCommand(*row) != command:
            raise ImportRefused(f"{where}: inbox command {command.command_id} is already in "
                                "this store, and says or did something else there: one of "
                                "the two was edited; import into another store (--db)")
        if row is None:
            conn.execute(f"INSERT INTO inbox ({', '.join(COLUMNS)}) VALUES "
                         f"({', '.join('?' * len(COLUMNS))})", astuple(command))
            added += 1
    return added
