"""Element-wise adds: the residual add (mlir-air programming_examples/eltwise_add, measured
by the registry page EltwiseAdd_bf16.md) and the QKV bias add of Qwen2 (ours: a bias row
added to every row, in the layout the tensor is stored in)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..air_parts import EmitError, LaunchLayout, Writer, call
from ..family import KernelFamily, KernelSpec, Numerics, Shape, Tensors, TimedLaunch, product_space
from ..measurements import Source, TableSource, markdown_tables, rows_at
from ..tensors import bf16_out, bound_layout, f32
from . import streaming

if TYPE_CHECKING:
    from ..plan import Launch

# --- spec --------------------------------------------------------------------------------

ADD = KernelSpec("add", "npu", "element-wise add (residuals)", ("rows", "width"),
                 streaming.row_operands("a", "b"), lambda s: 1.0 * s["rows"] * s["width"],
                 {"herd_m": 8, "tile": 2048})
BIAS_ADD = KernelSpec("bias_add", "npu", "QKV bias add (Qwen2)", ("rows", "width"),
                      streaming.row_operands("x", weight="bias"),
                      lambda s: 1.0 * s["rows"] * s["width"], {"herd_m": 8, "tile": 2048})

# --- numerics: one FP32 add of two bf16 values, one cast to bf16 ---------------------------


def emulate_add(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    return {"y": bf16_out(f32(x["a"]) + f32(x["b"]), out, "y")}


def emulate_bias_add(s: Shape, c: dict[str, Any], x: Tensors,
                     out: Tensors | None = None) -> Tensors:
    xs, bias = f32(x["x"]), f32(x["bias"])
    if bound_layout(c, "x", "seq-first") == "head-first":     # stored [heads, L, head_dim]
        hd = int(c["head_dim"])
        y = xs.reshape(-1, s["rows"], hd) + bias.view(-1, 1, hd)
        return {"y": bf16_out(y.reshape(s["rows"], s["width"]), out, "y")}
    return {"y": bf16_out(xs + bias, out, "y")}


ADD_NUMERICS = Numerics(emulate_add, lambda s, c, x: {"y": f32(x["a"]) + f32(x["b"])},
                        atol=1e-3)
BIAS_NUMERICS = Numerics(emulate_bias_add,
                         lambda s, c, x: {"y": f32(x["x"]) + f32(x["bias"])}, atol=1e-3)

# --- the programs ---------------------------------------------------------------------------

#: bias_add's size arguments: the tile's element count, its first element in the tensor, the
#: bias width, the head size and the rows per head (0 when the tensor is seq-first, stored
#: [rows, width]; else it is head-first, [width / head_dim, rows, head_dim]).
BIAS_ARGS = ("n", "first", "width", "head_dim", "head_rows")


def call_bias_add(w: Writer, launch: Launch, layout: LaunchLayout, step: int, rows: int,
                  head_dim: int | None) -> None:
    """The micro-kernel with what locates each element's bias in the stored layout."""
    s = launch.shape_dict
    head_first = launch.binding("x").layout == "head-first"
    if head_first and head_dim is None:
        raise EmitError(f"{launch.label}: x is bound head-first; the program needs the "
                        "model's head_dim")
    call(w, layout.externs[0], (step, "offset", s["width"], head_dim or 0,
                                s["rows"] if head_first else 0))


# --- measured -----------------------------------------------------------------------------

SOURCE = Source("details/EltwiseAdd_bf16.md", markdown_tables(
    TableSource("shapes", "Tested shapes", "N",
                "tested sizes (N elements), best config; latency and bandwidth (a and b in, "
                "c out)"),
    TableSource("herd", "Tunable space & performance", "herd",
                "which herds place at N=4194304"),
    TableSource("cols", "Tunable space & performance", "cols",
                "latency and bandwidth against the number of columns (one row)")))

# --- cost: streamed at the add's per-tile rate, fitted on its page ------------------------

#: the size the herd and column sweeps ran at
SWEPT = streaming.element_shape(4194304, "2048×2048")


def timed_launches() -> list[TimedLaunch]:
    """The tested sizes and the herd and column sweeps (tile 2048)."""
    def launch(name: str, r: dict[str, Any]) -> tuple[Shape, dict[str, Any], float]:
        shape = streaming.element_shape(r["N"], r["as_2d"]) if name == "shapes" else SWEPT
        cols, rows = ((r["cols"], r["rows"]) if name == "shapes" else
                      (r["cols"], 1) if name == "cols" else (r["herd_x"], r["herd_y"]))
        return (shape, {"herd_m": cols, "herd_rows": rows, "tile": r.get("tile", 2048)},
                3.0 * shape["rows"] * shape["width"] * 2)
    return streaming.measured_rows("add", launch)


FAMILIES = (
    KernelFamily(ADD, rules=streaming.RULES, check=streaming.check,
                 candidates=product_space(streaming.ELEMENT_SPACE), numerics=ADD_NUMERICS,
                 cost=streaming.stream_cost("add", timed_launches),
                 program=streaming.program("add_bf16"), data="add", source=SOURCE,
                 measured=rows_at("add", "shapes", lambda r: (r["N"],),
                                  lambda s: (s["rows"] * s["width"],))),
    # The bias add streams like the add and reuses its measured rate.
    KernelFamily(BIAS_ADD, rules=streaming.RULES, check=streaming.check,
                 candidates=product_space(streaming.ELEMENT_SPACE), numerics=BIAS_NUMERICS,
                 cost=streaming.stream_cost("add"),
                 program=streaming.program("bias_add_bf16", BIAS_ARGS, compute=call_bias_add),
                 data="add", layout_follows_output=True),
)
