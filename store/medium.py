"""What the store file sits on: a place SQLite cannot write (a read-only file, folder or
mount), a disk with no room left, and the companions SQLite keeps beside the file in WAL
mode (`runs.db-wal`, holding the newest committed pages, and `runs.db-shm`, its index).

Reading where nothing can be written. A read-only connection (`mode=ro`) to a WAL-mode
file still needs the `-shm` index, and creates it when it is missing; where it cannot (a
read-only mount, or a folder this user cannot write) SQLite answers "unable to open
database file" (sqlite.org/wal.html#readonly). Then, as SQLite's documentation offers:

* with no `-wal` holding pages beside the file, the whole store is in the file: it is
  opened `immutable` (sqlite.org/uri.html#uriimmutable), which reads it without locks or
  companions;
* with a `-wal` holding pages, they are part of the store (`immutable` would ignore them and show
  an older store): the connection keeps the WAL index in its own memory, which SQLite does
  in EXCLUSIVE locking mode (sqlite.org/wal.html#noshm), with the `unix-none` VFS, since a
  read-only descriptor cannot take the exclusive lock that mode asks for.

Either way nothing is written and no lock is taken, which is right where nothing can write
(a read-only mount); a `-shm` missing means no process has the store open in WAL mode.
A file this process may read but not write (chmod 0444) in a folder it can write is read
the same way when no `-shm` is beside it: `mode=ro` would create an empty `-wal` and a
`-shm` there, files beside a store its owner made read-only.

Writing where there is no room. SQLite rolls the transaction back and says "database or
disk is full" (SQLITE_FULL); what was committed before stays, in the file or in the
`-wal`. `is_disk_full` recognises that (and ENOSPC or EDQUOT from a file written beside the
store), and `disk_full` says so in one line.

Writing where nothing can be written. SQLite opens a file it may not write read-only
without a word, and fails at the first write; `why_unwritable` asks the kernel first, so a
writing command is refused before it writes anything.
"""

from __future__ import annotations

import errno
import os
import sqlite3
from pathlib import Path

from .errors import DiskFull, StoreReadOnly

#: A WAL file's header; a `-wal` no longer than it holds no page.
WAL_HEADER_BYTES = 32

# The primary result codes (the low byte of an extended code, sqlite.org/rescode.html).
_FULL = sqlite3.SQLITE_FULL
_CANTOPEN = sqlite3.SQLITE_CANTOPEN
_READONLY = sqlite3.SQLITE_READONLY
#: What a read-only connection meets where it cannot make or grow the `-shm` index: a
#: read-only place (SQLITE_CANTOPEN, or a SQLITE_READONLY_* code such as
#: SQLITE_READONLY_DIRECTORY), or, growing it, a full disk.
_NO_INDEX = {sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR_SHMOPEN, sqlite3.SQLITE_IOERR_SHMSIZE,
             sqlite3.SQLITE_IOERR_SHMMAP}
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT}


