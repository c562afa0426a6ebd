"""Element-wise adds: the residual add (mlir-air programming_examples/eltwise_add, measured
by the registry page EltwiseAdd_bf16.md) and the QKV bias add of Qwen2 (ours: a bias row
added to every row, in the layout the tensor is stored in)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..air_programs.air_parts import EmitError, LaunchLayout, Writer, stored_length
from ..definition.family import (
    KernelFamily,
    KernelSpec,
    Numerics,
    Shape,
    Tensors,
    TimedLaunch,
    product_space,
)
from ..emulation.tensors import bf16_out, bound_layout, f32
from ..measured.measurements import Source, TableSource, markdown_tables, rows_at
from . import streaming

if TYPE_CHECKING:
    from ..plans.plan import Launch

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

# --- the programs: inline, as upstream writes both (o_ffn_multi._build_add_2d_to_2d,
# rms_qkv_bias_rope_multi._build_bias_add_2d): arith.addf over 16-lane bf16 vectors ----------

CHECK = streaming.vector_check(0, "the add is inline vector code with no scalar tail")


def add(w: Writer, launch: Launch, layout: LaunchLayout, step: int, rows: int,
        head_dim: int | None) -> None:
    """a + b over the block, into y_l1."""
    lanes = streaming.LANES
    w(f"# a + b on {lanes}-lane bf16 vectors, inline")
    streaming.vector_prelude(w)
    w(f"for j in range_(0, {step // lanes}):")
    w.indent()
    w(f"lane = at([(j, {lanes})])")
    streaming.write(w, f"arith.addf({streaming.read('vec', 'a_l1', 'lane')}, "
                    f"{streaming.read('vec', 'b_l1', 'lane')})", "y_l1", "lane")
    w("yield_([])")
    w.dedent()


def bias_add(w: Writer, launch: Launch, layout: LaunchLayout, step: int, rows: int,
             head_dim: int | None) -> None:
    """x + bias over the block, into y_l1: each vector of the tile (at element `offset` of
    the tensor) reads the bias column of its first element in the layout x is stored in,
    e mod width seq-first ([rows, width]), (e div (rows x head_dim)) x head_dim + e mod
    head_dim head-first ([width / head_dim, rows, head_dim]). A vector never straddles a
    row or a head: the tile, the width and head_dim are whole vectors."""
    s, lanes = launch.shape_dict, streaming.LANES
    head_first = launch.binding("x").layout == "head-first"
    if head_first and head_dim is None:
        raise EmitError(f"{launch.label}: x is bound head-first; the program needs the "
                        "model's head_dim")
    w(f"# x + bias on {lanes}-lane bf16 vectors, inline")
    streaming.vector_prelude(w)
    w(f"for j in range_(0, {step // lanes}):")
    w.indent()
    w(f"lane = at([(j, {lanes})])")
    w(f"e = at([(offset, 1), (j, {lanes})])")
    if head_first and head_dim is not None:
        # [heads, L_pad, hd]: element e is in head e // (L_pad hd), column e mod hd of it
        per_head = stored_length(launch, "x", s["rows"]) * head_dim
        w(f"column = at([(at([(e, 1)], divisor={per_head}), {head_dim}), (e, 1), "
          f"(at([(e, 1)], divisor={head_dim}), {-head_dim})])")
    else:
        w(f"column = at([(e, 1), (at([(e, 1)], divisor={s['width']}), {-s['width']})])")
    streaming.write(w, f"arith.addf({streaming.read('vec', 'x_l1', 'lane')}, "
                    f"{streaming.read('vec', 'bias_l1', 'column')})", "y_l1", "lane")
    w("yield_([])")
    w.dedent()


RULES = (*streaming.RULES, f"divisible: a tile and a bias row are whole {streaming.LANES}-lane "
         "vectors (the add is inline vector code)")

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
    KernelFamily(ADD, rules=RULES, check=CHECK,
                 candidates=product_space(streaming.ELEMENT_SPACE), numerics=ADD_NUMERICS,
                 cost=streaming.stream_cost("add", timed_launches),
                 program=streaming.program(None, compute=add,
                                           imports=streaming.VECTOR_IMPORTS),
                 data="add", source=SOURCE,
                 measured=rows_at("add", "shapes", lambda r: (r["N"],),
                                  lambda s: (s["rows"] * s["width"],))),
    # The bias add streams like the add and reuses its measured rate.
    KernelFamily(BIAS_ADD, rules=RULES, check=CHECK,
                 candidates=product_space(streaming.ELEMENT_SPACE), numerics=BIAS_NUMERICS,
                 cost=streaming.stream_cost("add"),
                 program=streaming.program(None, compute=bias_add,
                                           imports=streaming.VECTOR_IMPORTS),
                 data="add", layout_follows_output=True),
)
