"""The phase gates. The harness runs them, never the agent: each one reads what the phases
stored (the recipe, the oracle) and computes its verdict itself, on the backend, with its own
inputs where the agent had some (phase 1 validates with another seed). One module a phase:

    0  oracle     the FP32 reference against Hugging Face, and the stored oracle runs
    1  kernels    every (kernel, shape) with its stored configuration: every element within
                  atol + rtol |ref|, no blocking finding of the checker
    2  block      layer 0 alone: cosine over the whole output and a per-position minimum
    3  model      the token-set check on every canonical prompt; the layer lens is recorded
    4  speed      the phase-3 check, and the deployed prefill strictly faster than the plan
                  without its transforms (modeled on the emulator, measured on the NPU)
    5  speed      the same for decode
    6  runner     the runner's token-set check, its answer to the chat question, the report
    7  evaluator  the independent evaluator, in a fresh process (pipeline.evaluator)
"""

from __future__ import annotations

from typing import Any

from .block import BlockGate
from .common import check, verdict
from .evaluator import EvaluatorGate
from .kernels import KernelGate
from .model import ModelGate
from .oracle import OracleGate
from .runner import RunnerGate
from .speed import SpeedGate


def gates() -> dict[int, Any]:
    """The gate of every phase, by phase number."""
    return {g.phase: g for g in (OracleGate(), KernelGate(), BlockGate(), ModelGate(),
                                 SpeedGate(4, decode=False), SpeedGate(5, decode=True),
                                 RunnerGate(), EvaluatorGate())}


__all__ = ["check", "gates", "verdict"]
