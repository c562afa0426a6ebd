"""GEMV y = W x, the decode projections and the LM head's partitions: W rows and x streamed
from DDR, y accumulated in FP32 vector lanes, one cast to bf16. mlir-air
programming_examples/matrix_vector_multiplication/bf16 (mv.cc); the registry page
GEMV_bf16.md measures it (memory-bound, ~30 GFLOP/s)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .. import rules
from ..air_parts import (
    Extern,
    LaunchLayout,
    Writer,
    buf,
    call,
    cdiv,
    dims,
    extern,
    stream_segment,
)
from ..family import (
    BF16,
    FP32,
    AirProgram,
    Cost,
    KernelFamily,
    KernelSpec,
    Numerics,
    Operand,
    Shape,
    Tensors,
    TimedLaunch,
    Work,
    product_space,
    timed,
)
from ..hardware import Hardware
from ..measurements import (
    TO_BASE,
    Source,
    TableSource,
    load,
    markdown_tables,
    rows_at,
    scaled,
    table,
)
from ..numerics import gemv_fp32acc
from ..rules import Finding
from ..tensors import f32
from .gemm import unit_scale

if TYPE_CHECKING:
    from ..perf import PerfParams
    from ..plan import Launch

# --- spec --------------------------------------------------------------------------------

GEMV = KernelSpec("gemv", "npu", "GEMV y = W x, FP32 vector accumulate (decode, LM head parts)",
                  ("M", "K"),
                  lambda s: [Operand("w", (s["M"], s["K"]), BF16, "weight"),
                             Operand("x", (s["K"],), BF16, "input"),
                             Operand("y", (s["M"],), BF16, "output")],
                  lambda s: 2.0 * s["M"] * s["K"],
                  {"tile_m": 16, "tile_k": 512, "herd_m": 8, "partitions": 1})

# --- checker rule -------------------------------------------------------------------------

RULES = (
    "herd: herd_m columns fit the array",
    "L1: W and x tiles twice, the FP32 accumulator and its bf16 cast",
    "shim streams: W and x in, y out, per tile",
    "repeat: the K loop (K / tile_k) and the M loop within the DMA repeat limit (split K, "
    "or M into partitions)",
    "stride: W's row stride K within the DMA limit; a W row moves a multiple of 4 bytes",
    "buffer descriptors: 3 streams, a pair more per unaligned tail",
    "divisible: K by tile_k (a K loop rounded up reads into the next row of W)",
    "padding (warning): M per partition to tile_m x herd_m",
)


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    M, K = s["M"], s["K"]
    tm, tk, hm, parts = (int(c[k]) for k in ("tile_m", "tile_k", "herd_m", "partitions"))
    f: list[Finding] = []
    rules.herd(f, 1, hm, hw)
    l1 = 2 * tm * tk * BF16 + 2 * tk * BF16 + tm * FP32 + tm * BF16
    usage.update(tiles=hm, l1_bytes=l1)
    rules.l1(f, l1, hw, f"W {tm}x{tk} and x {tk} bf16 twice, y {tm} fp32 and its bf16 cast",
             "use a smaller tile_m or tile_k")
    rules.shim(f, hm, 2, 1, hw)
    rows = math.ceil(M / parts)
    Mp = rules.pad(f, "M per partition", rows, tm * hm)
    if K % tk:
        f.append(Finding("divisible", "error", f"K={K} is not divisible by tile_k={tk}: the "
                         "K loop, rounded up, would read past each row of W into the next; "
                         "pick a tile_k that divides K", K, tk))
    Kp = K
    rules.repeat(f, "the K loop", Kp // tk, hw, f"split K so that K / tile_k <= "
                 f"{hw.max_repeat} (a larger tile_k, or K in parts)")
    rules.repeat(f, "the M loop", Mp // (tm * hm), hw,
                 "split M into more partitions (one launch each)")
    rules.stride(f, "W (row stride K)", K, hw)
    rules.align(f, "a W row", tk, BF16, hw)
    rules.bds(f, streams=3, tails=int(Mp != rows) + int(Kp != K), hw=hw, usage=usage)
    return f


# --- search space (NPU_FACTS: herd_m 8 first) -----------------------------------------------

SPACE = {"partitions": (1, 2, 4, 8, 16, 32, 64), "tile_m": (16, 8, 32),
         "tile_k": (512, 256, 1024, 128), "herd_m": (8, 4, 2, 1)}


def candidates(spec: KernelSpec, s: Shape, hw: Hardware) -> Iterator[dict[str, Any]]:
    """SPACE, with tile_k also every divisor of K that is a multiple of 32 (up to 1024), so
    that a K such as 576 has a tile that divides it."""
    divisors = tuple(t for t in range(min(s["K"], 1024), 31, -32) if s["K"] % t == 0)
    tiles = tuple(dict.fromkeys((*SPACE["tile_k"], *divisors)))
    return product_space({**SPACE, "tile_k": tiles})(spec, s, hw)

# --- numerics: FP32 lanes, one cast (kernels.numerics.gemv_fp32acc) -------------------------


def emulate(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    return {"y": gemv_fp32acc(x["w"], x["x"])}


def reference(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    return {"y": f32(x["w"]) @ f32(x["x"])}


# The FP32 vector accumulate rounds once to bf16 and stays within rtol; 1e-3 covers values
# near 0.
NUMERICS = Numerics(emulate, reference, atol=1e-3, weights=unit_scale)

# --- cost: each column streams its rows of W, a call per m_input rows --------------------
#
# GEMV_bf16.md measures it memory-bound: the herd_m columns each stream their share of W's
# rows through their own DMA ("8 columns is ~2.6x faster than 4"), and a micro-kernel call
# per m_input rows costs ("m_input = tile_m ... ~1.2x, by cutting per-call overhead"). Our
# tile_k moves nothing measured, so it prices nothing.

#: fitted coefficients and their starting values (NPU_FACTS' ~80 us floor, its ~30 GB/s
#: GEMV over 8 columns)
COEFFICIENTS = (("gemv_floor_s", 80e-6), ("gemv_column_bw", 4e9), ("gemv_call_s", 1e-6))


def work(spec: KernelSpec, s: Shape, c: dict[str, Any], p: PerfParams) -> Work:
    """memory: each of herd_m columns streams its rows of W at the column's bandwidth, one
    micro-kernel call per m_input rows (default tile_m); a launch split into partitions
    pays a floor per partition"""
    tm, hm, parts = int(c["tile_m"]), int(c["herd_m"]), int(c.get("partitions", 1))
    per_call = int(c.get("m_input", tm))
    rows = math.ceil(math.ceil(s["M"] / parts) / (tm * hm)) * tm      # per column
    column = rows * BF16 * s["K"] / p.gemv_column_bw + rows / per_call * p.gemv_call_s
    return Work(0.0, parts * column + (parts - 1) * p.gemv_floor_s)


def timed_launches() -> list[TimedLaunch]:
    """Every row of the page, at its latency (herd_m / tile_m / m_input as measured)."""
    return [timed("gemv", {"M": r["M"], "K": r["K"]},
                  {"herd_m": r["herd_m"], "tile_m": r["tile_m"], "m_input": r["m_input"]},
                  scaled(r["latency"], TO_BASE["us"]), f"{load('gemv')['source']['path']} (shapes)")
            for r in table("gemv", "shapes")]


COST = Cost(work, lambda p: p.gemv_floor_s, COEFFICIENTS, timed_launches, in_elf="stream")


# --- the program: W rows and x streamed in, y accumulated per tile --------------------------


def launch_layout(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    s = launch.shape_dict
    M, K = s["M"], s["K"]
    tm, tk, hm = int(c["tile_m"]), int(c["tile_k"]), int(c["herd_m"])
    obj = f"mv_{dims(tm, tk)}.o"
    # mlir-air GEMV: W rows and x streamed from DDR, y accumulated in FP32 per tile.
    l1 = (buf("w_l1", (tm, tk), BF16, "L1", True), buf("x_l1", (tk,), BF16, "L1", True),
          buf("acc_l1", (tm,), FP32, "L1"), buf("y_l1", (tm,), BF16, "L1"))
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands(s)),
        grid=(cdiv(M, tm * hm), 1), segment=None, herd=(hm, 1), l2=(), l1=l1,
        loop=cdiv(K, tk),
        externs=(Extern(f"zero_f32_{tm}", obj, ("acc_l1",)),
                 Extern(f"matvec_bf16_f32_{dims(tm, tk)}", obj, ("w_l1", "x_l1", "acc_l1")),
                 Extern(f"cast_f32_bf16_{tm}", obj, ("acc_l1", "y_l1"))),
        # upstream's GEMV decode ELFs (llms/shared/infra/backend_presets.py)
        flags={"omit_pingpong": "", "runtime_loop_tiling_sizes": [16, 16]})


def segment(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
            names: list[str], head_dim: int | None) -> None:
    stream_segment(w, p, layout, names, lambda: _body(w, launch, layout, arg))


def _body(w: Writer, launch: Launch, layout: LaunchLayout, arg: dict[str, str]) -> None:
    w_l1, x_l1, acc_l1, y_l1 = layout.l1
    tm, tk = w_l1.shape
    K, hm = launch.shape_dict["K"], layout.herd[0]
    call(w, extern(layout, "zero"))
    w(f"for k in range_(0, {layout.loop}):")
    w.indent()
    w(f"dma_memcpy_nd({w_l1.name}, {arg['w']}, src_offsets=[0, at([(lx, {tm * hm * K}), "
      f"(tx, {tm * K}), (k, {tk})])], src_sizes=[{tm}, {tk}], src_strides=[{K}, 1])")
    w(f"dma_memcpy_nd({x_l1.name}, {arg['x']}, src_offsets=[at([(k, {tk})])], "
      f"src_sizes=[{tk}], src_strides=[1])")
    call(w, extern(layout, "matvec"))
    w("yield_([])")
    w.dedent()
    call(w, extern(layout, "cast"))
    w(f"dma_memcpy_nd({arg['y']}, {y_l1.name}, dst_offsets=[at([(lx, {tm * hm}), "
      f"(tx, {tm})])], dst_sizes=[{tm}], dst_strides=[1])")


# --- measured -----------------------------------------------------------------------------

SOURCE = Source("details/GEMV_bf16.md", markdown_tables(
    TableSource("shapes", "Tested shapes", "(M, K)",
                "tested shapes (M x K), tile herd_m/tile_m/m_input; latency and GFLOP/s")))

FAMILIES = (KernelFamily(
    GEMV, rules=RULES, check=check, candidates=candidates, numerics=NUMERICS,
    cost=COST, program=AirProgram(launch_layout, segment), data="gemv", source=SOURCE,
    measured=rows_at("gemv", "shapes", lambda r: (r["M"], r["K"]), lambda s: (s["M"], s["K"]))),)
