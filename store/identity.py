"""One store file, one name. SQLite keeps a WAL-mode database's `-wal` and `-shm` beside
the name it was opened by (a symbolic link is followed first), and the run locks live beside
it too (locations.py `locks_dir`). A file with a second name of its own, a hard link or a
file bind-mounted elsewhere, would get a second WAL and a second set of locks: a process
opening it by the other name sees none of what is in the first WAL, and two writers of one
run, or two checkpoints, corrupt it ("How To Corrupt An SQLite Database File", section
"Multiple links to the same file", https://www.sqlite.org/howtocorrupt.html). So such a
file is refused before SQLite opens it, by every command, with what to do.

A bind-mounted folder is not such a case: its files are the same directory entries, so
their `-wal` and lock files are the same files whichever path is used.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import StoreUnreadable

MOUNTINFO = Path("/proc/self/mountinfo")


_WHY = ("SQLite keeps a store's write-ahead log beside the name it is opened by, so each "
        "name would get its own log and lock and writes through both would corrupt it")


def check_one_name(path: Path) -> None:
    """Refuse a store file that has another name than the ones symbolic links give it."""
    problem = second_name(path)
    if problem is not None:
        raise StoreUnreadable(problem)


def second_name(path: str | os.PathLike[str]) -> str | None:
    """What is wrong with a store file that has another name than the ones symbolic links
    give it (more than one hard link, or a file bind mount of it), or None. Nothing there (a
    new store) passes. Standard library only: the entry point asks it too (loading.py)."""
    try:
        info = os.stat(path)
    except OSError:
        return None       # missing or unreadable: the store's opening says which, in one line
    if not stat.S_ISREG(info.st_mode):
        return None
    if info.st_nlink > 1:
        return (f"{path} has {info.st_nlink} hard links: {_WHY}; keep one name (remove the "
                f"others: `find / -xdev -samefile {path}` lists them), or use a copy")
    mounted = bind_mounts_of(info)
    if mounted:
        return (f"{path} is also mounted as {mounted[0]} (a bind mount of the file): {_WHY}; "
                "unmount it, or bind-mount its folder instead")
    return None


def bind_mounts_of(info: os.stat_result) -> list[str]:
    """The mount points (as this process sees them) that are this very file, mounted on its
    own: from /proc/self/mountinfo, those on the file's device whose inode is the file's."""
    try:
        lines = MOUNTINFO.read_text().splitlines()
    except OSError:
        return []        # not Linux, or no /proc: nothing to compare with
    device = f"{os.major(info.st_dev)}:{os.minor(info.st_dev)}"
    found = []
    for line in lines:
        fields = line.split(" ")
        if len(fields) < 5 or fields[2] != device:
            continue
        point = _unescape(fields[4])
        try:
            there = os.stat(point)
        except OSError:
            continue
        if stat.S_ISREG(there.st_mode) and (there.st_dev, there.st_ino) == (info.st_dev,
                                                                             info.st_ino):
            found.append(point)
    return found


def _unescape(field: str) -> str:
    """A mountinfo path: space, tab, newline and backslash are written as octal escapes."""
    for code in ("\\040", "\\011", "\\012", "\\134"):
        field = field.replace(code, chr(int(code[1:], 8)))
    return field
