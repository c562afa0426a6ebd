"""The inbox: commands a person leaves for a run's writer (approve, redirect, pick, pause,
abort), each with a MAC of this user's key, until the conductor records it as a
`human.decision` event (writer.py marks it consumed in the same transaction)."""

from __future__ import annotations

import json
from typing import Any

from npu_deploy.events import InvalidEvent, canonical_json, utc_now, uuid7, validate_payload

from .anchor import check, command_fields, mac, signing_key, user_key
from .reading import Reader
from .storefile import StoreFile
from .transaction import transaction

COMMAND_KINDS = ("approve", "redirect", "pick", "pause", "abort")


class Inbox:
    """The inbox of `file`'s runs (a command names its run by an id or a prefix, `reader`
    resolves it)."""

    def __init__(self, file: StoreFile, reader: Reader) -> None:
        self.file = file
        self.reader = reader

    def post(self, run_id: str, kind: str, payload: dict[str, Any] | None = None,
             *, author: str = "human") -> str:
        """Leave a command (a person's decision) for the run's writer; returns its id."""
        if kind not in COMMAND_KINDS:
            raise InvalidEvent(f"kind: {kind!r} is not one of {', '.join(COMMAND_KINDS)}")
        command_id = uuid7()
        # Refuse now what could not be recorded later: the command must make a valid
        # human.decision (a redirect needs its instruction, a pick its direction).
        validate_payload("human.decision", {**(payload or {}), "decision": kind,
                                            "command_id": command_id, "author": author})
        run_id = self.reader.resolve_run(run_id)
        # The MAC tells the conductor a person's tool wrote it (store/anchor.py): a process
        # that can write the store but not read the key cannot pass as a person.
        fields = command_fields(run_id, command_id, kind, canonical_json(payload or {}), author)
        with transaction(self.file.db):
            self.file.conn.execute(
                "INSERT INTO inbox (run_id, command_id, kind, payload, author, created_ts, mac) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*fields, utc_now(), mac(signing_key(), "command", fields)))
        return command_id

    @staticmethod
    def is_authentic(command: dict[str, Any]) -> bool:
        """Whether a pending command (as `pending` gives it) carries a MAC made by this
        user's key over what it says."""
        fields = command_fields(command["run_id"], command["command_id"], command["kind"],
                                canonical_json(command["payload"]), command["author"])
        return check(user_key(create=False), command.get("mac"), "command", fields) == "ok"

    def pending(self, run_id: str) -> list[dict[str, Any]]:
        """Commands not yet recorded as events, oldest first."""
        cur = self.file.conn.execute(
            "SELECT * FROM inbox WHERE run_id = ? AND consumed_event_id IS NULL "
            "ORDER BY created_ts, command_id", [run_id])
        names = [d[0] for d in cur.description]
        return [{**row, "payload": json.loads(row["payload"])}
                for row in (dict(zip(names, r, strict=True)) for r in cur)]
