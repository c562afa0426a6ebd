"""The agent's files and commands: the run's workspace directory with read-only copies of
the gates' code and of the oracle's answers; file tools that walk a path one component at a
time without following links, touch regular files only, never write the protected copies
or through a hard link to them, and stop a regular expression that runs too long; and shell
commands confined by bubblewrap (`bubblewrap.py`), with limits on time, memory, output
and bytes written (`limits.py`)."""

from __future__ import annotations

import errno
import json
import os
import posixpath
import selectors
import signal
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import regex
from platformdirs import user_config_path

from npu_deploy.agents.claude import bubblewrap
from npu_deploy.agents.claude.limits import (
    WHERE,
    SandboxLimits,
    disk_usage,
    size_text,
    usage,
)
from npu_deploy.pipeline.workspace import Workspace
from npu_deploy.store.anchor import key_path

RESULT_CHARS = 20_000        # a tool result longer than this reaches the model cut
READ_CHARS = 60_000          # read_file returns at most this much at once
PROTECTED = ("oracle", "gates")      # copies of the oracle's outputs and of the gates
GREP_SECONDS = 10.0          # one grep's regular expression may search this long in all
GREP_FILE_BYTES = 16 << 20   # grep skips files larger than this
OUTPUT_BYTES = 1 << 20       # a command printing more is stopped, its output cut
MEMORY_BYTES = 4 << 30       # address space of each process of a command
WATCH_S = 0.02               # how often the workspace's size is measured while a command runs


class Refused(PermissionError):
    """A file or command outside what the agent may touch."""


def prepare(ws: Workspace, root: Path, answers: dict[str, Any] | None) -> None:
    """The directory, with read-only copies of the gates' code and thresholds and, once
    phase 0 built it, of the oracle's answers. The gates read the store, never these
    copies: changing them could fool nobody, and the file tools refuse to."""
    root.mkdir(parents=True, exist_ok=True)
    from npu_deploy.pipeline import gates as gates_package
    files = {root / "gates" / source.name: source.read_text()
             for source in sorted(Path(gates_package.__file__).parent.glob("*.py"))}
    if answers is not None:
        files[root / "oracle" / "answers.json"] = json.dumps(answers, indent=1,
                                                              sort_keys=True)
    for path, text in files.items():
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o444)
    for name in PROTECTED:
        if (root / name).is_dir():
            (root / name).chmod(0o555)


