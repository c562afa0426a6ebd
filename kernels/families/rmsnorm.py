"""Weighted RMSNorm over each row, and the per-head QK norm of Qwen3 (the same kernel on
head_dim-wide rows). mlir-air: programming_examples/weighted_rms_norm (`rms_norm_bf16`
over a block of rows); the registry page RMSNorm_bf16.md measures it, the QK norm at
2048x128 among its rows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from npu_deploy.oracle import reference as ref_ops

from ..air_programs.air_parts import LaunchLayout, Writer, buf
from ..definition.family import (
    FP32,
    Cost,
    KernelFamily,
    KernelSpec,
    Numerics,
    Shape,
    Tensors,
    TimedLaunch,
    product_space,
)
from ..emulation.tensors import bf16_out, f32
from ..measured.measurements import Source, TableSource, markdown_tables, rows_at
from . import streaming

if TYPE_CHECKING:
    from ..plans.plan import Launch

# --- spec --------------------------------------------------------------------------------

RMSNORM = KernelSpec("rmsnorm", "npu", "weighted RMSNorm over each row", ("rows", "width"),
                     streaming.row_operands("x", weight="weight"),
                     lambda s: 4.0 * s["rows"] * s["width"],
                     {"herd_m": 8, "tile_rows": 2, "eps": 1e-5})
QK_NORM = KernelSpec("qk_norm", "npu", "per-head RMSNorm of Q or K (Qwen3)", ("rows", "width"),
                     streaming.row_operands("x", weight="weight"),
                     lambda s: 4.0 * s["rows"] * s["width"],
                     {"herd_m": 8, "tile_rows": 4, "eps": 1e-6})

# --- numerics: as the program computes, an FP32 sum and rsqrt, a bf16 epilogue -------------


def emulate(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    """The program's arithmetic (see `compute`): each square exact in an FP32 fma lane, the
    lanes summed over the row's 16-lane vectors and then reduced; rstd = rsqrt(sum / width +
    eps) in FP32, rounded to bf16; then two bf16 vector multiplies, x * rstd and that times
    the weight, each rounded to bf16 (the epilogue of upstream's weighted_rms_norm.py). A
    product of two bf16 values is exact in FP32, so each torch step below rounds where the
    program does."""
    xf = f32(x["x"].to(torch.bfloat16))
    width, lanes = s["width"], streaming.LANES
    total = lane_sums(xf, width, lanes).sum(-1, keepdim=True)
    rstd = _bf16(torch.rsqrt(total / float(width) + float(c["eps"])))
    y = _bf16(_bf16(xf * rstd) * f32(x["weight"].to(torch.bfloat16)))
    return {"y": bf16_out(y, out, "y")}


def lane_sums(xf: torch.Tensor, width: int, lanes: int) -> torch.Tensor:
    """The program's lane sums of the squares of xf (FP32 [..., width]): lane l adds x[l]^2,
    x[lanes + l]^2, ... in order ([..., lanes]). Compiled (`lane_sums_of_squares`, the same
    bits as `lane_sums_torch`, tested): a decode step runs two norms per layer, and the torch
    loop's width / lanes small operations were most of their time."""
    from ..emulation._bfp_kernel import lane_sums_of_squares

    rows = xf.reshape(-1, width).contiguous()
    acc = torch.empty(rows.shape[0], lanes, dtype=torch.float32)
    lane_sums_of_squares(rows.numpy(), lanes, acc.numpy())
    return acc.view(*xf.shape[:-1], lanes)


def lane_sums_torch(xf: torch.Tensor, width: int, lanes: int) -> torch.Tensor:
    """`lane_sums` in torch operations: the definition it is tested against."""
    squares = (xf * xf).reshape(*xf.shape[:-1], width // lanes, lanes)
    acc = torch.zeros_like(squares[..., 0, :])
    for j in range(width // lanes):     # the lane sums, in the program's order
        acc = acc + squares[..., j, :]
    return acc


def _bf16(v: torch.Tensor) -> torch.Tensor:
    """An FP32 value rounded to bf16 (to nearest even), kept as FP32."""
    return f32(v.to(torch.bfloat16))


def reference(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    return {"y": ref_ops.rms_norm(f32(x["x"]), f32(x["weight"]), float(c["eps"]))}


def near_one(t: torch.Tensor, s: Shape) -> torch.Tensor:
    """A norm weight near 1, as trained ones are."""
    return 1.0 + 0.1 * t


# Three roundings to bf16 (rstd, x * rstd, the product with the weight) stay within the
# Phase-1 rtol at unit scale; 1e-3 covers values near 0.
NUMERICS = Numerics(emulate, reference, atol=1e-3, weights=near_one)

# --- the program: the row block and the weight row in L1, the norm inline -------------------
#
# Upstream writes RMSNorm inline, not as a micro-kernel (weighted_rms_norm.py, and the LLM
# builders' _build_rms_1d and _build_qknorm_2d), and so do we, in its structure: the sum of
# squares in FP32 (as attn_decode_npu2.py's inline RMSNorm takes it: fma(x, x, acc) on
# extf'd bf16 vectors into an FP32 accumulator kept in L1), rstd = rsqrt(mean + eps) as an
# FP32 scalar narrowed to bf16, and the epilogue y = (x * rstd) * weight in bf16 vectors.
# The epilogue stays bf16 because the alternatives are what upstream found broken
# (docs/hardware-facts.md#known-failure-symptoms): the AIE vector unit does not legalize an
# f32 vector multiply (weighted_rms_norm.py), an f32 vector.fma with a constant operand does
# not legalize on AIE2P, and a loop body that mixes subf and fma on products compiles to an
# ELF that writes all zeros (attn_decode_npu2.py). The verifier's vector check refuses each.

#: the f32 partial sums in L1
SCRATCH = (buf("acc_l1", (streaming.LANES,), FP32, "L1"),)
SCRATCH_BYTES = sum(b.nbytes for b in SCRATCH)


def compute(w: Writer, launch: Launch, layout: LaunchLayout, step: int, rows: int,
            head_dim: int | None) -> None:
    """RMSNorm of each row of the block in x_l1 into y_l1, with the weight row in
    weight_l1."""
    width, lanes = launch.shape_dict["width"], streaming.LANES
    eps = float(streaming.config(launch)["eps"])
    vectors = width // lanes
    w(f"# RMSNorm of {rows} row(s) of {width}, inline: an FP32 sum of squares, a bf16 "
      "epilogue")
    streaming.vector_prelude(w)
    w(f"width = arith.ConstantOp(f32, {float(width)!r})")
    w(f"eps = arith.ConstantOp(f32, {eps!r})")
    w("zeros_f32 = broadcast(vec_f32, zero_f32)")
    w(f"for r in range_(0, {rows}):")
    w.indent()
    streaming.write(w, "zeros_f32", "acc_l1", "c0")
    w(f"for j in range_(0, {vectors}):")
    w.indent()
    row = streaming.read("vec", "x_l1", f"at([(r, {width}), (j, {lanes})])")
    w(f"x = arith.extf(vec_f32, {row})")
    streaming.write(w, f"fma(x, x, {streaming.read('vec_f32', 'acc_l1', 'c0')})",
                    "acc_l1", "c0")
    w("yield_([])")
    w.dedent()
    w(f"total = reduction(f32, 'add', {streaming.read('vec_f32', 'acc_l1', 'c0')})")
    w("rstd = arith.truncf(bf16, math_dialect.rsqrt(arith.addf(arith.divf(total, width), "
      "eps)))")
    w("rstd_vec = broadcast(vec, rstd)")
    w(f"for j in range_(0, {vectors}):")
    w.indent()
    w(f"lane = at([(r, {width}), (j, {lanes})])")
    w(f"x = {streaming.read('vec', 'x_l1', 'lane')}")
    w(f"g = {streaming.read('vec', 'weight_l1', f'at([(j, {lanes})])')}")
    streaming.write(w, "arith.mulf(arith.mulf(x, rstd_vec), g)", "y_l1", "lane")
    w("yield_([])")
    w.dedent()
    w("yield_([])")
    w.dedent()


PROGRAM = streaming.program(None, compute=compute, imports=streaming.VECTOR_IMPORTS,
                            scratch=SCRATCH)

# --- measured -----------------------------------------------------------------------------

SOURCE = Source("details/RMSNorm_bf16.md", markdown_tables(
    TableSource("shapes", "Tested shapes", "(M, N)",
                "tested shapes (M rows of N), herd_x columns; latency and bandwidth "
                "(x in, y out) at the best config"),
    TableSource("herd_x", "herd_x choice vs performance", "herd_x",
                "latency against the number of columns at M=N=2048")))


# --- cost: streamed at RMSNorm's per-tile rate, fitted on its page ------------------------


def timed_launches() -> list[TimedLaunch]:
    """The tested shapes and the herd_x sweep (each column loops over its rows one at a
    time: tile_rows 1)."""
    def launch(name: str, r: dict[str, Any]) -> tuple[Shape, dict[str, Any], float]:
        m, n = (r["M"], r["N"]) if name == "shapes" else (2048, 2048)
        return ({"rows": m, "width": n}, {"herd_m": r["herd_x"], "tile_rows": 1},
                2.0 * m * n * 2)                # x in, y out (upstream's bandwidth)
    return streaming.measured_rows("rmsnorm", launch)


RULES = (*streaming.RULES, f"divisible: a row is whole {streaming.LANES}-lane vectors (the norm "
         "is inline vector code)")
CHECK = streaming.vector_check(SCRATCH_BYTES, "the norm is inline vector code with no "
                               "scalar tail")


def _family(spec: KernelSpec, cost: Cost, **extra: Any) -> KernelFamily:
    return KernelFamily(
        spec, rules=RULES, check=CHECK,
        candidates=product_space(streaming.ROW_SPACE), numerics=NUMERICS,
        cost=cost, program=PROGRAM, data="rmsnorm", **extra)


FAMILIES = (_family(RMSNORM, streaming.stream_cost("rmsnorm", timed_launches), source=SOURCE,
                    measured=rows_at("rmsnorm", "shapes", lambda r: (r["M"], r["N"]),
                                     lambda s: (s["rows"], s["width"]))),
            # QK norm is an RMSNorm: it reuses that kernel's fitted rate
            _family(QK_NORM, streaming.stream_cost("rmsnorm")))
