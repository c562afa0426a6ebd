"""GEMV y = W x, the decode projections and the LM head's partitions: as upstream's matvec.py
builds it, each core zeroes its tile_m outputs (`linalg_fill_bf16`) and, m_input rows at a
time, takes whole rows of W and all of x into L1 and calls `matvec_vectorized_bf16_bf16`,
which sums each row in FP32 vector lanes and writes it to bf16. mlir-air
programming_examples/matrix_vector_multiplication/bf16 (mv.cc, compiled as mv.o with
DIM_M_OUTPUT = tile_m); the registry page GEMV_bf16.md measures it (memory-bound,
~30 GFLOP/s).

mv.cc's symbols cannot be renamed and one module declares a symbol once, so one ELF holds
mv.o GEMVs of one K and one tile. When a merge puts GEMVs of another K in the ELF (Down after
Gate/Up), `share` moves them to the matvec herd of upstream's matvec_2tile_add
(bf16_cascade/mv_bf16.cc as mv_bf16.o: 8 rows x a k_chunk of K per call, the partials
rounded to bf16 after each block), which is what upstream's o_gemv_ffn links for its K-2048
and K-8192 stages. Its time is modeled with mv.o's fitted coefficients: no registry row
measures it."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from ..air_programs.air_parts import (
    Extern,
    KernelSource,
    LaunchLayout,
    Writer,
    buf,
    call,
    cdiv,
    extern,
    stream_segment,
)
from ..definition import rules
from ..definition.family import (
    BF16,
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
from ..definition.hardware import Hardware
from ..definition.rules import Finding
from ..emulation.numerics import gemv_fp32acc
from ..emulation.tensors import f32
from ..measured.measurements import (
    TO_BASE,
    Source,
    TableSource,
    load,
    markdown_tables,
    rows_at,
    scaled,
    table,
)
from .gemm_numerics import ATOL_BF16_PARTIALS, unit_scale

if TYPE_CHECKING:
    from ..performance.model import PerfParams
    from ..plans.plan import Launch

# --- spec --------------------------------------------------------------------------------

GEMV = KernelSpec("gemv", "npu", "GEMV y = W x, FP32 vector accumulate (decode, LM head parts)",
                  ("M", "K"),
                  lambda s: [Operand("w", (s["M"], s["K"]), BF16, "weight"),
                             Operand("x", (s["K"],), BF16, "input"),
                             Operand("y", (s["M"],), BF16, "output")],
                  lambda s: 2.0 * s["M"] * s["K"],
                  {"tile_m": 16, "m_input": 8, "herd_m": 8, "partitions": 1,
                   # the registry's harness (matvec.py) builds with omit_pingpong=True
                   "pingpong": 0,
                   # "mv": matvec.py on mv.o (the registry's measured GEMV); "mv_bf16": the
                   # matvec half of matvec_2tile_add on mv_bf16.o, 8 rows x k_chunk of K per
                   # call, for a GEMV sharing an ELF with mv.o GEMVs of another K (`share`)
                   "kernel": "mv", "k_chunk": 512})

# --- checker rule -------------------------------------------------------------------------

RULES = (
    "herd: herd_m columns fit the array",
    "L1: m_input whole rows of W and all of x (twice unless pingpong is 0: upstream's "
    "omit_pingpong), and the tile_m bf16 outputs",
    "shim streams: W and x in, y out, per tile",
    "repeat: x's stream, once per call, within the DMA repeat limit (M / (herd_m x m_input) "
    "- 1, as qwen3_4b_decode.py counts it; a larger m_input or M in partitions)",
    "stride: W's row stride K within the DMA limit",
    "buffer descriptors: 3 streams, a pair more per unaligned tail",
    "divisible: K by 64 (mv.cc's vectors), tile_m by m_input",
    "padding (warning): M per partition to tile_m x herd_m",
    "mv_bf16 (a GEMV sharing an ELF with mv.o GEMVs of another K): W 8 x k_chunk and x "
    "k_chunk in L1 (twice with pingpong) and 32 partials; K a multiple of k_chunk, k_chunk "
    "of 32, M of 8 x herd_m; one partition",
)


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    if c.get("kernel", "mv") == "mv_bf16":
        return _check_mv_bf16(s, c, hw, usage)
    M, K = s["M"], s["K"]
    tm, mi, hm, parts, pp = (int(c[k]) for k in ("tile_m", "m_input", "herd_m", "partitions",
                                                  "pingpong"))
    f: list[Finding] = []
    rules.herd(f, 1, hm, hw)
    l1 = (2 if pp else 1) * (mi * K + K) * BF16 + tm * BF16
    usage.update(tiles=hm, l1_bytes=l1)
    rules.l1(f, l1, hw, f"W {mi}x{K} and x {K} bf16{' twice' if pp else ''}, y {tm} bf16",
             "use a smaller m_input, or pingpong 0 (mv.cc takes whole rows: K is not split)")
    rules.shim(f, hm, 2, 1, hw)
    rows = math.ceil(M / parts)
    Mp = rules.pad(f, "M per partition", rows, tm * hm)
    rules.divisible(f, "K", K, MV_VECTOR, f"mv.cc sums a row in {MV_VECTOR}-wide vectors and "
                    "has no tail")
    if tm % mi:
        f.append(Finding("divisible", "error", f"tile_m={tm} is not a multiple of m_input="
                         f"{mi}: each call fills m_input of the tile's rows", tm, mi))
    # air-dma-to-channel hoists x's per-call load into one stream per column, repeated
    # M / (herd_m x m_input) - 1 times (qwen3_4b_decode.py, _GEMV_DOWN's note)
    rules.repeat(f, "x's stream (once per call)", Mp // (hm * mi) - 1, hw,
                 "use a larger m_input, or split M into more partitions (one launch each)")
    rules.stride(f, "W (row stride K)", K, hw)
    rules.bds(f, streams=3, tails=int(Mp != rows), hw=hw, usage=usage)
    return f


def _check_mv_bf16(s: Shape, c: dict[str, Any], hw: Hardware,
                   usage: dict[str, int]) -> list[Finding]:
    """matvec_2tile_add's matvec herd: per call an 8 x k_chunk block of W and k_chunk of x
    in L1 (twice with pingpong), the 8 partial sums in a 32-lane buffer (the cascade
    payload's width upstream keeps)."""
    M, K = s["M"], s["K"]
    k, hm, pp = int(c["k_chunk"]), int(c["herd_m"]), int(c["pingpong"])
    f: list[Finding] = []
    rules.herd(f, 1, hm, hw)
    l1 = (2 if pp else 1) * (MV_BF16_M * k + k) * BF16 + MV_BF16_PARTIAL * BF16
    usage.update(tiles=hm, l1_bytes=l1)
    rules.l1(f, l1, hw, f"W {MV_BF16_M}x{k} and x {k} bf16{' twice' if pp else ''}, "
             f"partials {MV_BF16_PARTIAL} bf16", "use a smaller k_chunk")
    rules.shim(f, hm, 2, 1, hw)
    if int(c.get("partitions", 1)) != 1:
        f.append(Finding("divisible", "error", "mv_bf16 runs one launch over M: partitions "
                         "must be 1", int(c["partitions"]), 1))
    rules.divisible(f, "K", K, k, "the kernel takes K in k_chunk blocks (DIM_K) and has no tail")
    rules.divisible(f, "k_chunk", k, MV_BF16_VECTOR, "mv_bf16.cc sums a block in 32-wide vectors")
    rules.divisible(f, "M", M, MV_BF16_M * hm, "each of herd_m columns writes 8 rows (DIM_M) a "
                    "call")
    rules.repeat(f, "x's stream (once per call)", K // max(k, 1) - 1, hw,
                 "use a larger k_chunk")
    rules.stride(f, "W (row stride K)", K, hw)
    rules.bds(f, streams=3, tails=0, hw=hw, usage=usage)
    return f


#: mv_bf16.cc: DIM_M rows per call (upstream compiles it at the default 8), a block summed in
#: 32-wide vectors, the partials kept in a 32-lane buffer (matvec_2tile_add's CASCADE_WIDTH)
MV_BF16_M, MV_BF16_VECTOR, MV_BF16_PARTIAL = 8, 32, 32

#: mv.cc's matvec_vectorized<64>: a row is summed in 64-wide vectors (upstream asserts
#: K % 64 == 0 in matvec.py)
MV_VECTOR = 64

# --- search space (herd_m 8 first: docs/hardware-facts.md#measured-kernel-throughput) -------

SPACE = {"partitions": (1, 2, 4, 8, 16, 32, 64), "tile_m": (16, 8, 32),
         "m_input": (1, 2, 4, 8, 16, 32), "herd_m": (8, 4, 2, 1), "pingpong": (1, 0)}


def candidates(spec: KernelSpec, s: Shape, hw: Hardware) -> Iterator[dict[str, Any]]:
    """SPACE, with m_input only where it divides tile_m."""
    return (c for c in product_space(SPACE)(spec, s, hw) if c["tile_m"] % c["m_input"] == 0)

# --- numerics: mv.cc's 64 FP32 lanes, one cast (kernels.emulation.numerics.gemv_fp32acc)
# -------------


def emulate(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    if c.get("kernel", "mv") != "mv_bf16":
        return {"y": gemv_fp32acc(x["w"], x["x"])}
    # mv_bf16.cc: each k_chunk block summed in 32 FP32 lanes, then c = bf16(c + partial)
    k = int(c["k_chunk"])
    y = torch.zeros(s["M"], dtype=torch.bfloat16)
    for j in range(0, s["K"], k):
        part = gemv_fp32acc(x["w"][:, j:j + k], x["x"][j:j + k], lanes=MV_BF16_VECTOR,
                            out_dtype=torch.float32)
        y = (y.float() + part).to(torch.bfloat16)
    return {"y": y}


def reference(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    return {"y": f32(x["w"]) @ f32(x["x"])}


# mv.cc's FP32 vector accumulate rounds once to bf16 and stays within rtol; 1e-3 covers values
# near 0. mv_bf16.cc rounds its running sum to bf16 after every K block, as a GEMM's direct
# method rounds per K tile: it takes that tier's atol (kernels.families.gemm).
NUMERICS = Numerics(emulate, reference, atol=1e-3, weights=unit_scale,
                    atol_by=("kernel", {"mv_bf16": ATOL_BF16_PARTIALS}))

# --- cost: each column streams its rows of W, a call per m_input rows --------------------
#
# GEMV_bf16.md measures it memory-bound: the herd_m columns each stream their share of W's
# rows through their own DMA ("8 columns is ~2.6x faster than 4"), and a micro-kernel call
# per m_input rows costs ("m_input = tile_m ... ~1.2x, by cutting per-call overhead").

#: fitted coefficients and their starting values (the ~80 us floor and the ~30 GB/s GEMV
#: over 8 columns of docs/hardware-facts.md#dispatch-and-host-costs)
COEFFICIENTS = (("gemv_floor_s", 80e-6), ("gemv_column_bw", 4e9), ("gemv_call_s", 1e-6))


def work(spec: KernelSpec, s: Shape, c: dict[str, Any], p: PerfParams) -> Work:
    """memory: each of herd_m columns streams its rows of W at the column's bandwidth, one
    micro-kernel call per m_input rows (default tile_m); a launch split into partitions
    pays a floor per partition"""
    tm, hm, parts = int(c["tile_m"]), int(c["herd_m"]), int(c.get("partitions", 1))
    per_call = int(c.get("m_input", tm))
    calls_per_row = 1.0
    if c.get("kernel", "mv") == "mv_bf16":      # 8 rows x k_chunk a call: more, smaller calls
        tm = per_call = MV_BF16_M
        calls_per_row = s["K"] / int(c["k_chunk"])
    rows = math.ceil(math.ceil(s["M"] / parts) / (tm * hm)) * tm      # per column
    column = (rows * BF16 * s["K"] / p.gemv_column_bw
              + rows / per_call * calls_per_row * p.gemv_call_s)
    return Work(0.0, parts * column + (parts - 1) * p.gemv_floor_s)


def timed_launches() -> list[TimedLaunch]:
    """Every row of the page, at its latency (herd_m / tile_m / m_input as measured)."""
    return [timed("gemv", {"M": r["M"], "K": r["K"]},
                  {"herd_m": r["herd_m"], "tile_m": r["tile_m"], "m_input": r["m_input"]},
                  scaled(r["latency"], TO_BASE["us"]), f"{load('gemv')['source']['path']} (shapes)")
            for r in table("gemv", "shapes")]


COST = Cost(work, lambda p: p.gemv_floor_s, COEFFICIENTS, timed_launches, in_elf="stream")


# --- the program: W rows and x streamed in, y accumulated per tile --------------------------


#: the upstream source of mv.o; its symbols cannot be renamed (no SYM_SUFFIX)
MV_SOURCE = "programming_examples/matrix_vector_multiplication/bf16/mv.cc"


def mv_object(tile_m: int) -> KernelSource:
    """mv.cc compiled with DIM_M_OUTPUT = tile_m (the length linalg_fill_bf16 zeroes), as
    upstream's compile_mv(tile_m) does; named for the define, as upstream names llama32_3b's
    tile_m-2 copy down_mv.o."""
    return KernelSource(f"mv_m{tile_m}.o", MV_SOURCE, (("DIM_M_OUTPUT", tile_m),))


#: the upstream source of mv_bf16.o; its symbols cannot be renamed either
MV_BF16_SOURCE = "programming_examples/matrix_vector_multiplication/bf16_cascade/mv_bf16.cc"


def mv_bf16_object(k_chunk: int) -> KernelSource:
    """mv_bf16.cc at DIM_M 8 and DIM_K = k_chunk; upstream compiles it with no defines (8 x
    512) as mv_bf16.o, so another k_chunk is another object."""
    name = "mv_bf16.o" if k_chunk == 512 else f"mv_bf16_k{k_chunk}.o"
    return KernelSource(name, MV_BF16_SOURCE, (("DIM_M", MV_BF16_M), ("DIM_K", k_chunk)))


def objects(s: Shape, c: dict[str, Any]) -> tuple[KernelSource, ...]:
    if c.get("kernel", "mv") == "mv_bf16":
        return (mv_bf16_object(int(c["k_chunk"])),)
    return (mv_object(int(c["tile_m"])),)


def declares(s: Shape, c: dict[str, Any]) -> dict[str, str]:
    """The L1 buffers each symbol is declared with (`launch_layout`). mv.o: W's m_input rows of
    K, x of K, y of tile_m; mv_bf16.o: a block of 8 x k_chunk, x's k_chunk, 8 partials."""
    if c.get("kernel", "mv") == "mv_bf16":
        k = int(c["k_chunk"])
        return {"zero_vectorized_bf16": f"bf16[{MV_BF16_M}]",
                "matvec_vectorized_bf16": f"bf16[{MV_BF16_M * k}], bf16[{k}], "
                                          f"bf16[{MV_BF16_M}]"}
    tm, mi, K = int(c["tile_m"]), int(c["m_input"]), s["K"]
    return {"linalg_fill_bf16": f"bf16[{tm}]",
            "matvec_vectorized_bf16_bf16": f"i32, i32, i32, bf16[{mi}x{K}], bf16[{K}], "
                                           f"bf16[{tm}]"}


def share(items: list[tuple[Shape, dict[str, Any]]]) -> list[dict[str, Any]] | None:
    """Configurations under which the GEMVs of one ELF link together: one mv.o and one
    declaration of its symbols, so the GEMVs of the most common K (the earliest on a tie)
    take the first of them's tile_m and m_input, and every other K runs on mv_bf16.o at one
    k_chunk, the largest of 512, 256, ..., 32 that divides them all (upstream's o_gemv_ffn
    links mv_bf16.o for its K-2048 and K-8192 stages). None when no k_chunk divides them."""
    ks = [s["K"] for s, _ in items]
    main = max(dict.fromkeys(ks), key=ks.count)
    first = next(c for s, c in items if s["K"] == main)
    rest = [k for k in ks if k != main]
    chunk = next((k for k in (512, 256, 128, 64, 32) if all(r % k == 0 for r in rest)), None)
    if rest and chunk is None:
        return None
    out = []
    for s, c in items:
        if s["K"] == main:
            out.append({**c, "kernel": "mv", "tile_m": first["tile_m"],
                        "m_input": first["m_input"]})
        else:
            hm = next(h for h in (8, 4, 2, 1) if s["M"] % (MV_BF16_M * h) == 0 or h == 1)
            out.append({**c, "kernel": "mv_bf16", "k_chunk": chunk, "herd_m": hm,
                        "partitions": 1})
    return out


def launch_layout(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    s = launch.shape_dict
    M, K = s["M"], s["K"]
    hm, pp = int(c["herd_m"]), bool(int(c["pingpong"]))
    # upstream's GEMV decode ELFs (llms/shared/infra/backend_presets.py); "all" for the
    # large-K GEMVs (qwen3_4b_decode.py's down GEMV)
    flags = {"omit_pingpong": "" if pp else "all", "runtime_loop_tiling_sizes": [16, 16]}
    if c.get("kernel", "mv") == "mv_bf16":
        k = int(c["k_chunk"])
        obj = mv_bf16_object(k)
        # matvec_2tile_add's matvec herd: a block of W and x's chunk per call, 8 partials
        l1 = (buf("w_l1", (MV_BF16_M * k,), BF16, "L1", pp), buf("x_l1", (k,), BF16, "L1", pp),
              buf("y_l1", (MV_BF16_PARTIAL,), BF16, "L1"))
        return LaunchLayout(
            launch.kernel, launch.label, tuple(launch.spec.operands(s)),
            grid=(cdiv(M, MV_BF16_M * hm), 1), segment=None, herd=(hm, 1), l2=(), l1=l1,
            loop=K // k,
            externs=(Extern("zero_vectorized_bf16", obj.obj, ("y_l1",)),
                     Extern("matvec_vectorized_bf16", obj.obj, ("w_l1", "x_l1", "y_l1"))),
            kernels=(obj,), flags=flags)
    tm, mi = int(c["tile_m"]), int(c["m_input"])
    obj = mv_object(tm)
    # matvec.py: A rows and B into L1 per call, C stays in L1 for the tile
    l1 = (buf("w_l1", (mi, K), BF16, "L1", pp), buf("x_l1", (K,), BF16, "L1", pp),
          buf("y_l1", (tm,), BF16, "L1"))
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands(s)),
        grid=(cdiv(M, tm * hm), 1), segment=None, herd=(hm, 1), l2=(), l1=l1,
        loop=tm // mi,
        externs=(Extern("linalg_fill_bf16", obj.obj, ("y_l1",)),
                 Extern("matvec_vectorized_bf16_bf16", obj.obj,
                        ("i32", "i32", "i32", "w_l1", "x_l1", "y_l1"))),
        kernels=(obj,), flags=flags)


def segment(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
            names: list[str], head_dim: int | None) -> None:
    body = _body_mv_bf16 if layout.externs[0].symbol == "zero_vectorized_bf16" else _body
    stream_segment(w, p, layout, names, lambda: body(w, launch, layout, arg))


def _body(w: Writer, launch: Launch, layout: LaunchLayout, arg: dict[str, str]) -> None:
    """matvec.py's herd: zero C, then per m_input rows x and those rows of W in, the call
    writing C from row offset j; C out."""
    w_l1, x_l1, y_l1 = layout.l1
    mi, K = w_l1.shape
    tm, hm = y_l1.shape[0], layout.herd[0]
    call(w, extern(layout, "linalg_fill"))
    w(f"for i in range_(0, {layout.loop}):")
    w.indent()
    w(f"dma_memcpy_nd({x_l1.name}, {arg['x']}, src_offsets=[0], src_sizes=[{K}], "
      "src_strides=[1])")
    w(f"dma_memcpy_nd({w_l1.name}, {arg['w']}, src_offsets=[at([(lx, {tm * hm * K}), "
      f"(tx, {tm * K}), (i, {mi * K})])], src_sizes=[{mi * K}], src_strides=[1])")
    call(w, extern(layout, "matvec"), (mi, K, f"at([(i, {mi})])"))
    w("yield_([])")
    w.dedent()
    w(f"dma_memcpy_nd({arg['y']}, {y_l1.name}, dst_offsets=[at([(lx, {tm * hm}), "
      f"(tx, {tm})])], dst_sizes=[{tm}], dst_strides=[1])")


def _body_mv_bf16(w: Writer, launch: Launch, layout: LaunchLayout, arg: dict[str, str]) -> None:
    """matvec_2tile_add's matvec herd, each tile 8 rows of y: zero the partials, then per
    k_chunk block of K the block's x and 8 x k_chunk of W in and the call adding into the
    partials; the 8 rows out (here to DDR, where upstream cascades them to an add herd)."""
    w_l1, x_l1, y_l1 = layout.l1
    k = x_l1.shape[0]
    K, hm, m = launch.shape_dict["K"], layout.herd[0], MV_BF16_M
    call(w, extern(layout, "zero"))
    w(f"for i in range_(0, {layout.loop}):")
    w.indent()
    w(f"dma_memcpy_nd({x_l1.name}, {arg['x']}, src_offsets=[at([(i, {k})])], "
      f"src_sizes=[{k}], src_strides=[1])")
    w(f"dma_memcpy_nd({w_l1.name}, {arg['w']}, src_offsets=[0, at([(lx, {m * hm * K}), "
      f"(tx, {m * K}), (i, {k})])], src_sizes=[{m}, {k}], src_strides=[{K}, 1])")
    call(w, extern(layout, "matvec"))
    w("yield_([])")
    w.dedent()
    w(f"dma_memcpy_nd({arg['y']}, {y_l1.name}, dst_offsets=[at([(lx, {m * hm}), "
      f"(tx, {m})])], dst_sizes=[{m}], dst_strides=[1], src_offsets=[0], src_sizes=[{m}], "
      "src_strides=[1])")


# --- measured -----------------------------------------------------------------------------

SOURCE = Source("details/GEMV_bf16.md", markdown_tables(
    TableSource("shapes", "Tested shapes", "(M, K)",
                "tested shapes (M x K), tile herd_m/tile_m/m_input; latency and GFLOP/s")))

FAMILIES = (KernelFamily(
    GEMV, rules=RULES, check=check, candidates=candidates, numerics=NUMERICS,
    cost=COST, program=AirProgram(launch_layout, segment), data="gemv", source=SOURCE,
    objects=objects, declares=declares, share=share, fp32_out="gemv_fp32",
    numerics_changes=(((("lm_head_out", "f32"),), "the LM head writes FP32 logits (no bf16 "
                       "cast)"),),
    measured=rows_at("gemv", "shapes", lambda r: (r["M"], r["K"]), lambda s: (s["M"], s["K"]))),)
