"""Decode attention: one query per head against the KV cache, on the NPU (mlir-air's
programming_examples/attention_decode design, with micro-kernels of our own for the group
sizes and head_dims its kernels do not take) or on the host (the measured deployment's
choice: one query against the cache costs less than a dispatch). Both share
FlashAttention's spec and numerics.

On the NPU it is built once for every length: the program and its micro-kernels are built
for the deployment's context (config `context`, the plan's `Decode.context` rounded up to
k_tile) and read the step's cache length (Lk) at run time, as upstream's fused decode
serves every length from one template (programming_examples/fused_decode/README.md, "One
template serves every context length")."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from npu_deploy.oracle import reference as ref_ops

from ..air_programs.air_parts import (
    NPU_DEPLOY,
    Buffer,
    ChannelDecl,
    EmitError,
    Extern,
    KernelSource,
    LaunchLayout,
    Writer,
    alloc_l1,
    buf,
    call,
    cdiv,
    dims,
    extern,
    free,
    head_rows,
    open_herd,
)
from ..definition import rules
from ..definition.family import (
    BF16,
    FP32,
    AirProgram,
    Cost,
    HostOp,
    KernelFamily,
    KernelSpec,
    Numerics,
    Shape,
    Tensors,
    Work,
    product_space,
)
from ..definition.hardware import Hardware
from ..definition.rules import Finding
from ..emulation.numerics import to_bf16
from ..emulation.tensors import bound_layout
from . import flash_attention, streaming

if TYPE_CHECKING:
    from ..performance.model import PerfParams
    from ..plans.plan import Launch

# --- specs: FlashAttention's operands with Lq = 1 -------------------------------------------

DIMS = ("heads", "kv_heads", "Lq", "Lk", "head_dim")
NPU_DECODE_ATTENTION = KernelSpec(
    "npu_decode_attention", "npu", "one query against the KV cache, on the NPU", DIMS,
    flash_attention.operands, flash_attention.flops, {"k_tile": 64, "herd_n": 8})
DECODE_ATTENTION = KernelSpec(
    "decode_attention", "cpu", "one query against the KV cache, on the host", DIMS,
    flash_attention.operands, flash_attention.flops)

# --- checker rule (NPU) -------------------------------------------------------------------

RULES = (
    "herd: min(herd_n, kv_heads) columns fit the array",
    "divisible: query heads over KV heads",
    "L1: the group's queries, a K/V row twice (bf16), the score rows (the context built "
    "for, or Lk, rounded up to k_tile) and the accumulator (FP32), the output (bf16), the "
    "current length (i32)",
    "shim streams: Q (then the current length) and the K/V rows in, the output out, per "
    "column",
    "window: no sliding window (config window): the program scores every cached position "
    "(upstream's fused decode does not wire Gemma 3's window either); such a step runs on "
    "the host",
    "scale: the softmax scale (config scale) is 1/sqrt(head_dim) only",
)


def score_length(lk: int, k_tile: int) -> int:
    """The score row's length: the cache length rounded up to k_tile (the kernel masks the
    rest)."""
    return cdiv(lk, k_tile) * k_tile


def built_length(s: Shape, c: dict[str, Any]) -> int:
    """The cache positions the program is built for and streams: the configuration's
    `context` (the window one build serves), or the step's own Lk without one."""
    return max(s["Lk"], int(c.get("context") or 0))


def l1_buffers(group: int, hd: int, lk: int, k_tile: int) -> tuple[Buffer, ...]:
    """Every L1 buffer of a column: the group's queries, one K or V row (ping-pong: it is
    refilled every step), the score rows and the accumulator in FP32, the bf16 output, the
    step's cache length (one i32, read by the micro-kernels). `lk` is the length built for.
    The checker's L1 figure is their sum."""
    return (buf("q_l1", (group, hd), BF16, "L1"), buf("row_l1", (hd,), BF16, "L1", True),
            buf("s_l1", (group, score_length(lk, k_tile)), FP32, "L1"),
            buf("acc_l1", (group, hd), FP32, "L1"), buf("o_l1", (group, hd), BF16, "L1"),
            buf("len_l1", (1,), "i32", "L1"))


