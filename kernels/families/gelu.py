"""GELU with the tanh approximation (GELUTanh, the MLP activation of Gemma-style models and of
SigLIP): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), element-wise, one bf16 input
and one bf16 output.

mlir-air builds it by direct codegen (programming_examples/gelu: `math.tanh` lowers to the
AIE2P tanh intrinsic, no micro-kernel object), streaming `tile_n`-element chunks through
an `herd_x x herd_y` herd. The registry page GELU_bf16.md measures it: memory-bound, 27.0
GB/s at its largest size, and, with one input, only 2 DMA streams per tile, so a second
row of tiles places (best herd 8x2 = 16 tiles) where the 3-stream element-wise kernels
stop at 8. That cap is not inherited here: the shared shim rule counts this kernel's own
streams (kernels.definition.rules.shim), which gives 16.

Numerics. The emulator computes in FP32 from the bf16 input and casts once to bf16, as
the other FP32-vector kernels do, so its error against the FP32 reference is bf16's
rounding alone (mean_rel_L1 ~1e-3 at randn inputs). The hardware evaluates the chain in
bf16 vectors with the tanh lookup table of AIE2P; upstream measures mean_rel_L1 8.4e-3
and a worst element of 1.56e-2 against the same FP32 reference. The emulator shows
several times less error than the NPU will, as a bf16-only GEMM would.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from ..air_programs.air_parts import LaunchLayout, Writer
from ..definition.family import (
    KernelFamily,
    KernelSpec,
    Numerics,
    Shape,
    Tensors,
    TimedLaunch,
    product_space,
)
from ..definition.hardware import Hardware
from ..definition.rules import Finding
from ..emulation.tensors import bf16_out, f32
from ..measured.measurements import Source, TableSource, markdown_tables, rows_at
from . import streaming

if TYPE_CHECKING:
    from ..plans.plan import Launch

# --- spec: rows x width, one input, one output, bf16 --------------------------------------

GELU = KernelSpec("gelu", "npu", "GELU, tanh approximation, element-wise", ("rows", "width"),
                  streaming.row_operands("x"),
                  # per element: x^3 (2), x + 0.044715 x^3 (2), the scale (1), tanh (1),
                  # 0.5 x (1 + t) (3): the steps of upstream's datapath
                  lambda s: 9.0 * s["rows"] * s["width"],
                  # upstream's best configuration: herd_x 8, herd_y 2, tile_n 4096
                  {"herd_m": 8, "herd_rows": 2, "tile": 4096})

# --- checker rule: the shared streaming rule, and whole vectors --------------------------------

#: math.tanh lowers only on 16-lane bf16 vectors: a tile of another multiple would fall
#: back to a scalar loop that does not compile (upstream gelu.py refuses it so).
LANES = 16

RULES = (*streaming.RULES, f"divisible: a tile is whole {LANES}-lane vectors (tanh has no "
         "scalar form)")


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    f = streaming.check(spec, s, c, hw, usage)
    if int(c["tile"]) % LANES:
        f.append(Finding("divisible", "error", f"tile={c['tile']} is not a multiple of the "
                         f"{LANES}-lane bf16 vector: tanh has no scalar lowering on AIE2P",
                         int(c["tile"]), LANES))
    return f


# --- search space: upstream's measured herds and tiles, its best first ----------------------

SPACE = {"herd_m": (8, 4, 2, 1), "herd_rows": (2, 1, 4), "tile": (4096, 2048, 1024, 512)}

# --- numerics: bf16 in, FP32 math with the tanh approximation, one cast to bf16 ---------------

SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
BETA = 0.044715


def gelu_tanh(x: torch.Tensor) -> torch.Tensor:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), in the dtype of x."""
    return 0.5 * x * (1.0 + torch.tanh(SQRT_2_OVER_PI * (x + BETA * x * x * x)))


