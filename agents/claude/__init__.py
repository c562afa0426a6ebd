"""The Claude agent: our own tool-use loop over the Anthropic Messages API, working a phase
through the same toolbox and under the same gates as the autopilot.

One conversation per phase attempt. It is seeded with the orchestrator's and the phase's
skill (the frozen system prompt), the catalog's other skills by name and description, and
what the log says of the phase (the last gate, a person's instruction, the picked debug
direction). Each turn is one `messages.create` call recorded through `PhaseRun.exchange`:
a `model.called` event with the usage (cache reads and writes too), cost, stop reason,
request id and latency, and blobs of the request and the response. Every tool the model
asks for is a recorded step (`tool.requested` / `tool.completed`), so a resumed run reads
the model's replies and the tools' results back from the log and neither calls nor pays
for anything twice.

Stop reasons: tool_use runs every requested tool and answers in one turn (a failure as
`is_error`); end_turn hands the phase to the harness's gate; pause_turn sends the turn back;
max_tokens asks the model to go on (an unfinished tool call is dropped); refusal and any
spent budget stop the phase for a person; a full context window starts a new conversation
seeded from the log.

The API key comes from ANTHROPIC_API_KEY and goes nowhere else: not into an event, a blob,
or an error message (`scrub`).

One module per concern: `prices` (what a turn costs), `budget` (when an attempt stops),
`config` (the settings and the key), `sandbox` (the agent's files and commands),
`bubblewrap` (the confined process a command runs in), `tools` (what the model may call),
`prompts` (what it reads), `conversation` (the messages as sent), `transport` (the
Messages API), `loop` (one attempt, turn by turn) and `directions` (debug directions
after a failed gate).
"""

from __future__ import annotations

from npu_deploy.agents.claude.budget import Budget, Spent, spent
from npu_deploy.agents.claude.config import (
    DEFAULT_MODEL,
    KEY_ENV,
    MODEL_ENV,
    ClaudeConfig,
    model_from_env,
    scrub,
)
from npu_deploy.agents.claude.conversation import Conversation, sendable
from npu_deploy.agents.claude.directions import AgentDirections
from npu_deploy.agents.claude.loop import ClaudeAgent
from npu_deploy.agents.claude.prices import PRICE_ENV, PRICES, Price, price_of
from npu_deploy.agents.claude.prompts import PHASE_SKILLS, reseed, seed, system_prompt
from npu_deploy.agents.claude.sandbox import Files, Refused, prepare, run_command
from npu_deploy.agents.claude.tools import TOOLS, Context, Tool, run_tool, tool_schemas
from npu_deploy.agents.claude.transport import MessagesAPI, context_overflow
from npu_deploy.machine import Pipeline
from npu_deploy.pipeline.gates import gates

__all__ = [
    "DEFAULT_MODEL", "KEY_ENV", "MODEL_ENV", "PHASE_SKILLS", "PRICES", "PRICE_ENV", "TOOLS",
    "AgentDirections", "Budget", "ClaudeAgent", "ClaudeConfig", "Context", "Conversation",
    "Files", "MessagesAPI", "Price", "Refused", "Spent", "Tool", "context_overflow",
    "model_from_env", "pipeline", "prepare", "price_of", "reseed", "run_command", "run_tool",
    "scrub", "seed", "sendable", "spent", "system_prompt", "tool_schemas",
]


# Defined here, not in a submodule: runs store "npu_deploy.agents.claude:pipeline" in
# run.started and resume loads the pipeline by that name.
def pipeline() -> Pipeline:
    return Pipeline(ClaudeAgent(), gates(), AgentDirections())
