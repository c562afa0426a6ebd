"""MLIR-AIR programs for the plan's dispatches, as Python sources for mlir-air's builder.

Two steps. `layout_of(launch)` says what one launch is on the array: its `air.launch`
grid, its herd, the buffers it allocates in L2 (the memory tiles) and L1 (each compute
tile), its loops, the channels it needs and the external micro-kernels it calls, all from
the kernel spec, the shape and the tile configuration. `emit_dispatch(dispatch)` writes
one module with one function holding every launch of the dispatch, in order, each as
`air.launch` -> `air.segment` -> `air.herd`: a bare herd next to other launches is dropped
silently on NPU2 (NPU_FACTS.md, "output all zeros after merging kernels"). Names of
segments, herds and channels are prefixed per launch (`s0_`, `s1_`...), and launches that
bind the same tensor share one function argument.

The structure follows mlir-air's programming examples (GEMM, GEMV, weighted RMSNorm,
RoPE half-split, SiLU x mul, eltwise add, FlashAttention kernel_fusion_based): L2
staging for GEMM, streaming from DDR for the row and element-wise kernels, channels and a
cascade for FlashAttention. The micro-kernel objects (`mm_64x32x128.o`...) are compiled
per tile shape from mlir-air's AIE kernel sources with Peano; their symbols carry the
sizes, so two tile shapes never clash in one ELF. The decode-attention program is our own
design: mlir-air has no example of it.

Nothing here imports mlir-air: the sources are text, and `kernels.xrt` builds them.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .hardware import XDNA2, Hardware
from .plan import Dispatch, DispatchPlan, Launch
from .specs import BF16, FP32, Operand

DTYPES = {BF16: "bf16", FP32: "f32"}


class EmitError(ValueError):
    """A launch that cannot be written as an MLIR-AIR program."""


@dataclass(frozen=True)
class Buffer:
    """An allocation in L2 or L1. `pingpong` buffers are double-buffered by the compiler
    (the checker counts them twice)."""

    name: str
    shape: tuple[int, ...]
    dtype: str                       # bf16 | f32
    space: str                       # L1 | L2
    pingpong: bool = False
    phase: str = "all"               # all | compute | drain: when it is allocated (GEMM)

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * (2 if self.dtype == "bf16" else 4)


@dataclass(frozen=True)
class Extern:
    """An external micro-kernel: a C symbol in an object file, called with L1 buffers."""

    symbol: str
    obj: str
    args: tuple[str, ...]            # L1 buffer names, then "i32" for each size argument


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
    channels: tuple[tuple[str, tuple[int, ...]], ...] = ()   # name, size
    flags: dict[str, Any] = field(default_factory=dict)       # compiler options it needs

    @property
    def tiles(self) -> int:
        return self.herd[0] * self.herd[1]

    def l1_bytes(self) -> int:
        """Peak L1 per compute tile, ping-pong buffers counted twice (as kernels.checker
        counts it): what lives throughout, plus the larger of the compute and drain
        phases' buffers."""
        def total(phase: str) -> int:
            return sum(b.nbytes * (2 if b.pingpong else 1) for b in self.l1 if b.phase == phase)
        return total("all") + max(total("compute"), total("drain"))

    def l2_bytes(self) -> int:
        return sum(b.nbytes * (2 if b.pingpong else 1) for b in self.l2)


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _buf(name: str, shape: tuple[int, ...], elem: int | str, space: str,
         pingpong: bool = False, phase: str = "all") -> Buffer:
    dtype = elem if isinstance(elem, str) else DTYPES[elem]
    return Buffer(name, tuple(int(d) for d in shape), dtype, space, pingpong, phase)


def _dims(*sizes: int) -> str:
    return "x".join(str(s) for s in sizes)


# --- one launch per kernel family ---------------------------------------------------------

def _gemm(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    s = launch.shape_dict
    M, K, N = s["M"], s["K"], s["N"]
    tm, tk2, tk1, tn, hm, hn = (int(c[k]) for k in
                                ("tile_m", "tile_k_l2", "tile_k_l1", "tile_n", "herd_m", "herd_n"))
    out = FP32 if launch.kernel == "gemm_fp32" else BF16
    obj = f"mm_{_dims(tm, tk1, tn)}.o"
    # mlir-air GEMM: launch over output blocks, A and B panels staged in the memory tiles
    # per K2 step, tiles of K1 moved into L1, C accumulated in FP32 in L1 and drained.
    l2 = (_buf("a_l2", (hm, tm, tk2), BF16, "L2", True), _buf("b_l2", (tk2, hn * tn), BF16,
          "L2", True), _buf("c_l2", (hm, tm, hn * tn), out, "L2"))
    l1: tuple[Buffer, ...] = (_buf("a_l1", (tm, tk1), BF16, "L1", True, "compute"),
          _buf("b_l1", (tk1, tn), BF16, "L1", True, "compute"), _buf("c_l1", (tm, tn), FP32, "L1"))
    tail = (Extern(f"cast_f32_bf16_{_dims(tm, tn)}", obj, ("c_l1", "c_out_l1")),) \
        if out == BF16 else ()
    if tail:
        l1 += (_buf("c_out_l1", (tm, tn), BF16, "L1", phase="drain"),)
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands(s)),
        grid=(_cdiv(M, tm * hm), _cdiv(N, tn * hn)), segment=None, herd=(hn, hm), l2=l2, l1=l1,
        loop=_cdiv(K, tk2), inner=tk2 // tk1,
        externs=(Extern(f"zero_f32_{_dims(tm, tn)}", obj, ("c_l1",)),
                 Extern(f"matmul_bf16_f32_{_dims(tm, tk1, tn)}", obj, ("a_l1", "b_l1", "c_l1")),
                 *tail),
        flags={"stack_size": 2048})