def emulate(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    return {"y": bf16_out(gelu_tanh(f32(x["x"])), out, "y")}


def reference(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    return {"y": gelu_tanh(f32(x["x"]))}


# Upstream's tolerance for this kernel (GELU_bf16.md, "Tolerances & reference"): rtol 1.6e-2
# and atol 5e-2, which clears the hardware's worst element (1.56e-2) about 3 times.
NUMERICS = Numerics(emulate, reference, atol=5e-2)

# --- cost: memory-bound, at its own per-tile rate, fitted on its page --------------------------

#: the size the herd and tile sweeps ran at
SWEPT = streaming.element_shape(3145728, "1024×3072")


def timed_launches() -> list[TimedLaunch]:
    """The tested sizes and the herd, herd_x and tile_n sweeps."""
    def launch(name: str, r: dict[str, Any]) -> tuple[Shape, dict[str, Any], float]:
        shape = streaming.element_shape(r["N"], r["as_2d"]) if name == "shapes" else SWEPT
        herd = (8, 2) if name == "tile_n" else (r["herd_x"], r.get("herd_y", 1))
        return (shape, {"herd_m": herd[0], "herd_rows": herd[1], "tile": r.get("tile_n", 4096)},
                2.0 * shape["rows"] * shape["width"] * 2)
    return streaming.measured_rows("gelu", launch)


COST = streaming.stream_cost("gelu", timed_launches)

# --- the program: inline vector code in each tile, no micro-kernel ----------------------------

IMPORTS = ("from air.dialects import math as math_dialect",
           "from air.dialects.vector import broadcast, transfer_read, transfer_write",
           "from air.ir import AffineMapAttr, VectorType")


def compute(w: Writer, launch: Launch, layout: LaunchLayout, step: int, rows: int,
            head_dim: int | None) -> None:
    """GELU over the block in x_l1, into y_l1, LANES elements at a time: the chain of
    upstream's direct codegen in bf16 vectors, tanh on the hardware's intrinsic."""
    w(f"# GELU (tanh approximation) on {LANES}-lane bf16 vectors, inline")
    w(f"vec = VectorType.get([{LANES}], bf16)")
    w("identity = AffineMapAttr.get(AffineMap.get_identity(1))")
    w("zero = arith.ConstantOp(bf16, 0.0)")
    for name, value in (("half", 0.5), ("one", 1.0), ("beta", BETA),
                        ("scale", SQRT_2_OVER_PI)):
        w(f"{name} = broadcast(vec, arith.ConstantOp(bf16, {value!r}))")
    w(f"for j in range_(0, {step // LANES}):")
    w.indent()
    w(f"lane = at([(j, {LANES})])")
    w("x = transfer_read(vec, x_l1, [lane], identity, zero, [True])")
    w("inner = arith.addf(x, arith.mulf(beta, arith.mulf(arith.mulf(x, x), x)))")
    w("t = math_dialect.tanh(arith.mulf(scale, inner))")
    w("y = arith.mulf(arith.mulf(half, x), arith.addf(one, t))")
    w("transfer_write(None, y, y_l1, [lane], identity, [True])")
    w("yield_([])")
    w.dedent()


PROGRAM = streaming.program(None, compute=compute, imports=IMPORTS)

# --- measured -----------------------------------------------------------------------------

SOURCE = Source("details/GELU_bf16.md", markdown_tables(
    TableSource("shapes", "Tested shapes", "N",
                "tested sizes (N elements), best config; latency and bandwidth (x in, y out)"),
    TableSource("herd", "Tunable space & performance", "herd",
                "which herds place at N=3145728 (2 streams per tile: a second row places)"),
    TableSource("herd_x", "Tunable space & performance", "herd_x",
                "latency and bandwidth against the number of columns (one row)"),
    TableSource("tile_n", "Tunable space & performance", "tile_n",
                "latency and bandwidth against the tile size, herd 8x2")))

FAMILIES = (KernelFamily(
    GELU, rules=RULES, check=check, candidates=product_space(SPACE), numerics=NUMERICS,
    cost=COST, program=PROGRAM, data="gelu", source=SOURCE,
    measured=rows_at("gelu", "shapes", lambda r: (r["N"],),
                     lambda s: (s["rows"] * s["width"],))),)
