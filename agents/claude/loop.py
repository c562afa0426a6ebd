"""The tool-use loop of one phase attempt: a turn at a time, each recorded through
`PhaseRun.exchange` (so a resumed run reads the reply back from the log instead of calling
again), every requested tool run and answered in one turn, and the stop reasons turned
into what happens next (the gate, another turn, a new conversation, or a person)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import partial
from typing import Any

from npu_deploy.agents.claude.budget import spent
from npu_deploy.agents.claude.config import ClaudeConfig
from npu_deploy.agents.claude.conversation import Conversation, sendable
from npu_deploy.agents.claude.prices import Price, price_of
from npu_deploy.agents.claude.prompts import reseed, seed, system_prompt
from npu_deploy.agents.claude.sandbox import Files, prepare
from npu_deploy.agents.claude.tools import Context, run_tool, tool_schemas
from npu_deploy.agents.claude.transport import MessagesAPI
from npu_deploy.events.payloads import ErrorRaised, ModelCalled
from npu_deploy.machine import NeedsHuman
from npu_deploy.machine.reopen import run_config
from npu_deploy.pipeline.workspace import Workspace, read_json, workspace_of


class ClaudeAgent:
    """The conductor's Agent for `--agent claude`."""

    name = "claude"

    def __init__(self, client: Any = None, env: Mapping[str, str] | None = None) -> None:
        self.env: Mapping[str, str] = os.environ if env is None else env
        self.api = MessagesAPI(client, self.env)

    def work(self, run: Any) -> None:
        ws = workspace_of(run)
        config = ClaudeConfig.of(run_config(ws.store, ws.run_id))
        price = price_of(config.model, self.env)
        root = ws.directory
        oracle = ws.latest("answers", tool="build_oracle")
        prepare(ws, root, read_json(ws.store, oracle["answers"]) if oracle else None)
        ctx = Context(run, Files(root), config)
        system, tools = system_prompt(run.phase), tool_schemas()
        conv = Conversation(seed(run, ws, root))
        decision = run.decision() if run.instruction else None
        if decision is not None and decision.payload["decision"] == "redirect":
            run.say("the person's instruction goes to Claude verbatim in this attempt's first "
                    f"turn:\n{run.instruction}", answering=decision.event_id)
        while True:
            event = run.exchange(partial(self._call, run, ws, config, price, system, tools,
                                         conv))
            if event.type == "error":
                if event.payload["kind"] == "context_window_exceeded":
                    conv = Conversation(reseed(run, ws, root))
                    continue
                raise NeedsHuman(f"the Anthropic API failed: {event.payload['message']}")
            conv.sent = len(conv.messages)
            response = read_json(ws.store, event.payload["response"])
            stop = event.payload["stop_reason"]
            blocks = [sendable(b) for b in response.get("content", [])]
            for b in blocks:
                if b.get("type") == "text" and b["text"].strip():
                    run.say(b["text"].strip())
            if stop == "tool_use":
                conv.assistant(blocks)
                conv.user(self._run_tools(ctx, [b for b in blocks if b["type"] == "tool_use"]))
            elif stop in ("end_turn", "stop_sequence"):
                return
            elif stop == "pause_turn":
                conv.assistant(blocks)
            elif stop == "max_tokens":
                conv.assistant([b for b in blocks if b.get("type") != "tool_use"])
                conv.user([{"type": "text", "text": "Your reply was cut off at the output "
                            "limit. Go on from there, in smaller steps."}])
            elif stop == "refusal":
                said = " ".join(b["text"] for b in blocks if b.get("type") == "text")
                raise NeedsHuman(f"Claude declined to go on with phase {run.phase} (stop "
                                 f"reason refusal){': ' + said[:300] if said else ''}")
            elif stop == "model_context_window_exceeded":
                conv = Conversation(reseed(run, ws, root))
            else:
                raise NeedsHuman(f"Claude stopped with an unknown stop reason {stop!r}")

    def _run_tools(self, ctx: Context, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every requested tool, in order; all the results go back in one turn."""
        results = []
        for call in calls:
            ok, content = run_tool(ctx, call["name"], dict(call.get("input") or {}))
            results.append({"type": "tool_result", "tool_use_id": call["id"],
                            "content": content, **({} if ok else {"is_error": True})})
        return results

    def _call(self, run: Any, ws: Workspace, config: ClaudeConfig, price: Price,
              system: list[dict[str, Any]], tools: list[dict[str, Any]],
              conv: Conversation) -> ModelCalled | ErrorRaised:
        """One request (only when the log has no reply for this turn yet)."""
        over = spent(run).over(config.budget)
        if over is not None:
            raise NeedsHuman(f"phase {run.phase} attempt {run.attempt}: {over}")
        return self.api.request(ws, config, price, system, tools, conv)
