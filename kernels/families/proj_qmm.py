"""The fused de-quantizing GEMV of upstream's 4-bit decode, y = W x with W in Q4NX blocks:
`proj_qmm_*` (Xilinx/mlir-air e972f29, programming_examples/fused_decode/kernels/proj_qmm.cc,
with q4_k.h's `_qmm_q4k_bf16` and model_spec.h's `q4k_block_t`).

A block is 32 rows x 256 columns of W as 2560 bf16 words (5120 bytes): bf16 scales[8][32],
bf16 mins[8][32] (Q4NX: w = scale * q + min per group of 32 columns) and the 4-bit codes.
The kernel keeps one FP32 accumulator of the block's 32 rows in L1: `proj_qmm_zero` clears
it, `proj_qmm_acc256` adds one block (x's 256 columns of the block), `proj_qmm_flush` casts
it to bf16 once. The min term uses the column-sum trick: min * sum(x over the group), the sum
taken once per group. Its arithmetic is kernels.emulation.quantized's. The Q4_0 build
(`-DQ4_0`, Qwen2.5-3B): signed codes, scale only, the same block size.

Two engines are described. "launch" is our own MLIR-AIR program of one launch: herd_m cores,
each zeroing, accumulating and flushing a row block of 32 over the K / 256 column blocks
(upstream's calls, our herd). "fused" is upstream's fused decode superkernel, which runs the
same kernel on 16 proj cores (aie_array_layout.h MVM_CORES) in one dispatch of the whole
decode: it is checked against that design's constraints (row blocks per phase, the LM head's
vocab chunking, the engine-wide stack) but not emitted here; its whole token is modeled by
kernels.performance.fused_decode.

The weight's fields (codes, scales, mins) come unpacked: `fields` is the seam where
formats/' Q4NX `unpack` of the device buffer connects.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from npu_deploy.events.phases import phase

from ..air_programs.air_parts import (
    EmitError,
    Extern,
    KernelSource,
    LaunchLayout,
    Writer,
    buf,
    call,
    extern,
    stream_segment,
)
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
from ..emulation.kernel_fields import (
    PROJ_QMM_FORMATS,
    device_fields,
    kernel_tensors,
    seeded_matrix,
)
from ..emulation.numerics import Rounding
from ..emulation.quantized import (
    Q4NX_COLS,
    Q4NX_GROUP,
    Q4NX_ROWS,
    QuantFields,
    proj_qmm,
    proj_qmm_bound,
    reference,
)

if TYPE_CHECKING:
    from npu_deploy.formats.catalog import QuantizedMatrix

    from ..performance.model import PerfParams
    from ..plans.plan import Launch

#: one q4k block as the kernel reads it: scales[8][32] + mins[8][32] bf16, then 32 x 256
#: 4-bit codes, 2560 bf16 words (model_spec.h q4k_block_t)
BLOCK_WORDS = (2 * (Q4NX_ROWS * Q4NX_COLS // Q4NX_GROUP) * BF16 + Q4NX_ROWS * Q4NX_COLS // 2) \
    // BF16
BLOCK_BYTES = BLOCK_WORDS * BF16

# --- spec ----------------------------------------------------------------------------------


def blocks(s: Shape) -> tuple[int, int]:
    """Row blocks of 32 and column blocks of 256 of an M x K weight."""
    return s["M"] // Q4NX_ROWS, s["K"] // Q4NX_COLS


PROJ_QMM = KernelSpec(
    "proj_qmm", "npu", "Q4NX GEMV y = W x, de-quantized in the kernel (4-bit decode)",
    ("M", "K"),
    lambda s: [Operand("w", (*blocks(s), BLOCK_WORDS), BF16, "weight"),
               Operand("x", (s["K"],), BF16, "input"),
               Operand("y", (s["M"],), BF16, "output")],
    lambda s: 2.0 * s["M"] * s["K"],
    {"herd_m": 8, "codec": "q4nx", "engine": "launch", "rounding": "floor",
     # the fused decode engine's stack_size default (llms/qwen3_8b_q4nx/README.md)
     "stack": 10240,
     # fused engine: rows emitted per core per round (FLM's lead/partner pairing), and the
     # LM head's row-pair iterations per dispatch (0: not the LM head)
     "pair_rows": 2, "vocab_i2": 0})

# --- checker rule --------------------------------------------------------------------------

#: fused_decode: 16 proj cores (aie_array_layout.h MVM_CORES), the vocab relay's payload of
#: 512 elements a round (fused_decode.py PAYLOAD), the tested envelope 2 x VOCAB_I2 <= 63
#: (fused_decode.py's vocab note: a 7-bit lock credit), and its rms/residual core's 7
#: K-wide bf16 buffers (llms/llama31_8b_q4nx/README.md, llms/qwen3_8b_q4nx/README.md)
FUSED_CORES, VOCAB_PAYLOAD, VOCAB_ENVELOPE, RMS_K_BUFFERS = 16, 512, 63, 7
#: a shim descriptor's byte offset is a uint32: one buffer object spans 4 GiB at most
#: (llms/qwen3_8b_q4nx/README.md "The weight buffer had to be split")
BO_SPAN = 1 << 32

#: how the kernel's bf16 casts round: "floor", as upstream builds it (neither proj_qmm.cc
#: nor q4_k.h sets the core's rounding register, so its reset mode, floor, stands:
#: kernels.emulation.quantized), or "conv_even", our build of the same source that sets the
#: register to round to nearest even on entry (`proj_object`), as upstream's attention
#: builds do with -DROUND_CONV_EVEN (attn_npu2.cc). The emulator's name for each:
QMM_ROUNDINGS = ("floor", "conv_even")
_EMULATED_ROUNDING: dict[str, Rounding] = {"floor": "floor", "conv_even": "nearest_even"}

RULES = (
    "divisible: M by 32 and K by 256 (a q4k block is 32 rows x 256 columns)",
    "launch: M by 32 x herd_m (a row block per core per launch); herd, shim streams "
    "(W and x in, y out per tile); L1: x's 256 and W's block twice, the FP32 accumulator, "
    "the bf16 output and the stack",
    "weight buffer: at most 4 GiB per buffer object (a shim BD's offset is a uint32)",
    "fused: each phase's rows a multiple of 32 x 16 cores x pair_rows",
    "fused LM head: vocab_i2 x 16 x pair_rows row blocks per chunk divide the padded vocab's "
    "row blocks, K / 512 divides vocab_i2 x pair_rows, 2 x vocab_i2 <= 63",
    "fused: the engine-wide stack beside the rms/residual core's 7 K-wide bf16 buffers",
    "stack: at least the 2112-byte frame upstream measured",
    "rounding: floor (upstream's build) or conv_even (ours, the register set on entry)",
)


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    M, K = s["M"], s["K"]
    f: list[Finding] = []
    rules.divisible(f, "M", M, Q4NX_ROWS, "a q4k block holds 32 rows (Q4NX_ROW_BLOCK_SIZE)")
    rules.divisible(f, "K", K, Q4NX_COLS, "a q4k block holds 256 columns (Q4NX_COL_BLOCK_SIZE)")
    if c["codec"] not in ("q4nx", "q4_0"):
        f.append(Finding("divisible", "error", f"codec {c['codec']!r} is not one the kernel is "
                         "built for: q4nx (default) or q4_0 (-DQ4_0)"))
    if c.get("rounding", "floor") not in QMM_ROUNDINGS:
        f.append(Finding("unsupported", "error", f"rounding {c['rounding']!r}: the kernel is "
                         f"built to round {' or '.join(QMM_ROUNDINGS)}"))
    weight_buffer(f, "W", spec.operands(s)[0].nbytes)
    if c["engine"] == "fused":
        _check_fused(f, s, c, hw, usage)
        return f
    hm, stack = int(c["herd_m"]), int(c["stack"])
    rules.herd(f, 1, hm, hw)
    rules.shim(f, hm, 2, 1, hw)
    l1 = launch_l1(c)
    usage.update(tiles=hm, l1_bytes=l1)
    rules.l1(f, l1, hw, "x 256 and a W block bf16 twice, 32 FP32 and 32 bf16 outputs",
             "use a smaller stack", stack=stack)
    deepest_frame(f, stack)
    rules.divisible(f, "M", M, Q4NX_ROWS * hm, f"each of herd_m={hm} cores takes a row block "
                    "of 32 per launch; use a herd_m that divides M / 32")
    rules.repeat(f, "x's stream (once per column block)", K // Q4NX_COLS - 1, hw,
                 "split K over launches")
    rules.bds(f, streams=3, tails=0, hw=hw, usage=usage)
    return f


#: the deepest decode frame upstream measured, proj_qmm_pass256's and attn_kv_fin's
#: (llms/llama31_8b_q4nx/q4nx_decode_8b.py, DECODE_STACK's note)
DEEPEST_FRAME = 2112


def deepest_frame(f: list[Finding], stack: int) -> None:
    """A stack below the deepest frame the kernel was measured to use overruns into L1."""
    if stack < DEEPEST_FRAME:
        f.append(Finding("stack", "corrupt", f"a stack of {stack} bytes is below the "
                         f"{DEEPEST_FRAME}-byte frame upstream measured for proj_qmm; the "
                         "call would write past it into L1 buffers: give it at least "
                         f"{DEEPEST_FRAME}", stack, DEEPEST_FRAME))


def launch_l1(c: dict[str, Any]) -> int:
    """One core's L1 in the launch engine: x's column block and a W block ping-ponged, the
    FP32 accumulator and the bf16 row block it flushes to."""
    return 2 * (Q4NX_COLS + BLOCK_WORDS) * BF16 + Q4NX_ROWS * (FP32 + BF16)


def weight_buffer(f: list[Finding], what: str, nbytes: int) -> None:
    """One buffer object of weights is addressed through a uint32 byte offset."""
    if nbytes > BO_SPAN:
        f.append(Finding("weight_buffer", "error", f"{what} is {nbytes / 2**30:.3f} GiB in one "
                         "buffer object; a shim BD's byte offset is a uint32, so past 4 GiB it "
                         "wraps and reads the start (every logit NaN upstream); split the "
                         "weights over buffers (upstream's DECODE_WGROUP)", nbytes, BO_SPAN))


def split_weights(layer_bytes: int, layers: int, lm_head_bytes: int, group: int
                  ) -> tuple[list[int], list[Finding]]:
    """The fused decode's weight buffers with `group` layers each (DECODE_WGROUP; 0 keeps
    every layer and the LM head in one buffer) and the LM head in its own: their sizes, and
    a finding for each over 4 GiB."""
    if group <= 0:
        sizes = [layer_bytes * layers + lm_head_bytes]
    else:
        sizes = [layer_bytes * min(group, layers - i) for i in range(0, layers, group)]
        sizes.append(lm_head_bytes)
    found: list[Finding] = []
    for i, n in enumerate(sizes):
        weight_buffer(found, f"weight buffer {i}", n)
    return sizes, found


def padded_vocab(vocab: int, k: int) -> int:
    """The LM head's rows as the fused decode lays them out: the vocab rounded up to a
    multiple of the model dim K (model_spec.h VOCAB_SIZE_PADDED)."""
    return math.ceil(vocab / k) * k


def _check_fused(f: list[Finding], s: Shape, c: dict[str, Any], hw: Hardware,
                 usage: dict[str, int]) -> None:
    """The fused decode's proj phase (fused_decode.py): its rows in rounds of 32 x 16 cores x
    pair_rows, the LM head's chunks, and the engine-wide stack."""
    M, K = s["M"], s["K"]
    pair, vi2, stack = int(c["pair_rows"]), int(c["vocab_i2"]), int(c["stack"])
    usage.update(tiles=FUSED_CORES, l1_bytes=launch_l1(c))
    if vi2 <= 0:
        rules.divisible(f, "rows", M, Q4NX_ROWS * FUSED_CORES * pair,
                        f"a round emits 32 rows from each of 16 cores x pair_rows={pair} "
                        "(use pair_rows 1: upstream's non-paired egress)")
    else:
        padded = padded_vocab(M, K)
        per_chunk = vi2 * FUSED_CORES * pair
        rules.divisible(f, "vocab row blocks", padded // Q4NX_ROWS, per_chunk,
                        f"vocab_i2={vi2} x 16 cores x pair_rows={pair} row blocks per chunk "
                        "must cover the padded vocab in whole chunks")
        rules.divisible(f, "vocab_i2 x pair_rows", vi2 * pair, K // VOCAB_PAYLOAD,
                        f"the vocab relay drains whole K: K / 512 = {K // VOCAB_PAYLOAD} "
                        "must divide it, or the vocab wave deadlocks")
        if 2 * vi2 > VOCAB_ENVELOPE:
            f.append(Finding("vocab_chunk", "error", f"2 x vocab_i2 = {2 * vi2} is over "
                             f"{VOCAB_ENVELOPE}, outside what upstream ran on the device "
                             "(the 7-bit lock credit it was once held by)", 2 * vi2,
                             VOCAB_ENVELOPE))
    rules.l1(f, RMS_K_BUFFERS * K * BF16, hw, f"the rms/residual core's {RMS_K_BUFFERS} "
             f"K-wide bf16 buffers at K={K}", "lower the engine's stack (upstream: "
             "DECODE_STACK=8064 or 6144 at K=4096)", stack=stack)
    deepest_frame(f, stack)