def l2_buffers(group: int, hd: int, cols: int) -> tuple[Buffer, ...]:
    """Each column's memory-tile relays (upstream allocates one set per column): its
    queries and the length that follows them, the K/V row (ping-pong), its output."""
    return tuple(b for c in range(cols) for b in (
        buf(f"q{c}_l2", (group, hd), BF16, "L2"), buf(f"len{c}_l2", (1,), "i32", "L2"),
        buf(f"kv{c}_l2", (hd,), BF16, "L2", True), buf(f"o{c}_l2", (group, hd), BF16, "L2")))


def _bytes(buffers: tuple[Buffer, ...]) -> int:
    """What the buffers take, ping-pong buffers twice (as the verifier counts them)."""
    return sum(b.nbytes * (2 if b.pingpong else 1) for b in buffers)


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    """One query per head against the cache, as mlir-air's attention_decode runs it: each
    column takes whole KV heads, keeps the group's queries, a score row per query (FP32) and
    the output accumulator (FP32), and streams the K rows, then the V rows, one at a time.
    The resource figures are the program's buffers (l1_buffers, l2_buffers)."""
    f: list[Finding] = []
    kt, cols = int(c["k_tile"]), min(int(c["herd_n"]), s["kv_heads"])
    group, hd, lk = s["heads"] // max(s["kv_heads"], 1), s["head_dim"], built_length(s, c)
    rules.herd(f, 1, cols, hw)
    rules.heads_share_kv(f, s["heads"], s["kv_heads"])
    l1 = _bytes(l1_buffers(group, hd, lk, kt))
    rules.l1(f, l1, hw, f"queries {group}x{hd}, a K/V row twice, scores "
             f"{group}x{score_length(lk, kt)} and accumulator {group}x{hd} FP32, output, "
             "length",
             "the score row grows with the context it is built for: build it for a shorter "
             "context, or run decode attention on the host (decode_attention_on_cpu)")
    rules.shim(f, cols, 2, 1, hw)
    f += window_and_scale(s, c)
    l2 = _bytes(l2_buffers(group, hd, cols))
    usage.update(tiles=cols, l1_bytes=l1, l2_bytes=l2)
    return f


def window_and_scale(s: Shape, c: dict[str, Any]) -> list[Finding]:
    """The program masks nothing but the positions past the step's length, and its
    softmax scales by 1/sqrt(head_dim): a sliding window or another scale is refused, so the
    plan runs that step on the host (`host_alternative`), which takes both. Upstream's
    fused decode leaves Gemma 3's window out too, as a no-op below 1024 positions
    (programming_examples/llms/gemma3_4b_q4nx/gemma3_4b_q4nx_inference.py, e972f29)."""
    f: list[Finding] = []
    w = flash_attention.window(c)
    if w is not None:
        f.append(Finding("window", "error", f"sliding window {w}: the decode attention "
                         "program scores every cached position; run this step on the host "
                         "(decode_attention)", w, 0))
    scale, want = c.get("scale"), flash_attention.softmax_scale(s["head_dim"])
    if scale is not None and not math.isclose(float(scale), want, rel_tol=1e-6):
        f.append(Finding("unsupported", "error", f"softmax scale {float(scale):g}: the decode "
                         f"attention program scales by 1/sqrt(head_dim)={want:g}; run this "
                         "step on the host (decode_attention)", 0, 0))
    return f


# --- search space ------------------------------------------------------------------------

# Selection has always walked the element-wise space here (herd_m and tile, which this
# kernel does not read; its own k_tile and herd_n keep their defaults): kept as it is so
# that the selected configurations stay those already recorded.
SPACE = streaming.ELEMENT_SPACE

# --- numerics: FlashAttention's (the BFP16 matmuls, FP32 softmax, P as bf16) ---------------


