"""GEMV with FP32 output, y = W x: the LM head writing FP32 logits. Ours, not upstream's.

Upstream's GEMV (programming_examples/matrix_vector_multiplication/bf16/mv.cc,
`matvec_vectorized_bf16_bf16`) sums each row in FP32 vector lanes and casts the sum to bf16
when it stores it; upstream's Llama LM head runs that kernel
(programming_examples/llms/llama32_1b/llama32_1b_inference.py), so its logits are bf16.
Near a tie of the two best tokens the cast decides the greedy token: two logits 0.08 apart
at a magnitude of 16 round to one bf16 value or to the wrong order. This family is mv.cc's
kernel with the cast taken out: the same lanes, the same reduction, the float stored
(kernels/aie/mv_f32.cc, our own micro-kernel written after mv.cc's structure), its L1 output
tile and its DDR output FP32. The program is matvec.py's herd (kernels.families.gemv) with
that tile and object; nothing of it was measured on an NPU: its time is gemv's fitted model
plus the wider output stream (docs/hardware-facts.md#lm-head-fp32-logits).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from ..air_programs.air_parts import NPU_DEPLOY, Extern, KernelSource, LaunchLayout, buf, cdiv
from ..definition import rules
from ..definition.family import (
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
    Work,
)
from ..definition.hardware import Hardware
from ..definition.rules import Finding
from ..emulation.numerics import gemv_fp32acc
from . import gemv

if TYPE_CHECKING:
    from ..performance.model import PerfParams
    from ..plans.plan import Launch

# --- spec: gemv's, y FP32, mv.o's tunables only (no mv_bf16 sharing) -----------------------

GEMV_FP32 = KernelSpec("gemv_fp32", "npu", "GEMV y = W x, FP32 vector accumulate, FP32 out "
                       "(the LM head's FP32 logits; ours)", ("M", "K"),
                       lambda s: [Operand("w", (s["M"], s["K"]), BF16, "weight"),
                                  Operand("x", (s["K"],), BF16, "input"),
                                  Operand("y", (s["M"],), FP32, "output")],
                       lambda s: 2.0 * s["M"] * s["K"],
                       {k: v for k, v in gemv.GEMV.tunables.items()
                        if k not in ("kernel", "k_chunk")})

RULES = (
    "as gemv's mv.o rules (herd, shim streams, repeat, stride, buffer descriptors, K by 64, "
    "tile_m by m_input), with the tile_m outputs in L1 as FP32",
    "divisible: tile_m by 16 (our fill zeroes the FP32 tile in 16-lane vectors)",
    "our own micro-kernel (kernels/aie/mv_f32.cc): mv.cc's reduction without the bf16 "
    "cast; unmeasured",
)


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    """gemv's mv.o checks, then L1 again with the output tile at 4 bytes an element."""
    found = [f for f in gemv.check(spec, s, {**c, "kernel": "mv"}, hw, usage)
             if f.kind != "L1"]
    K, tm, mi, pp = s["K"], int(c["tile_m"]), int(c["m_input"]), int(c["pingpong"])
    l1 = (2 if pp else 1) * (mi * K + K) * BF16 + tm * FP32
    usage.update(l1_bytes=l1)
    rules.divisible(found, "tile_m", tm, FILL_VECTOR, "mv_f32.cc zeroes the output tile in "
                    f"{FILL_VECTOR}-lane FP32 vectors")
    rules.l1(found, l1, hw, f"W {mi}x{K} and x {K} bf16{' twice' if pp else ''}, y {tm} f32",
             "use a smaller m_input, or pingpong 0 (the kernel takes whole rows)")
    return found


#: mv_f32.cc stores FP32 in 16-lane vectors (AIE2P)
FILL_VECTOR = 16


def candidates(spec: KernelSpec, s: Shape, hw: Hardware) -> Any:
    return (c for c in gemv.candidates(spec, s, hw) if c["tile_m"] % FILL_VECTOR == 0)

# --- numerics: mv.cc's 64 FP32 lanes, no cast ----------------------------------------------


