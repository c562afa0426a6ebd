"""Weighted RMSNorm over each row, and the per-head QK norm of Qwen3 (the same kernel on
head_dim-wide rows). mlir-air: programming_examples/weighted_rms_norm (`rms_norm_bf16`
over a block of rows); the registry page RMSNorm_bf16.md measures it, the QK norm at
2048x128 among its rows."""

from __future__ import annotations

from typing import Any

import torch

from npu_deploy.oracle import reference as ref_ops

from ..family import (
    Cost,
    KernelFamily,
    KernelSpec,
    Numerics,
    Shape,
    Tensors,
    TimedLaunch,
    product_space,
)
from ..measurements import Source, TableSource, markdown_tables, rows_at
from ..tensors import bf16_out, f32
from . import streaming

# --- spec --------------------------------------------------------------------------------

RMSNORM = KernelSpec("rmsnorm", "npu", "weighted RMSNorm over each row", ("rows", "width"),
                     streaming.row_operands("x", weight="weight"),
                     lambda s: 4.0 * s["rows"] * s["width"],
                     {"herd_m": 8, "tile_rows": 2, "eps": 1e-5})
QK_NORM = KernelSpec("qk_norm", "npu", "per-head RMSNorm of Q or K (Qwen3)", ("rows", "width"),
                     streaming.row_operands("x", weight="weight"),
                     lambda s: 4.0 * s["rows"] * s["width"],
                     {"herd_m": 8, "tile_rows": 4, "eps": 1e-6})

# --- numerics: bf16 in, the sum of squares and the scale in FP32, one cast to bf16 --------


def emulate(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    return {"y": bf16_out(ref_ops.rms_norm(f32(x["x"]), f32(x["weight"]), float(c["eps"])),
                          out, "y")}


def reference(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    return {"y": ref_ops.rms_norm(f32(x["x"]), f32(x["weight"]), float(c["eps"]))}


def near_one(t: torch.Tensor, s: Shape) -> torch.Tensor:
    """A norm weight near 1, as trained ones are."""
    return 1.0 + 0.1 * t


# The FP32-vector kernels round once to bf16 and stay within rtol (measured excess 0);
# 1e-3 covers values near 0.
NUMERICS = Numerics(emulate, reference, atol=1e-3, weights=near_one)

# --- the program: the row block and the weight row in L1, `rms_norm_bf16` per block -------

PROGRAM = streaming.program("rms_norm_bf16", ("rows",))

# --- measured -----------------------------------------------------------------------------

SOURCE = Source("details/RMSNorm_bf16.md", markdown_tables(
    TableSource("shapes", "Tested shapes", "(M, N)",
                "tested shapes (M rows of N), herd_x columns; latency and bandwidth "
                "(x in, y out) at the best config"),
    TableSource("herd_x", "herd_x choice vs performance", "herd_x",
                "latency against the number of columns at M=N=2048")))


# --- cost: streamed at RMSNorm's per-tile rate, fitted on its page ------------------------


def timed_launches() -> list[TimedLaunch]:
    """The tested shapes and the herd_x sweep (each column loops over its rows one at a
    time: tile_rows 1)."""
    def launch(name: str, r: dict[str, Any]) -> tuple[Shape, dict[str, Any], float]:
        m, n = (r["M"], r["N"]) if name == "shapes" else (2048, 2048)
        return ({"rows": m, "width": n}, {"herd_m": r["herd_x"], "tile_rows": 1},
                2.0 * m * n * 2)                # x in, y out (upstream's bandwidth)
    return streaming.measured_rows("rmsnorm", launch)


def _family(spec: KernelSpec, cost: Cost, **extra: Any) -> KernelFamily:
    return KernelFamily(
        spec, rules=streaming.RULES, check=streaming.check,
        candidates=product_space(streaming.ROW_SPACE), numerics=NUMERICS,
        cost=cost, program=PROGRAM, data="rmsnorm", **extra)


FAMILIES = (_family(RMSNORM, streaming.stream_cost("rmsnorm", timed_launches), source=SOURCE,
                    measured=rows_at("rmsnorm", "shapes", lambda r: (r["M"], r["N"]),
                                     lambda s: (s["rows"], s["width"]))),
            # QK norm is an RMSNorm: it reuses that kernel's fitted rate
            _family(QK_NORM, streaming.stream_cost("rmsnorm")))
