"""One conversation of a phase attempt, as the Messages API takes it: the messages so far
with the moving cache mark on the newest tool result, and a response's blocks as they go
back in the next request."""

from __future__ import annotations

from typing import Any


class Conversation:
    def __init__(self, first: str) -> None:
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
        self.sent = 0              # messages already recorded in an earlier request blob

    def assistant(self, blocks: list[dict[str, Any]]) -> None:
        if blocks:
            self.messages.append({"role": "assistant", "content": blocks})

    def user(self, content: list[dict[str, Any]]) -> None:
        self.messages.append({"role": "user", "content": content})

    def for_request(self) -> list[dict[str, Any]]:
        """The messages with the moving cache mark on the newest tool result."""
        out = list(self.messages)
        last = out[-1]
        if isinstance(last["content"], list) and last["content"] \
                and last["content"][-1].get("type") == "tool_result":
            blocks = list(last["content"])
            blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
            out[-1] = {**last, "content": blocks}
        return out


def sendable(block: dict[str, Any]) -> dict[str, Any]:
    """A response block as it goes back in the next request."""
    if block.get("type") == "text":
        return {"type": "text", "text": block["text"]}
    if block.get("type") == "tool_use":
        return {"type": "tool_use", "id": block["id"], "name": block["name"],
                "input": block.get("input") or {}}
    return {k: v for k, v in block.items() if v is not None}
