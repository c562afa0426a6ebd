"""One store file and the files beside it: its connection (opened read-write, creating and
migrating it, or read-only), the per-run writer locks and the progress files. What the
store's roles (reading.py, snapshots.py, verification.py, blobs.py, inbox.py) and the
writer (writer.py) share; `EventStore` is one of these with all its roles."""

from __future__ import annotations

import os
import sqlite3
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Self

from .errors import StoreUnreadable
from .files import no_store_at, nothing_at
from .identity import check_one_name
from .locations import default_db_path, locks_dir
from .medium import wal_holds_pages
from .schema import connect, release

if TYPE_CHECKING:
    from sqlite_utils import Database


class StoreFile:
    """An open store file. `StoreFile.open(path)` opens it read-write (creating and
    migrating it), `StoreFile.open(path, readonly=True)` read-only; no path, the default
    store (store/locations.py)."""

    def __init__(self, path: Path, conn: sqlite3.Connection, *, readonly: bool) -> None:
        self.path = path
        self.conn = conn
        self.readonly = readonly
        self._closed = False

    @classmethod
    def open(cls, path: str | os.PathLike[str] | None = None, *,
             readonly: bool = False, create: bool = True) -> Self:
        """Not `create`: a missing store is refused as a read-only open refuses it, for a
        command about runs that must already be there (resume, fork, decide), which would
        otherwise leave an empty store behind its refusal."""
        p = Path(path) if path is not None else default_db_path()
        if not create and not readonly and nothing_at(p) and not wal_holds_pages(p):
            raise StoreUnreadable(f"{no_store_at(p)}; run a deployment first, or pass --db "
                                  "(or NPU_DEPLOY_DB) with the path of an existing store")
        check_one_name(p)
        return cls(p, connect(p, readonly=readonly, create=create), readonly=readonly)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self.conn.close()
        release(self.path)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @cached_property
    def db(self) -> Database:
        """The connection as sqlite-utils' `Database`, for what writes (transactions,
        migrations). Made on first use: a command that only reads never imports
        sqlite-utils (nor numpy, which it imports), and answers in a fraction of the time."""
        from sqlite_utils import Database

        return Database(self.conn)

    def lock_path(self, run_id: str) -> Path:
        """The run's writer lock (writer.py takes it), beside the store file whatever path
        reached it (locations.py), so that no alias of the file gets a lock of its own."""
        return locks_dir(self.path) / f"{run_id}.lock"

    def progress_path(self, run_id: str) -> Path:
        """Where the run's step in flight says how far it has got (store/progress.py)."""
        return self.lock_path(run_id).with_suffix(".progress")
