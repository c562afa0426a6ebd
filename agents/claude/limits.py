"""What one sandboxed command may write: the size of any one file (RLIMIT_FSIZE, `ulimit
-f`, set inside the sandbox where no capability is left to raise it), the bytes the whole
workspace may hold (checked before each command and watched while it runs), and the size
of its private /tmp (a tmpfs of that size). Part of the run's config ("claude" ->
"sandbox" in run.started), set with `deploy --sandbox-limits`."""

from __future__ import annotations

import os
import stat
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
#: The names `--sandbox-limits` takes, and the fields they set.
NAMES = {"file": "file_bytes", "workspace": "workspace_bytes", "tmp": "tmp_bytes"}
WHERE = "the run's config: claude.sandbox, set with `deploy --sandbox-limits`"


@dataclass(frozen=True)
class SandboxLimits:
    """Bytes a command may write: one file, the whole workspace, its /tmp."""

    file_bytes: int = 256 << 20
    workspace_bytes: int = 2 << 30
    tmp_bytes: int = 256 << 20

    @classmethod
    def parse(cls, text: str) -> SandboxLimits:
        """"file=64M,workspace=1G,tmp=32M" (any subset; K, M, G, T are powers of 1024)."""
        values: dict[str, int] = {}
        for item in filter(None, (t.strip() for t in text.split(","))):
            name, _, value = item.partition("=")
            if name not in NAMES:
                raise ValueError(f"sandbox limit {item!r}: expected file=, workspace= or tmp= "
                                 "(bytes, e.g. 64M or 2G)")
            number = value.strip().upper().removesuffix("B").removesuffix("I")
            unit = number[-1:] if number[-1:] in _UNITS else ""
            try:
                size = int(float(number[:len(number) - len(unit)]) * _UNITS[unit])
            except ValueError:
                raise ValueError(f"sandbox limit {item!r}: {value!r} is not a size like 64M "
                                 "or 2G") from None
            if size < 1 << 20:
                raise ValueError(f"sandbox limit {item!r}: must be at least 1M")
            values[NAMES[name]] = size
        return cls(**values)

    @classmethod
    def of(cls, config: dict[str, Any] | None) -> SandboxLimits:
        """The limits a run's config records (defaults for a run from before they were)."""
        c = config or {}
        return cls(**{k: int(c[k]) for k in asdict(cls()) if k in c})

    def to_config(self) -> dict[str, int]:
        return asdict(self)


def size_text(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} bytes"


def disk_usage(root: Path) -> int:
    """Bytes the files under `root` take on disk (allocated blocks, each inode once, links
    not followed): what a command's writes cost the filesystem."""
    return usage(root)[0]


def usage(root: Path) -> tuple[int, int]:
    """(disk_usage, the size of the largest regular file) under `root`."""
    seen: set[int] = set()
    total = largest = 0
    try:
        fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return 0, 0
    try:
        for _, dirs, files, dfd in os.fwalk(".", dir_fd=fd):
            for name in dirs + files:
                try:
                    st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
                except OSError:     # removed while we looked
                    continue
                if st.st_ino not in seen and not stat.S_ISLNK(st.st_mode):
                    seen.add(st.st_ino)
                    total += st.st_blocks * 512
                    if stat.S_ISREG(st.st_mode):
                        largest = max(largest, st.st_size)
    finally:
        os.close(fd)
    return total, largest
