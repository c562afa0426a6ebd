"""What a turn costs: Anthropic's list prices per million tokens, and the figures a person
sets for a model that is not listed. `model.called` records each turn's cost from them."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

PRICE_ENV = "NPU_DEPLOY_CLAUDE_PRICE"


@dataclass(frozen=True)
class Price:
    """USD per million tokens: input, output, 5-minute cache write, cache read."""

    input: float
    output: float
    cache_write: float
    cache_read: float

    def cost(self, usage: dict[str, int]) -> float:
        return (usage["input_tokens"] * self.input + usage["output_tokens"] * self.output
                + usage["cache_write_tokens"] * self.cache_write
                + usage["cache_read_tokens"] * self.cache_read) / 1e6


#: Anthropic's list prices (platform.claude.com/docs/en/about-claude/pricing, read
#: 2026-11). A model not listed needs NPU_DEPLOY_CLAUDE_PRICE="in,out,cache_write,cache_read".
PRICES = {
    "claude-fable-5-1": Price(10.0, 50.0, 12.5, 0.25),
    "claude-opus-5-5": Price(4.0, 20.0, 5.0, 0.20),
    "claude-sonnet-5-5": Price(2.0, 10.0, 2.5, 0.10),
    "claude-sonnet-5": Price(2.0, 10.0, 2.5, 0.20),
    "claude-opus-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-8": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-7": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-6": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-sonnet-4-6": Price(3.0, 15.0, 3.75, 0.30),
    "claude-sonnet-4-5": Price(3.0, 15.0, 3.75, 0.30),
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 0.10),
}


def price_of(model: str, env: Mapping[str, str] | None = None) -> Price:
    override = (os.environ if env is None else env).get(PRICE_ENV)
    if override:
        try:
            figures = [float(x) for x in override.split(",")]
            if len(figures) != 4 or min(figures) < 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"{PRICE_ENV}={override!r}: expected four USD-per-million-token "
                             "figures: input,output,cache_write,cache_read") from None
        return Price(*figures)
    base = re.sub(r"-\d{8}$", "", model)          # a dated snapshot costs what its alias does
    if base not in PRICES:
        raise ValueError(f"no list price known for model {model!r}; set {PRICE_ENV}="
                         "input,output,cache_write,cache_read (USD per million tokens)")
    return PRICES[base]
