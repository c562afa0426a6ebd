"""The token embedding lookup, on the host: one row of the table per token."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from ..definition.family import BF16, HostOp, KernelFamily, KernelSpec, Operand, Shape

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
    put("y", get("table")[get("tokens")])


def host_seconds(s: Shape, p: PerfParams) -> float:
    """the rows' bytes at the host's copy rate"""
    return BF16 * s["rows"] * s["width"] / p.cpu_bw


FAMILIES = (KernelFamily(EMBEDDING, host=HostOp(run_on_host, host_seconds)),)
