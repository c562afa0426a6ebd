"""What the store accepts as a file: a store, an import file or an export target must be a
regular file (or, where one is created, a path with nothing there yet).

A FIFO blocks the first open or read until something writes to it, a device can be endless
(/dev/zero) or lose what is written (/dev/full), and renaming a file over either replaces
the node itself. So each is refused by `os.stat` before anything opens it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from .errors import StoreUnreadable

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def kind_of(mode: int) -> str:
    """'a FIFO (named pipe)', 'a directory', ... for a file mode that is not a regular
    file's."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def regular_or_missing(path: Path, *, what: str, fix: str,
                       error: type[Exception] = StoreUnreadable) -> bool:
    """True when `path` is a regular file (symbolic links followed), False when nothing is
    there; anything else (a FIFO, a device, a directory, a socket) is refused with `error`:
    '<path> is <kind>, not <what>; <fix>'."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return False
    except PermissionError:
        raise error(f"cannot read {path}: permission denied") from None
    except OSError as e:
        raise error(f"cannot read {path}: {e.strerror}") from None
    if not stat.S_ISREG(mode):
        raise error(f"{path} is {kind_of(mode)}, not {what}; {fix}")
    return True


def nothing_at(path: Path) -> bool:
    """Whether nothing is at `path` (symbolic links followed): a dangling link is nothing, a
    loop of links or an unreadable folder is something, which opening then names."""
    try:
        os.stat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def no_store_at(path: Path) -> str:
    """'no store at PATH', saying where a symbolic link there leads when it leads nowhere."""
    try:
        target = os.readlink(path)
    except OSError:
        return f"no store at {path}"
    return f"no store at {path}, a symbolic link to {target}, where there is nothing"


def dangling_link_problem(path: Path) -> str | None:
    """Why a store cannot be made through `path`, a symbolic link to nothing whose target's
    folder does not exist (SQLite would say only 'unable to open database file'), or None."""
    if not path.is_symlink():
        return None
    target = path.parent / os.readlink(path)
    if target.parent.is_dir():
        return None            # the store is made at the link's target, as SQLite does
    return (f"{path} is a symbolic link to {os.readlink(path)}, and the folder "
            f"{target.parent} does not exist; create it, or pass another path to --db")


def check_writable_target(path: Path, *, what: str) -> None:
    """An output path is written by renaming a finished temporary file over it: refuse
    anything there that is not a regular file (the rename would replace a device node or
    a FIFO), and a missing directory."""
    regular_or_missing(path, what=f"a place for the {what}",
                       fix="pass the path of a regular file (it is replaced) or a new one")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise StoreUnreadable(f"cannot write {path}: the directory {parent} does not exist")


@contextmanager
def atomic_file(target: Path) -> Iterator[TextIO]:
    """Write a text file whole or not at all: into a temporary file beside `target`,
    fsync'd, then renamed over it. Nothing is left behind if the block raises."""
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent or Path("."))
    try:
        with os.fdopen(fd, "w", encoding="ascii") as out:
            yield out
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