def _gemv(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    s = launch.shape_dict
    M, K = s["M"], s["K"]
    tm, tk, hm = int(c["tile_m"]), int(c["tile_k"]), int(c["herd_m"])
    obj = f"mv_{_dims(tm, tk)}.o"
    # mlir-air GEMV: W rows and x streamed from DDR, y accumulated in FP32 per tile.
    l1 = (_buf("w_l1", (tm, tk), BF16, "L1", True), _buf("x_l1", (tk,), BF16, "L1", True),
          _buf("acc_l1", (tm,), FP32, "L1"), _buf("y_l1", (tm,), BF16, "L1"))
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands(s)),
        grid=(_cdiv(M, tm * hm), 1), segment=None, herd=(hm, 1), l2=(), l1=l1,
        loop=_cdiv(K, tk),
        externs=(Extern(f"zero_f32_{tm}", obj, ("acc_l1",)),
                 Extern(f"matvec_bf16_f32_{_dims(tm, tk)}", obj, ("w_l1", "x_l1", "acc_l1")),
                 Extern(f"cast_f32_bf16_{tm}", obj, ("acc_l1", "y_l1"))),
        flags={"omit_pingpong": ""})


#: The row kernels' micro-kernel symbols: one row block at a time, sizes as arguments.
ROW_SYMBOLS = {"rmsnorm": "rms_norm_bf16", "qk_norm": "rms_norm_bf16", "rope": "rope_bf16"}
#: The element-wise kernels' symbols (mlir-air silu_and_mul, eltwise add).
ELT_SYMBOLS = {"silu_mul": "silu_and_mul_bf16", "add": "add_bf16", "bias_add": "bias_add_bf16"}
#: bias_add's size arguments: the tile's element count, its first element in the tensor, the
#: bias width, the head size and the rows per head (0 when the tensor is seq-first, stored
#: [rows, width]; else it is head-first, [width / head_dim, rows, head_dim]).
BIAS_ARGS = ("n", "first", "width", "head_dim", "head_rows")


def _streaming(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    """Row and element-wise kernels: each tile of a 1-D herd (herd_m x 1: a [1, P] herd fails
    placement on NPU2) streams its inputs from DDR and its output back, loop by loop."""
    spec, s = launch.spec, launch.shape_dict
    ops = tuple(spec.operands(s))
    hm = int(c["herd_m"])
    ins = [o for o in ops if o.role == "input"]
    width = s["width"]
    if "tile_rows" in c:
        rows = int(c["tile_rows"])
        l1 = tuple(_buf(f"{o.name}_l1", (rows, width), BF16, "L1", True)
                   for o in (*ins, *[o for o in ops if o.role == "output"]))
        if spec.name == "rope":          # a table row for each row of the block
            l1 += (_buf("cos_l1", (rows, width), BF16, "L1"),
                   _buf("sin_l1", (rows, width), BF16, "L1"))
        else:
            l1 += (_buf("weight_l1", (width,), BF16, "L1"),)
        symbol = f"{ROW_SYMBOLS[spec.name]}_{_dims(rows, width)}"
        obj = f"{spec.name}_{_dims(rows, width)}.o"
        loop = _cdiv(s["rows"], rows * hm)
    else:
        tile = int(c["tile"])
        l1 = tuple(_buf(f"{o.name}_l1", (tile,), BF16, "L1", True)
                   for o in (*ins, *[o for o in ops if o.role == "output"]))
        if spec.name == "bias_add":          # the bias row, whole, next to the stream
            l1 += (_buf("bias_l1", (width,), BF16, "L1"),)
        symbol = f"{ELT_SYMBOLS[spec.name]}_{tile}"
        obj = f"{spec.name}_{tile}.o"
        loop = _cdiv(s["rows"] * width, tile * hm)
    ints = ("i32",) * (len(BIAS_ARGS) if spec.name == "bias_add" else 1)
    return LaunchLayout(
        spec.name, launch.label, ops, grid=(1, 1), segment=None, herd=(hm, 1), l2=(), l1=l1,
        loop=loop, externs=(Extern(symbol, obj, tuple(b.name for b in l1) + ints),))


def _attention(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    """mlir-air FlashAttention (kernel_fusion_based, NPU2): a launch per (q block, head
    group), a segment unrolled over heads_per_unroll heads, a herd of q_tiles columns by
    `cascade` rows; K and V reach L1 through L2 by channels, one per cascade stage, and the
    stages merge their partial softmax states over cascade channels."""
    s = launch.shape_dict
    hd, heads = s["head_dim"], s["heads"]
    q_tile, k_tile, q_tiles, cascade, unroll = (int(c[k]) for k in
                                                ("q_tile", "k_tile", "q_tiles", "cascade",
                                                 "heads_per_unroll"))
    dv = int(c.get("dv_tile") or k_tile)
    tq = q_tile // q_tiles
    obj = f"attn_{_dims(s['Lq'], s['Lk'], hd)}.o"     # compiled for the launch's sizes
    l2 = tuple(b for st in range(cascade) for b in (
        _buf(f"k{st}_l2", (k_tile, k_tile), BF16, "L2"), _buf(f"v{st}_l2", (k_tile, dv), BF16,
                                                                "L2"))) \
        + (_buf("o_l2", (q_tile, dv), BF16, "L2"),)
    l1 = (_buf("q_l1", (tq, hd), BF16, "L1"), _buf("k_l1", (k_tile, k_tile), BF16, "L1"),
          _buf("v_l1", (k_tile, dv), BF16, "L1"), _buf("g_l1", (tq, k_tile), BF16, "L1"),
          _buf("gp_l1", (tq, dv), BF16, "L1"), _buf("gp_in_l1", (tq, dv), BF16, "L1"),
          _buf("up_l1", (tq, 1), BF16, "L1"), _buf("sp_l1", (tq, 1), BF16, "L1"),
          _buf("rows_l1", (tq, 6), BF16, "L1"))
    channels = (("q_in", (q_tiles,)), ("k_in", (cascade,)), ("k_to_l1", (cascade,)),
                ("v_in", (cascade,)), ("v_to_l1", (cascade,)),
                ("cascade_gp", (q_tiles, cascade)), ("cascade_up", (q_tiles, cascade)),
                ("cascade_sp", (q_tiles, cascade)), ("o_to_l2", (q_tiles,)), ("o_out", (1,)))
    externs = (Extern("zero_fill_gp_bf16", obj, ("gp_l1",)),
               Extern("neg_inf_fill_up_bf16", obj, ("up_l1",)),
               Extern("matmul_a_b_bf16", obj, ("q_l1", "k_l1", "g_l1")),
               Extern("apply_causal_mask", obj, ("g_l1", "i32", "i32")),
               Extern("fused_softmax", obj, ("g_l1", "up_l1", "sp_l1")),
               Extern("matmul_g_b_bf16", obj, ("g_l1", "v_l1", "gp_l1")),
               Extern("add_gp_g", obj, ("gp_in_l1", "gp_l1")),
               Extern("div_gp_sp", obj, ("sp_l1", "gp_l1")))
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands(s)),
        grid=(_cdiv(s["Lq"], q_tile), _cdiv(heads, unroll)), segment=(unroll, 1),
        herd=(q_tiles, cascade), l2=l2, l1=l1, loop=_cdiv(s["Lk"], k_tile * cascade),
        externs=externs, channels=channels,
        flags={"omit_pingpong": "all", "compiled_for": (s["Lq"], s["Lk"], hd)})


