"""The token embedding lookup, on the host: one row of the table per token."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..definition.family import BF16, HostOp, KernelFamily, KernelSpec, Operand, Shape
from ..emulation.numerics import to_bf16

if TYPE_CHECKING:
    from ..performance.model import PerfParams

# --- spec --------------------------------------------------------------------------------

EMBEDDING = KernelSpec("embedding", "cpu", "token embedding lookup on the host", ("rows", "width"),
                       lambda s: [Operand("table", (s["vocab"], s["width"]), BF16, "weight"),
                                  Operand("y", (s["rows"], s["width"]), BF16, "output")],
                       lambda s: 0.0)

# --- on the host ---------------------------------------------------------------------------


def run_on_host(s: Shape, params: dict[str, Any], get: Callable[[str], torch.Tensor],
                put: Callable[[str, torch.Tensor], None]) -> None:
    """The table's rows of the tokens; with a `scale` parameter (Gemma 3's sqrt(hidden))
    each row times the scale, both in bf16 as the bf16 model computes it (transformers'
    Gemma3TextScaledWordEmbedding casts the scale to the weights' dtype: sqrt(2560) becomes
    50.5) and as upstream's bundle holds the table pre-scaled
    (programming_examples/llms/gemma3_4b_q4nx/gemma3_4b_q4nx_prefill.py, e972f29). The table
    is left unscaled: a tied LM head reads it too."""
    rows = get("table")[get("tokens")]
    if "scale" in params:
        scale = to_bf16(torch.tensor(params["scale"], dtype=torch.float64)).item()
        rows = to_bf16(rows.to(torch.float32) * scale)     # exact in FP32, one rounding
    put("y", rows)


def host_seconds(s: Shape, p: PerfParams) -> float:
    """the rows' bytes at the host's copy rate"""
    return BF16 * s["rows"] * s["width"] / p.cpu_bw


FAMILIES = (KernelFamily(EMBEDDING, host=HostOp(run_on_host, host_seconds)),)