Parts = list[str]   # a path's components under the workspace
DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
#: O_NONBLOCK: opening a FIFO returns at once (and fstat refuses it) instead of waiting
#: for a writer that never comes.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Files:
    """read / list / grep / write / edit inside one directory. A path is walked one
    component at a time from the workspace's descriptor, each opened with O_NOFOLLOW: a
    link is refused, not followed, and a component swapped for a link between a check and
    its use cannot lead out, because there is no separate check. Only regular files are
    read or written; writes go to a new file renamed into place, so they never reach
    another name of the same file, and writes to the protected folders, to a file with a
    second name, or to a protected file's inode are refused."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def parts(self, path: str) -> Parts:
        """The path's components under the workspace, '..' resolved by name (a link is
        never looked through to resolve it)."""
        p = Path(path)
        if p.is_absolute():
            if not p.is_relative_to(self.root):
                raise Refused(f"{path}: outside the run's workspace {self.root}; refused")
            p = p.relative_to(self.root)
        norm = posixpath.normpath(p.as_posix())
        parts = [] if norm == "." else norm.split("/")
        if parts[:1] == [".."]:
            raise Refused(f"{path}: outside the run's workspace {self.root}; refused")
        return parts

    @contextmanager
    def directory(self, path: str, parts: Parts, *,
                  create: bool = False) -> Iterator[int]:
        """A descriptor of the directory `parts`, reached without following a link."""
        fd = os.open(self.root, DIR_FLAGS)
        try:
            for part in parts:
                try:
                    if create and not _exists(part, fd):
                        os.mkdir(part, dir_fd=fd)
                    child = os.open(part, DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR) and _is_link(part, fd):
                        raise self._link(path, part) from None
                    raise
                os.close(fd)
                fd = child
            yield fd
        finally:
            os.close(fd)

    def _link(self, path: str, part: str) -> Refused:
        return Refused(f"{path}: {part} is a symbolic link, which could lead outside the "
                       f"run's workspace {self.root}; the file tools follow none; refused")

    def open_regular(self, path: str, parts: Parts) -> int:
        """A read descriptor of the regular file at `parts`; links, FIFOs, devices and
        sockets refused."""
        if not parts:
            raise IsADirectoryError(f"{path}: the workspace is a directory")
        with self.directory(path, parts[:-1]) as d:
            try:
                fd = os.open(parts[-1], FILE_FLAGS, dir_fd=d)
            except OSError as e:
                if e.errno == errno.ELOOP:
                    raise self._link(path, parts[-1]) from None
                raise
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise Refused(f"{path}: not a regular file (a directory, FIFO, device or "
                          "socket); refused")
        return fd

    def read_bytes(self, path: str) -> bytes:
        with os.fdopen(self.open_regular(path, self.parts(path)), "rb") as f:
            return f.read()

    def read(self, path: str, offset: int = 0, limit: int = READ_CHARS) -> dict[str, Any]:
        text = self.read_bytes(path).decode(errors="replace")
        part = text[offset:offset + min(limit, READ_CHARS)]
        return {"path": path, "text": part, "offset": offset, "chars": len(text),
                "more": offset + len(part) < len(text)}

    def list(self, path: str = ".") -> dict[str, Any]:
        parts = self.parts(path)
        entries = []
        with self.directory(path, parts) as d:
            for where, dirs, files, fd in os.fwalk(".", dir_fd=d):
                prefix = posixpath.normpath(posixpath.join(*parts, where)) if parts \
                    else posixpath.normpath(where)
                for name in dirs + files:
                    mode = os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode
                    mark = "/" if stat.S_ISDIR(mode) else "@" if stat.S_ISLNK(mode) else ""
                    entries.append(posixpath.normpath(posixpath.join(prefix, name)) + mark)
        entries.sort()
        return {"path": path, "entries": entries[:2000], "count": len(entries)}

    def grep(self, pattern: str, path: str = ".") -> dict[str, Any]:
        """Lines of the regular files under `path` (links not followed) that match; the
        search stops with an error after GREP_SECONDS (the `regex` package's timeout, so a
        pattern that backtracks without end cannot hang the agent)."""
        compiled = regex.compile(pattern)
        deadline = time.monotonic() + GREP_SECONDS
        hits: list[str] = []

        def search(name: str, data: bytes) -> None:
            for n, line in enumerate(data.decode(errors="replace").splitlines(), 1):
                left = deadline - time.monotonic()
                try:
                    if left <= 0 or compiled.search(line, timeout=left):
                        if left <= 0:
                            raise TimeoutError
                        hits.append(f"{name}:{n}: {line[:300]}")
                except TimeoutError:
                    raise TimeoutError(f"grep {pattern!r}: the search ran past {GREP_SECONDS:g}"
                                       " s (a pattern that backtracks without end?) and "
                                       "was stopped; simplify the pattern") from None

        parts = self.parts(path)
        try:
            fd = self.open_regular(path, parts)
        except (IsADirectoryError, Refused):
            fd = -1
        if fd >= 0:
            with os.fdopen(fd, "rb") as f:
                search(posixpath.join(*parts), f.read(GREP_FILE_BYTES))
        else:
            with self.directory(path, parts) as d:
                for where, _, files, dfd in os.fwalk(".", dir_fd=d):
                    for name in sorted(files):
                        data = _regular_bytes(name, dfd)
                        if data is not None:
                            search(posixpath.normpath(posixpath.join(*parts, where, name)),
                                   data)
        return {"pattern": pattern, "hits": hits[:500], "count": len(hits)}

    def write(self, path: str, content: str) -> dict[str, Any]:
        self._replace(path, content.encode())
        return {"path": path, "chars": len(content)}

    def edit(self, path: str, old: str, new: str) -> dict[str, Any]:
        self.writable(path, self.parts(path))
        text = self.read_bytes(path).decode()
        count = text.count(old)
        if count != 1:
            raise ValueError(f"{path}: the text to replace occurs {count} times; it must "
                             "occur exactly once")
        self._replace(path, text.replace(old, new, 1).encode())
        return {"path": path, "chars": len(text) - len(old) + len(new)}

    def writable(self, path: str, parts: Parts) -> None:
        if not parts or parts[0] in PROTECTED:
            raise Refused(f"{path}: {parts[0] if parts else '.'} is protected (the "
                          "oracle's outputs and the gates); refused")

    def _replace(self, path: str, data: bytes) -> None:
        """The file's new content written to a new file and renamed over the old name."""
        parts = self.parts(path)
        self.writable(path, parts)
        protected = self.protected_inodes()
        with self.directory(path, parts[:-1], create=True) as d:
            name = parts[-1]
            try:
                st = os.stat(name, dir_fd=d, follow_symlinks=False)
            except FileNotFoundError:
                st = None
            if st is not None:
                if stat.S_ISLNK(st.st_mode):
                    raise self._link(path, name)
                if not stat.S_ISREG(st.st_mode):
                    raise Refused(f"{path}: not a regular file; refused")
                if (st.st_dev, st.st_ino) in protected or st.st_nlink > 1:
                    raise Refused(f"{path}: a hard link ({st.st_nlink} names; maybe to a "
                                  "protected file of oracle/ or gates/); refused")
            temp = f".{name}.{uuid.uuid4().hex[:8]}.tmp"
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o644, dir_fd=d)
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.replace(temp, name, src_dir_fd=d, dst_dir_fd=d)
            except BaseException:
                os.unlink(temp, dir_fd=d)
                raise

    def protected_inodes(self) -> set[tuple[int, int]]:
        """(device, inode) of every file under oracle/ and gates/."""
        found = set()
        with self.directory(".", []) as d:
            for top in PROTECTED:
                if not _exists(top, d):
                    continue
                for _, _, files, fd in os.fwalk(top, dir_fd=d):
                    for name in files:
                        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                        found.add((st.st_dev, st.st_ino))
        return found


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _is_link(name: str, dir_fd: int) -> bool:
    return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)


