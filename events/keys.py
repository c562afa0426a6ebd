"""How idempotency keys and call ids are spelled: the one place that builds and reads them.

A resumed run finds what it already did by its events' idempotency keys, and a step's
call id is the key of its request, so these spellings are part of every stored run and of
its hash chain. They never change:

    run.start                       a run's first event (run.started or run.forked)
    run.finished                    its last
    p{phase}.a{attempt}             an attempt: the id of its checkpoint, of its debug proposal
    p{phase}.a{attempt}.{what}      one event of that attempt, what being
        entered, exited, overridden     its phase.entered, its phase.exited (an override
                                        after a needs_human exit is an exit of its own)
        m3, f4, c5, s6, s6.done         what the agent's PhaseRun numbered: its 3rd message,
                                        4th fact, 5th model call, 6th step (requested,
                                        completed); the step's call id is "p0.a1.s6"
        gate.s1, gate.m2, debug.s1      the same, numbered by the gate's or the debug
                                        matcher's own PhaseRun
        gate, gate.done, gate.result    the gate's step (requested, completed) and its verdict
        checkpoint, debug               checkpoint.requested, debug.proposed
        policy.approve, policy.pick     a decision the auto-approve policy took
        stopped                         (never stored) the TUI's id of a stopped attempt
    {call id}:requested, :completed a step keyed by what it computes, not by its attempt:
                                    the golden tensors of one prompt, captured once a run
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

#: The idempotency keys of a run's first and last events.
RUN_START: Final = "run.start"
RUN_FINISHED: Final = "run.finished"

#: What a PhaseRun numbers, by the letter its keys spell it with.
MESSAGE: Final = "m"
FACT: Final = "f"
MODEL_CALL: Final = "c"
STEP: Final = "s"
#: The PhaseRuns other than the agent's, which number their keys apart.
ROLES: Final = ("gate", "debug")
#: A step's completion: its request's key and this.
DONE: Final = "done"

_KEY = re.compile(r"p(0|[1-9][0-9]*)\.a([1-9][0-9]*)(?:\.(.+))?")
_COUNTED = re.compile(rf"(?:({'|'.join(ROLES)})\.)?([{MESSAGE}{FACT}{MODEL_CALL}{STEP}])"
                      rf"([1-9][0-9]*)(?:\.{DONE})?")


@dataclass(frozen=True, slots=True)
class AttemptKey:
    """The key of one event of one attempt of one phase (`what` given), or of the attempt
    itself (`what` empty): `str()` spells it, `parse` reads it back."""

    phase: int
    attempt: int
    what: str = ""

    def __post_init__(self) -> None:
        if type(self.phase) is not int or self.phase < 0:
            raise ValueError(f"a key's phase must be an integer >= 0, got {self.phase!r}")
        if type(self.attempt) is not int or self.attempt < 1:
            raise ValueError(f"a key's attempt must be an integer >= 1, got {self.attempt!r}")
        if self.what and not all(self.what.split(".")):
            raise ValueError(f"a key's parts must not be empty: {self.what!r}")

    def __str__(self) -> str:
        base = f"p{self.phase}.a{self.attempt}"
        return f"{base}.{self.what}" if self.what else base

    @classmethod
    def parse(cls, text: str) -> AttemptKey | None:
        """The key `text` spells, or None when it is not an attempt's key (run.start, a
        capture's call id, a foreign id)."""
        m = _KEY.fullmatch(text)
        if m is None or (m[3] is not None and not all(m[3].split("."))):
            return None
        return cls(int(m[1]), int(m[2]), m[3] or "")

    def child(self, *parts: str) -> AttemptKey:
        """This key with `parts` appended: AttemptKey(0, 1).child("gate", "result")."""
        return AttemptKey(self.phase, self.attempt, ".".join(filter(None, (self.what, *parts))))

    def counted(self, kind: str, n: int) -> AttemptKey:
        """The n-th message, fact, model call or step (MESSAGE, FACT, MODEL_CALL, STEP) of
        the PhaseRun whose keys start with this one."""
        if kind not in (MESSAGE, FACT, MODEL_CALL, STEP) or type(n) is not int or n < 1:
            raise ValueError(f"a counted key needs a kind of m, f, c, s and n >= 1, "
                             f"got {kind!r}, {n!r}")
        return self.child(f"{kind}{n}")

    def done(self) -> AttemptKey:
        """The key of a step's completion, from the key (the call id) of its request."""
        return self.child(DONE)

    @property
    def attempt_key(self) -> AttemptKey:
        """The key of the attempt itself (a checkpoint's, a debug proposal's id)."""
        return AttemptKey(self.phase, self.attempt)

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.what.split(".")) if self.what else ()

    @property
    def role(self) -> str:
        """Whose PhaseRun numbered this key: "gate" or "debug" (p0.a1.gate.s1), "" for the
        agent's (p0.a1.s1) and for keys nobody numbered (p0.a1.gate, p0.a1.gate.result)."""
        m = _COUNTED.fullmatch(self.what)
        return (m[1] or "") if m else ""

    @property
    def counter(self) -> int | None:
        """The number its PhaseRun gave this key (3 for m3, s3.done, gate.s3), if any."""
        m = _COUNTED.fullmatch(self.what)
        return int(m[3]) if m else None


def capture_keys(call_id: str) -> tuple[str, str]:
    """The idempotency keys of the request and the completion of a step keyed by what it
    computes (its call id), not by its attempt."""
    return f"{call_id}:requested", f"{call_id}:completed"
