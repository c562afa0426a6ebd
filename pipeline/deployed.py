"""The deployed model: a `Recipe` (pipeline.recipe) run on a backend.

`DeployedModel` runs a recipe on a backend: prefill, KV-cache decode, and greedy generation
that keeps the top-k of every step for the token-set check (npu_deploy.metrics.tokens).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import torch

from npu_deploy.events import progress
from npu_deploy.kernels.definition.hardware import XDNA2, Hardware
from npu_deploy.kernels.definition.specs import Decode, Mode, prompt_prefill
from npu_deploy.kernels.plans.plan import DispatchPlan
from npu_deploy.kernels.plans.plan_runner import PlanRunner
from npu_deploy.kernels.plans.signature import plan_signature
from npu_deploy.kernels.plans.transforms import TRANSFORMS
from npu_deploy.metrics.tokens import Greedy, greedy_step, greedy_with_logits
from npu_deploy.models.config import ModelArgs
from npu_deploy.pipeline.recipe import Recipe


def reference_greedy(reference: Any, ids: torch.Tensor, steps: int) -> Greedy:
    """The FP32 oracle's greedy run, with each step's top-k logits (`Greedy.bf16_tie`)."""
    tokens, logits = reference.generate(ids, steps)
    return greedy_with_logits(tokens, logits)


class PlanCache:
    """The plans of one model built so far, shared by every recipe that builds the same
    one: a mode's plan depends on the recipe's configurations and numerics and on that
    mode's transforms only (`Recipe.plan_key`), so a recipe that differs from another in
    its prefill transforms builds none of its decode plans again, and one that adds a
    transform applies only that one. The newest `size` are kept."""

    def __init__(self, size: int = 2048) -> None:
        self.size = size
        self._plans: OrderedDict[tuple[bytes, Mode], DispatchPlan] = OrderedDict()
        self._signatures: OrderedDict[tuple[bytes, Mode, bool], str] = OrderedDict()

    def plan(self, recipe: Recipe, name: str, args: ModelArgs, mode: Mode, hw: Hardware
             ) -> DispatchPlan:
        key = (recipe.plan_key(mode), mode)
        plan = _kept(self._plans, key, self.size)
        if plan is None:
            # Recipe.plan applies the mode's transforms in order to its baseline: the plan
            # of the same recipe without the last one, built already while the transforms
            # were tried one by one, is where the last one applies
            names = recipe.transforms(mode)
            plan = recipe.plan(name, args, mode, hw) if not names else \
                TRANSFORMS[names[-1]].apply(self.plan(
                    recipe.with_transforms(mode, names[:-1]), name, args, mode, hw))
            _kept(self._plans, key, self.size, plan)
        return plan

    def modes(self) -> list[Mode]:
        """The modes of the plans kept, the oldest first."""
        return [mode for _, mode in self._plans]

    def signature(self, recipe: Recipe, name: str, args: ModelArgs, mode: Mode, hw: Hardware,
                  *, layouts: bool) -> str:
        """The arithmetic signature (kernels.plans.signature) of that plan, computed once."""
        key = (recipe.plan_key(mode), mode, layouts)
        sig = _kept(self._signatures, key, self.size)
        if sig is None:
            sig = plan_signature(self.plan(recipe, name, args, mode, hw), layouts=layouts)
            _kept(self._signatures, key, self.size, sig)
        return sig


def _kept(cache: OrderedDict[Any, Any], key: Any, size: int, value: Any = None) -> Any:
    """`cache[key]` marked as the newest (None if absent); with `value`, stored so first,
    the oldest entry past `size` dropped."""
    if value is not None:
        cache[key] = value
        if len(cache) > size:
            cache.popitem(last=False)
    if key in cache:
        cache.move_to_end(key)
    return cache.get(key)


class DeployedModel:
    """A recipe run on a backend: the deployed model."""

    def __init__(self, name: str, args: ModelArgs, weights: Any, recipe: Recipe, backend: Any,
                 hw: Hardware = XDNA2, runner: PlanRunner | None = None,
                 plans: PlanCache | None = None) -> None:
        """`runner`: a plan runner of these weights on `backend` to share (its device
        weights and GEMM operands prepared once); else a new one. `plans`: the plans of
        this model built before, to share (filled as plans are built)."""
        self.name, self.args, self.recipe, self.hw = name, args, recipe, hw
        self.runner = runner or PlanRunner(args, weights, backend)
        self.plans = PlanCache() if plans is None else plans

    def plan(self, mode: Mode) -> DispatchPlan:
        return self.plans.plan(self.recipe, self.name, self.args, mode, self.hw)

    def plan_signature(self, mode: Mode, *, layouts: bool = True) -> str:
        """The arithmetic signature of the plan of `mode` (kernels.plans.signature)."""
        return self.plans.signature(self.recipe, self.name, self.args, mode, self.hw,
                                     layouts=layouts)

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
