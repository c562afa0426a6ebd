"""What the row and element-wise kernel families share (RMSNorm, the QK norm, RoPE, SiLU x
mul, the adds, GELU): their operands, the resource rule, the search spaces, the cost and the
program of a herd whose tiles stream their inputs from DDR and their output back.

A row kernel (a `tile_rows` tunable) moves whole rows: a block of `tile_rows` rows of
`width` per tile and loop step. An element-wise kernel moves flat tiles of `tile` elements.
What differs per family is declared by roles: a `weight` operand (a norm's weight, a bias)
is loaded whole into L1 once; a `table` operand (RoPE's cos/sin LUT) gets a row per row of
the block; every `input` is a stream.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..air_programs.air_parts import (
    Buffer,
    EmitError,
    Extern,
    KernelSource,
    LaunchLayout,
    Writer,
    buf,
    call,
    cdiv,
    stream_segment,
)
from ..definition import rules
from ..definition.family import (
    BF16,
    AirProgram,
    Cost,
    KernelSpec,
    Operand,
    SegmentWriter,
    Shape,
    TimedLaunch,
    Work,
    timed,
)
from ..definition.hardware import Hardware
from ..definition.rules import Finding
from ..measured.measurements import TO_BASE, load, scaled

if TYPE_CHECKING:
    from ..performance.model import PerfParams
    from ..plans.plan import Launch


# --- spec -------------------------------------------------------------------------------

def row_operands(*names: str, out: str = "y", weight: str | None = None, table: bool = False
                 ) -> Callable[[Shape], list[Operand]]:
    """Inputs `names` of [rows, width], a weight row of [width], RoPE's table of [seq,
    width] (one LUT row per position, as upstream's rope kernel reads it), and the output
    of [rows, width]; all bf16."""
    def ops(s: Shape) -> list[Operand]:
        shape = (s["rows"], s["width"])
        out_ops = [Operand(n, shape, BF16, "input") for n in names]
        if weight:
            out_ops.append(Operand(weight, (s["width"],), BF16, "weight"))
        if table:
            out_ops.append(Operand("lut", (s["seq"], s["width"]), BF16, "table"))
        return [*out_ops, Operand(out, shape, BF16, "output")]
    return ops


# --- checker rule ------------------------------------------------------------------------

#: Inline (direct codegen) code works on 16-lane bf16 vectors, as upstream's does
#: (weighted_rms_norm, the LLM builders' adds, gelu): math.tanh and the vector ops lower on
#: that width on AIE2P.
LANES = 16

RULES = (
    "herd: herd_m columns x herd_rows rows fit the array",
    "shim streams: every tile streams its inputs and its output through the shim tiles",
    "L1: the block of every stream, ping-pong, plus a weight row or a table row per row",
    "alignment: a row (or tile) moves a multiple of 4 bytes",
    "padding (warning, element-wise): elements pad to tile x tiles",
    "buffer descriptors: a pair per stream and table of each tile in a column, one per "
    "weight load (the buffers are padded, so no tail)",
)


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int], scratch_bytes: int = 0) -> list[Finding]:
    """Element-wise and row-wise kernels: each tile streams its inputs from DDR (plus
    `scratch_bytes` of L1 its inline code keeps, a norm's accumulator)."""
    hm, rows_used = int(c["herd_m"]), int(c.get("herd_rows", 1))
    ops = spec.operands(s)
    ins = sum(1 for o in ops if o.role == "input")
    width = s["width"]
    f: list[Finding] = []
    rules.herd(f, rows_used, hm, hw)
    rules.shim(f, hm * rows_used, ins, 1, hw)
    if "tile_rows" in c:       # row kernels hold whole rows: norms, RoPE
        rows = int(c["tile_rows"])
        # A table row for each row of the block (RoPE); a weight row (a norm).
        extra = sum(rows * width * BF16 if o.role == "table" else width * BF16
                    for o in ops if o.role in ("table", "weight"))
        l1 = 2 * (ins + 1) * rows * width * BF16 + extra + scratch_bytes
        usage.update(tiles=hm * rows_used, l1_bytes=l1)
        rules.l1(f, l1, hw, f"{rows} row(s) of {width} in and out, twice", "use fewer tile_rows")
        rules.align(f, "a row", width, BF16, hw)
    else:
        tile = int(c["tile"])
        n = s["rows"] * width
        # a weight (the bias row) sits whole next to the stream
        l1 = 2 * (ins + 1) * tile * BF16 + sum(width * BF16 for o in ops if o.role == "weight") \
            + scratch_bytes
        usage.update(tiles=hm * rows_used, l1_bytes=l1)
        rules.l1(f, l1, hw, f"{ins + 1} buffers of {tile} elements, twice", "use a smaller tile")
        # A 1-D stream folds into a multi-dimensional descriptor: no repeat limit bites.
        rules.pad(f, "elements", n, tile * hm * rows_used)
        rules.align(f, "a tile", tile, BF16, hw)
    # Through its column's shim tile, each tile of the column streams its inputs, its output
    # and its table rows (ping-pong pairs); a weight row is loaded once.
    tables = sum(1 for o in ops if o.role == "table")
    weights = sum(1 for o in ops if o.role == "weight")
    rules.bds(f, streams=rows_used * (ins + 1 + tables), tails=0, hw=hw, usage=usage,
              once=rows_used * weights)
    return f


def whole_vectors(f: list[Finding], what: str, n: int, why: str, multiple: int = LANES
                  ) -> None:
    """`n` elements are whole 16-lane vectors (`multiple` of them: vector code has no
    scalar tail)."""
    if n % multiple:
        f.append(Finding("divisible", "error", f"{what}={n} is not a multiple of "
                         f"{multiple}: {why}", n, multiple))


def vector_check(scratch_bytes: int, why: str, multiple: int = LANES
                 ) -> Callable[[KernelSpec, Shape, dict[str, Any], Hardware, dict[str, int]],
                               list[Finding]]:
    """The check of a kernel that works on whole vectors (inline code, or an upstream kernel
    with no tail): the streaming rule with its scratch L1, and every row (a row kernel) or
    tile (element-wise) a `multiple` of elements."""
    def run(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
            usage: dict[str, int]) -> list[Finding]:
        f = check(spec, s, c, hw, usage, scratch_bytes)
        # a row, or a weight row read vector by vector beside an element-wise tile
        if "tile_rows" in c or any(o.role == "weight" for o in spec.operands(s)):
            whole_vectors(f, "width", s["width"], why, multiple)
        if "tile" in c:
            whole_vectors(f, "tile", int(c["tile"]), why, multiple)
        return f
    return run


# --- search spaces (calibrated value first: the element-wise herds of 8 measured upstream) --

ROW_SPACE = {"herd_m": (8, 4, 2, 1), "tile_rows": (2, 1, 4, 8, 16, 32)}
ELEMENT_SPACE = {"herd_m": (8, 4, 2, 1), "tile": (2048, 1024, 4096, 512, 256)}


# --- cost --------------------------------------------------------------------------------
#
# The registry pages measure these kernels memory-bound and herd-scaled: each tile streams
# its share of the rows at a rate of its own kernel ("near-linear scaling because each
# column independently streams its row chunk"), up to what DDR gives the array; every DMA
# block costs a little (EltwiseAdd_bf16.md: "larger blocks amortize DMA-launch overhead");
# and a launch pays a floor ("the ~80 us launch floor ... dominates the small shapes").

#: fitted coefficients shared by the streaming kernels, and their starting values
#: (docs/hardware-facts.md#dispatch-and-host-costs: ~80 us floor, DDR ~30-58 GB/s)
SHARED = (("stream_floor_s", 80e-6), ("stream_ddr_bw", 58e9), ("stream_block_s", 1e-7))


def stream_bytes(spec: KernelSpec, s: Shape, elements: int) -> float:
    """Bytes a launch moves over `elements` of rows x width (the padded blocks it loops
    over): every input, table and output element once (RoPE moves a table row per row), a
    weight row once."""
    ops = spec.operands(s)
    per_element = sum(1 for o in ops if o.role in ("input", "table", "output"))
    return elements * BF16 * per_element + sum(o.nbytes for o in ops if o.role == "weight")


def stream_cost(rate_key: str, fitted_on: Callable[[], list[TimedLaunch]] | None = None
                ) -> Cost:
    """Memory-bound at the kernel's fitted per-tile rate `stream_tile_bw[rate_key]`."""
    def work(spec: KernelSpec, s: Shape, c: dict[str, Any], p: PerfParams) -> Work:
        """memory: the bytes of the blocks the herd loops over (rows or elements padded to
        whole blocks) at the herd's tiles times the kernel's per-tile rate (capped by DDR),
        and a cost per DMA block of each tile"""
        tiles = int(c["herd_m"]) * int(c.get("herd_rows", 1))
        if "tile_rows" in c:
            block = int(c["tile_rows"]) * s["width"]
            blocks = math.ceil(s["rows"] / (int(c["tile_rows"]) * tiles))
        else:
            block = int(c["tile"])
            blocks = math.ceil(s["rows"] * s["width"] / (block * tiles))
        bw = min(tiles * p.tile_bw(rate_key), p.stream_ddr_bw)
        moved = stream_bytes(spec, s, blocks * block * tiles)
        return Work(0.0, moved / bw + blocks * p.stream_block_s)
    return Cost(work, lambda p: p.stream_floor_s,
                (*SHARED, (f"stream_tile_bw.{rate_key}", 3e9)), fitted_on, in_elf="stream",
                rate_key=rate_key)


def element_shape(n: int, as_2d: str | None) -> Shape:
    """An element-wise page's size N as our rows x width: its 2-D form where it gives one."""
    if as_2d:
        rows, width = (int(x) for x in as_2d.replace("×", "x").split("x"))
        return {"rows": rows, "width": width}
    return {"rows": 1, "width": n}


def seconds(row: dict[str, Any], table_units: dict[str, str], moved: float) -> float | None:
    """A measured row's time: its latency, else the bytes upstream counts over its
    bandwidth; None for a configuration that did not run."""
    latency = row.get("latency")
    if isinstance(latency, list):
        latency = sum(latency) / len(latency)
    if latency is not None:
        return scaled(latency, TO_BASE[table_units["latency"]])
    if row.get("bandwidth") is not None:
        return moved / scaled(row["bandwidth"], TO_BASE[table_units["bandwidth"]])
    return None


def measured_rows(kernel: str, launch: Callable[[str, dict[str, Any]],
                                                tuple[Shape, dict[str, Any], float] | None]
                  ) -> list[TimedLaunch]:
    """Every row that ran of every table of the kernel's data file: `launch(table, row)`
    gives its shape, its configuration and the bytes upstream's bandwidth counts (None to
    leave a row out)."""
    data = load(kernel)
    page = data["source"]["path"]
    out = []
    for name, t in data["tables"].items():
        for row in t["rows"]:
            if row.get("result") == "fail" or row.get("status") == "fail":
                continue
            got = launch(name, row)
            if got is None:
                continue
            shape, config, moved = got
            secs = seconds(row, t["units"], moved)
            if secs is not None:
                out.append(timed(kernel, shape, config, secs, f"{page} ({name})"))
    return out


# --- the program ---------------------------------------------------------------------------

#: what inline code imports beyond the program's common header
VECTOR_IMPORTS = ("from air.dialects import math as math_dialect",
                  "from air.dialects.vector import broadcast, fma, reduction, transfer_read, "
                  "transfer_write",
                  "from air.ir import AffineMapAttr, VectorType")


def vector_prelude(w: Writer) -> None:
    """The names inline code reads: the bf16 and f32 vector types, the identity map of a
    transfer, the pad values, index 0."""
    w(f"vec = VectorType.get([{LANES}], bf16)")
    w(f"vec_f32 = VectorType.get([{LANES}], f32)")
    w("identity = AffineMapAttr.get(AffineMap.get_identity(1))")
    w("zero = arith.ConstantOp(bf16, 0.0)")
    w("zero_f32 = arith.ConstantOp(f32, 0.0)")
    w("c0 = at([])")


def read(vector: str, buffer: str, index: str) -> str:
    """vector.transfer_read of LANES elements of `buffer` from `index`."""
    pad = "zero_f32" if vector == "vec_f32" else "zero"
    return f"transfer_read({vector}, {buffer}, [{index}], identity, {pad}, [True])"


def write(w: Writer, value: str, buffer: str, index: str) -> None:
    w(f"transfer_write(None, {value}, {buffer}, [{index}], identity, [True])")


@dataclass(frozen=True)
class KernelCall:
    """An upstream micro-kernel a block is handed to (upstream_kernels.json): its C symbol,
    the object and mlir-air source it is compiled from (with no defines: these kernels take
    every size at run time, so one object serves every shape), the L1 buffers it takes in
    order, then its i32s (one: the elements of one call). A `per_row` kernel takes one row (RoPE's
    `dims`), and its block is one row: one row per DMA, the kernel called on the whole row
    buffers, as upstream's rope_halfsplit.py does. Several rows per DMA with a call per row
    on a window of each buffer is the structure upstream found broken (half the rows came
    back zero or NaN: docs/hardware-facts.md#known-failure-symptoms); the verifier's window
    check refuses it."""

    symbol: str
    obj: str
    source: str
    buffers: tuple[str, ...]
    per_row: bool = False
    #: its i32 arguments after the buffers (rope_partial's dims and rope_dims: 2)
    i32s: int = 1

    @property
    def kernel_source(self) -> KernelSource:
        return KernelSource(self.obj, self.source, ())

    def extern(self) -> Extern:
        return Extern(self.symbol, self.obj, (*self.buffers, *("i32",) * self.i32s))


def config(launch: Launch) -> dict[str, Any]:
    return {**launch.spec.tunables, **launch.config_dict}


def block_rows(launch: Launch) -> int:
    """The rows of a row kernel's block (tile_rows); 0 for an element-wise kernel."""
    return int(config(launch).get("tile_rows", 0))

#: (writer, launch, layout, operand -> argument, rows of the block) -> per-block DMAs
BlockWriter = Callable[[Writer, "Launch", LaunchLayout, dict[str, str], int], None]
#: (writer, launch, layout, elements per block, rows per block, head_dim) -> the compute
ComputeWriter = Callable[[Writer, "Launch", LaunchLayout, int, int, int | None], None]


def layout(kernel: KernelCall | None, *, imports: tuple[str, ...] = (),
           scratch: tuple[Buffer, ...] = ()) -> Callable[..., LaunchLayout]:
    """The launch of a row or element-wise kernel: one herd of herd_m columns by herd_rows
    rows (1 unless the family streams few enough operands; a [1, P] herd fails placement
    on NPU2), no L2, every stream's block in L1 twice, flat (a row block is tile_rows rows
    of width, one after the other, so inline code indexes it as upstream's 1-d rows).
    `kernel` is the upstream micro-kernel the block is handed to; None when the compute is
    written inline (direct codegen: `imports` what it needs, `scratch` its own L1)."""
    def launch_layout(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
        spec, s = launch.spec, launch.shape_dict
        ops = tuple(spec.operands(s))
        hm, herd_rows = int(c["herd_m"]), int(c.get("herd_rows", 1))
        streams = [o for o in ops if o.role == "input"] + [o for o in ops if o.role == "output"]
        width, stored = s["width"], stored_rows(launch)
        rows = int(c.get("tile_rows", 0))
        if kernel is not None and kernel.per_row and rows != 1:
            raise EmitError(f"{launch.label}: {kernel.symbol} takes one row per call, so its "
                            f"block is one row per DMA (tile_rows 1, as upstream's "
                            f"{kernel.source.rsplit('/', 2)[-2]} example moves it), not {rows}")
        block = rows * width if rows else int(c["tile"])
        loop = cdiv(stored * width, block * hm * herd_rows)
        l1: tuple[Buffer, ...] = tuple(buf(f"{o.name}_l1", (block,), BF16, "L1", True)
                                       for o in streams)
        # a table row per row of the block (RoPE), a weight row whole (a norm, a bias)
        l1 += tuple(buf(f"{o.name}_l1", (block,) if o.role == "table" else (width,),
                        BF16, "L1") for o in ops if o.role in ("table", "weight"))
        l1 += scratch
        externs = () if kernel is None else (kernel.extern(),)
        kernels = () if kernel is None else (kernel.kernel_source,)
        # the last round's blocks run past the data: every stream is padded to the rounds'
        # reach, and a table to the rows those positions need (RoPE seq-first: row r is
        # position r // heads; head-first positions wrap within the table)
        reach = loop * hm * herd_rows * block
        padded = {o.name: reach for o in streams if reach > o.numel}
        for o in ops:
            if o.role == "table" and launch.binding("x").layout == "seq-first":
                rows_reached = reach // width
                need = -(-rows_reached // (s["rows"] // s["seq"])) * width
                if need > o.numel:
                    padded[o.name] = need
            elif o.role == "table" and stored > s["rows"]:
                # head-first rows of a padded sequence: positions wrap at L_pad
                padded[o.name] = stored // (s["rows"] // s["seq"]) * width
        return LaunchLayout(
            spec.name, launch.label, ops, grid=(1, 1), segment=None, herd=(hm, herd_rows),
            l2=(), l1=l1, loop=loop, externs=externs, kernels=kernels, imports=imports,
            padded=padded)
    return launch_layout


def stored_rows(launch: Launch) -> int:
    """The rows the kernel walks: its shape's, or, when its operands are head-first rows of
    a padded sequence (`Binding.seq_pad`: L positions stored as L_pad per head), every
    stored row, padding included (rows map to rows one to one, so the padding stays in
    place)."""
    rows = launch.shape_dict["rows"]
    pad = next((b.seq_pad for b in launch.bindings if b.seq_pad is not None), None)
    return rows if pad is None else rows // pad[0] * pad[1]


def call_extern(w: Writer, launch: Launch, layout: LaunchLayout, step: int, rows: int,
                head_dim: int | None) -> None:
    """The micro-kernel on this block's buffers, whole: the block's elements (one row of a
    per-row kernel)."""
    call(w, layout.externs[0], (step,))


def segment(compute: ComputeWriter = call_extern, per_block: BlockWriter | None = None
            ) -> SegmentWriter:
    """The herd's body: load each weight row once; then per block, move the inputs in (and
    the block's table rows), compute, move the output back."""
    def write(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
              names: list[str], head_dim: int | None) -> None:
        stream_segment(w, p, layout, names,
                       lambda: _body(w, launch, layout, arg, head_dim, compute, per_block))
    return write


def _body(w: Writer, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
          head_dim: int | None, compute: ComputeWriter, per_block: BlockWriter | None) -> None:
    step = math.prod(layout.l1[0].shape)
    rows = block_rows(launch) or 1
    cols, herd_rows = layout.herd
    l1_names = {b.name for b in layout.l1}
    for o in layout.operands:
        if o.role == "weight" and f"{o.name}_l1" in l1_names:
            w(f"dma_memcpy_nd({o.name}_l1, {arg[o.name]}, src_sizes=[{o.dims[-1]}], "
              "src_strides=[1])")
    w(f"for i in range_(0, {layout.loop}):")
    w.indent()
    if herd_rows == 1:
        w(f"offset = at([(i, {step * cols}), (tx, {step})])")
    else:       # tile (tx, ty) takes block tx * herd_rows + ty of each round
        w(f"offset = at([(i, {step * cols * herd_rows}), (tx, {step * herd_rows}), "
          f"(ty, {step})])")
    for o in layout.operands:
        if o.role == "input":
            w(f"dma_memcpy_nd({o.name}_l1, {arg[o.name]}, src_offsets=[offset], "
              f"src_sizes=[{step}], src_strides=[1])")
    if per_block is not None:
        per_block(w, launch, layout, arg, rows)
    compute(w, launch, layout, step, rows, head_dim)
    out = next(o for o in layout.operands if o.role == "output")
    w(f"dma_memcpy_nd({arg[out.name]}, {out.name}_l1, dst_offsets=[offset], "
      f"dst_sizes=[{step}], dst_strides=[1])")
    w("yield_([])")
    w.dedent()


def program(kernel: KernelCall | None, *, compute: ComputeWriter = call_extern,
            per_block: BlockWriter | None = None, imports: tuple[str, ...] = (),
            scratch: tuple[Buffer, ...] = ()) -> AirProgram:
    return AirProgram(layout(kernel, imports=imports, scratch=scratch),
                      segment(compute, per_block))
