"""The agent's settings (model, output limit, budget, retries, command timeout, what a
command may write), stored in the run's configuration, and the API key: read from
ANTHROPIC_API_KEY and nowhere else, and kept out of every event, blob and error message
(`scrub`)."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from npu_deploy.agents.claude.budget import Budget
from npu_deploy.agents.claude.limits import SandboxLimits

KEY_ENV = "ANTHROPIC_API_KEY"
MODEL_ENV = "NPU_DEPLOY_CLAUDE_MODEL"
DEFAULT_MODEL = "claude-sonnet-5-5"


@dataclass(frozen=True)
class ClaudeConfig:
    """The agent's settings, from the run's configuration ("claude" in run.started)."""

    model: str = DEFAULT_MODEL
    max_tokens: int = 8192
    budget: Budget = field(default_factory=Budget)
    max_retries: int = 4
    command_timeout_s: float = 600.0
    sandbox: SandboxLimits = field(default_factory=SandboxLimits)

    @classmethod
    def of(cls, config: dict[str, Any]) -> ClaudeConfig:
        c = dict(config.get("claude") or {})
        budget = Budget(**c["budget"]) if c.get("budget") else Budget()
        return cls(str(c.get("model", DEFAULT_MODEL)), int(c.get("max_tokens", 8192)), budget,
                   int(c.get("max_retries", 4)), float(c.get("command_timeout_s", 600.0)),
                   SandboxLimits.of(c.get("sandbox")))

    def to_config(self) -> dict[str, Any]:
        b = self.budget
        return {"model": self.model, "max_tokens": self.max_tokens,
                "max_retries": self.max_retries, "command_timeout_s": self.command_timeout_s,
                "budget": {"turns": b.turns, "tokens": b.tokens, "usd": b.usd,
                           "wall_s": b.wall_s},
                "sandbox": self.sandbox.to_config()}


def model_from_env(option: str | None, env: Mapping[str, str] | None = None) -> str:
    """--model, else $NPU_DEPLOY_CLAUDE_MODEL, else the default."""
    return option or (os.environ if env is None else env).get(MODEL_ENV) or DEFAULT_MODEL


def scrub(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` without the API key (nor anything shaped like an Anthropic key)."""
    key = (os.environ if env is None else env).get(KEY_ENV)
    if key:
        text = text.replace(key, "[ANTHROPIC_API_KEY]")
    return re.sub(r"sk-ant-[A-Za-z0-9_\-]{8,}", "[ANTHROPIC_API_KEY]", text)