def _decode_attention(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    """Ours (no mlir-air example): each column takes whole KV heads, keeps the group's
    queries, streams K and V chunks and accumulates scores and output in FP32. The step
    micro-kernel takes the rows of its chunk: k_tile, and Lk mod k_tile for the last one
    (moved on its own, so that no DMA reads past the cache)."""
    s = launch.shape_dict
    kt, hd = int(c["k_tile"]), s["head_dim"]
    cols = min(int(c["herd_n"]), s["kv_heads"])
    if s["kv_heads"] % cols:
        raise EmitError(f"{launch.label}: {s['kv_heads']} KV heads over herd_n={cols} "
                        "columns leaves tiles without a head; use a herd_n that divides "
                        "kv_heads")
    group = s["heads"] // max(s["kv_heads"], 1)
    obj = f"decode_attn_{_dims(group, kt, hd)}.o"
    l1 = (_buf("q_l1", (group, hd), BF16, "L1"), _buf("k_l1", (kt, hd), BF16, "L1", True),
          _buf("v_l1", (kt, hd), BF16, "L1", True), _buf("s_l1", (group, kt), FP32, "L1"),
          _buf("acc_l1", (group, hd), FP32, "L1"))
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands(s)),
        grid=(_cdiv(s["kv_heads"], cols), 1), segment=None, herd=(cols, 1), l2=(), l1=l1,
        loop=s["Lk"] // kt,
        externs=(Extern(f"decode_attn_step_{_dims(group, kt, hd)}", obj,
                        ("q_l1", "k_l1", "v_l1", "s_l1", "acc_l1", "i32")),
                 Extern(f"decode_attn_out_{_dims(group, hd)}", obj, ("acc_l1", "q_l1"))))


FAMILIES = {
    "gemm_bf16": _gemm, "gemm_fp32": _gemm, "gemv": _gemv,
    "rmsnorm": _streaming, "qk_norm": _streaming, "rope": _streaming,
    "silu_mul": _streaming, "add": _streaming, "bias_add": _streaming,
    "flash_attention": _attention, "npu_decode_attention": _decode_attention,
}


def layout_of(launch: Launch, hw: Hardware = XDNA2) -> LaunchLayout:
    family = FAMILIES.get(launch.kernel)
    if family is None:
        raise EmitError(f"{launch.label}: no MLIR-AIR program for kernel {launch.kernel!r}; "
                        f"known: {', '.join(sorted(FAMILIES))}")
    return family(launch, {**launch.spec.tunables, **launch.config_dict}, hw)


# --- writing the module ---------------------------------------------------------------------

def identifier(name: str) -> str:
    """A dispatch name as a Python and MLIR symbol: the function, and XRT's instance name."""
    out = re.sub(r"\W", "_", name).strip("_") or "dispatch"
    return out if not out[0].isdigit() else f"d_{out}"


@dataclass(frozen=True)
class Program:
    """One dispatch's module: its source, the function (= the ELF instance name), the
    function's arguments (names, flat shapes, dtypes) with the plan tensor each one holds
    (`tensors`: "L0.q", or "logits[0:4096]" for a row range), per launch the argument each
    operand is wired to (`wiring`, in the spec's operand order), the objects it links."""

    dispatch: str
    function: str
    source: str
    arguments: tuple[tuple[str, tuple[int, ...], str], ...]
    objects: tuple[str, ...]
    layouts: tuple[LaunchLayout, ...]
    tensors: tuple[str, ...] = ()
    wiring: tuple[tuple[str, ...], ...] = ()
    launches: tuple[Launch, ...] = ()

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    @property
    def flags(self) -> dict[str, Any]:
        """The compiler options the launches ask for, merged (the strictest wins)."""
        out: dict[str, Any] = {"output_format": "elf" if len(self.layouts) > 1 else "xclbin",
                               "instance_name": self.function, "stack_size": 1024,
                               "omit_pingpong": ""}
        for layout in self.layouts:
            out["stack_size"] = max(out["stack_size"], layout.flags.get("stack_size", 0))
            if layout.flags.get("omit_pingpong") == "all":
                out["omit_pingpong"] = "all"
        return out


