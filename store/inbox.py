"""The inbox: commands a person leaves for a run's writer (approve, redirect, pick, pause,
abort), each with a MAC of this user's key, until the conductor records it as a
`human.decision` event (writer.py marks it consumed in the same transaction)."""

from __future__ import annotations

import json
from typing import Any

from npu_deploy.events import InvalidEvent, canonical_json, utc_now, uuid7, validate_payload

from .anchor import KEY_ENV, check, command_fields, key_path, mac, signing_key, user_key
from .errors import Unanchored
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
        key = user_key(create=False) or self._new_key_for(run_id)
        with transaction(self.file.db):
            self.file.conn.execute(
                "INSERT INTO inbox (run_id, command_id, kind, payload, author, created_ts, mac) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*fields, utc_now(), mac(key, "command", fields)))
        return command_id

    def _new_key_for(self, run_id: str) -> bytes:
        """No key here: a decision for a run another key anchored is refused (its conductor
        would refuse the run, and a new key would make every run the old one anchored read
        as another key's); for a run that carries no anchor, a key is made to sign it."""
        row = self.file.conn.execute("SELECT head_mac FROM runs WHERE run_id = ?",
                                     (run_id,)).fetchone()
        if row and row[0]:
            raise Unanchored(
                f"run {run_id} was anchored by key {row[0].partition(':')[0]}, and there is no "
                f"key at {key_path()} to sign your decision: put that key file back there (or "
                f"point {KEY_ENV} at it) and decide again; nothing was left, and no key was made")
        return signing_key(f"to sign your decision for run {run_id}")

    @staticmethod
    def is_authentic(command: dict[str, Any]) -> bool:
        """Whether a pending command (as `pending` gives it) carries a MAC made by this
        user's key over what it says."""
        fields = command_fields(command["run_id"], command["command_id"], command["kind"],
                                canonical_json(command["payload"]), command["author"])
        return check(user_key(create=False), command.get("mac"), "command", fields) == "ok"

    def pending(self, run_id: str) -> list[dict[str, Any]]:
        """Commands not yet recorded as events, oldest first."""
        return [{**r, "payload": json.loads(r["payload"])} for r in self.file.db.query(
            "SELECT * FROM inbox WHERE run_id = ? AND consumed_event_id IS NULL "
            "ORDER BY created_ts, command_id", [run_id])]
