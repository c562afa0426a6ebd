"""SiLU(gate) x up, element-wise: the SwiGLU activation. mlir-air programming_examples/
silu_and_mul (`silu_and_mul_bf16` over a tile); the registry page SiLU_Mul_bf16.md measures
it (3 streams per tile cap the herd at 8 tiles).

Its variant `gelu_mul`, GELU-tanh(gate) x up (Gemma 3's GLU), is upstream's
`gelu_and_mul_bf16(gate, up, out, n)` (programming_examples/gelu_and_mul/gelu_and_mul.cc,
e972f29): the same signature and 16-lane loop, so the same program, streams and checker.
No page measures it: its cost is modeled at SiLU x mul's fitted rate (the same three
streams; the tanh is one more vector op per element on a memory-bound kernel)."""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F

from npu_deploy.oracle import reference as ref_ops

from ..definition.family import (
    KernelFamily,
    KernelSpec,
    Numerics,
    Shape,
    Tensors,
    TimedLaunch,
    product_space,
)
from ..emulation.tensors import bf16_out, f32
from ..measured.measurements import Source, TableSource, markdown_tables, rows_at
from . import streaming

# --- spec --------------------------------------------------------------------------------

SILU_MUL = KernelSpec("silu_mul", "npu", "SiLU(gate) x up, element-wise", ("rows", "width"),
                      streaming.row_operands("gate", "up"), lambda s: 5.0 * s["rows"] * s["width"],
                      {"herd_m": 8, "tile": 2048})

# --- numerics: bf16 in, SiLU and the product in FP32, one cast to bf16 ---------------------


def emulate(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    return {"y": bf16_out(ref_ops.silu_mul(f32(x["gate"]), f32(x["up"])), out, "y")}


def reference(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    return {"y": F.silu(f32(x["gate"])) * f32(x["up"])}


NUMERICS = Numerics(emulate, reference, atol=1e-3)

# --- the program: upstream's silu_and_mul_bf16(gate, up, out, n) on each tile -------------

def glu_call(symbol: str, name: str) -> tuple[streaming.KernelCall, Any]:
    """Upstream's `<symbol>(gate, up, out, n)` from programming_examples/<name>/<name>.cc,
    compiled with no defines (n a run-time argument), and its check: whole 16-lane vectors,
    since the kernel drops a tail."""
    call = streaming.KernelCall(symbol, f"{name}.o", f"programming_examples/{name}/{name}.cc",
                                ("gate_l1", "up_l1", "y_l1"))
    return call, streaming.vector_check(0, f"{symbol} processes n / 16 whole vectors and "
                                        "drops a tail")


KERNEL, CHECK = glu_call("silu_and_mul_bf16", "silu_and_mul")

RULES = (*streaming.RULES, f"divisible: a tile is whole {streaming.LANES}-lane vectors (the "
         "kernel drops a tail)")

# --- measured -----------------------------------------------------------------------------

SOURCE = Source("details/SiLU_Mul_bf16.md", markdown_tables(
    TableSource("shapes", "Tested shapes", "N",
                "tested sizes (N elements), best config; latency and bandwidth (gate and up "
                "in, out)"),
    TableSource("herd", "Tunable space & performance", "herd",
                "which herds place at N=16777216"),
    TableSource("herd_x", "Tunable space & performance", "herd_x",
                "latency and bandwidth against the number of columns (one row)"),
    TableSource("tile_n", "Tunable space & performance", "tile_n",
                "latency and bandwidth against the tile size, herd 8x1")))

# --- cost: streamed at SiLU x mul's per-tile rate, fitted on its page ---------------------

#: the size the herd and tile sweeps ran at
SWEPT = streaming.element_shape(16777216, "2048×8192")


def timed_launches() -> list[TimedLaunch]:
    """The tested sizes and the herd, herd_x and tile_n sweeps."""
    def launch(name: str, r: dict[str, Any]) -> tuple[Shape, dict[str, Any], float]:
        shape = streaming.element_shape(r["N"], r["as_2d"]) if name == "shapes" else SWEPT
        tile = r.get("tile_n", 4096)
        return (shape, {"herd_m": r.get("herd_x", 8), "herd_rows": r.get("herd_y", 1),
                        "tile": tile}, 3.0 * shape["rows"] * shape["width"] * 2)
    return streaming.measured_rows("silu_mul", launch)


# --- the GELU-tanh variant (Gemma 3) --------------------------------------------------------

GELU_MUL = KernelSpec("gelu_mul", "npu", "GELU-tanh(gate) x up, element-wise",
                      ("rows", "width"), streaming.row_operands("gate", "up"),
                      # the tanh polynomial's 9 steps (gelu.py) and the product
                      lambda s: 10.0 * s["rows"] * s["width"], {"herd_m": 8, "tile": 2048})


def emulate_gelu(s: Shape, c: dict[str, Any], x: Tensors,
                 out: Tensors | None = None) -> Tensors:
    """bf16 in, GELU-tanh and the product in FP32, one cast to bf16 (as gelu.py's emulator:
    the hardware's bf16 chain and tanh table err several times more, upstream measures
    mean_rel_L1 8.4e-3 for GELU alone)."""
    return {"y": bf16_out(ref_ops.gelu_mul(f32(x["gate"]), f32(x["up"])), out, "y")}


def reference_gelu(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    return {"y": F.gelu(f32(x["gate"]), approximate="tanh") * f32(x["up"])}


#: gelu_and_mul.cc, built as upstream's external_kernels.py:compile_gelu_and_mul does
KERNEL_GELU, CHECK_GELU = glu_call("gelu_and_mul_bf16", "gelu_and_mul")

FAMILIES = (KernelFamily(
    GELU_MUL, rules=RULES, check=CHECK_GELU,
    candidates=product_space(streaming.ELEMENT_SPACE),
    numerics=Numerics(emulate_gelu, reference_gelu, atol=1e-3),
    cost=streaming.stream_cost("silu_mul"), program=streaming.program(KERNEL_GELU)),
) + (KernelFamily(
    SILU_MUL, rules=RULES, check=CHECK,
    candidates=product_space(streaming.ELEMENT_SPACE), numerics=NUMERICS,
    cost=streaming.stream_cost("silu_mul", timed_launches),
    program=streaming.program(KERNEL), data="silu_mul", source=SOURCE,
    measured=rows_at("silu_mul", "shapes", lambda r: (r["N"],),
                     lambda s: (s["rows"] * s["width"],))),)