class _Writer:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.depth = 0

    def __call__(self, text: str = "") -> None:
        self.lines.append(("    " * self.depth + text) if text else "")

    def indent(self) -> _Writer:
        self.depth += 1
        return self

    def dedent(self) -> None:
        self.depth -= 1


def _memref(shape: tuple[int, ...], dtype: str, space: str | None = None) -> str:
    where = f", memory_space={space}" if space else ""
    return f"MemRefType.get({list(shape)}, {dtype}{where})"


def tensor_key(launch: Launch, b: Any) -> str:
    """The device buffer a binding names: its tensor, with its row range if it has one. A
    GEMM reads its weight as B = W^T ([K, N]), a buffer of its own ("w.L0.q_proj:KN"): a
    GEMV of the same weight reads W as it is."""
    key = b.tensor if b.rows is None else f"{b.tensor}[{b.rows[0]}:{b.rows[1]}]"
    if launch.kernel.startswith("gemm") and b.operand == "b" and b.tensor.startswith("w."):
        key += ":KN"
    return key


def _argument_names(dispatch: Dispatch, layouts: list[LaunchLayout]
                    ) -> tuple[dict[str, tuple[str, tuple[int, ...], str]], list[list[str]]]:
    """The function's arguments (one per bound tensor, in order of first use, keyed by the
    tensor) and, per launch, the argument each of its operands is wired to."""
    args: dict[str, tuple[str, tuple[int, ...], str]] = {}
    wiring: list[list[str]] = []
    for launch, layout in zip(dispatch.launches, layouts, strict=True):
        names = []
        for op in layout.operands:
            b = launch.binding(op.name)
            key = tensor_key(launch, b)
            if key not in args:
                args[key] = (identifier(re.sub(r"\W", "_", key)) + f"_{len(args)}",
                             (math.prod(op.dims),), DTYPES[op.elem_bytes])
            names.append(args[key][0])
        wiring.append(names)
    return args, wiring


def emit_dispatch(dispatch: Dispatch, hw: Hardware = XDNA2,
                  head_dim: int | None = None) -> Program:
    """The MLIR-AIR module of one dispatch: one function, one air.launch per launch.
    `head_dim` (the model's) is needed when an operand is bound head-first."""
    layouts = [layout_of(ln, hw) for ln in dispatch.launches]
    function = identifier(dispatch.name)
    by_tensor, wiring = _argument_names(dispatch, layouts)
    arguments = list(by_tensor.values())
    externs: dict[str, tuple[Extern, tuple[Buffer, ...]]] = {}
    for layout in layouts:
        for ext in layout.externs:
            externs.setdefault(ext.symbol, (ext, layout.l1))
    objects = tuple(sorted({e.obj for e, _ in externs.values()}))

    w = _Writer()
    w('"""MLIR-AIR program of dispatch ' + f"{dispatch.name!r}: {len(layouts)} launch(es).")
    w("")
    w("Written by npu-deploy (kernels/air.py) from the dispatch plan; `python` this file to")
    w("print the module. Compile with mlir-air's XRT backend, output_format="
      f"{'elf' if len(layouts) > 1 else 'xclbin'!r},")
    w(f"instance_name={function!r}; link objects: {', '.join(objects)}.")
    w('"""')
    w("")
    w("from air.dialects import arith")
    w("from air.dialects.affine import apply as affine_apply")
    w("from air.dialects.air import *  # noqa: F403 - launch, segment, herd, Channel, T, ...")
    w("from air.dialects.func import CallOp, FuncOp")
    w("from air.dialects.memref import AllocOp, DeallocOp")
    w("from air.dialects.scf import for_ as range_")
    w("from air.dialects.scf import yield_")
    w("from air.ir import *  # noqa: F403 - MemRefType, IntegerAttr, AffineMap, ...")
    w("")
    w(f"FUNCTION = {function!r}")
    w(f"OBJECTS = {list(objects)!r}")
    w(f"LAUNCHES = {[ly.label for ly in layouts]!r}")
    w("")
    w("")
    w("def at(terms, constant=0, divisor=1):")
    w('    """(sum(value * multiplier) + constant) floordiv divisor, as an index')
    w('    (affine.apply)."""')
    w("    expr = AffineConstantExpr.get(constant)")
    w("    for i, (_, multiplier) in enumerate(terms):")
    w("        expr = AffineExpr.get_add(expr, AffineExpr.get_mul(AffineSymbolExpr.get(i),")
    w("                                                           "
      "AffineConstantExpr.get(multiplier)))")
    w("    if divisor != 1:")
    w("        expr = AffineExpr.get_floor_div(expr, AffineConstantExpr.get(divisor))")
    w("    return affine_apply(AffineMap.get(0, len(terms), [expr]), [v for v, _ in terms])")
    w("")
    w("")
    w("@module_builder")
    w("def build_module():")
    w.indent()
    w("bf16, f32, i32 = T.bf16(), T.f32(), T.i32()")
    w("L1 = IntegerAttr.get(i32, MemorySpace.L1)")
    w("L2 = IntegerAttr.get(i32, MemorySpace.L2)")
    w("")
    w("# external micro-kernels, one symbol per compiled tile shape")
    for symbol, (ext, l1) in externs.items():
        by_name = {b.name: b for b in l1}
        types = ", ".join("i32" if a == "i32" else _memref(by_name[a].shape, by_name[a].dtype,
                                                           "L1") for a in ext.args)
        w(f"{symbol} = FuncOp({symbol!r}, ([{types}], []), visibility='private')")
        w(f"{symbol}.attributes['link_with'] = StringAttr.get({ext.obj!r})")
        w(f"{symbol}.attributes['llvm.emit_c_interface'] = UnitAttr.get()")
    for i, layout in enumerate(layouts):
        for name, size in layout.channels:
            w(f"Channel('s{i}_{name}', size={list(size)})")
    w("")
    arg_types = ", ".join(_memref(shape, dtype) for _, shape, dtype in arguments)
    w(f"@FuncOp.from_py_func({arg_types})")
    w(f"def {function}({', '.join(a for a, _, _ in arguments)}):")
    w.indent()
    for i, (launch, layout, names) in enumerate(zip(dispatch.launches, layouts, wiring,
                                                    strict=True)):
        _emit_launch(w, i, launch, layout, names, head_dim)
    w.dedent()
    w.dedent()
    w("")
    w("")
    w('if __name__ == "__main__":')
    w("    print(build_module())")
    return Program(dispatch.name, function, "\n".join(w.lines) + "\n", tuple(arguments),
                   objects, tuple(layouts), tuple(by_tensor),
                   tuple(tuple(names) for names in wiring), dispatch.launches)