def emulate(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    return {"y": gemv_fp32acc(x["w"], x["x"], out_dtype=torch.float32)}

#: no output cast: only the lanes' order of FP32 sums differs from the reference
NUMERICS = Numerics(emulate, gemv.reference, atol=1e-4, weights=gemv.unit_scale)

# --- cost: gemv's fitted model, the output stream twice as wide ------------------------------


def work(spec: KernelSpec, s: Shape, c: dict[str, Any], p: PerfParams) -> Work:
    """gemv's (W streamed per column, a call per m_input rows) plus each column's output
    rows written at 4 bytes, not 2, at the column's bandwidth: modeled, not measured"""
    base = gemv.work(spec, s, {**c, "kernel": "mv"}, p)
    tm, hm, parts = int(c["tile_m"]), int(c["herd_m"]), int(c.get("partitions", 1))
    rows = math.ceil(math.ceil(s["M"] / parts) / (tm * hm)) * tm      # per column
    wider = parts * rows * (FP32 - BF16) / p.gemv_column_bw
    return Work(base.compute_s, base.memory_s + wider, base.serial_s)


#: reads gemv's coefficients, fitted on gemv's page; nothing of its own was measured
COST = Cost(work, lambda p: p.gemv_floor_s, gemv.COEFFICIENTS, None, in_elf="stream")

# --- the program: matvec.py's herd, an FP32 output tile, our object --------------------------

#: our own micro-kernel source (in this package)
MV_F32_SOURCE = "kernels/aie/mv_f32.cc"


def mv_f32_object(tile_m: int) -> KernelSource:
    """mv_f32.cc with DIM_M_OUTPUT = tile_m (the tile its fill zeroes), its symbols suffixed
    by the tile so that two tiles link into one ELF."""
    return KernelSource(f"mv_f32_m{tile_m}.o", MV_F32_SOURCE,
                        (("DIM_M_OUTPUT", tile_m), ("SYM_SUFFIX", f"_m{tile_m}")), NPU_DEPLOY)


def objects(s: Shape, c: dict[str, Any]) -> tuple[KernelSource, ...]:
    return (mv_f32_object(int(c["tile_m"])),)


def declares(s: Shape, c: dict[str, Any]) -> dict[str, str]:
    tm, mi, K = int(c["tile_m"]), int(c["m_input"]), s["K"]
    return {f"linalg_fill_f32_m{tm}": f"f32[{tm}]",
            f"matvec_vectorized_bf16_f32_m{tm}": f"i32, i32, i32, bf16[{mi}x{K}], bf16[{K}], "
                                                 f"f32[{tm}]"}


def launch_layout(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    """matvec.py's herd (as gemv's mv.o launch): per m_input rows W's rows and x into L1,
    the call writing the FP32 tile from its row offset, the tile out."""
    s = launch.shape_dict
    M, K = s["M"], s["K"]
    tm, mi, hm = int(c["tile_m"]), int(c["m_input"]), int(c["herd_m"])
    pp = bool(int(c["pingpong"]))
    obj = mv_f32_object(tm)
    flags = {"omit_pingpong": "" if pp else "all", "runtime_loop_tiling_sizes": [16, 16]}
    l1 = (buf("w_l1", (mi, K), BF16, "L1", pp), buf("x_l1", (K,), BF16, "L1", pp),
          buf("y_l1", (tm,), FP32, "L1"))
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands(s)),
        grid=(cdiv(M, tm * hm), 1), segment=None, herd=(hm, 1), l2=(), l1=l1,
        loop=tm // mi,
        externs=(Extern(f"linalg_fill_f32_m{tm}", obj.obj, ("y_l1",)),
                 Extern(f"matvec_vectorized_bf16_f32_m{tm}", obj.obj,
                        ("i32", "i32", "i32", "w_l1", "x_l1", "y_l1"))),
        kernels=(obj,), flags=flags)


FAMILIES = (KernelFamily(
    GEMV_FP32, rules=RULES, check=check, candidates=candidates, numerics=NUMERICS,
    cost=COST, program=AirProgram(launch_layout, gemv.segment), objects=objects,
    declares=declares),)
