"""What talks to the Anthropic Messages API: the client (its own retries with backoff,
`max_retries` of the configuration), one request per turn turned into the turn's event,
and the error that means the context window is full."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from npu_deploy.agents.claude.config import KEY_ENV, ClaudeConfig, scrub
from npu_deploy.agents.claude.conversation import Conversation
from npu_deploy.agents.claude.prices import Price
from npu_deploy.events.payloads import ErrorRaised, ModelCalled
from npu_deploy.machine import NeedsHuman
from npu_deploy.pipeline.workspace import Workspace, blob_json


def context_overflow(e: Exception) -> bool:
    text = str(e).lower()
    return getattr(e, "status_code", None) == 400 and (
        "prompt is too long" in text or "context window" in text or "context_length" in text)


class MessagesAPI:
    """The Messages API as the agent uses it: one client, made on the first request (so a
    run resumed from the log needs no key until it calls the model again)."""

    def __init__(self, client: Any, env: Mapping[str, str]) -> None:
        self._client = client
        self.env = env

    def client(self, config: ClaudeConfig) -> Any:
        if self._client is None:
            import anthropic

            key = self.env.get(KEY_ENV)
            if not key:
                raise NeedsHuman(f"{KEY_ENV} is not set: export it and resume the run")
            self._client = anthropic.Anthropic(api_key=key, max_retries=config.max_retries)
        return self._client

    def request(self, ws: Workspace, config: ClaudeConfig, price: Price,
                system: list[dict[str, Any]], tools: list[dict[str, Any]],
                conv: Conversation) -> ModelCalled | ErrorRaised:
        """One `messages.create` call and the turn's event: `model.called` with the usage,
        cost, stop reason, request id, latency and blobs of the request and the response,
        or an `error` (after the client's retries) whose message carries no key."""
        import anthropic

        messages = conv.for_request()
        request = {"model": config.model, "max_tokens": config.max_tokens,
                   "system": blob_json(ws.store, system), "tools": blob_json(ws.store, tools),
                   "messages_before": conv.sent, "new_messages": messages[conv.sent:]}
        t0 = time.perf_counter()
        try:
            message = self.client(config).messages.create(
                model=config.model, max_tokens=config.max_tokens, system=system,
                tools=tools, messages=messages)
        except anthropic.APIError as e:
            kind = "context_window_exceeded" if context_overflow(e) else "api_error"
            status = getattr(e, "status_code", None)
            return ErrorRaised(kind=kind, recoverable=True,
                               message=scrub(f"{type(e).__name__}"
                                             f"{f' (HTTP {status})' if status else ''}: {e}",
                                             self.env),
                               detail=f"request blob {blob_json(ws.store, request)}; after "
                                      f"{time.perf_counter() - t0:.1f} s and "
                                      f"{config.max_retries} retries")
        duration = time.perf_counter() - t0
        u = message.usage
        usage = {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                 "cache_write_tokens": u.cache_creation_input_tokens or 0,
                 "cache_read_tokens": u.cache_read_input_tokens or 0}
        return ModelCalled(
            model=message.model, **usage, cost_usd=price.cost(usage),
            stop_reason=str(message.stop_reason), duration_s=duration,
            request_id=getattr(message, "_request_id", None),
            request=blob_json(ws.store, request),
            response=ws.store.put_blob(scrub(message.to_json(), self.env).encode()))
