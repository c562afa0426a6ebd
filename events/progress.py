"""How far a long step has got: the stages its work marks, for whoever watches the run.

A step's work marks its stages. A stage counts its own unit ("part", "token", ...):
`advance(unit)` counts in the innermost open stage of that unit and is a no-op when there is
none, so a loop deep in the model (each greedy token) costs one lookup when nobody counts:

    with stage("phase-3 check", total=len(prompts) * steps, unit="token"):
        for p in prompts:
            model.generate(...)         # advance("token") per token
            reach("token", (i + 1) * steps)

Stages nest (the independent check's parts, each with its tokens). The marks go to the
step's counter, installed by `counting` while the step runs: the conductor's writes them to
a file beside the run's lock for the watcher (store/progress.py). Progress is not history:
nothing here is an event, and nothing here does I/O. It sits in the vocabulary because the
oracle and the pipeline mark stages and the conductor installs the counter, and `events` is
the one package all of them may import.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Any, Protocol


class Counter(Protocol):
    """What a step's marks count into (store/progress.py's `Reporter`)."""

    def open(self, name: str, total: int, unit: str) -> Any:
        """A new innermost stage; returns its handle, for `close`."""

    def close(self, stage: Any) -> None:
        """The stage `open` returned has ended (and any opened inside it)."""

    def count(self, unit: str, n: int, *, absolute: bool = False) -> None:
        """`n` more (or, `absolute`, `n` in all) `unit`s in the innermost stage of that unit."""

    def write(self, *, force: bool = False) -> None:
        """Show the counts now (a step within this one has ended)."""


_counter: ContextVar[Counter | None] = ContextVar("npu_deploy_progress", default=None)


@contextlib.contextmanager
def counting(counter: Counter) -> Iterator[Counter]:
    """While a step runs: what its work marks counts into `counter` (a step within a step
    counts into its own until it ends, then its parent's again)."""
    token = _counter.set(counter)
    try:
        yield counter
    finally:
        _counter.reset(token)


def current() -> Counter | None:
    """The counter of the running step, or None when no step counts."""
    return _counter.get()


@contextlib.contextmanager
def stage(name: str, total: int, unit: str = "part") -> Iterator[None]:
    """A stage of the running step of `total` `unit`s (nothing when no step counts)."""
    counter = _counter.get()
    if counter is None:
        yield
        return
    s = counter.open(name, total, unit)
    try:
        yield
    finally:
        counter.close(s)


def advance(unit: str = "part", n: int = 1) -> None:
    """`n` more `unit`s done in the innermost stage that counts them."""
    counter = _counter.get()
    if counter is not None:
        counter.count(unit, n)


def reach(unit: str, done: int) -> None:
    """The innermost stage of `unit` has `done` of them (a run that stopped early skips the
    rest of its count)."""
    counter = _counter.get()
    if counter is not None:
        counter.count(unit, done, absolute=True)