def _emit_launch(w: _Writer, i: int, launch: Launch, layout: LaunchLayout,
                 names: list[str], head_dim: int | None) -> None:
    p = f"s{i}"
    ops = ", ".join(names)
    w(f"# launch {i}: {layout.label}, {layout.kernel} {launch.shape_dict}, "
      f"herd {layout.herd[0]}x{layout.herd[1]}, grid {layout.grid[0]}x{layout.grid[1]}")
    w(f"@launch(operands=[{ops}], sizes={list(layout.grid)})")
    w(f"def {p}_launch(lx, ly, lsx, lsy, {ops}):")
    w.indent()
    seg_sizes = f", sizes={list(layout.segment)}" if layout.segment else ""
    seg_ids = "gx, gy, gsx, gsy, " if layout.segment else ""
    w(f"@segment(name='{p}_segment', operands=[lx, ly, {ops}]{seg_sizes})")
    w(f"def {p}_segment({seg_ids}lx, ly, {ops}):")
    w.indent()
    for b in layout.l2:
        w(f"{b.name} = AllocOp({_memref(b.shape, b.dtype, 'L2')}, [], [])")
    arg = dict(zip((o.name for o in layout.operands), names, strict=True))
    if layout.kernel.startswith("gemm"):
        _segment_gemm(w, p, launch, layout, arg, head_dim)
    elif layout.kernel == "flash_attention":
        _segment_attention(w, p, launch, layout, arg)
    else:
        _segment_streaming(w, p, launch, layout, arg, names, head_dim)
    for b in layout.l2:
        w(f"DeallocOp({b.name})")
    w.dedent()
    w.dedent()
    w("")


def _call(w: _Writer, ext: Extern, ints: tuple[int | str, ...] = ()) -> None:
    """Call a micro-kernel: its L1 buffers, then its size arguments as i32 (an int is a
    constant, a string an index value of the program, cast)."""
    it = iter(ints)

    def i32(value: int | str) -> str:
        return f"arith.ConstantOp(i32, {value})" if isinstance(value, int) \
            else f"arith.index_cast(i32, {value})"
    args = [i32(next(it, 0)) if a == "i32" else a for a in ext.args]
    w(f"CallOp({ext.symbol}, [{', '.join(args)}])")


def _extern(layout: LaunchLayout, prefix: str) -> Extern:
    return next(e for e in layout.externs if e.symbol.startswith(prefix))


def _herd(w: _Writer, p: str, layout: LaunchLayout, operands: list[str], what: str) -> None:
    """Open a herd (the caller writes its body, then dedents): every herd of a launch has the
    same name and size, as in mlir-air's GEMM, which runs one herd three times."""
    objs = ",".join(sorted({e.obj for e in layout.externs}))
    w(f"# herd: {what}")
    ops = ", ".join(["lx", "ly", *operands])
    w(f"@herd(name='{p}_herd', sizes={list(layout.herd)}, operands=[{ops}], "
      f"link_with={objs!r})")
    w(f"def {p}_herd_{identifier(what.split()[0])}(tx, ty, hsx, hsy, {ops}):")
    w.indent()


def _alloc_l1(w: _Writer, buffers: tuple[Buffer, ...]) -> None:
    for b in buffers:
        w(f"{b.name} = AllocOp({_memref(b.shape, b.dtype, 'L1')}, [], [])")


def _free(w: _Writer, buffers: tuple[Buffer, ...]) -> None:
    for b in buffers:
        w(f"DeallocOp({b.name})")


