"""RoPE, half-split (HF Llama `rotate_half`), from a cos/sin table. mlir-air links
rope_halfsplit.cc (rope.o): `rope(input, lut, output, dims)` rotates one row of dims
elements with one LUT row, [cos of the dims/2 frequencies | their sin]; the host builds the
table in that layout (`lut`). The registry page RoPE_bf16.md measures it.

Partial rotary (Phi-3 / Phi-4-mini: 96 of 128 dims) is the same object's
`rope_partial(input, lut, output, dims, rope_dims)`: it rotates the leading rope_dims as
`rope` does and copies the other dims through; its LUT row stays dims wide, [cos of
rope_dims/2 | their sin | unused] (Xilinx/mlir-air programming_examples/rope_halfsplit/
rope_halfsplit.cc, `rope_partial_kernel`, e972f29). A launch's config says `rope_dim` when
it is partial (the plan sets it from the model); without it the whole row rotates."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from npu_deploy.oracle import reference as ref_ops

from ..air_programs.air_parts import LaunchLayout, Writer, call, stored_length
from ..definition.family import (
    AirProgram,
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


def lut(cos: torch.Tensor, sin: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """The kernel's table from HF's [positions, rope_dim] cos and sin (each the rope_dim/2
    frequencies twice): per position [cos_0 .. cos_{half-1} | sin_0 .. sin_{half-1}],
    zero-padded to `width` (head_dim) when the rotary is partial, as rope_partial reads it."""
    half = cos.shape[-1] // 2
    table = torch.cat((cos[..., :half], sin[..., :half]), dim=-1)
    if width is not None and width > table.shape[-1]:
        table = torch.nn.functional.pad(table, (0, width - table.shape[-1]))
    return table


def cos_sin(table: torch.Tensor, rope_dim: int | None = None) -> tuple[torch.Tensor,
                                                                        torch.Tensor]:
    """HF's cos and sin ([positions, rope_dim]) back from the kernel's table (`lut`'s
    inverse); `rope_dim` (the table's width unless given) says how much of a row is read."""
    half = (rope_dim or table.shape[-1]) // 2
    cos, sin = table[..., :half], table[..., half:2 * half]
    return torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)


def rope_dim(s: Shape, c: dict[str, Any]) -> int:
    """The leading dims of each row the launch rotates: its config's rope_dim, or all."""
    return int(c.get("rope_dim") or s["width"])


# --- numerics: bf16 in, the rotation in FP32, one cast to bf16 -----------------------------


def emulate(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    seq, width = s["seq"], s["width"]
    cos, sin = cos_sin(f32(x["lut"]), rope_dim(s, c))
    if bound_layout(c, "x", "head-first") == "seq-first":
        rows = f32(x["x"]).view(seq, -1, width)       # [seq, heads, width]
        cos, sin = cos[:, None], sin[:, None]
    else:
        rows = f32(x["x"]).view(-1, seq, width)       # [heads, seq, width]
    y = ref_ops.apply_rope(rows, cos, sin)
    return {"y": bf16_out(y.reshape(-1, width), out, "y")}


def reference(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    rows = f32(x["x"]).view(-1, s["seq"], s["width"])
    cos, sin = cos_sin(f32(x["lut"]), rope_dim(s, c))
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


#: rope_partial, the same object: the leading rope_dims rotated, the rest copied
KERNEL_PARTIAL = streaming.KernelCall("rope_partial", "rope.o", KERNEL.source, KERNEL.buffers,
                                      per_row=True, i32s=2)


def _call_partial(w: Writer, launch: Launch, layout: LaunchLayout, step: int, rows: int,
                  head_dim: int | None) -> None:
    """rope_partial on the block's row: its dims, then the dims it rotates."""
    call(w, layout.externs[0], (step, rope_dim(launch.shape_dict, streaming.config(launch))))


_FULL = streaming.program(KERNEL, per_block=table_rows)
_PARTIAL = streaming.program(KERNEL_PARTIAL, compute=_call_partial, per_block=table_rows)


def _program(launch: Launch) -> AirProgram:
    """rope_partial's program when the launch rotates part of each row, rope's otherwise:
    the same DMAs (the LUT row is head_dim wide either way), another call."""
    s = launch.shape_dict
    return _PARTIAL if rope_dim(s, streaming.config(launch)) != s["width"] else _FULL


PROGRAM = AirProgram(lambda launch, c, hw: _program(launch).layout(launch, c, hw),
                     lambda w, p, launch, *rest: _program(launch).segment(w, p, launch, *rest))
_VECTORS = streaming.vector_check(0, "rope works on 16-lane vectors of each half of a row",
                                  multiple=2 * streaming.LANES)


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    """The streaming rule and whole vectors, one row per DMA, and a partial rotary's rotated
    dims whole vectors in each half with the copied tail whole vectors (rope_partial)."""
    f = _VECTORS(spec, s, c, hw, usage)
    rd, width = rope_dim(s, c), s["width"]
    # a full rotary's width is the vector rule's (above): one finding, in its words
    if rd != width and (not 0 < rd < width or rd % (2 * streaming.LANES)
                        or (width - rd) % streaming.LANES):
        f.append(Finding("divisible", "error", f"rope_dim={rd} of width {width}: "
                         f"rope_partial rotates a multiple of {2 * streaming.LANES} dims "
                         f"(16-lane vectors in each half) and copies the other "
                         f"{width - rd} in 16-lane vectors (rope_halfsplit.cc)", rd,
                         2 * streaming.LANES))
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
         "requires dims a multiple of 32); a partial rotary's rope_dim too, and the rest of the "
         "row whole vectors (rope_partial)", "known failure: one row per DMA (tile_rows 1; "
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
