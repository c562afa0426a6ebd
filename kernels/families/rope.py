"""RoPE, half-split (HF Llama `rotate_half`), from a cos/sin table. mlir-air links
`rope_halfsplit.cc` (`rope_bf16` over a block of rows, one table row per row); the registry
page RoPE_bf16.md measures it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from npu_deploy.oracle import reference as ref_ops

from ..air_parts import LaunchLayout, Writer, stored_length
from ..family import KernelFamily, KernelSpec, Numerics, Shape, Tensors, TimedLaunch, product_space
from ..measurements import Source, TableSource, markdown_tables, rows_at
from ..tensors import bf16_out, bound_layout, f32
from . import streaming

if TYPE_CHECKING:
    from ..plan import Launch

# --- spec: rows of head_dim (every head of every position), the table of `seq` positions ---

ROPE = KernelSpec("rope", "npu", "RoPE, half-split, from a cos/sin table", ("rows", "width", "seq"),
                  streaming.row_operands("x", table=True), lambda s: 3.0 * s["rows"] * s["width"],
                  {"herd_m": 8, "tile_rows": 4})

# --- numerics: bf16 in, the rotation in FP32, one cast to bf16 -----------------------------


def emulate(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    seq, width = s["seq"], s["width"]
    cos, sin = f32(x["cos"]), f32(x["sin"])
    if bound_layout(c, "x", "head-first") == "seq-first":
        rows = f32(x["x"]).view(seq, -1, width)       # [seq, heads, width]
        cos, sin = cos[:, None], sin[:, None]
    else:
        rows = f32(x["x"]).view(-1, seq, width)       # [heads, seq, width]
    y = ref_ops.apply_rope(rows, cos, sin)
    return {"y": bf16_out(y.reshape(-1, width), out, "y")}


def reference(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    rows = f32(x["x"]).view(-1, s["seq"], s["width"])
    return {"y": ref_ops.apply_rope(rows, f32(x["cos"]), f32(x["sin"])).reshape(-1, s["width"])}


NUMERICS = Numerics(emulate, reference, atol=1e-3)

# --- the program: per block, the cos and sin row of each row's position --------------------


def table_rows(w: Writer, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
               rows: int) -> None:
    """One cos and one sin row per row of the block. Row r of x is position r // heads
    seq-first ([L, heads * head_dim]), position r mod L_pad head-first ([heads, L_pad, hd],
    L_pad = L unless the sequence is padded; a padded position reads the table's zeros)."""
    s = launch.shape_dict
    heads, seq = s["rows"] // s["seq"], stored_length(launch, "x", s["seq"])
    for j in range(rows):
        row = f"at([(i, {rows * layout.herd[0]}), (tx, {rows})], {j})"
        pos = f"at([({row}, 1)], divisor={heads})" \
            if launch.binding("x").layout == "seq-first" \
            else f"at([({row}, 1), (at([({row}, 1)], divisor={seq}), {-seq})])"
        for name in ("cos", "sin"):
            w(f"dma_memcpy_nd({name}_l1, {arg[name]}, dst_offsets=[{j}, 0], dst_sizes=[1, "
              f"{s['width']}], dst_strides=[{s['width']}, 1], src_offsets=[0, at([({pos}, "
              f"{s['width']})])], src_sizes=[1, {s['width']}], src_strides=[{s['width']}, 1])")


PROGRAM = streaming.program("rope_bf16", ("rows",), per_block=table_rows)

# --- measured -----------------------------------------------------------------------------

SOURCE = Source("details/RoPE_bf16.md", markdown_tables(
    TableSource("shapes", "Tested shapes", "rows",
                "tested shapes (rows of head_dim), best herd; latency and bandwidth (x and "
                "the table in, y out)"),
    TableSource("herd", "Tunable space & performance", "herd",
                "which herds place at rows=65536, head_dim=64"),
    TableSource("herd_x", "Tunable space & performance", "herd_x",
                "latency and bandwidth against the number of columns at rows=65536")))

# --- cost: streamed at RoPE's per-tile rate, fitted on its page ----------------------------


def timed_launches() -> list[TimedLaunch]:
    """The tested shapes and the herd sweeps: one head_dim row per DMA (tile_rows 1, as the
    harness streams it), a table row per row (seq = rows)."""
    def launch(name: str, r: dict[str, Any]) -> tuple[Shape, dict[str, Any], float]:
        rows, hd = (r["rows"], r["head_dim"]) if name == "shapes" else (65536, 64)
        herd = (r["herd_x"], r.get("herd_y", 1))
        return ({"rows": rows, "width": hd, "seq": rows},
                {"herd_m": herd[0], "herd_rows": herd[1], "tile_rows": 1},
                3.0 * rows * hd * 2)            # x and the table in, y out
    return streaming.measured_rows("rope", launch)


FAMILIES = (KernelFamily(
    ROPE, rules=streaming.RULES, check=streaming.check,
    candidates=product_space(streaming.ROW_SPACE), numerics=NUMERICS,
    cost=streaming.stream_cost("rope", timed_launches), program=PROGRAM, data="rope", source=SOURCE,
    # alone, x and y are [heads, L, head_dim] (the emulator reads the spec's dims so)
    head_first_alone=("x", "y"),
    measured=rows_at("rope", "shapes", lambda r: (r["rows"], r["head_dim"]),
                     lambda s: (s["rows"], s["width"]))),)