def first_positions(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    """The inputs with k and v cut to the step's Lk positions: a cache buffer longer than
    that (the device's, sized for the context the program is built for) counts only its
    first Lk, as the program's micro-kernels mask the rest (softmax over Lk, no score or
    value past it)."""
    lk, hkv, d = s["Lk"], s["kv_heads"], s["head_dim"]
    out = dict(x)
    for name in ("k", "v"):
        t = x[name]
        if t.numel() == hkv * lk * d:
            continue
        if bound_layout(c, name, "head-first") == "head-first":
            out[name] = t.reshape(hkv, -1, d)[:, :lk]
        else:
            out[name] = t.reshape(-1, hkv * d)[:lk]
    return out


def emulate(s: Shape, c: dict, x: Tensors, out: Tensors | None = None) -> Tensors:
    """FlashAttention's numerics with Lq = 1 over the step's first Lk positions."""
    return flash_attention.emulate(s, c, first_positions(s, c, x), out)


def reference(s: Shape, c: dict, x: Tensors) -> Tensors:
    """FP32 attention of the query over the step's first Lk positions."""
    return flash_attention.reference(s, c, first_positions(s, c, x))


NUMERICS = Numerics(emulate, reference, atol=5e-2)

# --- cost ----------------------------------------------------------------------------------


def work(spec: KernelSpec, s: Shape, c: dict[str, Any], p: PerfParams) -> Work:
    """memory: each column streams its KV heads' cache, every position the program is
    built for whatever the step's length, at the GEMV's fitted column bandwidth (nothing
    measures this program; it streams like a GEMV)"""
    cols = min(int(c["herd_n"]), s["kv_heads"])
    streamed = {**s, "Lk": built_length(s, c)}
    return Work(0.0, spec.bytes_moved(streamed) / (cols * p.gemv_column_bw))


COST = Cost(work, lambda p: p.gemv_floor_s, in_elf="stream")


# --- on the host: FP32 attention of the bf16 query against the bf16 cache, one cast --------


def run_on_host(s: Shape, params: dict[str, Any], get: Callable[[str], torch.Tensor],
                put: Callable[[str, torch.Tensor], None]) -> None:
    """The query against the cache's first Lk positions in FP32, within the step's sliding
    window and at its softmax scale (params `window`, `scale`; plain causal at
    1/sqrt(head_dim) without them)."""
    heads, lk, hd = s["heads"], s["Lk"], s["head_dim"]
    q = get("q").to(torch.float32).reshape(heads, 1, hd)
    k = get("k").to(torch.float32)[:, :lk]
    v = get("v").to(torch.float32)[:, :lk]
    o = ref_ops.attention(q, k, v, start=lk - 1, scale=params.get("scale"),
                          window=params.get("window"))
    put("o", to_bf16(o.transpose(0, 1).reshape(1, heads * hd)))


def host_seconds(s: Shape, p: PerfParams) -> float:
    """its fixed cost (fitted: 0.3 ms per layer in the deployment) and the cache's bytes at
    the host's copy rate"""
    kv = 2 * BF16 * s["kv_heads"] * s["Lk"] * s["head_dim"]
    return p.cpu_attention_s + kv / p.cpu_bw


# --- the program (NPU): mlir-air's attention_decode, a column per KV head ----------------------
#
# programming_examples/attention_decode/attn_decode_npu2.py (e972f29), its attention part:
# a herd of one column per KV head; per column, memory-tile relays (aL3ToL2 / aL2ToL1) carry
# the K cache rows, then the V rows, one [head_dim] row at a time; the column keeps the
# group's queries and a score row per query, writes score `pos` for each K row
# (attn_1_group), runs the softmax over the row once, then adds p[pos] x V row into an FP32
# accumulator (attn_2_group) and sends the group's output through its memory tile
# (dL1ToL2 / dL2ToL3). Our queries come from DDR (upstream computes them in the same tile).
#
# The micro-kernels are ours (kernels/aie/decode_attention.cc): upstream's attn_1_group and
# attn_2_group static_assert GROUP_SIZE == 4 and DIM_N == 64, accumulate in bf16, and its
# softmax is inline MLIR; we need groups of 2, 3 and 7 and head_dim 128.
#
# Built once for every length. Upstream's attention_decode bakes the position in (its
# pos_host is an index constant, a herd operand, and the K/V loops run to it), so a new
# position is a new build. Its fused decode builds one template at ATTN_MAXL instead and
# gives the cores the length at run time (programming_examples/fused_decode/README.md):
# by default an RTP word of the herd that the host patches in the instruction stream per
# token (decode_insts_gen.py), or, with DECODE_DYNSEQ, a trailing i32 scalar of the
# runtime sequence that reaches the herd as a segment and herd operand and from which a
# TXN builder assembles each token's instruction stream (fused_decode.py, decode_dynseq.py,
# python/air/backend/txn_builder.py; XRTBackend's emit_txn_cpp in python/air/backend/xrt.py).
# Both put the length into the instruction stream, which our dispatches cannot change per
# run: a merged decode dispatch is an ELF whose instructions XRT loads with its hardware
# context (kernels/npu_runtime/xrt_runtime.py), and the xclbin flow writes its instruction
# buffer once. So the length travels as data: a one-word i32 function argument
# (`LaunchLayout.runtime`, written by the backend per run), put on each column's query
# stream after its queries (upstream puts a head packet on a stream the same way: the
# padded xrms packet ahead of the weights on bL3ToL2 in attention_decode/attn_decode_npu2.py;
# an air.channel has a size, not an element type), relayed by the memory tile and read by
# the micro-kernels from L1. The instruction stream stays frozen, and the shim streams
# every position the program is built for whatever the length is, as upstream's single
# template does ("the KV readback streams ATTN_MAXL positions whatever L is"); the cores
# skip the rows past the length (no score, no value) and the softmax counts only the first
# `length` scores, zeroing the rest.

KERNEL_SOURCE = "kernels/aie/decode_attention.cc"


def launch_layout(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    """A column per KV head (herd_n columns, launches over the rest), each with its own
    memory-tile relays; its micro-kernels compiled for the group, head_dim and score row
    of the length it is built for (`built_length`); the step's length an i32 argument."""
    s = launch.shape_dict
    kt, hd, lk = int(c["k_tile"]), s["head_dim"], built_length(s, c)
    cols = min(int(c["herd_n"]), s["kv_heads"])
    if s["kv_heads"] % cols:
        raise EmitError(f"{launch.label}: {s['kv_heads']} KV heads over herd_n={cols} "
                        "columns leaves tiles without a head; use a herd_n that divides "
                        "kv_heads")
    group = s["heads"] // max(s["kv_heads"], 1)
    length = score_length(lk, kt)
    suffix = f"_{dims(group, hd, length)}"
    obj = f"decode_attn{suffix}.o"
    externs = tuple(Extern(f"decode_attn_{name}{suffix}", obj, args) for name, args in (
        ("zero", ("acc_l1",)), ("scores", ("q_l1", "row_l1", "i32", "s_l1", "len_l1")),
        ("softmax", ("s_l1", "len_l1")),
        ("values", ("s_l1", "row_l1", "i32", "acc_l1", "len_l1")),
        ("out", ("acc_l1", "o_l1"))))
    defines = (("GROUP_SIZE", group), ("DIM_N", hd), ("SEQ_LEN", length),
               ("SYM_SUFFIX", suffix))
    channels = tuple(ChannelDecl(name, (cols,)) for name in
                     ("q_in", "q_to_l1", "kv_in", "kv_to_l1", "o_to_l2", "o_out"))
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands({**s, "Lk": lk})),
        grid=(s["kv_heads"] // cols, 1), segment=None, herd=(cols, 1),
        l2=l2_buffers(group, hd, cols), l1=l1_buffers(group, hd, lk, kt), loop=lk,
        externs=externs, channels=channels,
        kernels=(KernelSource(obj, KERNEL_SOURCE, defines, NPU_DEPLOY),), runtime=("Lk",))


def _columns(w: Writer, layout: LaunchLayout) -> None:
    """Name each column's KV head in the launch body: kv<c> = lx x columns + c."""
    cols = layout.herd[0]
    for c in range(cols):
        w(f"kv{c} = at([(lx, {cols})], {c})  # column {c}'s KV head")


def launch_in(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
              names: list[str], head_dim: int | None) -> None:
    """The launch body before the segment: per column, the DDR-side puts of its KV head's
    queries, then its K rows and its V rows, one at a time (attn_decode_npu2.py issues its
    DDR-side puts in the launch body too)."""
    s = launch.shape_dict
    group, hd = layout.l1[0].shape
    cols, lk, kvh = layout.herd[0], layout.loop, s["kv_heads"]
    span = group * hd                   # the group's queries (and outputs), contiguous: Lq = 1
    _columns(w, layout)
    for c in range(cols):
        w(f"# column {c}: its {group} queries and the step's length, then its {lk} K rows "
          f"and its {lk} V rows, one at a time")
        w(f"ChannelPut('{p}_q_in', {arg['q']}, indices=[{c}], offsets=[0, at([(kv{c}, {span})])]"
          f", sizes=[{group}, {hd}], strides=[{hd}, 1])")
        w(f"ChannelPut('{p}_q_in', {arg['Lk']}, indices=[{c}], offsets=[0], sizes=[1], "
          "strides=[1])")
        for name in ("k", "v"):
            at_row, _ = head_rows(launch, name, f"kv{c}", kvh, lk, hd, [("i", 1)])
            w(f"for i in range_(0, {lk}):")
            w.indent()
            w(f"ChannelPut('{p}_kv_in', {arg[name]}, indices=[{c}], offsets=[{at_row}], "
              f"sizes=[{hd}], strides=[1])")
            w("yield_([])")
            w.dedent()


def launch_out(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
               names: list[str], head_dim: int | None) -> None:
    """The launch body after the segment: each column's output from its memory tile to the
    group's rows in DDR (the KV heads `launch_in` named)."""
    group, hd = layout.l1[0].shape
    span = group * hd
    for c in range(layout.herd[0]):
        w(f"ChannelGet('{p}_o_out', {arg['o']}, indices=[{c}], offsets=[0, at([(kv{c}, {span})])]"
          f", sizes=[{group}, {hd}], strides=[{hd}, 1])")


def segment(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
            names: list[str], head_dim: int | None) -> None:
    s = launch.shape_dict
    group, hd = layout.l1[0].shape
    cols, lk = layout.herd[0], s["Lk"]
    w("# memory-tile relays, one set per column (upstream's aL3ToL2 -> aL2ToL1)")
    for c in range(cols):
        for b in (f"q{c}_l2", f"len{c}_l2"):
            w(f"ChannelGet('{p}_q_in', {b}, indices=[{c}])")
            w(f"ChannelPut('{p}_q_to_l1', {b}, indices=[{c}])")
        w(f"for i in range_(0, {2 * lk}):")
        w.indent()
        w(f"ChannelGet('{p}_kv_in', kv{c}_l2, indices=[{c}])")
        w(f"ChannelPut('{p}_kv_to_l1', kv{c}_l2, indices=[{c}])")
        w("yield_([])")
        w.dedent()

    open_herd(w, p, layout, [], f"attend: a column per KV head, {group} queries each")
    alloc_l1(w, layout.l1)
    w(f"ChannelGet('{p}_q_to_l1', q_l1, indices=[tx])")
    w(f"ChannelGet('{p}_q_to_l1', len_l1, indices=[tx])")
    call(w, extern(layout, "decode_attn_zero"))
    for what, ext in (("score i of each query (attn_1_group); none past the length",
                       "decode_attn_scores"),
                      ("acc += p[i] x V row i (attn_2_group); none past the length",
                       "decode_attn_values")):
        w(f"# {what}")
        w(f"for i in range_(0, {lk}):")
        w.indent()
        w(f"ChannelGet('{p}_kv_to_l1', row_l1, indices=[tx])")
        call(w, extern(layout, ext), ("i",))
        w("yield_([])")
        w.dedent()
        if ext == "decode_attn_scores":
            w("# the softmax over the first len_l1[0] scores of each row (the step's length, "
              "read at run time); the rest is zeroed")
            call(w, extern(layout, "decode_attn_softmax"))
    call(w, extern(layout, "decode_attn_out"))
    w(f"ChannelPut('{p}_o_to_l2', o_l1, indices=[tx])")
    free(w, layout.l1)
    w.dedent()

    w("# each column's output through its memory tile (dL1ToL2 -> dL2ToL3)")
    for c in range(cols):
        w(f"ChannelGet('{p}_o_to_l2', o{c}_l2, indices=[{c}])")
        w(f"ChannelPut('{p}_o_out', o{c}_l2, indices=[{c}])")


FAMILIES = (
    KernelFamily(NPU_DECODE_ATTENTION, rules=RULES, check=check,
                 candidates=product_space(SPACE), numerics=NUMERICS,
                 cost=COST, program=AirProgram(launch_layout, segment, launch_in=launch_in,
                                               launch_out=launch_out),
                 head_first_alone=("q", "k", "v", "o"), host_alternative="decode_attention",
                 exact_tiles=True, runtime_dims=(("Lk", "context"),)),
    KernelFamily(DECODE_ATTENTION, numerics=NUMERICS,
                 host=HostOp(run_on_host, host_seconds), exact_tiles=True),
)
