"""The replay's play state: whether it plays, how fast, and the event it is due at now."""

from __future__ import annotations

import time

SPEEDS = (1, 4, 16, 64, 256, 1024)     # replay speeds, events per second


class Player:
    """Plays from the event it started at, at SPEEDS[speed] events a second of the UI's
    clock; changing the speed starts counting again from the cursor."""

    def __init__(self) -> None:
        self.playing = False
        self.speed = 3                       # index into SPEEDS
        self._from = 0.0
        self._start = 0

    @property
    def rate(self) -> int:
        """Events per second."""
        return SPEEDS[self.speed]

    def mode(self, follow: bool) -> str:
        """What the title calls it: LIVE, PLAY x16 or REPLAY."""
        return "LIVE" if follow else (f"PLAY x{self.rate}" if self.playing else "REPLAY")

    def start(self, cursor: int) -> None:
        """Count from `cursor`, now."""
        self._from, self._start = time.monotonic(), cursor

    def faster(self, step: int, cursor: int) -> None:
        """`step` speeds up (or down, negative), within SPEEDS."""
        self.speed = max(0, min(len(SPEEDS) - 1, self.speed + step))
        self.start(cursor)

    def due(self, newest: int) -> int:
        """The event the replay is due at, at most `newest`; it stops there."""
        target = self._start + int((time.monotonic() - self._from) * self.rate)
        if target >= newest:
            self.playing = False
            target = newest
        return target
