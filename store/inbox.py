"""The inbox: commands a person leaves for a run's writer (approve, redirect, pick, pause,
abort), each with a MAC of this user's key, until the conductor records it as a
`human.decision` event (writer.py marks it consumed in the same transaction)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any

from npu_deploy.events import InvalidEvent, canonical_json, utc_now, uuid7, validate_payload
from npu_deploy.events.envelope import shown

from .anchor import (
    KEY_ENV,
    check,
    command_fields,
    key_id,
    key_path,
    mac,
    signing_key,
    user_key,
)
from .errors import DecisionRefused, Unanchored
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
             *, author: str = "human",
             still_open: Callable[[], str | None] | None = None,
             relayed: str | None = None) -> str:
        """Leave a command (a person's decision) for the run's writer; returns its id.
        `still_open`, asked under the write lock just before the command is left (no writer
        can append meanwhile), says why the run no longer takes it: then nothing is left,
        and DecisionRefused says so. `relayed`: the id of a command a person left at the
        head of a matrix (cluster/), kept so it is left here once however often it comes."""
        command_id = relayed or uuid7()
        check_command(kind, payload or {}, command_id, author)
        run_id = self.reader.resolve_run(run_id)
        # The MAC tells the conductor a person's tool wrote it (store/anchor.py): a process
        # that can write the store but not read the key cannot pass as a person.
        fields = command_fields(run_id, command_id, kind, canonical_json(payload or {}), author)
        key = user_key(create=False)
        key = self._new_key_for(run_id) if key is None else self._anchored_by(run_id, key)
        with transaction(self.file.db):
            why_not = still_open() if still_open is not None else None
            if why_not is not None:
                raise DecisionRefused(why_not)
            self.file.conn.execute(
                f"INSERT {'OR IGNORE ' if relayed else ''}INTO inbox (run_id, command_id, "
                "kind, payload, author, created_ts, mac) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*fields, utc_now(), mac(key, "command", fields)))
        return command_id

    def _anchored_by(self, run_id: str, key: bytes) -> bytes:
        """`key`, when the run carries no anchor or one `key` made; a run another key
        anchored would refuse the command at its conductor (signed by another key), and
        `resume` would refuse the run: the decision is refused now, nothing left."""
        row = self.file.conn.execute("SELECT head_mac FROM runs WHERE run_id = ?",
                                     (run_id,)).fetchone()
        theirs = (row[0] or "").partition(":")[0] if row else ""
        if theirs and theirs != key_id(key):
            raise Unanchored(
                f"run {run_id} was anchored by key {theirs}, and your key at {key_path()} is "
                f"another (key id {key_id(key)}): its conductor would refuse a decision your "
                f"key signs. Put that key file back there (or point {KEY_ENV} at it), or "
                f"`npu-deploy resume {run_id} --adopt` if you trust the run; nothing was left")
        return key

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
    def unsigned(command: dict[str, Any]) -> str | None:
        """Why a pending command (as `pending` gives it) does not carry a MAC of this user's
        key over what it says (`signature_problem`: none, another key's, an altered one),
        or None when it does."""
        fields = command_fields(command["run_id"], command["command_id"], command["kind"],
                                canonical_json(command["payload"]), command["author"])
        return signature_problem(user_key(create=False), command.get("mac"), fields)

    def unbacked(self, run_id: str) -> dict[int, str]:
        """Each person's `human.decision` of the run that no inbox command stands behind,
        by version, with why (`command_problem`); and each policy's that the run's policy
        could not have taken (`policy_problem`). A forked run's decisions up to its fork
        point are its parent's, copied: each must be the parent's event at that version,
        and stand as that one does."""
        key = user_key(create=False)
        first = self.reader.event_at(run_id, 1)
        origin = ((first.payload["parent_run_id"], int(first.payload["parent_version"]))
                  if first is not None and first.type == "run.forked" else None)
        parents: dict[int, str] | None = None
        uncarried = self._uncarried_upto(run_id)
        out: dict[int, str] = {}
        config = dict(first.payload.get("config") or {}) if first is not None else {}
        for e in self.reader.events(run_id, types=("human.decision",)):
            v = e.run_version
            if is_policys(e.payload):
                problem = policy_problem(config, e.payload, e.phase)
                if problem is not None:
                    out[v] = problem
                continue
            if origin is not None and v <= origin[1]:
                theirs = self.reader.event_at(origin[0], v)
                if theirs is None or (theirs.type, theirs.actor, theirs.payload_json) != (
                        e.type, e.actor, e.payload_json):
                    out[v] = f"it is not the decision v{v} of run {origin[0]} it was forked from"
                    continue
                parents = self.unbacked(origin[0]) if parents is None else parents
                if v in parents:
                    out[v] = f"as in run {origin[0]}, {parents[v]}"
                continue
            problem = command_problem(self.file.conn, key, run_id, e.payload,
                                      recorded_by=e.event_id)
            if problem is not None and v <= uncarried and problem.startswith(_NO_COMMAND):
                problem = (f"it came through an export file written before exports carried "
                           f"decisions' commands (format 1), without its inbox command "
                           f"{e.payload.get('command_id')}: export the run again from the "
                           "store it was decided in, and import that file")
            if problem is not None:
                out[v] = problem
        return out

    def _uncarried_upto(self, run_id: str) -> int:
        """The version up to which the run's decisions came through a format-1 export, which
        carried no inbox commands (store/transfer.py); 0 when none did."""
        return uncarried_upto(self.file.conn, run_id)

    def pending(self, run_id: str) -> list[dict[str, Any]]:
        """Commands not yet recorded as events, oldest first."""
        cur = self.file.conn.execute(
            "SELECT * FROM inbox WHERE run_id = ? AND consumed_event_id IS NULL "
            "ORDER BY created_ts, command_id", [run_id])
        names = [d[0] for d in cur.description]
        return [{**row, "payload": json.loads(row["payload"])}
                for row in (dict(zip(names, r, strict=True)) for r in cur)]


# --- a person's decision has a command behind it ------------------------------------------

#: The fields of a decision that only a person's command can give it (the conductor adds
#: the checkpoint or proposal it answers when the command names none).
_FROM_THE_COMMAND = ("instruction", "direction_id", "override")


def check_command(kind: Any, payload: dict[str, Any], command_id: str, author: Any) -> None:
    """What a command must be to make a valid `human.decision` once recorded (a redirect
    needs its instruction, a pick its direction): checked when it is left, and when an
    export brings one (store/carried.py). Raises InvalidEvent naming the first bad field."""
    if kind not in COMMAND_KINDS:
        raise InvalidEvent(f"kind: {shown(kind)} is not one of {', '.join(COMMAND_KINDS)}")
    if type(author) is not str:
        raise InvalidEvent(f"author: {shown(author)} must be a string")
    validate_payload("human.decision", {**payload, "decision": kind,
                                        "command_id": command_id, "author": author})


def uncarried_upto(conn: sqlite3.Connection, run_id: str) -> int:
    """The version up to which the run's decisions came through a format-1 export, which
    carried no inbox commands (the `imports` table, store/transfer.py); 0 when none did."""
    row = conn.execute("SELECT uncarried_upto FROM imports WHERE run_id = ?",
                       (run_id,)).fetchone()
    return int(row[0]) if row else 0


def is_policys(payload: dict[str, Any]) -> bool:
    """A decision the run's own policy took (`author` "policy:..."), not a person's."""
    return str(payload.get("author") or "").startswith("policy:")


def policy_problem(config: dict[str, Any], payload: dict[str, Any],
                   phase: int | None) -> str | None:
    """Why the run's own policy could not have taken this decision, or None: the conductor
    approves a checkpoint for a person only under auto-approve, outside the phases it pauses
    at, and picks a debug direction only under auto-approve (machine/conductor.py); nothing
    else is ever a policy's."""
    decision, auto = payload.get("decision"), bool(config.get("auto_approve"))
    if decision == "approve" and auto and phase not in set(config.get("pause_at") or ()):
        return None
    if decision == "pick" and auto:
        return None
    return (f"the run's policy (auto_approve {auto}, pause_at "
            f"{sorted(config.get('pause_at') or ())}) takes no {decision} at phase {phase}")


def command_problem(conn: sqlite3.Connection, key: bytes | None, run_id: str,
                    payload: dict[str, Any], *, recorded_by: str | None = None) -> str | None:
    """Why a person's `human.decision` (its payload) is not the record of an inbox command of
    `run_id`, or None: the command its `command_id` names must be there, signed by this
    user's key, and say the same (kind, author, instruction, direction, override); pending
    when it is about to be recorded, or consumed by the event `recorded_by` once it was."""
    command_id = payload.get("command_id")
    row = conn.execute("SELECT kind, payload, author, mac, consumed_event_id FROM inbox "
                       "WHERE command_id = ? AND run_id = ?", (command_id, run_id)).fetchone()
    if row is None:
        return f"{_NO_COMMAND} {command_id} of run {run_id} is behind it"
    kind, text, author, stored_mac, consumed_by = row
    if recorded_by is None and consumed_by is not None:
        return None       # the writer's consumption refuses it as already recorded, and says so
    fields = command_fields(run_id, str(command_id), kind, text, author)
    unsigned = signature_problem(key, stored_mac, fields)
    if unsigned is not None:
        return f"its inbox command {command_id} {unsigned}"
    if says_other(kind, text, author, payload):
        return f"it says other than its inbox command {command_id} ({kind}, {text})"
    if recorded_by is not None and consumed_by != recorded_by:
        return (f"its inbox command {command_id} was recorded by "
                f"{'no event' if consumed_by is None else 'event ' + consumed_by}, not by it")
    return None


_NO_COMMAND = "no inbox command"


def says_other(kind: str, text: str, author: str | None, payload: dict[str, Any]) -> bool:
    """Whether a decision (its payload) says other than the command (kind, payload text,
    author) it records: the command's every field, and those only a command gives."""
    said = json.loads(text)
    return (kind != payload.get("decision") or author != payload.get("author")
            or any(payload.get(k) != v for k, v in said.items())
            or any(payload.get(k) and payload.get(k) != said.get(k) for k in _FROM_THE_COMMAND))


def signature_problem(key: bytes | None, stored: str | None, fields: list[Any]) -> str | None:
    """Why a command's MAC does not show this user's key signed it, or None; worded as
    `verify` words a run's anchor: another key's MAC is not tampering, only not ours."""
    result = check(key, stored, "command", fields)
    if result == "ok":
        return None
    if result == "absent":
        return "carries no MAC: no person's key signed it"
    if result == "bad":
        return ("carries a MAC of this user's key that does not match it: the command was "
                "edited after it was signed")
    theirs = (stored or "").partition(":")[0]
    if key is None:
        return (f"was signed by key {theirs}, and there is no key at {key_path()} to check it "
                f"(put that key file back there, or point {KEY_ENV} at it)")
    return f"was signed by another key (key id {theirs}) than this user's (key id {key_id(key)})"
