"""The int4-AWQ GEMV of upstream's int4 decode, y = W x with W as 4-bit codes, bf16 scales and
uint8 zero points per group of 128 columns: `matvec_int4_bf16_packed` and its overwriting
`_store` form (Xilinx/mlir-air e972f29,
programming_examples/matrix_vector_multiplication/int4_awq/mv_int4_bf16.cc, compiled by
llms/shared/infra/external_kernels.py `compile_mv_int4_bf16` with DIM_M = m_tile rows, DIM_K =
k_chunk columns a call, DIM_GS = 128).

Each call takes one packed tile of m_tile rows x k_chunk columns, Q (two codes a byte), S
(bf16 scales) and Z (uint8 zero points) back to back in one L1 buffer, so the tile needs one
shim stream (matvec_int4_packed.py), and x's k_chunk. The program is upstream's
matvec_int4_packed.py herd written by us: herd_m cores each own M / herd_m rows, m_tile at a
time; per row tile the first K chunk is stored (`_store`) and every further one accumulated
into the bf16 output, so the rows are rounded to bf16 between chunks
(kernels.emulation.quantized.matvec_int4). The device buffer of W is upstream's pack_inputs
order, tile by tile (core, row tile, K chunk): it depends on herd_m, m_tile and k_chunk, so
a format writes it for the configuration (`to_device` is where formats/' AWQ packer
connects); the emulator reads the unpacked fields (`fields`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from npu_deploy.events.phases import phase

from ..air_programs.air_parts import (
    Extern,
    KernelSource,
    LaunchLayout,
    Writer,
    buf,
    call,
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
    Work,
)
from ..definition.hardware import Hardware
from ..definition.rules import Finding
from ..emulation.kernel_fields import device_fields, kernel_tensors, seeded_matrix
from ..emulation.quantized import (
    AWQ_GROUP,
    QuantFields,
    matvec_int4,
    matvec_int4_bound,
    reference,
)
from .proj_qmm import weight_buffer

if TYPE_CHECKING:
    from npu_deploy.formats.catalog import QuantizedMatrix

    from ..performance.model import PerfParams
    from ..plans.plan import Launch

#: a byte of packed weight (two codes, or a zero point)
I8 = 1

# --- spec ----------------------------------------------------------------------------------


def row_bytes(k: int) -> int:
    """One row of W packed: K / 2 bytes of codes, and per group of 128 a bf16 scale and a
    uint8 zero point."""
    return k // 2 + (k // AWQ_GROUP) * (BF16 + I8)


def tile_bytes(c: dict[str, Any]) -> int:
    """One packed tile of m_tile rows x k_chunk columns (Q, then S, then Z)."""
    return int(c["m_tile"]) * row_bytes(int(c["k_chunk"]))


GEMV_INT4 = KernelSpec(
    "gemv_int4", "npu", "int4-AWQ GEMV y = W x, group 128, de-quantized in the kernel",
    ("M", "K"),
    lambda s: [Operand("w", (s["M"], row_bytes(s["K"])), I8, "weight"),
               Operand("x", (s["K"],), BF16, "input"),
               Operand("y", (s["M"],), BF16, "output")],
    lambda s: 2.0 * s["M"] * s["K"],
    # upstream's defaults (int4_awq/Makefile: M_TILE 8, K_CHUNK 2048, 8 cores)
    {"herd_m": 8, "m_tile": 8, "k_chunk": 2048, "pingpong": 1})

# --- checker rule --------------------------------------------------------------------------

RULES = (
    "divisible: K by k_chunk (upstream asserts K % K_CHUNK == 0), k_chunk by the group of "
    "128 (static_assert), M by herd_m x m_tile (each core's rows in whole tiles)",
    "alignment: the tile's scales and zero points start 32-byte aligned (matvec_int4_packed.py "
    "asserts both offsets)",
    "L1: the packed tile and x's k_chunk (twice with pingpong), m_tile bf16 outputs, the stack",
    "herd, shim streams (the packed tile and x in, y out per tile), x's repeat count, buffer "
    "descriptors",
    "weight buffer: at most 4 GiB per buffer object (a shim BD's offset is a uint32)",
)


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    M, K = s["M"], s["K"]
    hm, mt, kc, pp = (int(c[k]) for k in ("herd_m", "m_tile", "k_chunk", "pingpong"))
    f: list[Finding] = []
    rules.divisible(f, "K", K, kc, "a call takes k_chunk columns (DIM_K); no tail")
    rules.divisible(f, "k_chunk", kc, AWQ_GROUP, "a call takes whole groups of 128 "
                    "(static_assert DIM_K % DIM_GS == 0)")
    rules.divisible(f, "M", M, hm * mt, f"each of herd_m={hm} cores takes its rows "
                    f"m_tile={mt} at a time")
    q_bytes = mt * kc // 2
    rules.divisible(f, "the scales' offset", q_bytes, 32, "matvec_int4_packed.py asserts "
                    "it 32-byte aligned (m_tile x k_chunk / 2)")
    rules.divisible(f, "the zero points' offset", q_bytes + (kc // AWQ_GROUP) * mt * BF16, 32,
                    "matvec_int4_packed.py asserts it 32-byte aligned")
    rules.herd(f, 1, hm, hw)
    rules.shim(f, hm, 2, 1, hw)
    l1 = (2 if pp else 1) * (tile_bytes(c) + kc * BF16) + mt * BF16
    usage.update(tiles=hm, l1_bytes=l1)
    rules.l1(f, l1, hw, f"a packed {mt}x{kc} tile and x {kc} bf16{' twice' if pp else ''}, "
             f"y {mt} bf16", "use a smaller k_chunk")
    calls = max(M // max(hm * mt, 1), 1) * max(K // max(kc, 1), 1)
    rules.repeat(f, "x's stream (once per call)", calls - 1, hw,
                 "use a larger k_chunk or m_tile")
    rules.bds(f, streams=3, tails=0, hw=hw, usage=usage)
    weight_buffer(f, "W", spec.operands(s)[0].nbytes)
    return f


#: k_chunk, largest first: fewer calls, fewer roundings of the output to bf16
K_CHUNKS = (2048, 1024, 512, 256, 128)


def candidates(spec: KernelSpec, s: Shape, hw: Hardware) -> Iterator[dict[str, Any]]:
    """Upstream's m_tile 8, the widest herd whose tiles divide M, each k_chunk dividing K."""
    for hm in (8, 4, 2, 1):
        if s["M"] % (hm * 8):
            continue
        for kc in K_CHUNKS:
            if s["K"] % kc == 0:
                yield {"herd_m": hm, "m_tile": 8, "k_chunk": kc, "pingpong": 1}

