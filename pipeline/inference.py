"""The inference runner of a deployment: the run's recipe (its configurations, datapath and
kept transforms) on the backend, prefill then a KV-cache decode loop, with the model's
tokenizer and chat template. `npu-deploy generate` and `npu-deploy chat` are this class, and
so is the phase-6 gate: what the gate checked is what a user runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from npu_deploy.oracle.prompts import Prompt
from npu_deploy.pipeline.deployed import DeployedModel
from npu_deploy.pipeline.toolbox import stop_tokens
from npu_deploy.pipeline.workspace import Workspace

MAX_NEW_TOKENS = 64


class NotDeployed(RuntimeError):
    """The run has no recipe yet: phase 1 has not chosen the kernels' configurations."""


class PromptRefused(ValueError):
    """A conversation the model cannot answer: no tokens at all, or more than its context."""


class Runner:
    def __init__(self, ws: Workspace) -> None:
        if ws.latest("recipe") is None:
            raise NotDeployed(f"run {ws.run_id} has no deployment yet (phase 1 chooses the "
                              "kernel configurations); resume it, or pick a run that passed "
                              "phase 5")
        self.ws = ws
        self.recipe = ws.recipe()
        self.model: DeployedModel = ws.deployed(self.recipe)

    @property
    def tokenizer(self) -> Any:
        return self.ws.loaded.tokenizer

    def encode(self, messages: list[dict[str, str]]) -> torch.Tensor:
        """A conversation as prompt ids: the chat template when the tokenizer has one, else
        the last message as plain text."""
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            ids = tok.apply_chat_template(messages, add_generation_prompt=True,
                                          return_dict=True)["input_ids"]
            return torch.tensor(ids, dtype=torch.long)
        return Prompt("user", messages[-1]["content"]).token_ids(tok)

    def generate(self, messages: list[dict[str, str]], max_tokens: int = MAX_NEW_TOKENS,
                 on_text: Callable[[str], None] | None = None) -> str:
        """The greedy answer to the conversation, streamed piece by piece to `on_text`."""
        ids = self.encode(messages)
        if ids.shape[0] == 0:
            raise PromptRefused("the prompt has no tokens: give some text to answer")
        room = self.model.args.max_positions - int(ids.shape[0])
        if room <= 0:
            raise PromptRefused(f"the conversation has {ids.shape[0]} tokens, the model takes "
                                f"{self.model.args.max_positions}: shorten it, or start a new "
                                "chat")
        stops = stop_tokens(self.ws)
        tokens: list[int] = []
        shown = ""

        def emit(token: int) -> None:
            nonlocal shown
            if token in stops:
                return
            tokens.append(token)
            text = self.tokenizer.decode(tokens, skip_special_tokens=True)
            if on_text is not None and text.startswith(shown) and len(text) > len(shown):
                on_text(text[len(shown):])
                shown = text

        self.model.generate(ids, min(max_tokens, room), stop=stops, on_token=emit)
        return str(self.tokenizer.decode(tokens, skip_special_tokens=True)).strip()

    def references(self, messages: list[dict[str, str]], max_tokens: int = MAX_NEW_TOKENS
                   ) -> list[tuple[str, str]]:
        """The greedy answers of the FP32 oracle and of Hugging Face's bf16 run of the
        original model to the same conversation (both on the CPU), labelled, each cut at
        the first stop token as the deployment's is."""
        from npu_deploy.oracle import reference_of
        from npu_deploy.oracle.bf16 import bf16_model, hf_greedy

        ids = self.encode(messages)
        steps = min(max_tokens, self.model.args.max_positions - int(ids.shape[0]))
        stops = stop_tokens(self.ws)

        def text(tokens: list[int]) -> str:
            cut = next((i for i, t in enumerate(tokens) if t in stops), len(tokens))
            return str(self.tokenizer.decode(tokens[:cut], skip_special_tokens=True)).strip()

        oracle, _ = reference_of(self.ws.loaded).generate(ids, steps)
        _, bf16, _ = hf_greedy(bf16_model(self.ws.loaded), ids, steps)
        return [("FP32 oracle (CPU)", text(oracle)),
                ("bf16 reference (HF, CPU)", text(bf16))]
