"""The progress file of a run's step in flight: what the step's work counts
(events/progress.py: its stages, marked by the oracle's and the pipeline's work) is written
here for whoever watches the run, the TUI of this process or of another (`attach`).

Progress is not history. It is not an event and not in the chain: a step's result is. The
conductor writes it to a small JSON file beside the run's lock (`<store>.locks/RUN.progress`,
`EventStore.progress_path`), replaced whole at most every `WRITE_S` (a count held back is
written when that has passed) and removed when the step ends, so the watcher never
contends with the run's writer for the database; `read` is the watcher's side.

The watcher shows every stage and fills its bar from the outermost, the inner one's
fraction included.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path

from npu_deploy.events.progress import counting, current

WRITE_S = 0.2               # the file is replaced at most this often (and at a stage's edges)


@dataclass(slots=True)
class Stage:
    name: str
    total: int
    unit: str
    done: int = 0


@dataclass(slots=True)
class Progress:
    """A step's stages, outermost first, as written for the watcher."""

    call_id: str
    tool: str
    stages: list[Stage] = field(default_factory=list)

    def fraction(self) -> float | None:
        """How much of the outermost stage is done, the inner stages' shares included; None
        with no stage open."""
        frac, seen = 0.0, False
        for s in reversed(self.stages):
            if s.total <= 0:
                continue
            frac = min(1.0, (min(s.done, s.total) + frac) / s.total)
            seen = True
        return frac if seen else None

    def text(self) -> str:
        """`name done/total unit`, stage by stage: `independent check 3/9 parts · phase-3 check
        12/64 tokens`."""
        return " · ".join(f"{s.name} {min(s.done, s.total)}/{s.total} {s.unit}s"
                          for s in self.stages)


class Reporter:
    """The progress of one step, written to `path` for the watcher: the counter that
    events/progress.py's marks count into while the step runs."""

    def __init__(self, path: Path, call_id: str, tool: str) -> None:
        self.path, self.progress = path, Progress(call_id, tool)
        self._written = 0.0
        self._lock = threading.Lock()
        self._later: threading.Timer | None = None    # writes a count held back
        self._removed = False

    def open(self, name: str, total: int, unit: str) -> Stage:
        s = Stage(name, max(0, int(total)), unit)
        self.progress.stages.append(s)
        self.write(force=True)
        return s

    def close(self, s: Stage) -> None:
        if s in self.progress.stages:
            del self.progress.stages[self.progress.stages.index(s):]
            if self.progress.stages:      # the outer stage's last count is not lost
                self.write(force=True)

    def count(self, unit: str, n: int, *, absolute: bool = False) -> None:
        for s in reversed(self.progress.stages):
            if s.unit == unit:
                s.done = n if absolute else s.done + n
                self.write(force=s.done >= s.total)
                return

    def write(self, *, force: bool = False) -> None:
        """Replace the file now, or (within WRITE_S of the last write) once that has passed:
        the newest count always reaches the watcher, however long the next one takes."""
        with self._lock:
            if self._removed:
                return
            wait = self._written + WRITE_S - time.monotonic()
            if not force and wait > 0:
                if self._later is None:
                    self._later = threading.Timer(wait, self._write_later)
                    self._later.daemon = True
                    self._later.start()
                return
            self._written = time.monotonic()
            text = json.dumps(asdict(self.progress))
            tmp = self.path.with_name(self.path.name + f".{threading.get_ident()}.tmp")
            try:
                tmp.write_text(text, encoding="utf-8")
                os.replace(tmp, self.path)
            except OSError:
                pass        # progress is a courtesy: a full or read-only disk loses only it

    def _write_later(self) -> None:
        self._later = None
        self.write(force=True)

    def remove(self) -> None:
        with self._lock:
            self._removed = True
            if self._later is not None:
                self._later.cancel()
            with contextlib.suppress(OSError):
                self.path.unlink()


@contextlib.contextmanager
def reporting(path: Path, call_id: str, tool: str) -> Iterator[Reporter]:
    """While a step runs: what its work counts goes to `path`, removed after (a step within
    a step writes over its parent's until it ends)."""
    reporter = Reporter(path, call_id, tool)
    try:
        with counting(reporter):
            yield reporter
    finally:
        reporter.remove()
        outer = current()
        if outer is not None:
            outer.write(force=True)


def read(path: Path) -> Progress | None:
    """What the step at `path` last wrote; None when nothing runs, or what is there is not
    a progress file (it is a courtesy, never trusted for anything else)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        stages = [Stage(str(s["name"]), int(s["total"]), str(s["unit"]), int(s["done"]))
                  for s in raw["stages"]]
        return Progress(str(raw["call_id"]), str(raw["tool"]), stages)
    except (OSError, ValueError, KeyError, TypeError):
        return None