def _segment_gemm(w: _Writer, p: str, launch: Launch, layout: LaunchLayout,
                  arg: dict[str, str], head_dim: int | None) -> None:
    """mlir-air GEMM: the C tiles live in L1 for the whole launch (allocated here, in the
    segment); a herd zeroes them; per K2 step the segment stages A and B panels in L2 and a
    herd multiplies them K1 by K1; a last herd casts and drains C through L2 to DDR."""
    s = launch.shape_dict
    K, N = s["K"], s["N"]
    a_l2, b_l2, c_l2 = layout.l2
    a_l1, b_l1, c_l1 = layout.l1[:3]
    rest = layout.l1[3:]
    hn, hm = layout.herd
    tm, tk1 = a_l1.shape
    tn, tk2 = b_l1.shape[1], a_l2.shape[2]
    w(f"{c_l1.name} = AllocOp({_memref(c_l1.shape, c_l1.dtype, 'L1')}, [], [])  "
      "# per tile, kept across the K loop")
    _herd(w, p, layout, [c_l1.name], "zero the accumulators")
    _call(w, _extern(layout, "zero"))
    w.dedent()
    w(f"for k2 in range_(0, {layout.loop}):")
    w.indent()
    w(f"dma_memcpy_nd({a_l2.name}, {arg['a']}, src_offsets=[0, at([(lx, {hm * tm * K}), "
      f"(k2, {tk2})])], src_sizes=[{hm * tm}, {tk2}], src_strides=[{K}, 1])")
    w(f"dma_memcpy_nd({b_l2.name}, {arg['b']}, src_offsets=[0, at([(k2, {tk2 * N}), "
      f"(ly, {hn * tn})])], src_sizes=[{tk2}, {hn * tn}], src_strides=[{N}, 1])")
    _herd(w, p, layout, [a_l2.name, b_l2.name, c_l1.name], f"multiply one K2 step of {tk2}")
    _alloc_l1(w, (a_l1, b_l1))
    w(f"for k1 in range_(0, {layout.inner}):")
    w.indent()
    w(f"dma_memcpy_nd({a_l1.name}, {a_l2.name}, src_offsets=[ty, 0, at([(k1, {tk1})])], "
      f"src_sizes=[1, {tm}, {tk1}], src_strides=[{tm * tk2}, {tk2}, 1])")
    w(f"dma_memcpy_nd({b_l1.name}, {b_l2.name}, src_offsets=[at([(k1, {tk1})]), "
      f"at([(tx, {tn})])], src_sizes=[{tk1}, {tn}], src_strides=[{hn * tn}, 1])")
    _call(w, _extern(layout, "matmul"))
    w("yield_([])")
    w.dedent()
    _free(w, (a_l1, b_l1))
    w.dedent()
    w("yield_([])")
    w.dedent()
    _herd(w, p, layout, [c_l2.name, c_l1.name], "drain C to the memory tile")
    out = c_l1.name
    if rest:
        _alloc_l1(w, rest)
        _call(w, _extern(layout, "cast"))
        out = rest[0].name
    w(f"dma_memcpy_nd({c_l2.name}, {out}, dst_offsets=[ty, 0, at([(tx, {tn})])], "
      f"dst_sizes=[1, {tm}, {tn}], dst_strides=[{tm * hn * tn}, {hn * tn}, 1])")
    _free(w, rest)
    w.dedent()
    _drain_c(w, launch, arg["c"], c_l2.name, hm * tm, hn * tn, head_dim)
    w(f"DeallocOp({c_l1.name})")


def _drain_c(w: _Writer, launch: Launch, c: str, c_l2: str, rows: int, span: int,
             head_dim: int | None) -> None:
    """The C block [rows, span] at (lx, ly) from the memory tile to DDR: row-major [M, N],
    or head-first [N / head_dim, M, head_dim] when C is bound head-first (the DMA does the
    transpose the host would otherwise do)."""
    M, N = launch.shape_dict["M"], launch.shape_dict["N"]
    if launch.binding("c").layout != "head-first":
        w(f"dma_memcpy_nd({c}, {c_l2}, dst_offsets=[0, at([(lx, {rows * N}), (ly, {span})])], "
          f"dst_sizes=[{rows}, {span}], dst_strides=[{N}, 1])")
        return
    hd = head_dim
    if hd is None or N % hd:
        raise EmitError(f"{launch.label}: C is bound head-first; the program needs the "
                        f"model's head_dim (got {hd}) dividing N={N}")
    if span % hd == 0:      # whole heads per block: a 3-D pattern on both sides
        w(f"dma_memcpy_nd({c}, {c_l2}, dst_offsets=[0, 0, at([(ly, {span // hd * M * hd}), "
          f"(lx, {rows * hd})])], dst_sizes=[{span // hd}, {rows}, {hd}], "
          f"dst_strides=[{M * hd}, {hd}, 1], src_offsets=[0, 0, 0], "
          f"src_sizes=[{span // hd}, {rows}, {hd}], src_strides=[{hd}, {span}, 1])")
    elif hd % span == 0:    # a slice of one head: head = n0 // hd, column n0 mod hd
        w(f"head = at([(ly, {span})], divisor={hd})")
        w(f"dma_memcpy_nd({c}, {c_l2}, dst_offsets=[0, at([(head, {M * hd - hd}), "
          f"(ly, {span}), (lx, {rows * hd})])], dst_sizes=[{rows}, {span}], "
          f"dst_strides=[{hd}, 1])")
    else:
        raise EmitError(f"{launch.label}: a head-first C needs tile_n x herd_n ({span}) and "
                        f"head_dim ({hd}) to divide one another")


def _segment_streaming(w: _Writer, p: str, launch: Launch, layout: LaunchLayout,
                       arg: dict[str, str], names: list[str], head_dim: int | None) -> None:
    """GEMV, the row and element-wise kernels and decode attention: one herd whose tiles
    stream their operands between DDR and L1 (no L2 staging)."""
    _herd(w, p, layout, names, "stream tiles")
    _alloc_l1(w, layout.l1)
    if layout.kernel == "gemv":
        _body_gemv(w, launch, layout, arg)
    elif layout.kernel == "npu_decode_attention":
        _body_decode_attention(w, launch, layout, arg)
    else:
        _body_rows(w, layout, arg, launch, head_dim)
    _free(w, layout.l1)
    w.dedent()