def candidates(spec: KernelSpec, s: Shape, hw: Hardware) -> Iterator[dict[str, Any]]:
    """The launch engine at the widest herd that divides M's row blocks."""
    for hm in (8, 4, 2, 1):
        if (s["M"] // Q4NX_ROWS) % hm == 0:
            yield {"herd_m": hm, "engine": "launch"}

# --- numerics (kernels.emulation.quantized) ---------------------------------------------------


def fields(x: Tensors, s: Shape, c: Mapping[str, Any] | None = None) -> QuantFields:
    """The weight's fields: `w.q` (uint8 [M, K]), `w.scale` and `w.min` ([M, K / 32]) where
    the tensors carry them (a plan's launch, Phase 1's seeded weight), else decoded from the
    blocks `w` as the kernel reads them (the build `c["codec"]` says the format)."""
    if "w.q" in x:
        return QuantFields.of(x["w.q"], x["w.scale"], x.get("w.min"), Q4NX_GROUP)
    if c is None or "w" not in x:
        raise ValueError("proj_qmm reads its weight's fields (w.q, w.scale, w.min) or its Q4NX "
                         "blocks `w` with the build's codec; neither was given")
    fmt = PROJ_QMM_FORMATS.get(str(c.get("codec", "q4nx")), "q4nx")
    return device_fields(fmt, x["w"], (s["M"], s["K"]))


def rounding(c: Mapping[str, Any]) -> Rounding:
    """The emulator's rounding of the build's bf16 casts (`QMM_ROUNDINGS`)."""
    return _EMULATED_ROUNDING[str(c.get("rounding", "floor"))]


def emulate(s: Shape, c: dict[str, Any], x: Tensors, out: Tensors | None = None) -> Tensors:
    return {"y": proj_qmm(fields(x, s, c), x["x"], signed=c.get("codec") == "q4_0",
                          rounding=rounding(c))}


def _reference(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    return {"y": reference(fields(x, s, c), x["x"], signed=c.get("codec") == "q4_0")}


def bound(s: Shape, c: dict[str, Any], x: Tensors) -> torch.Tensor:
    """The per-row distance from the FP32 reference the kernel's arithmetic allows."""
    return proj_qmm_bound(fields(x, s, c), x["x"], signed=c.get("codec") == "q4_0")


def packed_weight(s: Shape, c: Mapping[str, Any], m: QuantizedMatrix) -> Tensors:
    """Weight `m` (Q4NX or the Q4_0 container) as the kernel's operand `w`, its blocks, and
    the fields the emulator reads (kernels.emulation.kernel_fields `kernel_tensors`)."""
    t = kernel_tensors(m)
    t["w"] = t["w"].view(torch.bfloat16).reshape(*blocks(s), BLOCK_WORDS)
    return t


def seeded_weight(s: Shape, c: Mapping[str, Any], gen: torch.Generator) -> Tensors:
    """A valid Q4NX (or Q4_0) weight for Phase 1 (kernels.emulation.kernel_fields
    `seeded_matrix`)."""
    fmt = PROJ_QMM_FORMATS.get(str(c["codec"]), "q4nx")
    return packed_weight(s, c, seeded_matrix(fmt, (s["M"], s["K"]), gen))


#: Phase 1's atols (beside its rtol, which covers the flush's cast of under 2^-7 |y|), for
#: each build, with the measurements behind them: the phase table's
_PHASE1 = phase(1)
NUMERICS = Numerics(emulate, _reference, atol=_PHASE1.threshold("atol_proj_qmm"),
                    seeded_weight=seeded_weight,
                    atol_by=("codec", {"q4_0": _PHASE1.threshold("atol_proj_qmm_q4_0")}),
                    packed_weight=packed_weight)

# --- cost: the weight bytes streamed per core, and the core's work per block ------------------
#
# No upstream page times proj_qmm on its own. A core streams 5120 bytes a block (4 bits a
# weight plus bf16 scales and mins per 32: 5 bits a weight) at the GEMV's fitted column
# bandwidth (kernels.families.gemv, fitted on GEMV_bf16.md), and spends per block the static
# bundle count upstream reports at about one bundle a cycle
# (programming_examples/fused_decode/README.md): Q4_0's inner body 140 bundles x 16 per
# block; Q4NX's body without the sign fix 121 x 16, plus the 171 bundles of
# proj_qmm_acc256's column-sum reduction (proj_qmm.cc). Every figure modeled.

BLOCK_CYCLES = {"q4_0": 140 * 16, "q4nx": 121 * 16 + 171}
#: a host-armed LM-head wave of the fused engine, measured: ~20 us (fused_decode.py, the
#: (VOCAB_I2, UNI_LM) sweep 18.13 / 18.18 / 18.40 ms per token)
VOCAB_WAVE_S = 20e-6


def work(spec: KernelSpec, s: Shape, c: dict[str, Any], p: PerfParams) -> Work:
    """memory: each core's blocks at a column's bandwidth; compute: their cycles at the
    array's clock (1.8 GHz); the fused LM head's waves after them"""
    rows, cols = blocks(s)
    cores = FUSED_CORES if c["engine"] == "fused" else int(c["herd_m"])
    per_core = math.ceil(rows / cores) * cols
    memory = per_core * (BLOCK_BYTES + Q4NX_COLS * BF16) / p.gemv_column_bw
    compute = per_core * BLOCK_CYCLES.get(c["codec"], BLOCK_CYCLES["q4nx"]) / CLOCK_HZ
    waves = 0.0
    if c["engine"] == "fused" and int(c["vocab_i2"]) > 0:
        chunk = int(c["vocab_i2"]) * FUSED_CORES * int(c["pair_rows"])
        waves = math.ceil(padded_vocab(s["M"], s["K"]) / Q4NX_ROWS / chunk) * VOCAB_WAVE_S
    return Work(compute, memory, waves)


#: XDNA 2's clock (kernels.definition.hardware: inferred, 1.8 GHz)
CLOCK_HZ = 1.8e9

COST = Cost(work, lambda p: p.gemv_floor_s, in_elf="stream")

# --- the program: per core, a row block zeroed, accumulated over K's blocks, flushed --------

SOURCE = "programming_examples/fused_decode/kernels/proj_qmm.cc"


#: the conv_even build's one edit of proj_qmm.cc: the rounding register set where every
#: row block starts (proj_qmm_zero), so each later cast of the core rounds to nearest even
CONV_EVEN_EDIT = ("void proj_qmm_zero(float *__restrict y_acc, int _arm) {",
                  "void proj_qmm_zero(float *__restrict y_acc, int _arm) {\n"
                  "  aie::set_rounding(aie::rounding_mode::conv_even);")


def proj_object(codec: str, rounding: str = "floor") -> KernelSource:
    """proj_qmm.cc as upstream's fused_decode Makefile builds it: -DMODEL_TYPE picks the model
    header that sets the block sizes (32 x 256, groups of 32, in every models/*.h), and
    qwen2.5-3b.h's defines Q4_0; with `rounding` conv_even, our build with CONV_EVEN_EDIT."""
    name, model = ("proj_qmm_q4_0", "QWEN2_5_3B") if codec == "q4_0" else \
        ("proj_qmm", "LLAMA_3_2_1B")
    if rounding == "conv_even":
        return KernelSource(f"{name}_ne.o", SOURCE, (("MODEL_TYPE", model),),
                            edits=(CONV_EVEN_EDIT,))
    return KernelSource(f"{name}.o", SOURCE, (("MODEL_TYPE", model),))


def declares(s: Shape, c: dict[str, Any]) -> dict[str, str]:
    return {"proj_qmm_zero": "f32[32], i32",
            "proj_qmm_acc256": f"bf16[{Q4NX_COLS}], bf16[{BLOCK_WORDS}], f32[32]",
            "proj_qmm_flush": "f32[32], bf16[32]"}


def objects(s: Shape, c: dict[str, Any]) -> tuple[KernelSource, ...]:
    return (proj_object(str(c["codec"]), str(c.get("rounding", "floor"))),)


def launch_layout(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    if c["engine"] != "launch":
        raise EmitError(f"{launch.label}: the fused decode superkernel is upstream's "
                        "(fused_decode.py); npu-deploy emits proj_qmm as one launch "
                        "(engine 'launch')")
    s = launch.shape_dict
    hm = int(c["herd_m"])
    obj = proj_object(str(c["codec"]), str(c.get("rounding", "floor")))
    l1 = (buf("x_l1", (Q4NX_COLS,), BF16, "L1", True),
          buf("w_l1", (BLOCK_WORDS,), BF16, "L1", True),
          buf("acc_l1", (Q4NX_ROWS,), FP32, "L1"), buf("y_l1", (Q4NX_ROWS,), BF16, "L1"))
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands(s)),
        grid=(s["M"] // (Q4NX_ROWS * hm), 1), segment=None, herd=(hm, 1), l2=(), l1=l1,
        loop=s["K"] // Q4NX_COLS,
        externs=(Extern("proj_qmm_zero", obj.obj, ("acc_l1", "i32")),
                 Extern("proj_qmm_acc256", obj.obj, ("x_l1", "w_l1", "acc_l1")),
                 Extern("proj_qmm_flush", obj.obj, ("acc_l1", "y_l1"))),
        kernels=(obj,), flags={"stack_size": int(c["stack"])})


def segment(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
            names: list[str], head_dim: int | None) -> None:
    stream_segment(w, p, layout, names, lambda: _body(w, layout, arg))


def _body(w: Writer, layout: LaunchLayout, arg: dict[str, str]) -> None:
    """Core tx of launch lx owns row block lx x herd_m + tx: zero its accumulator, add each
    column block (x's 256 and the block's 2560 words in), flush it and write its 32 rows."""
    x_l1, w_l1, _, y_l1 = layout.l1
    hm, cols = layout.herd[0], layout.loop
    call(w, extern(layout, "proj_qmm_zero"), (0,))
    w(f"for j in range_(0, {cols}):")
    w.indent()
    w(f"dma_memcpy_nd({x_l1.name}, {arg['x']}, src_offsets=[at([(j, {Q4NX_COLS})])], "
      f"src_sizes=[{Q4NX_COLS}], src_strides=[1])")
    w(f"dma_memcpy_nd({w_l1.name}, {arg['w']}, src_offsets=[at([(lx, {hm * cols * BLOCK_WORDS}), "
      f"(tx, {cols * BLOCK_WORDS}), (j, {BLOCK_WORDS})])], src_sizes=[{BLOCK_WORDS}], "
      "src_strides=[1])")
    call(w, extern(layout, "proj_qmm_acc256"))
    w("yield_([])")
    w.dedent()
    call(w, extern(layout, "proj_qmm_flush"))
    w(f"dma_memcpy_nd({arg['y']}, {y_l1.name}, dst_offsets=[at([(lx, {Q4NX_ROWS * hm}), "
      f"(tx, {Q4NX_ROWS})])], dst_sizes=[{Q4NX_ROWS}], dst_strides=[1])")


FAMILIES = (KernelFamily(
    PROJ_QMM, rules=RULES, check=check, candidates=candidates, numerics=NUMERICS, cost=COST,
    program=AirProgram(launch_layout, segment), objects=objects, declares=declares,
    numerics_changes=(((("qmm_rounding", "conv_even"),),
                       "the 4-bit GEMV's bf16 casts rounded to nearest even (our build of "
                       "proj_qmm.cc, the rounding register set on entry), not toward -inf: "
                       "the group partials and column sums no longer drift down together"),)),)
