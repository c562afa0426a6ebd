"""The agent's files and commands: the run's workspace directory with read-only copies of
the gates' code and of the oracle's answers, file tools that stay inside it and refuse to
write the protected copies, and shell commands with a minimal environment and a timeout."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from npu_deploy.pipeline.workspace import Workspace

RESULT_CHARS = 20_000        # a tool result longer than this reaches the model cut
READ_CHARS = 60_000          # read_file returns at most this much at once
PROTECTED = ("oracle", "gates")      # copies of the oracle's outputs and of the gates


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


class Files:
    """read / list / grep / write / edit inside one directory, paths resolved with their
    symlinks; writes to the protected folders are refused."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def resolve(self, path: str, *, write: bool = False) -> Path:
        target = (self.root / path).resolve()
        if target != self.root and not target.is_relative_to(self.root):
            raise Refused(f"{path}: outside the run's workspace {self.root}; refused")
        rel = target.relative_to(self.root)
        if write and (not rel.parts or rel.parts[0] in PROTECTED):
            raise Refused(f"{path}: {'/'.join(rel.parts[:1]) or '.'} is protected (the "
                          "oracle's outputs and the gates); refused")
        return target

    def read(self, path: str, offset: int = 0, limit: int = READ_CHARS) -> dict[str, Any]:
        text = self.resolve(path).read_text(errors="replace")
        part = text[offset:offset + min(limit, READ_CHARS)]
        return {"path": path, "text": part, "offset": offset, "chars": len(text),
                "more": offset + len(part) < len(text)}

    def list(self, path: str = ".") -> dict[str, Any]:
        base = self.resolve(path)
        entries = sorted(str(p.relative_to(self.root)) + ("/" if p.is_dir() else "")
                         for p in base.rglob("*"))
        return {"path": path, "entries": entries[:2000], "count": len(entries)}

    def grep(self, pattern: str, path: str = ".") -> dict[str, Any]:
        regex = re.compile(pattern)
        base = self.resolve(path)
        hits = []
        for p in sorted([base] if base.is_file() else base.rglob("*")):
            if not p.is_file():
                continue
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                if regex.search(line):
                    hits.append(f"{p.relative_to(self.root)}:{n}: {line[:300]}")
        return {"pattern": pattern, "hits": hits[:500], "count": len(hits)}

    def write(self, path: str, content: str) -> dict[str, Any]:
        target = self.resolve(path, write=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        return {"path": path, "chars": len(content)}

    def edit(self, path: str, old: str, new: str) -> dict[str, Any]:
        target = self.resolve(path, write=True)
        text = target.read_text()
        count = text.count(old)
        if count != 1:
            raise ValueError(f"{path}: the text to replace occurs {count} times; it must "
                             "occur exactly once")
        target.write_text(text.replace(old, new, 1))
        return {"path": path, "chars": len(text) - len(old) + len(new)}


def run_command(command: str, cwd: Path, timeout_s: float) -> dict[str, Any]:
    """A shell command in the workspace with a minimal environment (no API keys). At the
    timeout the whole process group is killed."""
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
           "HOME": str(cwd), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        timed_out = True
    text = out.decode(errors="replace")
    return {"command": command, "exit_code": proc.returncode, "timed_out": timed_out,
            "output": text[-RESULT_CHARS:], "output_chars": len(text)}
