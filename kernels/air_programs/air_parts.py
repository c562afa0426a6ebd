"""The parts an MLIR-AIR program is written from, for the kernel families' emitters: buffers
in L1 and L2, external micro-kernels, a launch's layout on the array, and the source writer
with its herd, allocation, call and DDR-addressing helpers. `kernels.air_programs.air` assembles a
dispatch's module from the families' layouts and segments.

Nothing here imports mlir-air: the programs are text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..definition.family import BF16, FP32, Operand

if TYPE_CHECKING:
    from ..plans.plan import Launch

DTYPES = {BF16: "bf16", FP32: "f32", 1: "i8"}
#: bytes per element of each element type a buffer holds (i8: packed 4-bit weights)
ELEM_BYTES = {"bf16": 2, "f32": 4, "i32": 4, "i8": 1}


class EmitError(ValueError):
    """A launch that cannot be written as an MLIR-AIR program."""


@dataclass(frozen=True)
class Buffer:
    """An allocation in L2 or L1. `pingpong` buffers are double-buffered by the compiler
    (the checker counts them twice). An L1 buffer with `herd_axes` is allocated in the
    segment with one leading dimension per herd axis, and each core holds its own slab
    (mlir-air's GEMM accumulator): a core's L1 is the slab."""

    name: str
    shape: tuple[int, ...]
    dtype: str                       # bf16 | f32
    space: str                       # L1 | L2
    pingpong: bool = False
    phase: str = "all"               # all | compute | drain: when it is allocated (GEMM)
    herd_axes: int = 0               # leading dimensions indexed by the herd's cores

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * ELEM_BYTES[self.dtype]

    @property
    def tile_nbytes(self) -> int:
        """What one core holds: the whole buffer, or its slab."""
        return math.prod(self.shape[self.herd_axes:]) * ELEM_BYTES[self.dtype]

    @property
    def slab(self) -> tuple[int, ...]:
        """The shape of a core's memref.subview: 1 on each herd axis."""
        return (1,) * self.herd_axes + self.shape[self.herd_axes:]

    def window_type(self, n: int) -> str:
        """The type of a window of `n` contiguous elements of a 1-d buffer at an offset known
        at run time (memref.subview in a loop): what a micro-kernel that takes one row of a
        block is declared with."""
        return memref((n,), self.dtype, self.space,
                      "StridedLayoutAttr.get(ShapedType.get_dynamic_size(), [1])")

    def slab_type(self) -> str:
        """The type of a core's slab, as a subview at the core's indices makes it: strided
        within the whole buffer at an offset known at run time (upstream's l1MemrefTyC)."""
        if not self.herd_axes:
            return memref(self.shape, self.dtype, self.space)
        strides = [math.prod(self.shape[i + 1:]) for i in range(len(self.shape))]
        return memref(self.slab, self.dtype, self.space,
                      f"StridedLayoutAttr.get(ShapedType.get_dynamic_size(), {strides})")


#: where an upstream micro-kernel's source lives; ours name our own repository
MLIR_AIR = "Xilinx/mlir-air"
NPU_DEPLOY = "npu-deploy"


@dataclass(frozen=True)
class KernelSource:
    """How an external micro-kernel object is compiled (with Peano): its source (a path in
    `repository`: mlir-air for upstream's kernels, npu-deploy for our own) and the
    preprocessor defines (-DNAME=VALUE)."""

    obj: str
    source: str
    defines: tuple[tuple[str, Any], ...]     # a value of None is a bare -DNAME
    repository: str = MLIR_AIR
    #: literal (old, new) replacements made in the source before it is compiled, each of
    #: an `old` that occurs exactly once (kernels.npu_runtime.peano_build checks it): for a
    #: constant the source fixes rather than takes as a define
    edits: tuple[tuple[str, str], ...] = ()

    def recipe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "defines": dict(self.defines),
               "repository": self.repository}
        if self.edits:          # an unedited source's recipe reads as it always did
            out["edits"] = [list(e) for e in self.edits]
        return out


@dataclass(frozen=True)
class Extern:
    """An external micro-kernel: a C symbol in an object file, called with L1 buffers."""

    symbol: str
    obj: str
    args: tuple[str, ...]            # L1 buffer names, then "i32" for each size argument
    #: a kernel that takes one row of a block: each buffer is passed as a window of this
    #: many elements (Buffer.window_type), None when it takes whole buffers (or slabs)
    window: int | None = None


