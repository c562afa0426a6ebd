"""When a phase attempt must stop for a person: its budget (turns, tokens, dollars, wall
clock) and what it has spent, read from its events so that a resumed attempt counts what
it spent before the crash."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Budget:
    """What one phase attempt may spend before it stops for a person. `wall_s` counts the
    seconds of the attempt's model calls and tool steps (a pause is not counted)."""

    turns: int = 60
    tokens: int = 4_000_000
    usd: float = 10.0
    wall_s: float = 3600.0

    @classmethod
    def parse(cls, text: str) -> Budget:
        """"turns=40,tokens=2e6,usd=5,wall=1800" (any subset)."""
        names = {"turns": "turns", "tokens": "tokens", "usd": "usd", "wall": "wall_s"}
        values: dict[str, Any] = {}
        for item in filter(None, (t.strip() for t in text.split(","))):
            name, _, value = item.partition("=")
            if name not in names:
                raise ValueError(f"agent budget {item!r}: expected turns=, tokens=, usd= or "
                                 "wall= (seconds)")
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"agent budget {item!r}: {value!r} is not a number") from None
            if number <= 0:
                raise ValueError(f"agent budget {item!r}: must be > 0")
            values[names[name]] = int(number) if name in ("turns", "tokens") else number
        return cls(**values)


@dataclass(frozen=True)
class Spent:
    turns: int = 0
    tokens: int = 0
    usd: float = 0.0
    wall_s: float = 0.0

    def over(self, b: Budget) -> str | None:
        figures = (f"turns {self.turns}/{b.turns}, tokens {self.tokens:,}/{b.tokens:,}, "
                   f"${self.usd:.2f}/${b.usd:.2f}, {self.wall_s:.0f}/{b.wall_s:.0f} s")
        for name, used, limit in (("turns", self.turns, b.turns),
                                  ("tokens", self.tokens, b.tokens),
                                  ("dollars", self.usd, b.usd),
                                  ("wall clock", self.wall_s, b.wall_s)):
            if used >= limit:
                return f"the attempt spent its {name} budget ({figures})"
        return None


def spent(run: Any) -> Spent:
    """What this attempt has spent, from its events (the same on a resumed run)."""
    s = Spent()
    for e in run.events("model.called", "tool.completed"):
        p = e.payload
        if e.type == "model.called":
            s = Spent(s.turns + 1, s.tokens + p["input_tokens"] + p["output_tokens"]
                      + p["cache_read_tokens"] + p["cache_write_tokens"],
                      s.usd + p["cost_usd"], s.wall_s + p["duration_s"])
        else:
            s = Spent(s.turns, s.tokens, s.usd, s.wall_s + p["duration_s"])
    return s