def _body_gemv(w: _Writer, launch: Launch, layout: LaunchLayout, arg: dict[str, str]) -> None:
    w_l1, x_l1, acc_l1, y_l1 = layout.l1
    tm, tk = w_l1.shape
    K, hm = launch.shape_dict["K"], layout.herd[0]
    _call(w, _extern(layout, "zero"))
    w(f"for k in range_(0, {layout.loop}):")
    w.indent()
    w(f"dma_memcpy_nd({w_l1.name}, {arg['w']}, src_offsets=[0, at([(lx, {tm * hm * K}), "
      f"(tx, {tm * K}), (k, {tk})])], src_sizes=[{tm}, {tk}], src_strides=[{K}, 1])")
    w(f"dma_memcpy_nd({x_l1.name}, {arg['x']}, src_offsets=[at([(k, {tk})])], "
      f"src_sizes=[{tk}], src_strides=[1])")
    _call(w, _extern(layout, "matvec"))
    w("yield_([])")
    w.dedent()
    _call(w, _extern(layout, "cast"))
    w(f"dma_memcpy_nd({arg['y']}, {y_l1.name}, dst_offsets=[at([(lx, {tm * hm}), "
      f"(tx, {tm})])], dst_sizes=[{tm}], dst_strides=[1])")


def _body_rows(w: _Writer, layout: LaunchLayout, arg: dict[str, str],
               launch: Launch, head_dim: int | None) -> None:
    s = launch.shape_dict
    step = math.prod(layout.l1[0].shape)
    rows = layout.l1[0].shape[0] if len(layout.l1[0].shape) > 1 else 1
    if "weight_l1" in {b.name for b in layout.l1}:
        weight = next(o for o in layout.operands if o.role == "weight")
        w(f"dma_memcpy_nd(weight_l1, {arg[weight.name]}, src_sizes=[{weight.dims[-1]}], "
          "src_strides=[1])")
    if "bias_l1" in {b.name for b in layout.l1}:
        w(f"dma_memcpy_nd(bias_l1, {arg['bias']}, src_sizes=[{s['width']}], "
          "src_strides=[1])")
    w(f"for i in range_(0, {layout.loop}):")
    w.indent()
    w(f"offset = at([(i, {step * layout.herd[0]}), (tx, {step})])")
    for o in layout.operands:
        if o.role == "input":
            w(f"dma_memcpy_nd({o.name}_l1, {arg[o.name]}, src_offsets=[offset], "
              f"src_sizes=[{step}], src_strides=[1])")
    if layout.kernel == "rope":
        # One cos and one sin row per row of the block. Row r of x is position r // heads
        # seq-first ([L, heads * head_dim]), position r mod L head-first ([heads, L, hd]).
        heads, seq = s["rows"] // s["seq"], s["seq"]
        for j in range(rows):
            row = f"at([(i, {rows * layout.herd[0]}), (tx, {rows})], {j})"
            pos = f"at([({row}, 1)], divisor={heads})" \
                if launch.binding("x").layout == "seq-first" \
                else f"at([({row}, 1), (at([({row}, 1)], divisor={seq}), {-seq})])"
            for name in ("cos", "sin"):
                w(f"dma_memcpy_nd({name}_l1, {arg[name]}, dst_offsets=[{j}, 0], dst_sizes=[1, "
                  f"{s['width']}], dst_strides=[{s['width']}, 1], src_offsets=[0, at([({pos}, "
                  f"{s['width']})])], src_sizes=[1, {s['width']}], src_strides=[{s['width']}, 1])")
    if layout.kernel == "bias_add":
        head_first = launch.binding("x").layout == "head-first"
        if head_first and head_dim is None:
            raise EmitError(f"{launch.label}: x is bound head-first; the program needs the "
                            "model's head_dim")
        _call(w, layout.externs[0], (step, "offset", s["width"], head_dim or 0,
                                     s["rows"] if head_first else 0))
    else:
        _call(w, layout.externs[0], (rows if len(layout.l1[0].shape) > 1 else step,))
    out = next(o for o in layout.operands if o.role == "output")
    w(f"dma_memcpy_nd({arg[out.name]}, {out.name}_l1, dst_offsets=[offset], "
      f"dst_sizes=[{step}], dst_strides=[1])")
    w("yield_([])")
    w.dedent()


def _body_decode_attention(w: _Writer, launch: Launch, layout: LaunchLayout,
                           arg: dict[str, str]) -> None:
    s = launch.shape_dict
    kt, hd = layout.l1[1].shape
    group = layout.l1[0].shape[0]
    cols = layout.herd[0]
    w(f"head = at([(lx, {cols}), (tx, 1)])          # this tile's KV head")
    w(f"dma_memcpy_nd(q_l1, {arg['q']}, src_offsets=[0, at([(head, {group * hd})])], "
      f"src_sizes=[{group}, {hd}], src_strides=[{hd}, 1])")
    def chunk(rows: int, terms: list[tuple[str, int]], first: int) -> None:
        for name in ("k", "v"):
            at_kv, stride = _head_rows(launch, name, "head", s["kv_heads"], s["Lk"], hd,
                                       terms, first)
            w(f"dma_memcpy_nd({name}_l1, {arg[name]}, src_offsets=[0, {at_kv}], "
              f"src_sizes=[{rows}, {hd}], src_strides=[{stride}, 1])")
        _call(w, _extern(layout, "decode_attn_step"), (rows,))

    if layout.loop:
        w(f"for j in range_(0, {layout.loop}):")
        w.indent()
        chunk(kt, [("j", kt)], 0)
        w("yield_([])")
        w.dedent()
    if s["Lk"] % kt:
        w(f"# the last {s['Lk'] % kt} positions")
        chunk(s["Lk"] % kt, [], layout.loop * kt)
    _call(w, _extern(layout, "decode_attn_out"))
    w(f"dma_memcpy_nd({arg['o']}, q_l1, dst_offsets=[0, at([(head, {group * hd})])], "
      f"dst_sizes=[{group}, {hd}], dst_strides=[{hd}, 1])")


