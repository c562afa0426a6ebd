"""The event store: one store file with all its roles, each in its own module and reached
through the same calls as ever (`store.events(...)`, `store.verify(...)`, ...):

- storefile.py: the file, its connection, the writer locks and progress files beside it;
- reading.py: the runs (listed, resolved, their locks probed), their events, the tail a
  watcher polls, the fold;
- snapshots.py: folded states cached for the fold and the writer;
- verification.py: the hash chain, blobs, snapshots and anchor of a run checked;
- blobs.py: content-addressed bytes;
- inbox.py: the commands a person leaves for a run's writer.

Appends go through a `RunWriter` (writer.py: one per run, under a file lock), which works
on a `StoreFile` of its own and never imports this module.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from npu_deploy.events import DeploymentState, Event

from .blobs import Blobs
from .inbox import Inbox
from .reading import Reader, RunSummary
from .snapshots import Snapshots
from .storefile import StoreFile
from .verification import Verifier, VerifyReport

if TYPE_CHECKING:
    from npu_deploy.events.payloads import RunStarted

    from .writer import RunWriter


class EventStore(StoreFile):
    """One SQLite store file. Open with `EventStore.open(path)` (read-write,
    creating and migrating it) or `EventStore.open(path, readonly=True)`."""

    def __init__(self, path: Path, conn: sqlite3.Connection, *, readonly: bool) -> None:
        super().__init__(path, conn, readonly=readonly)
        self._snapshots = Snapshots(self)
        self._reader = Reader(self, self._snapshots)
        self._verifier = Verifier(self)
        self._blobs = Blobs(self)
        self._inbox = Inbox(self, self._reader)

    # --- runs (reading.py) -------------------------------------------------------

    def is_locked(self, run_id: str) -> bool:
        """True while some process holds this run's writer lock."""
        return self._reader.is_locked(run_id)

    def live_status(self, run_id: str, folded_status: str) -> str:
        """The folded status, corrected by the lock (a free lock on a running run: crashed)."""
        return self._reader.live_status(run_id, folded_status)

    def resolve_run(self, ref: str) -> str:
        """A full run id from an id or a unique prefix of one."""
        return self._reader.resolve_run(ref)

    def run_ids(self) -> list[str]:
        return self._reader.run_ids()

    def runs(self) -> list[RunSummary]:
        return self._reader.runs()

    # --- writing (writer.py) -----------------------------------------------------

    def writer(self, run_id: str) -> RunWriter:
        """Take the writer lock of an existing run (to resume it)."""
        from .writer import RunWriter  # a command that only reads never loads the writer

        return RunWriter.attach(self, self.resolve_run(run_id))

    def create_run(self, started: RunStarted | dict[str, Any], *, run_id: str | None = None,
                   actor: str = "harness") -> RunWriter:
        """Start a new run with its `run.started` event; returns its writer."""
        from .writer import RunWriter

        return RunWriter.create(self, started, run_id=run_id, actor=actor)

    # --- events, fold (reading.py) -------------------------------------------------

    def events(self, run_id: str, *, after_version: int = 0,
               upto_version: int | None = None, phase: int | None = None,
               types: tuple[str, ...] = ()) -> Iterator[Event]:
        """A run's events in order, from the oldest (or after a version); only those of
        one phase, or of some types, when asked."""
        return self._reader.events(run_id, after_version=after_version,
                                   upto_version=upto_version, phase=phase, types=types)

    def event_at(self, run_id: str, version: int) -> Event | None:
        return self._reader.event_at(run_id, version)

    def tail(self, run_id: str, after_seq: int, limit: int = 10_000) -> list[Event]:
        """Events of a run with `seq > after_seq`, in order; cheap to poll."""
        return self._reader.tail(run_id, after_seq, limit)

    def fold(self, run_id: str, upto_version: int | None = None, *,
             use_snapshots: bool = True) -> DeploymentState:
        """The run's state after `upto_version` (default: all events)."""
        return self._reader.fold(run_id, upto_version, use_snapshots=use_snapshots)

    # --- snapshots (snapshots.py) ----------------------------------------------------

    def save_snapshot(self, state: DeploymentState) -> None:
        """Cache a folded state. Deleting snapshots changes nothing but speed."""
        self._snapshots.save(state)

    def load_snapshot(self, run_id: str, upto_version: int | None = None
                      ) -> DeploymentState | None:
        """The newest usable snapshot (same reducer, on the chain, MAC of this user's key)."""
        return self._snapshots.load(run_id, upto_version)

    # --- verification (verification.py) ----------------------------------------------

    def verify(self, run_id: str, *, fold: bool = True) -> VerifyReport:
        """Check a run's hash chain link by link and name the first bad event; then its
        blobs, snapshots and head anchor (Verifier.verify says how)."""
        return self._verifier.verify(run_id, fold=fold)

    def integrity_problem(self) -> str | None:
        """SQLite's own structural check of the whole file (B-trees, pages)."""
        return self._verifier.integrity_problem()

    # --- blobs (blobs.py) ------------------------------------------------------------

    def put_blob(self, data: bytes) -> str:
        """Store bytes once, compressed; returns the reference 'sha256:<hex>'."""
        return self._blobs.put(data)

    def get_blob(self, ref: str) -> bytes:
        return self._blobs.get(ref)

    def blob_row(self, digest: str) -> tuple[str, bytes] | None:
        return self._blobs.row(digest)

    # --- inbox (inbox.py) ------------------------------------------------------------

    def post_command(self, run_id: str, kind: str, payload: dict[str, Any] | None = None,
                     *, author: str = "human",
                     still_open: Callable[[], str | None] | None = None,
                     relayed: str | None = None) -> str:
        """Leave a command (a person's decision) for the run's writer; returns its id.
        `still_open` is asked under the write lock; `relayed` keeps the id of a command
        left at a matrix's head (Inbox.post)."""
        return self._inbox.post(run_id, kind, payload, author=author, still_open=still_open,
                                relayed=relayed)

    @staticmethod
    def command_unsigned(command: dict[str, Any]) -> str | None:
        """Why a pending command carries no MAC made by this user's key over what it says
        (none, another key's, an altered one), or None when it does."""
        return Inbox.unsigned(command)

    def unbacked_decisions(self, run_id: str) -> dict[int, str]:
        """Each person's decision of the run (by version) that no inbox command of theirs
        stands behind, with why: every person's decision is the record of one."""
        return self._inbox.unbacked(run_id)

    def pending_commands(self, run_id: str) -> list[dict[str, Any]]:
        """Commands not yet recorded as events, oldest first."""
        return self._inbox.pending(run_id)