def _regular_bytes(name: str, dir_fd: int) -> bytes | None:
    """A regular file's first GREP_FILE_BYTES, or None for anything else."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=dir_fd)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return f.read(GREP_FILE_BYTES)


def hidden_paths(store_file: Path | None) -> list[Path]:
    """What a command must never see: the store's folder and the per-user key's (its
    default folder, and the one NPU_DEPLOY_KEY_FILE names)."""
    paths = list(dict.fromkeys([user_config_path("npu-deploy"), key_path().parent]))
    if store_file is not None:
        paths.append(store_file.resolve().parent)
    return paths


def run_command(command: str, cwd: Path, timeout_s: float, *,
                hidden: list[Path] | None = None, output_bytes: int = OUTPUT_BYTES,
                memory_bytes: int = MEMORY_BYTES,
                limits: SandboxLimits | None = None) -> dict[str, Any]:
    """A shell command in the workspace, confined by bubblewrap (refused where no sandbox
    can be set up). The output is read as it comes; past `output_bytes`, or at the
    timeout, the command is killed: bwrap's process group, and with it its PID namespace,
    so nothing it started outlives it. What it writes is bounded by `limits`: no file past
    file_bytes (nor past what the workspace has left), /tmp at tmp_bytes, and the
    workspace, measured every WATCH_S while it runs, at workspace_bytes: refused before it
    starts when the workspace is already full, stopped when it fills it."""
    problem = bubblewrap.unavailable()
    exe = bubblewrap.binary()
    if problem is not None or exe is None:
        raise Refused(problem or "run_command: no bubblewrap")
    limits = limits or SandboxLimits()
    root = cwd.resolve()
    used = disk_usage(root)
    left = limits.workspace_bytes - used
    if left < 1 << 20:
        raise Refused(f"run_command: the workspace holds {size_text(used)}, at its limit of "
                      f"{size_text(limits.workspace_bytes)} (workspace_bytes in {WHERE}); "
                      "delete files from it before running a command")
    file_bytes = min(limits.file_bytes, left)
    argv = bubblewrap.command_argv(exe, command, root, [root / p for p in PROTECTED],
                                   hidden if hidden is not None else hidden_paths(None),
                                   memory_bytes, file_bytes, limits.tmp_bytes)
    init = bubblewrap.SandboxInit()
    try:
        proc = subprocess.Popen(init.argv(argv), stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env=bubblewrap.BWRAP_ENV_VARS, start_new_session=True,
                                pass_fds=(init.write_fd,))
    finally:
        init.started()
    assert proc.stdout is not None
    out, total, timed_out, full = bytearray(), 0, False, False
    deadline = time.monotonic() + timeout_s
    watch_at = time.monotonic()
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(proc.stdout, selectors.EVENT_READ)
            while True:
                left_s = deadline - time.monotonic()
                if left_s <= 0:
                    timed_out = True
                    break
                if time.monotonic() >= watch_at:
                    walk = time.monotonic()
                    if disk_usage(root) > limits.workspace_bytes:
                        full = True
                        break
                    # a walk costs CPU in proportion to the files: at most a tenth of it
                    watch_at = time.monotonic() + max(WATCH_S, 10 * (time.monotonic() - walk))
                if not sel.select(max(0.0, min(left_s, watch_at - time.monotonic()))):
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                total += len(chunk)
                out += chunk[:max(0, output_bytes - len(out))]
                if total > output_bytes:
                    break
    finally:
        init.kill()
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.stdout.close()
        proc.wait()
        init.gone()           # and every process it started: none writes after we return
    text = out.decode(errors="replace")
    cut = total > output_bytes
    if cut:
        text += (f"\n… output cut at {output_bytes:,} bytes: the command was stopped "
                 "(write long output to a file and read parts of it)")
    used, largest = usage(root)
    full = full or used > limits.workspace_bytes
    # A write stopped at the file limit: the writer got SIGXFSZ (128 + 25 from the shell),
    # or EFBIG ("File too large"), and the file it wrote stands at the limit.
    hit = (largest >= file_bytes or proc.returncode == 128 + signal.SIGXFSZ
           or b"File size limit exceeded" in out or b"File too large" in out)
    stopped = None
    if full:
        stopped = (f"the command was stopped: the workspace passed its limit of "
                   f"{size_text(limits.workspace_bytes)} (workspace_bytes in {WHERE}); "
                   "delete what it wrote that you do not need")
    elif hit:
        stopped = (f"a write was refused: no file may grow past {size_text(file_bytes)} "
                   f"(file_bytes in {WHERE}, or what the workspace has left of its "
                   f"{size_text(limits.workspace_bytes)}; /tmp holds "
                   f"{size_text(limits.tmp_bytes)})")
    elif b"No space left on device" in out:
        stopped = (f"a write found no space left: /tmp holds at most "
                   f"{size_text(limits.tmp_bytes)} (tmp_bytes in {WHERE}); write large "
                   "files to the workspace instead")
    if stopped:
        text += f"\n… {stopped}"
    return {"command": command, "exit_code": proc.returncode, "timed_out": timed_out,
            "output_cut": cut, "output": text[-RESULT_CHARS:], "output_chars": len(text),
            "limit": stopped}
