"""Decode attention: one query per head against the KV cache, on the NPU (our own program:
mlir-air has no example of it) or on the host (the measured deployment's choice: one query
against the cache costs less than a dispatch). Both share FlashAttention's spec and
numerics."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from npu_deploy.oracle import reference as ref_ops

from .. import rules
from ..air_parts import (
    EmitError,
    Extern,
    LaunchLayout,
    Writer,
    buf,
    call,
    cdiv,
    dims,
    extern,
    head_rows,
    stream_segment,
)
from ..family import (
    BF16,
    FP32,
    AirProgram,
    Cost,
    HostOp,
    KernelFamily,
    KernelSpec,
    Numerics,
    Shape,
    Work,
    product_space,
)
from ..hardware import Hardware
from ..numerics import to_bf16
from ..rules import Finding
from . import flash_attention, streaming

if TYPE_CHECKING:
    from ..perf import PerfParams
    from ..plan import Launch

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
    "L1: the group's queries, K and V chunks twice (bf16), scores and accumulator (FP32)",
    "shim streams: K and V in, the output out, per column",
)


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    """One query per head against the cache: each column takes whole KV heads, streams their
    K and V in k_tile chunks (ping-pong), keeps the group's queries, scores (FP32) and output
    accumulator (FP32). Our model of a decode-attention launch, not a measured program."""
    f: list[Finding] = []
    kt, cols = int(c["k_tile"]), min(int(c["herd_n"]), s["kv_heads"])
    group, hd = s["heads"] // max(s["kv_heads"], 1), s["head_dim"]
    rules.herd(f, 1, cols, hw)
    rules.heads_share_kv(f, s["heads"], s["kv_heads"])
    l1 = BF16 * (group * hd + 2 * 2 * kt * hd) + FP32 * (group * kt + group * hd)
    rules.l1(f, l1, hw, f"queries {group}x{hd}, K and V chunks {kt}x{hd} bf16 twice, scores "
             "and accumulator FP32", "use a smaller k_tile")
    rules.shim(f, cols, 2, 1, hw)
    usage.update(tiles=cols, l1_bytes=l1)
    return f


# --- search space ------------------------------------------------------------------------

# Selection has always walked the element-wise space here (herd_m and tile, which this
# kernel does not read; its own k_tile and herd_n keep their defaults): kept as it is so
# that the selected configurations stay those already recorded.
SPACE = streaming.ELEMENT_SPACE

# --- numerics: FlashAttention's (the BFP16 matmuls, FP32 softmax, P as bf16) ---------------

NUMERICS = Numerics(flash_attention.emulate, flash_attention.reference, atol=5e-2)

# --- cost ----------------------------------------------------------------------------------


def work(spec: KernelSpec, s: Shape, c: dict[str, Any], p: PerfParams) -> Work:
    """memory: each column streams its KV heads' cache at the GEMV's fitted column
    bandwidth (nothing measures this program; it streams like a GEMV)"""
    cols = min(int(c["herd_n"]), s["kv_heads"])
    return Work(0.0, spec.bytes_moved(s) / (cols * p.gemv_column_bw))


COST = Cost(work, lambda p: p.gemv_floor_s, in_elf="stream")


# --- on the host: FP32 attention of the bf16 query against the bf16 cache, one cast --------


def run_on_host(s: Shape, get: Callable[[str], torch.Tensor],
                put: Callable[[str, torch.Tensor], None]) -> None:
    heads, lk, hd = s["heads"], s["Lk"], s["head_dim"]
    q = get("q").to(torch.float32).reshape(heads, 1, hd)
    k = get("k").to(torch.float32)[:, :lk]
    v = get("v").to(torch.float32)[:, :lk]
    o = ref_ops.attention(q, k, v, start=lk - 1)
    put("o", to_bf16(o.transpose(0, 1).reshape(1, heads * hd)))


def host_seconds(s: Shape, p: PerfParams) -> float:
    """its fixed cost (fitted: 0.3 ms per layer in the deployment) and the cache's bytes at
    the host's copy rate"""
    kv = 2 * BF16 * s["kv_heads"] * s["Lk"] * s["head_dim"]
    return p.cpu_attention_s + kv / p.cpu_bw


# --- the program (NPU): each column takes whole KV heads --------------------------------------

def launch_layout(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
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
    obj = f"decode_attn_{dims(group, kt, hd)}.o"
    l1 = (buf("q_l1", (group, hd), BF16, "L1"), buf("k_l1", (kt, hd), BF16, "L1", True),
          buf("v_l1", (kt, hd), BF16, "L1", True), buf("s_l1", (group, kt), FP32, "L1"),
          buf("acc_l1", (group, hd), FP32, "L1"))
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands(s)),
        grid=(cdiv(s["kv_heads"], cols), 1), segment=None, herd=(cols, 1), l2=(), l1=l1,
        loop=s["Lk"] // kt,
        externs=(Extern(f"decode_attn_step_{dims(group, kt, hd)}", obj,
                        ("q_l1", "k_l1", "v_l1", "s_l1", "acc_l1", "i32")),
                 Extern(f"decode_attn_out_{dims(group, hd)}", obj, ("acc_l1", "q_l1"))))


def segment(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
            names: list[str], head_dim: int | None) -> None:
    stream_segment(w, p, layout, names, lambda: _body(w, launch, layout, arg))


def _body(w: Writer, launch: Launch, layout: LaunchLayout, arg: dict[str, str]) -> None:
    s = launch.shape_dict
    kt, hd = layout.l1[1].shape
    group = layout.l1[0].shape[0]
    cols = layout.herd[0]
    w(f"head = at([(lx, {cols}), (tx, 1)])          # this tile's KV head")
    w(f"dma_memcpy_nd(q_l1, {arg['q']}, src_offsets=[0, at([(head, {group * hd})])], "
      f"src_sizes=[{group}, {hd}], src_strides=[{hd}, 1])")

    def chunk(rows: int, terms: list[tuple[str, int]], first: int) -> None:
        for name in ("k", "v"):
            at_kv, stride = head_rows(launch, name, "head", s["kv_heads"], s["Lk"], hd,
                                       terms, first)
            w(f"dma_memcpy_nd({name}_l1, {arg[name]}, src_offsets=[0, {at_kv}], "
              f"src_sizes=[{rows}, {hd}], src_strides=[{stride}, 1])")
        call(w, extern(layout, "decode_attn_step"), (rows,))

    if layout.loop:
        w(f"for j in range_(0, {layout.loop}):")
        w.indent()
        chunk(kt, [("j", kt)], 0)
        w("yield_([])")
        w.dedent()
    if s["Lk"] % kt:
        w(f"# the last {s['Lk'] % kt} positions")
        chunk(s["Lk"] % kt, [], layout.loop * kt)
    call(w, extern(layout, "decode_attn_out"))
    w(f"dma_memcpy_nd({arg['o']}, q_l1, dst_offsets=[0, at([(head, {group * hd})])], "
      f"dst_sizes=[{group}, {hd}], dst_strides=[{hd}, 1])")


FAMILIES = (
    KernelFamily(NPU_DECODE_ATTENTION, rules=RULES, check=check,
                 candidates=product_space(SPACE), numerics=NUMERICS,
                 cost=COST, program=AirProgram(launch_layout, segment),
                 head_first_alone=("q", "k", "v", "o"), host_alternative="decode_attention",
                 exact_tiles=True),
    KernelFamily(DECODE_ATTENTION, numerics=NUMERICS,
                 host=HostOp(run_on_host, host_seconds), exact_tiles=True),
)