# --- numerics (kernels.emulation.quantized) ---------------------------------------------------


def fields(x: Tensors, s: Shape, c: Mapping[str, Any] | None = None) -> QuantFields:
    """The weight's fields: `w.q` (uint8 [M, K]), `w.scale` (bf16 [M, K / 128]) and `w.zero`
    (uint8 [M, K / 128]) where the tensors carry them, else decoded from the packed tiles `w`
    at the configuration's m_tile x k_chunk, as the kernel reads them."""
    if "w.q" in x:
        return QuantFields.of(x["w.q"], x["w.scale"], x["w.zero"], AWQ_GROUP)
    if c is None or "w" not in x:
        raise ValueError("gemv_int4 reads its weight's fields (w.q, w.scale, w.zero) or its "
                         "packed tiles `w` at the configuration's tile; neither was given")
    return device_fields("awq-int4", x["w"], (s["M"], s["K"]), dict(c))


def emulate(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    return {"y": matvec_int4(fields(x, s, c), x["x"], k_chunk=int(c["k_chunk"]))}


def _reference(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    return {"y": reference(fields(x, s, c), x["x"], subtract=True)}


def bound(s: Shape, c: dict[str, Any], x: Tensors) -> torch.Tensor:
    """The per-row distance from the FP32 reference the kernel's arithmetic allows."""
    return matvec_int4_bound(fields(x, s, c), x["x"], k_chunk=int(c["k_chunk"]))


def packed_weight(s: Shape, c: Mapping[str, Any], m: QuantizedMatrix) -> Tensors:
    """Weight `m` (int4-AWQ) as the kernel's operand `w`, its tiles at the configuration's
    m_tile x k_chunk, and the fields the emulator reads."""
    t = kernel_tensors(m, dict(c))
    t["w"] = t["w"].reshape(s["M"], row_bytes(s["K"]))
    return t


def seeded_weight(s: Shape, c: Mapping[str, Any], gen: torch.Generator) -> Tensors:
    """A valid int4-AWQ weight for Phase 1 (kernels.emulation.kernel_fields `seeded_matrix`)."""
    return packed_weight(s, c, seeded_matrix("awq-int4", (s["M"], s["K"]), gen))


#: Phase 1's atol at unit-scale outputs, per k_chunk (the output is rounded to bf16 once per
#: call, so the fewer columns a call takes the more it drifts), with the measurements behind
#: them: the phase table's
_PHASE1 = phase(1)
NUMERICS = Numerics(emulate, _reference, atol=_PHASE1.threshold("atol_gemv_int4"),
                    seeded_weight=seeded_weight,
                    atol_by=("k_chunk", {k: _PHASE1.threshold(f"atol_gemv_int4_k{k}")
                                         for k in ("1024", "512", "256", "128")}),
                    packed_weight=packed_weight)

# --- cost: the packed bytes each core streams, a call per tile ---------------------------------
#
# No upstream page times mv_int4_bf16 on its own (the int4_awq lit tests check results only).
# Modeled with the bf16 GEMV's fitted coefficients (kernels.families.gemv, fitted on
# GEMV_bf16.md): each core streams its packed tiles (4 bits a weight plus 3 bytes a group of
# 128: 4.19 bits a weight) and x's chunk per call at a column's bandwidth, and pays a call's
# cost per tile.


def work(spec: KernelSpec, s: Shape, c: dict[str, Any], p: PerfParams) -> Work:
    """memory: each core's packed tiles and x's chunk per call at a column's bandwidth, plus a
    call's cost per tile"""
    hm, mt, kc = int(c["herd_m"]), int(c["m_tile"]), int(c["k_chunk"])
    calls = math.ceil(s["M"] / (hm * mt)) * (s["K"] // kc)
    per_call = tile_bytes(c) + kc * BF16
    return Work(0.0, calls * (per_call / p.gemv_column_bw + p.gemv_call_s))


COST = Cost(work, lambda p: p.gemv_floor_s, in_elf="stream")

# --- the program --------------------------------------------------------------------------------

SOURCE = "programming_examples/matrix_vector_multiplication/int4_awq/mv_int4_bf16.cc"


def int4_object(c: dict[str, Any]) -> KernelSource:
    """mv_int4_bf16.cc at DIM_M = m_tile, DIM_K = k_chunk, DIM_GS = 128, as
    compile_mv_int4_bf16 builds it; named for its sizes where they are not upstream's."""
    mt, kc = int(c["m_tile"]), int(c["k_chunk"])
    name = "mv_int4_bf16.o" if (mt, kc) == (8, 2048) else f"mv_int4_bf16_m{mt}_k{kc}.o"
    return KernelSource(name, SOURCE, (("DIM_M", mt), ("DIM_K", kc), ("DIM_GS", AWQ_GROUP)))


def objects(s: Shape, c: dict[str, Any]) -> tuple[KernelSource, ...]:
    return (int4_object(c),)


def declares(s: Shape, c: dict[str, Any]) -> dict[str, str]:
    args = f"i8[{tile_bytes(c)}], bf16[{int(c['k_chunk'])}], bf16[{int(c['m_tile'])}]"
    return {"matvec_int4_bf16_packed_store": args, "matvec_int4_bf16_packed": args}


def launch_layout(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    s = launch.shape_dict
    hm, mt, kc, pp = (int(c[k]) for k in ("herd_m", "m_tile", "k_chunk", "pingpong"))
    obj = int4_object(c)
    l1 = (buf("w_l1", (tile_bytes(c),), "i8", "L1", bool(pp)),
          buf("x_l1", (kc,), BF16, "L1", bool(pp)), buf("y_l1", (mt,), BF16, "L1"))
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands(s)),
        grid=(1, 1), segment=None, herd=(hm, 1), l2=(), l1=l1,
        loop=s["M"] // (hm * mt), inner=s["K"] // kc,
        externs=(Extern("matvec_int4_bf16_packed_store", obj.obj, ("w_l1", "x_l1", "y_l1")),
                 Extern("matvec_int4_bf16_packed", obj.obj, ("w_l1", "x_l1", "y_l1"))),
        kernels=(obj,), flags={"omit_pingpong": "" if pp else "all"})


def segment(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
            names: list[str], head_dim: int | None) -> None:
    stream_segment(w, p, layout, names, lambda: _body(w, layout, arg))


def _body(w: Writer, layout: LaunchLayout, arg: dict[str, str]) -> None:
    """Core tx owns row tiles tx x loop ... : per tile, the first K chunk stored, the others
    accumulated, each call's packed tile and x's chunk in first; the tile's rows out."""
    w_l1, x_l1, y_l1 = layout.l1
    tb, kc, mt = w_l1.shape[0], x_l1.shape[0], y_l1.shape[0]
    tiles, chunks = layout.loop, layout.inner
    w(f"for i in range_(0, {tiles}):")
    w.indent()
    _chunk(w, arg, w_l1.name, x_l1.name, tb, kc, tiles, chunks, "0")
    call(w, _ext(layout, "matvec_int4_bf16_packed_store"))
    if chunks > 1:
        w(f"for j in range_(1, {chunks}):")
        w.indent()
        _chunk(w, arg, w_l1.name, x_l1.name, tb, kc, tiles, chunks, "j")
        call(w, _ext(layout, "matvec_int4_bf16_packed"))
        w("yield_([])")
        w.dedent()
    w(f"dma_memcpy_nd({arg['y']}, {y_l1.name}, dst_offsets=[at([(tx, {tiles * mt}), "
      f"(i, {mt})])], dst_sizes=[{mt}], dst_strides=[1])")
    w("yield_([])")
    w.dedent()


def _ext(layout: LaunchLayout, symbol: str) -> Extern:
    return next(e for e in layout.externs if e.symbol == symbol)


def _chunk(w: Writer, arg: dict[str, str], w_l1: str, x_l1: str, tb: int, kc: int,
           tiles: int, chunks: int, j: str) -> None:
    """The DMAs of one call: x's chunk j, and the packed tile (core tx, row tile i, chunk j)
    in upstream's pack_inputs order."""
    jx = f"({j}, {kc})" if j != "0" else ""
    jw = f", ({j}, {tb})" if j != "0" else ""
    x_off = f"at([{jx}])" if jx else "0"
    w(f"dma_memcpy_nd({x_l1}, {arg['x']}, src_offsets=[{x_off}], src_sizes=[{kc}], "
      "src_strides=[1])")
    w(f"dma_memcpy_nd({w_l1}, {arg['w']}, src_offsets=[at([(tx, {tiles * chunks * tb}), "
      f"(i, {chunks * tb}){jw}])], src_sizes=[{tb}], src_strides=[1])")


FAMILIES = (KernelFamily(
    GEMV_INT4, rules=RULES, check=check, candidates=candidates, numerics=NUMERICS, cost=COST,
    program=AirProgram(launch_layout, segment), objects=objects, declares=declares),)
