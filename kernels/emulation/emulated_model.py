"""A whole-model prefill on a backend: the baseline dispatch plan (one kernel per op, bf16
tensors between kernels, the LM head over every row) run by `PlanRunner`."""

from __future__ import annotations

from typing import Any

import torch

from npu_deploy.models.adapters import Weights
from npu_deploy.models.config import ModelArgs

from ..definition.hardware import XDNA2, Hardware
from ..definition.specs import Prefill
from ..plans.plan import DispatchPlan, baseline_plan
from ..plans.plan_runner import PlanRunner


class EmulatedModel:
    """Prefill of a model on `backend`, each kernel with the configuration selected for it."""

    def __init__(self, args: ModelArgs, weights: Weights, backend: Any,
                 hw: Hardware = XDNA2, *, exact_tiles: bool = False) -> None:
        self.args, self.hw = args, hw
        self.runner = PlanRunner(args, weights, backend, exact_tiles=exact_tiles)
        self._plans: dict[int, DispatchPlan] = {}

    def prefill(self, tokens: torch.Tensor) -> torch.Tensor:
        """Logits [L, vocab] (FP32 out of the LM head GEMM) of a prefill of `tokens`."""
        L = int(tokens.shape[0])
        if L not in self._plans:
            self._plans[L] = baseline_plan("model", self.args, Prefill(L), self.hw,
                                           lm_head="full")
        return self.runner.run(self._plans[L], tokens).logits