def wal_path(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def shm_path(path: Path) -> Path:
    return path.with_name(path.name + "-shm")


def wal_holds_pages(path: Path) -> bool:
    """Whether a `-wal` beside `path` holds pages (SQLite reads them as part of the store)."""
    try:
        return wal_path(path).stat().st_size > WAL_HEADER_BYTES
    except OSError:
        return False


def primary_code(error: BaseException) -> int | None:
    code = getattr(error, "sqlite_errorcode", None)
    return None if code is None else int(code) & 0xFF


def open_read_only(path: Path) -> sqlite3.Connection:
    """A read-only connection to an existing store file, wherever it is (module doc)."""
    uri = path.resolve().as_uri()
    if _may_share_index(path):
        conn = sqlite3.connect(f"{uri}?mode=ro", uri=True, check_same_thread=False)
        try:
            # The first read opens the WAL and its index: where a read-only place fails.
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return conn
        except sqlite3.DatabaseError as e:
            conn.close()
            code = getattr(e, "sqlite_errorcode", None)
            if (code not in _NO_INDEX and primary_code(e) not in (_CANTOPEN, _READONLY)
                    or not os.access(path, os.R_OK)):
                raise
    return _open_without_index(path, uri)


def _may_share_index(path: Path) -> bool:
    """Whether a read-only connection should use the WAL index SQLite keeps beside the file:
    when this process could write the file (a writer of the store may run), or the index is
    there (one has it open), or the file cannot be read (SQLite's error says so). A file this
    process may read but not write, with no index beside it, is read as on a read-only place:
    else SQLite, in a folder it can write, leaves an empty `-wal` and a `-shm` beside a store
    the person made read-only."""
    return (os.access(path, os.W_OK) or shm_path(path).exists()
            or not os.access(path, os.R_OK))


def _open_without_index(path: Path, uri: str) -> sqlite3.Connection:
    """The read where no WAL index can be shared (module doc): nothing is created beside
    the file and no lock is taken."""
    if wal_holds_pages(path):
        conn = sqlite3.connect(f"{uri}?mode=ro&vfs=unix-none", uri=True,
                               check_same_thread=False)
    else:
        conn = sqlite3.connect(f"{uri}?immutable=1", uri=True, check_same_thread=False)
    try:
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")   # before the first read
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
    except BaseException:
        conn.close()
        raise
    return conn


def _read_only_file_system(path: Path) -> bool:
    try:
        return bool(os.statvfs(path).f_flag & os.ST_RDONLY)
    except OSError:
        return False


def why_unwritable(path: Path) -> str | None:
    """Why a writing command cannot write the store at `path` (an existing file, or a new
    one in an existing folder), in words; None when it can. The kernel answers
    (`os.access`, `statvfs`), so root writes where its permissions let it."""
    exists = path.exists()
    if _read_only_file_system(path if exists else path.parent):
        return "it is on a read-only file system" if exists else (
            f"its folder {path.parent} is on a read-only file system")
    if exists and not os.access(path, os.W_OK):
        return "its permissions let you read it, not write it"
    companions = (wal_path(path), shm_path(path))
    if not os.access(path.parent, os.W_OK) and not (exists and all(
            os.access(c, os.W_OK) for c in companions)):
        return (f"its folder {path.parent} cannot be written" if not exists else
                f"its folder cannot be written, and SQLite writes {path.name}-wal and "
                f"{path.name}-shm beside it")
    return None


def read_only_error(path: Path, reason: str) -> StoreReadOnly:
    return StoreReadOnly(f"cannot write {path}: {reason}; nothing was written. The reading "
                         "commands work (runs, show, verify, export, report); to write, copy "
                         f"it (with its {path.name}-wal, if any) to a writable place and pass "
                         "that to --db")


def is_disk_full(error: BaseException) -> bool:
    """Whether a write failed for want of space: SQLite's SQLITE_FULL, or ENOSPC/EDQUOT from
    a file written beside the store."""
    if isinstance(error, sqlite3.Error):
        return primary_code(error) == _FULL
    return isinstance(error, OSError) and error.errno in _NO_SPACE


def disk_full(where: Path | str | None, *, resume: str | None = None) -> DiskFull:
    """The one line for a write that found no room. `resume`: the run to go on with."""
    place = f"the disk holding {where} is full" if where else "the disk is full"
    then = (f"free space, then `npu-deploy resume {resume}` goes on" if resume else
            "free space, then run the command again")
    return DiskFull(f"{place}: nothing was lost; {then}")


def storage_error(path: Path, error: sqlite3.DatabaseError) -> Exception | None:
    """A write's SQLite error in a user's words, when it is about the medium (no room, or
    no write permission); None for any other."""
    code = primary_code(error)
    if code == _FULL:
        return disk_full(path)
    if code == _READONLY:
        return read_only_error(path, why_unwritable(path) or f"SQLite says: {error}")
    return None
