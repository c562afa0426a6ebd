"""The deployed model: a `Recipe` (pipeline.recipe) run on a backend.

`DeployedModel` runs a recipe on a backend: prefill, KV-cache decode, and greedy generation
that keeps the top-k of every step for the token-set check (npu_deploy.metrics.tokens).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from npu_deploy.events import progress
from npu_deploy.kernels.definition.hardware import XDNA2, Hardware
from npu_deploy.kernels.definition.specs import Decode, Mode, prompt_prefill
from npu_deploy.kernels.plans.plan import DispatchPlan
from npu_deploy.kernels.plans.plan_runner import PlanRunner
from npu_deploy.metrics.tokens import Greedy, greedy_step, greedy_with_logits
from npu_deploy.models.config import ModelArgs
from npu_deploy.pipeline.recipe import Recipe


def reference_greedy(reference: Any, ids: torch.Tensor, steps: int) -> Greedy:
    """The FP32 oracle's greedy run, with each step's top-k logits (`Greedy.bf16_tie`)."""
    tokens, logits = reference.generate(ids, steps)
    return greedy_with_logits(tokens, logits)


class DeployedModel:
    """A recipe run on a backend: the deployed model."""

    def __init__(self, name: str, args: ModelArgs, weights: Any, recipe: Recipe, backend: Any,
                 hw: Hardware = XDNA2, runner: PlanRunner | None = None,
                 plans: dict[Mode, DispatchPlan] | None = None) -> None:
        """`runner`: a plan runner of these weights on `backend` to share (its device
        weights and GEMM operands prepared once); else a new one. `plans`: the plans of
        this recipe built before, by mode, to share (filled as plans are built)."""
        self.name, self.args, self.recipe, self.hw = name, args, recipe, hw
        self.runner = runner or PlanRunner(args, weights, backend)
        self._plans: dict[Mode, DispatchPlan] = {} if plans is None else plans

    def plan(self, mode: Mode) -> DispatchPlan:
        if mode not in self._plans:
            self._plans[mode] = self.recipe.plan(self.name, self.args, mode, self.hw)
        return self._plans[mode]

    def prefill_plan(self, tokens: int) -> DispatchPlan:
        """The plan a prompt of `tokens` runs: the prefill of the length it is padded to
        (`prompt_prefill`), so that prompts of nearby lengths run one build."""
        return self.plan(prompt_prefill(tokens))

    def prefill(self, ids: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The last position's logits [vocab] and the KV cache of the prompt's positions."""
        out = self.runner.run(self.prefill_plan(int(ids.shape[0])), ids)
        return out.logits[-1], out.cache

    def decode(self, token: int, pos: int, cache: dict[str, torch.Tensor],
               context: int | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One decode step at `pos`; `context`: the positions its decode programs are built
        for (`Decode.context`), the same at every step of a generation so that its NPU
        decode attention is built once."""
        out = self.runner.run(self.plan(Decode(pos, context)), torch.tensor([token]), cache)
        return out.logits[-1], out.cache

    def generate(self, ids: torch.Tensor, steps: int, *, stop: set[int] | None = None,
                 on_token: Callable[[int], None] | None = None,
                 follow: list[int] | None = None) -> Greedy:
        """Greedy decoding for `steps` tokens (or until a token of `stop`). With `follow`
        (another run's tokens), it stops at the first token that differs from it: the
        token-set check compares nothing after that. Every decode step of the generation
        runs plans built for its whole context (the prompt and the steps), so the NPU's
        decode attention is compiled once for it, not as the cache grows."""
        if int(ids.shape[0]) + steps > self.args.max_positions:
            raise ValueError(f"{ids.shape[0]} prompt tokens + {steps} steps pass the model's "
                             f"max_position_embeddings={self.args.max_positions}")
        logits, cache = self.prefill(ids)
        pos = int(ids.shape[0])
        context = pos + steps
        tokens: list[int] = []
        topk: list[list[int]] = []
        for step in range(steps):
            token, top = greedy_step(logits)
            tokens.append(token)
            topk.append(top)
            progress.advance("token")
            if on_token is not None:
                on_token(token)
            if (stop and token in stop) or step + 1 == steps:
                break
            if follow is not None and (step >= len(follow) or token != follow[step]):
                break
            logits, cache = self.decode(token, pos, cache, context)
            pos += 1
        return Greedy(tokens, topk)