def _head_rows(launch: Launch, operand: str, head: str, heads: int, length: int, hd: int,
               rows: list[tuple[str, int]], first: int = 0) -> tuple[str, int]:
    """Where rows `first + sum(value * multiplier)` of one head of an attention operand
    start, and the stride between rows, in the layout the operand is bound in:
    head-first [heads, length, hd] or seq-first [length, heads * hd]."""
    if launch.binding(operand).layout == "head-first":
        terms, stride, per_head = [(v, m * hd) for v, m in rows], hd, length * hd
    else:
        terms, stride, per_head = [(v, m * heads * hd) for v, m in rows], heads * hd, hd
    body = ", ".join(f"({v}, {m})" for v, m in [(head, per_head), *terms])
    const = first * stride
    return (f"at([{body}], {const})" if const else f"at([{body}])"), stride


def _segment_attention(w: _Writer, p: str, launch: Launch, layout: LaunchLayout,
                       arg: dict[str, str]) -> None:
    """FlashAttention: the segment moves this q block and the K and V chunks from DDR into
    the memory tiles and on to the herd by channels (K and V broadcast along each cascade
    row); each row of the herd takes every cascade-th chunk; the rows merge their partial
    results over the cascade channels and the first row sends the output back."""
    s = launch.shape_dict
    q_tiles, cascade = layout.herd
    hd, Lk = s["head_dim"], s["Lk"]
    q_tile = layout.l2[-1].shape[0]
    kt = layout.l1[1].shape[0]
    group = s["heads"] // s["kv_heads"]
    w(f"head = at([(ly, {layout.segment[0] if layout.segment else 1}), (gx, 1)])")
    w(f"kv_head = at([(head, 1)], divisor={group})  # GQA: {group} query heads per KV head")
    heads, kvh, Lq = s["heads"], s["kv_heads"], s["Lq"]
    q_at, q_stride = _head_rows(launch, "q", "head", heads, Lq, hd, [("lx", q_tile)])
    w(f"ChannelPut('{p}_q_in', {arg['q']}, offsets=[0, {q_at}], sizes=[{q_tile}, {hd}], "
      f"strides=[{q_stride}, 1])")
    w(f"for j in range_(0, {layout.loop}):")
    w.indent()
    for st in range(cascade):
        for name in ("k", "v"):
            at_kv, stride = _head_rows(launch, name, "kv_head", kvh, Lk, hd,
                                       [("j", kt * cascade)], st * kt)
            w(f"ChannelPut('{p}_{name}_in', {arg[name]}, indices=[{st}], offsets=[0, "
              f"{at_kv}], sizes=[{kt}, {hd}], strides=[{stride}, 1])")
            w(f"ChannelGet('{p}_{name}_in', {name}{st}_l2, indices=[{st}])")
            w(f"ChannelPut('{p}_{name}_to_l1', {name}{st}_l2, indices=[{st}])")
    w("yield_([])")
    w.dedent()
    o_l2 = layout.l2[-1].name
    _herd(w, p, layout, [], f"attend: {q_tiles} q blocks x {cascade} cascade stages")
    _alloc_l1(w, layout.l1)
    w(f"ChannelGet('{p}_q_in', q_l1, indices=[tx])")
    _call(w, _extern(layout, "zero_fill_gp"))
    _call(w, _extern(layout, "neg_inf_fill_up"))
    w(f"for j in range_(0, {layout.loop}):")
    w.indent()
    w(f"ChannelGet('{p}_k_to_l1', k_l1, indices=[ty])")
    w(f"ChannelGet('{p}_v_to_l1', v_l1, indices=[ty])")
    _call(w, _extern(layout, "matmul_a_b"))
    _call(w, _extern(layout, "apply_causal_mask"), (s["Lq"], Lk))
    _call(w, _extern(layout, "fused_softmax"))
    _call(w, _extern(layout, "matmul_g_b"))
    w("yield_([])")
    w.dedent()
    for kind in ("gp", "up", "sp"):
        w(f"ChannelGet('{p}_cascade_{kind}', {'gp_in' if kind == 'gp' else kind}_l1, "
          "indices=[tx, ty])  # from the row below; the last row starts the chain")
    _call(w, _extern(layout, "add_gp_g"))
    _call(w, _extern(layout, "div_gp_sp"))
    w(f"ChannelPut('{p}_o_to_l2', gp_l1, indices=[tx])")
    _free(w, layout.l1)
    w.dedent()
    w(f"ChannelGet('{p}_o_to_l2', {o_l2})")
    w(f"ChannelPut('{p}_o_out', {o_l2})")
    o_at, o_stride = _head_rows(launch, "o", "head", heads, Lq, hd, [("lx", q_tile)])
    w(f"ChannelGet('{p}_o_out', {arg['o']}, offsets=[0, {o_at}], "
      f"sizes=[{q_tile}, {layout.l1[2].shape[1]}], strides=[{o_stride}, 1])")


# --- a plan's programs as files ---------------------------------------------------------------

def emit_plan(plan: DispatchPlan, hw: Hardware = XDNA2) -> list[Program]:
    return [emit_dispatch(d, hw, plan.args.head_dim) for d in plan.dispatches]


def write_programs(programs: list[Program], directory: Path, *,
                   by_digest: bool = False) -> list[dict[str, Any]]:
    """Each program as DIRECTORY/<function>.py (<function>-<digest>.py with `by_digest`,
    where programs of one dispatch at several shapes meet); what was written, for the
    log."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for prog in programs:
        path = directory / (f"{prog.function}-{prog.digest[:12]}.py" if by_digest
                            else f"{prog.function}.py")
        path.write_text(prog.source)
        out.append({"dispatch": prog.dispatch, "file": path.name, "function": prog.function,
                    "launches": len(prog.layouts), "objects": list(prog.objects),
                    "sha256": prog.digest})
    return out


__all__ = ["Buffer", "EmitError", "Extern", "LaunchLayout", "Program", "emit_dispatch",
           "emit_plan", "identifier", "layout_of", "tensor_key", "write_programs"]
