"""RoPE, half-split (HF Llama `rotate_half`), from a cos/sin table. mlir-air links
rope_halfsplit.cc (rope.o): `rope(input, lut, output, dims)` rotates one row of dims
elements with one LUT row, [cos of the dims/2 frequencies | their sin]; the host builds the
table in that layout (`lut`). The registry page RoPE_bf16.md measures it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from npu_deploy.oracle import reference as ref_ops

from ..air_programs.air_parts import LaunchLayout, Writer, stored_length
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
from ..emulation.tensors import bf16_out, bound_layout, f32
from ..measured.measurements import Source, TableSource, markdown_tables, rows_at
from . import streaming

if TYPE_CHECKING:
    from ..plans.plan import Launch

# --- spec: rows of head_dim (every head of every position), the table of `seq` positions ---

ROPE = KernelSpec("rope", "npu", "RoPE, half-split, from a cos/sin LUT", ("rows", "width", "seq"),
                  streaming.row_operands("x", table=True), lambda s: 3.0 * s["rows"] * s["width"],
                  {"herd_m": 8, "tile_rows": 1})

# --- the table: one LUT row per position, as rope_halfsplit.cc reads it ----------------------


def lut(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The kernel's table from HF's [positions, head_dim] cos and sin (each the dims/2
    frequencies twice): per position [cos_0 .. cos_{half-1} | sin_0 .. sin_{half-1}]."""
    half = cos.shape[-1] // 2
    return torch.cat((cos[..., :half], sin[..., :half]), dim=-1)


def cos_sin(table: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """HF's cos and sin back from the kernel's table (`lut`'s inverse)."""
    half = table.shape[-1] // 2
    cos, sin = table[..., :half], table[..., half:]
    return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)


# --- numerics: bf16 in, the rotation in FP32, one cast to bf16 -----------------------------


def emulate(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    seq, width = s["seq"], s["width"]
    cos, sin = cos_sin(f32(x["lut"]))
    if bound_layout(c, "x", "head-first") == "seq-first":
        rows = f32(x["x"]).view(seq, -1, width)       # [seq, heads, width]
        cos, sin = cos[:, None], sin[:, None]
    else:
        rows = f32(x["x"]).view(-1, seq, width)       # [heads, seq, width]
    y = ref_ops.apply_rope(rows, cos, sin)
    return {"y": bf16_out(y.reshape(-1, width), out, "y")}


def reference(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    rows = f32(x["x"]).view(-1, s["seq"], s["width"])
    cos, sin = cos_sin(f32(x["lut"]))
    return {"y": ref_ops.apply_rope(rows, cos, sin).reshape(-1, s["width"])}


NUMERICS = Numerics(emulate, reference, atol=1e-3)

# --- the program: one row per DMA, its LUT row, `rope` on the whole row buffers ------------
#
# upstream's rope_halfsplit.py: each tile moves one head_dim row of x, its LUT row and its
# output row per DMA and calls `rope` on the three row buffers. It records that several rows
# per DMA with a call per row on a window of each buffer broke: the air dependency pass
# orders the windowed writes wrongly against the one output DMA (RoPE_bf16.md: at 2 rows per
# DMA it failed to place, at 4 half the rows came back zero or NaN). So the block is one row
# (tile_rows 1, the only value RoPE's search space and check allow), and the verifier's
# window check refuses the windowed form.

#: rope_halfsplit.cc, compiled with no defines: one call rotates one row of `dims`
KERNEL = streaming.KernelCall("rope", "rope.o", "programming_examples/rope_halfsplit/"
                              "rope_halfsplit.cc", ("x_l1", "lut_l1", "y_l1"), per_row=True)


def table_rows(w: Writer, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
               rows: int) -> None:
    """One LUT row per row of the block. Row r of x is position r // heads seq-first
    ([L, heads * head_dim]), position r mod L_pad head-first ([heads, L_pad, hd], L_pad = L
    unless the sequence is padded; a padded position reads the table's zeros)."""
    s = launch.shape_dict
    heads, seq, width = s["rows"] // s["seq"], stored_length(launch, "x", s["seq"]), s["width"]
    for j in range(rows):
        row = f"at([(i, {rows * layout.herd[0]}), (tx, {rows})], {j})"
        pos = f"at([({row}, 1)], divisor={heads})" \
            if launch.binding("x").layout == "seq-first" \
            else f"at([({row}, 1), (at([({row}, 1)], divisor={seq}), {-seq})])"
        w(f"dma_memcpy_nd(lut_l1, {arg['lut']}, dst_offsets=[{j * width}], dst_sizes=[{width}], "
          f"dst_strides=[1], src_offsets=[at([({pos}, {width})])], src_sizes=[{width}], "
          "src_strides=[1])")


PROGRAM = streaming.program(KERNEL, per_block=table_rows)
_VECTORS = streaming.vector_check(0, "rope works on 16-lane vectors of each half of a row",
                                  multiple=2 * streaming.LANES)


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    """The streaming rule and whole vectors, and one row per DMA."""
    f = _VECTORS(spec, s, c, hw, usage)
    if int(c["tile_rows"]) != 1:
        f.append(Finding("known_failure", "error", f"tile_rows={c['tile_rows']}: RoPE moves "
                         "one row per DMA; upstream's batched variant failed to place at 2 rows "
                         "per DMA and returned half the rows zero or NaN at 4 (RoPE_bf16.md, "
                         "rope_halfsplit.py)", int(c["tile_rows"]), 1))
    return f


CHECK = check
#: RoPE's search space: the herd only; a block is one row
SPACE = {"herd_m": streaming.ROW_SPACE["herd_m"], "tile_rows": (1,)}

RULES = (*streaming.RULES, "divisible: a row is whole 16-lane vectors in each half (rope "
         "requires dims a multiple of 32)", "known failure: one row per DMA (tile_rows 1; "
         "upstream's batched variant failed to place at 2 rows per DMA and lost half the "
         "rows at 4, RoPE_bf16.md)")

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
    ROPE, rules=RULES, check=CHECK,
    candidates=product_space(SPACE), numerics=NUMERICS,
    cost=streaming.stream_cost("rope", timed_launches), program=PROGRAM, data="rope", source=SOURCE,
    # alone, x and y are [heads, L, head_dim] (the emulator reads the spec's dims so)
    head_first_alone=("x", "y"),
    measured=rows_at("rope", "shapes", lambda r: (r["rows"], r["head_dim"]),
                     lambda s: (s["rows"], s["width"]))),)