@dataclass(frozen=True)
class ChannelDecl:
    """An air.channel: its size (a bundle), the broadcast shape each put reaches (a get at
    index g takes the put at g with the broadcast dimensions at 0), and whether it is a
    cascade (core to neighbouring core, `npu_cascade`) rather than a DMA stream."""

    name: str
    size: tuple[int, ...]
    broadcast: tuple[int, ...] | None = None
    cascade: bool = False


@dataclass(frozen=True)
class LaunchLayout:
    """One launch on the array: what `emit_dispatch` writes for it."""

    kernel: str
    label: str                       # L0.q_proj
    operands: tuple[Operand, ...]    # the function's arguments for it, in the spec's order
    grid: tuple[int, int]            # air.launch sizes
    segment: tuple[int, int] | None  # air.segment sizes (FlashAttention's head unroll)
    herd: tuple[int, int]            # air.herd sizes: (columns, rows)
    l2: tuple[Buffer, ...]
    l1: tuple[Buffer, ...]
    loop: int                        # iterations of each herd tile's main loop
    inner: int = 1                   # iterations of its inner loop (GEMM's K1 steps)
    externs: tuple[Extern, ...] = ()
    #: the compile recipe of each object its externs link, when known
    kernels: tuple[KernelSource, ...] = ()
    channels: tuple[tuple[str, tuple[int, ...]] | ChannelDecl, ...] = ()   # (name, size)
    flags: dict[str, Any] = field(default_factory=dict)       # compiler options it needs
    #: module imports its inline code needs beyond the common header (direct codegen)
    imports: tuple[str, ...] = ()
    #: operands the program walks past their end (the last round of blocks), with the flat
    #: elements it touches: the host pads their buffers to that many (zeros after the data)
    padded: dict[str, int] = field(default_factory=dict)
    #: device-only arguments the launch needs beyond its operands: (name, the operand whose
    #: buffer it mirrors, element type), e.g. fused-cast's FP32 C scratch
    scratch: tuple[tuple[str, str, str], ...] = ()
    #: (L, multiple) when the program walks the sequence of its head-first operands (L
    #: positions) in blocks of `multiple` positions: their per-head rows on the device must
    #: be a multiple of it (`kernels.air_programs.air.pad_sequences` pads them so)
    sequence: tuple[int, int] | None = None
    #: dimensions of the launch's shape the program reads at run time
    #: (`KernelFamily.runtime_dims`): each a function argument of one i32 (tensor key
    #: "runtime:<label>:<dim>", named in the segment's argument map by the dimension) that
    #: the backend writes per run with the launch's value
    runtime: tuple[str, ...] = ()

    @property
    def tiles(self) -> int:
        return self.herd[0] * self.herd[1]

    def l1_bytes(self) -> int:
        """Peak L1 per compute tile, ping-pong buffers counted twice (as kernels.definition.checker
        counts it): what lives throughout, plus the larger of the compute and drain
        phases' buffers."""
        def total(phase: str) -> int:
            return sum(b.tile_nbytes * (2 if b.pingpong else 1) for b in self.l1
                       if b.phase == phase)
        return total("all") + max(total("compute"), total("drain"))

    def l2_bytes(self) -> int:
        return sum(b.nbytes * (2 if b.pingpong else 1) for b in self.l2)


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def buf(name: str, shape: tuple[int, ...], elem: int | str, space: str,
        pingpong: bool = False, phase: str = "all", herd_axes: int = 0) -> Buffer:
    dtype = elem if isinstance(elem, str) else DTYPES[elem]
    return Buffer(name, tuple(int(d) for d in shape), dtype, space, pingpong, phase, herd_axes)


def dims(*sizes: int) -> str:
    return "x".join(str(s) for s in sizes)


def identifier(name: str) -> str:
    """A dispatch name as a Python and MLIR symbol: the function, and XRT's instance name."""
    out = re.sub(r"\W", "_", name).strip("_") or "dispatch"
    return out if not out[0].isdigit() else f"d_{out}"


# --- writing source ------------------------------------------------------------------------

class Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, text: str = "") -> None:
        self.lines.append(("    " * self.depth + text) if text else "")

    def indent(self) -> Writer:
        self.depth += 1
        return self

    def dedent(self) -> None:
        self.depth -= 1


def memref(shape: tuple[int, ...], dtype: str, space: str | None = None,
           layout: str | None = None) -> str:
    where = (f", layout={layout}" if layout else "") + (f", memory_space={space}" if space
                                                          else "")
    return f"MemRefType.get({list(shape)}, {dtype}{where})"


def call(w: Writer, ext: Extern, ints: tuple[int | str, ...] = (),
         names: dict[str, str] | None = None) -> None:
    """Call a micro-kernel: its L1 buffers (by the names in scope: `names` maps a buffer to
    the value that stands for it, a core's slab), then its size arguments as i32 (an int is
    a constant, a string an index value of the program, cast)."""
    it = iter(ints)

    def i32(value: int | str) -> str:
        return f"arith.ConstantOp(i32, {value})" if isinstance(value, int) \
            else f"arith.index_cast(i32, {value})"
    args = [i32(next(it, 0)) if a == "i32" else (names or {}).get(a, a) for a in ext.args]
    w(f"CallOp({ext.symbol}, [{', '.join(args)}])")


def extern(layout: LaunchLayout, prefix: str) -> Extern:
    return next(e for e in layout.externs if e.symbol.startswith(prefix))


def open_herd(w: Writer, p: str, layout: LaunchLayout, operands: list[str], what: str) -> None:
    """Open a herd (the caller writes its body, then dedents): every herd of a launch has the
    same name and size, as in mlir-air's GEMM, which runs one herd three times. A herd whose
    code is all inline (no micro-kernel) links nothing."""
    objs = ",".join(sorted({e.obj for e in layout.externs}))
    w(f"# herd: {what}")
    ops = ", ".join(["lx", "ly", *operands])
    link = f", link_with={objs!r}" if objs else ""
    w(f"@herd(name='{p}_herd', sizes={list(layout.herd)}, operands=[{ops}]{link})")
    w(f"def {p}_herd_{identifier(what.split()[0])}(tx, ty, hsx, hsy, {ops}):")
    w.indent()


def alloc_l1(w: Writer, buffers: tuple[Buffer, ...]) -> None:
    for b in buffers:
        w(f"{b.name} = AllocOp({memref(b.shape, b.dtype, 'L1')}, [], [])")


def free(w: Writer, buffers: tuple[Buffer, ...]) -> None:
    for b in buffers:
        w(f"DeallocOp({b.name})")


def stream_segment(w: Writer, p: str, layout: LaunchLayout, names: list[str],
                   body: Callable[[], None]) -> None:
    """A segment of one herd whose tiles stream their operands between DDR and L1 (no L2
    staging): open the herd, allocate the L1 buffers, write `body()`, free them."""
    open_herd(w, p, layout, names, "stream tiles")
    alloc_l1(w, layout.l1)
    body()
    free(w, layout.l1)
    w.dedent()


def stored_length(launch: Launch, operand: str, length: int) -> int:
    """The rows per head operand `operand` (of a sequence of `length` positions) has on the
    device: L_pad when its binding is padded head-first, else `length`."""
    pad = launch.binding(operand).seq_pad
    return length if pad is None else pad[1]


def head_rows(launch: Launch, operand: str, head: str, heads: int, length: int, hd: int,
              rows: list[tuple[str, int]], first: int = 0) -> tuple[str, int]:
    """Where rows `first + sum(value * multiplier)` of one head of an attention operand
    start, and the stride between rows, in the layout the operand is bound in:
    head-first [heads, L_pad, hd] (L_pad: `length`, or the binding's padded length) or
    seq-first [length, heads * hd]."""
    if launch.binding(operand).layout == "head-first":
        per_head = stored_length(launch, operand, length) * hd
        terms, stride = [(v, m * hd) for v, m in rows], hd
    else:
        terms, stride, per_head = [(v, m * heads * hd) for v, m in rows], heads * hd, hd
    body = ", ".join(f"({v}, {m})" for v, m in [(head, per_head), *terms])
    const = first * stride
    return (f"at([{body}], {const})" if const else f"at([{body}])"), stride
