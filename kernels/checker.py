"""Can this kernel configuration exist on the hardware? Typed findings, each naming the
limit, the numbers and the fix.

The resource model per kernel family (how a configuration maps onto L1, L2,
DMA channels and buffer descriptors) is ours, built on the figures of
NPU_FACTS.md: GEMM tiles get A and B panels through the memory tile of their
column and accumulate in FP32 in L1; GEMV and element-wise kernels stream
straight from DDR through the shim. It is set so that the measured
configurations of NPU_FACTS.md pass and the static failures of its symptom
table are flagged; it has not yet been compared with mlir-air's own allocation
(FlashAttention's L1 use, in particular, is not modelled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

from .hardware import Hardware
from .specs import BF16, FP32, KernelSpec, Shape

Severity = Literal["error", "corrupt", "warning"]
#: error: will not compile or run. corrupt: runs, silently wrong. warning: works, costs.


@dataclass(frozen=True)
class Finding:
    kind: str              # l1 | l2 | channels | shim_streams | bds | repeat | stride | divisible |
    #                        padding | alignment | herd | layout | known_failure
    severity: Severity
    message: str
    value: float = 0.0
    limit: float = 0.0

    def __str__(self) -> str:
        return f"[{self.severity}] {self.message}"


def blocking(findings: list[Finding]) -> list[Finding]:
    """The findings that make a configuration unusable (errors and silent corruption)."""
    return [f for f in findings if f.severity != "warning"]


def check(spec: KernelSpec, shape: Shape, config: dict[str, Any], hw: Hardware) -> list[Finding]:
    """Every rule of the hardware this (kernel, shape, config) breaks; [] when it fits."""
    return check_with_usage(spec, shape, config, hw)[0]


def check_with_usage(spec: KernelSpec, shape: Shape, config: dict[str, Any], hw: Hardware
                     ) -> tuple[list[Finding], dict[str, int]]:
    """The findings, and what the configuration uses: tiles, L1 and L2 bytes."""
    usage: dict[str, int] = {"tiles": 0, "l1_bytes": 0, "l2_bytes": 0}
    if spec.where == "cpu":
        return [], usage
    family = _FAMILY.get(spec.name)
    if family is None:
        raise KeyError(f"no resource model for kernel {spec.name!r}")
    return family(spec, shape, {**spec.tunables, **config}, hw, usage), usage


# --- shared rules -----------------------------------------------------------------------

def _herd(findings: list[Finding], rows: int, cols: int, hw: Hardware) -> None:
    if rows > hw.rows or cols > hw.cols:
        findings.append(Finding(
            "herd", "error", f"herd {cols}x{rows} (cols x rows) does not fit the "
            f"{hw.cols}x{hw.rows} array of {hw.name}; use at most {hw.cols} columns and "
            f"{hw.rows} rows", rows * cols, hw.tiles))


def _l1(findings: list[Finding], need: int, hw: Hardware, what: str, fix: str) -> None:
    if need > hw.l1_bytes:
        findings.append(Finding(
            "l1", "error", f"L1 footprint {need / 1024:.1f} KiB ({what}, ping-pong buffers "
            f"counted twice) exceeds the {hw.l1_bytes // 1024} KiB of a compute tile; {fix}",
            need, hw.l1_bytes))


def _repeat(findings: list[Finding], name: str, count: int, hw: Hardware, fix: str) -> None:
    if count > hw.max_repeat:
        findings.append(Finding(
            "repeat", "error", f"{name} needs a DMA repeat count of {count}, over the limit "
            f"of {hw.max_repeat} (`Repeat count exceeds [0:{hw.max_repeat}]`); {fix}",
            count, hw.max_repeat))


def _stride(findings: list[Finding], name: str, stride: int, hw: Hardware) -> None:
    if not 1 <= stride <= hw.max_stride:
        findings.append(Finding(
            "stride", "error", f"{name} needs a DMA stride of {stride} elements, outside "
            f"[1, {hw.max_stride}]; split the transfer or transpose the layout",
            stride, hw.max_stride))


def _shim(findings: list[Finding], tiles: int, ins: int, outs: int, hw: Hardware) -> None:
    need_in, need_out = tiles * ins, tiles * outs
    if need_in > hw.shim_inputs or need_out > hw.shim_outputs:
        most = min(hw.shim_inputs // max(ins, 1), hw.shim_outputs // max(outs, 1))
        findings.append(Finding(
            "shim_streams", "error", f"{tiles} tiles x ({ins} DDR inputs + {outs} output) need "
            f"{need_in} in / {need_out} out shim streams, the array has {hw.shim_inputs} / "
            f"{hw.shim_outputs} (compile error 'out of channels'); use at most {most} tiles",
            max(need_in, need_out), min(hw.shim_inputs, hw.shim_outputs)))


def _align(findings: list[Finding], name: str, elems: int, elem_bytes: int, hw: Hardware) -> None:
    if (elems * elem_bytes) % hw.transfer_align:
        findings.append(Finding(
            "alignment", "error", f"{name} transfers {elems * elem_bytes} bytes, not a "
            f"multiple of {hw.transfer_align}; use an even number of bf16 elements",
            elems * elem_bytes, hw.transfer_align))


def _pad(findings: list[Finding], dim: str, size: int, step: int) -> int:
    """Record the padding a dim needs to a multiple of `step`; returns the padded size."""
    padded = math.ceil(size / step) * step
    if padded != size:
        findings.append(Finding(
            "padding", "warning", f"{dim}={size} is not a multiple of {step}: padded to "
            f"{padded}, {100 * (padded - size) / padded:.1f}% of that work is wasted",
            padded - size, padded))
    return padded


# --- kernel families -----------------------------------------------------------------------

def _gemm(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    out_bytes = FP32 if spec.name == "gemm_fp32" else BF16
    M, K, N = s["M"], s["K"], s["N"]
    tm, tk2, tk1, tn, hm, hn = (int(c[k]) for k in
                                ("tile_m", "tile_k_l2", "tile_k_l1", "tile_n", "herd_m", "herd_n"))
    f: list[Finding] = []
    if c.get("datapath", "bfp16") not in ("bfp16", "bf16"):
        f.append(Finding("datapath", "error", f"datapath={c['datapath']!r}: the AIE2P matmul "
                         "runs bfp16 (8x8x8 blocks) or bf16 (native 4x8x8)", 0, 0))
    _herd(f, hm, hn, hw)
    # L1: the C tile accumulated in FP32 for the whole launch; while multiplying, A and B
    # tiles double-buffered; while draining (A and B freed), for bf16 out, the cast C tile
    # (the three herd phases of kernels.air's GEMM).
    l1 = tm * tn * FP32 + max(2 * tm * tk1 * BF16 + 2 * tk1 * tn * BF16,
                              tm * tn * BF16 if out_bytes == BF16 else 0)
    _l1(f, l1, hw, f"A {tm}x{tk1} and B {tk1}x{tn} bf16 twice, C {tm}x{tn} fp32",
        "use a smaller tile_m, tile_n or tile_k_l1")
    # L2, one memory tile per herd column: an A panel per herd row and the column's B
    # panel, double-buffered, and the C tiles of the column on their way out.
    l2 = 2 * hm * tm * tk2 * BF16 + 2 * tk2 * tn * BF16 + hm * tm * tn * out_bytes
    usage.update(tiles=hm * hn, l1_bytes=l1, l2_bytes=l2)
    if l2 > hw.l2_bytes:
        f.append(Finding("l2", "error", f"L2 capacity exceeded: {l2 / 1024:.0f} KiB staged per "
                         f"memory tile (A {hm}x{tm}x{tk2}, B {tk2}x{tn} double-buffered, C "
                         f"{hm}x{tm}x{tn}) > {hw.l2_bytes // 1024} KiB; use a smaller tile_m, "
                         "herd_m or tile_k_l2", l2, hw.l2_bytes))
    # Memory-tile channels: in = A + B from the shim + C from each row; out = A to each
    # row + B down the column + C to the shim.
    mem_in, mem_out = 2 + hm, hm + 2
    if mem_in > hw.memory_dma.inputs or mem_out > hw.memory_dma.outputs:
        f.append(Finding("channels", "error", f"a memory tile would need {mem_in} input and "
                         f"{mem_out} output DMA channels for herd_m={hm}, it has "
                         f"{hw.memory_dma.inputs} + {hw.memory_dma.outputs} ('out of "
                         "channels'); use a smaller herd_m", max(mem_in, mem_out),
                         hw.memory_dma.inputs))
    if tk2 % tk1:
        f.append(Finding("divisible", "error", f"tile_k_l2={tk2} is not a multiple of "
                         f"tile_k_l1={tk1}", tk2, tk1))
    for name, tile in (("tile_m", tm), ("tile_k_l1", tk1), ("tile_n", tn)):
        if tile % hw.mmul_k_block:
            f.append(Finding("divisible", "error", f"{name}={tile} is not a multiple of the "
                             f"{hw.mmul_k_block}x{hw.mmul_k_block}x{hw.mmul_k_block} matmul "
                             "unit", tile, hw.mmul_k_block))
    span_n = tn * hn
    if N % span_n:
        options = sorted({t * h for t in (32, 64, 128, 256) for h in range(1, hw.cols + 1)
                          if N % (t * h) == 0 and t * h <= N})[-3:]
        f.append(Finding("divisible", "corrupt", f"N={N} is not divisible by tile_n x herd_n = "
                         f"{tn}x{hn} = {span_n}: the hardware writes a silently corrupt output "
                         f"(cosine ~0.02); pick tile_n x herd_n dividing N (e.g. "
                         f"{', '.join(map(str, options)) or 'pad N'})", N, span_n))
    if hn == 1 and tn == 128 and N % 512:
        f.append(Finding("known_failure", "error", f"herd_n=1 with tile_n=128 at N={N} (not "
                         "512-aligned) fails at run time on NPU2 (measured); use tile_n=64 or "
                         "more columns", N, 512))
    Mp = _pad(f, "M", M, tm * hm)
    Kp = _pad(f, "K", K, tk2)
    # M and N tiles are iterations of the launch grid; the K loop is one DMA repeat.
    _repeat(f, "the K loop", Kp // tk2, hw, "use a larger tile_k_l2")
    for name, stride in (("A (row stride K)", K), ("B (row stride N)", N),
                         ("C (row stride N)", N)):
        _stride(f, name, stride, hw)
    _align(f, "an A row", tk1, BF16, hw)
    _bds(f, streams=3, tails=sum(x != y for x, y in ((M, Mp), (K, Kp))), hw=hw, usage=usage)
    return f


def _bds(f: list[Finding], streams: int, tails: int, hw: Hardware,
         usage: dict[str, int] | None = None) -> None:
    # Each stream ping-pongs over two descriptors; an unaligned tail needs its own pair.
    base, extra = streams * 2, tails * 2 * streams
    need = base + extra
    if usage is not None:
        usage.update(bd_base=base, bd_tails=extra)
    if need > hw.shim_bds:
        f.append(Finding("bds", "error", f"{need} buffer descriptors needed per shim tile, "
                         f"{hw.shim_bds} exist ('Allocator exhausted available buffer "
                         "descriptor IDs'); pad the dims to aligned sizes or split the launch",
                         need, hw.shim_bds))


def _gemv(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    M, K = s["M"], s["K"]
    tm, tk, hm, parts = (int(c[k]) for k in ("tile_m", "tile_k", "herd_m", "partitions"))
    f: list[Finding] = []
    _herd(f, 1, hm, hw)
    l1 = 2 * tm * tk * BF16 + 2 * tk * BF16 + tm * FP32 + tm * BF16
    usage.update(tiles=hm, l1_bytes=l1)
    _l1(f, l1, hw, f"W {tm}x{tk} and x {tk} bf16 twice, y {tm} fp32 and its bf16 cast",
        "use a smaller tile_m or tile_k")
    _shim(f, hm, 2, 1, hw)
    rows = math.ceil(M / parts)
    Mp = _pad(f, "M per partition", rows, tm * hm)
    Kp = _pad(f, "K", K, tk)
    _repeat(f, "the K loop", Kp // tk, hw, f"split K so that K / tile_k <= {hw.max_repeat} "
            "(a larger tile_k, or K in parts)")
    _repeat(f, "the M loop", Mp // (tm * hm), hw,
            "split M into more partitions (one launch each)")
    _stride(f, "W (row stride K)", K, hw)
    _align(f, "a W row", tk, BF16, hw)
    _bds(f, streams=3, tails=int(Mp != rows) + int(Kp != K), hw=hw, usage=usage)
    return f


def _streaming(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
               usage: dict[str, int]) -> list[Finding]:
    """Element-wise and row-wise kernels: each tile streams its inputs from DDR."""
    hm, rows_used = int(c["herd_m"]), int(c.get("herd_rows", 1))
    ins = sum(1 for o in spec.operands(s) if o.role == "input")
    width = s["width"]
    f: list[Finding] = []
    _herd(f, rows_used, hm, hw)
    _shim(f, hm * rows_used, ins, 1, hw)
    if "tile_rows" in c:       # row kernels hold whole rows: norms, RoPE
        rows = int(c["tile_rows"])
        # RoPE: a cos and a sin row for each row of the block (kernels.air); a norm: the
        # weight row.
        extra = 2 * rows * width * BF16 if spec.name == "rope" else width * BF16
        l1 = 2 * (ins + 1) * rows * width * BF16 + extra
        usage.update(tiles=hm * rows_used, l1_bytes=l1)
        _l1(f, l1, hw, f"{rows} row(s) of {width} in and out, twice", "use fewer tile_rows")
        _align(f, "a row", width, BF16, hw)
    else:
        tile = int(c["tile"])
        n = s["rows"] * width
        l1 = 2 * (ins + 1) * tile * BF16 + (width * BF16 if spec.name == "bias_add" else 0)
        usage.update(tiles=hm * rows_used, l1_bytes=l1)
        _l1(f, l1, hw, f"{ins + 1} buffers of {tile} elements, twice", "use a smaller tile")
        # A 1-D stream folds into a multi-dimensional descriptor: no repeat limit bites.
        _pad(f, "elements", n, tile * hm * rows_used)
        _align(f, "a tile", tile, BF16, hw)
    return f


def _attention(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
               usage: dict[str, int]) -> list[Finding]:
    """mlir-air's FlashAttention (programming_examples/flash_attention/kernel_fusion_based,
    attn_npu2.py): a herd of (heads_per_unroll x q_tiles) columns by `cascade` rows; each
    compute tile takes a q block of q_tile / q_tiles rows and streams K and V in k_tile
    chunks (the K chunk is also the head-dim tile), and the cascade rows merge their partial
    softmax states. The resource figures follow that program's L1 allocations."""
    f: list[Finding] = []
    heads, hd = s["heads"], s["head_dim"]
    per_unroll, q_tiles, cascade = int(c["heads_per_unroll"]), int(c["q_tiles"]), int(c["cascade"])
    q_tile, k_tile = int(c["q_tile"]), int(c["k_tile"])
    dv_tile = int(c.get("dv_tile") or k_tile)
    cols = per_unroll * q_tiles
    _herd(f, cascade, cols, hw)
    # NPU_FACTS: 32 tiles for 4 q tiles and 4 cascade stages -- the example's default of two
    # heads per unroll.
    usage.update(tiles=cols * cascade)
    if s["heads"] % s["kv_heads"]:
        f.append(Finding("divisible", "error", f"{s['heads']} query heads do not share "
                         f"{s['kv_heads']} KV heads evenly", s["heads"], s["kv_heads"]))
    if heads % per_unroll:
        f.append(Finding("divisible", "error", f"heads={heads} is not a multiple of "
                         f"heads_per_unroll={per_unroll}; use a divisor of {heads}", heads,
                         per_unroll))
    if q_tile % q_tiles:
        f.append(Finding("divisible", "error", f"q_tile={q_tile} does not split into "
                         f"q_tiles={q_tiles} equal blocks", q_tile, q_tiles))
    tq = q_tile // max(q_tiles, 1)
    if tq != k_tile:
        f.append(Finding("divisible", "error", f"causal masking needs q blocks as long as the K "
                         f"chunks: q_tile/q_tiles={tq} but k_tile={k_tile}", tq, k_tile))
    for name, dim, step in (("head_dim", hd, k_tile), ("head_dim (V)", hd, dv_tile)):
        if dim % step:
            f.append(Finding("divisible", "error", f"{name}={dim} is not a multiple of the "
                             f"tile {step}; use a tile that divides it", dim, step))
    if dv_tile % 8:
        f.append(Finding("divisible", "error", f"dv_tile={dv_tile} is not a multiple of the "
                         "8-wide matmul", dv_tile, 8))
    # L1 per tile, bf16, single buffers as allocated: Q kept whole (head_dim wide), one K
    # chunk, one V chunk, the score block, the output accumulator, and two per-row vectors
    # (max and sum); during the cascade merge one more accumulator and six row vectors.
    l1 = BF16 * (tq * hd + k_tile * k_tile + k_tile * dv_tile + tq * k_tile
                 + 2 * tq * dv_tile + 8 * tq)
    _l1(f, l1, hw, f"Q {tq}x{hd}, K {k_tile}x{k_tile}, V {k_tile}x{dv_tile}, scores "
        f"{tq}x{k_tile}, two {tq}x{dv_tile} accumulators, row vectors; bf16",
        "use a smaller dv_tile or k_tile")
    # L2 per column: a K and a V chunk per cascade stage, and the q block's output.
    l2 = BF16 * (cascade * (k_tile * k_tile + k_tile * dv_tile) + q_tile * dv_tile)
    if l2 > hw.l2_bytes:
        f.append(Finding("l2", "error", f"L2 footprint {l2 / 1024:.1f} KiB (K and V chunks per "
                         f"stage, the output block) exceeds the {hw.l2_bytes // 1024} KiB of a "
                         "memory tile; use fewer cascade stages or a smaller k_tile", l2,
                         hw.l2_bytes))
    usage.update(l1_bytes=l1, l2_bytes=l2)
    if hd >= 128 and c["layout"] == "seq-first":
        f.append(Finding("layout", "error", f"seq-first FlashAttention with head_dim="
                         f"{hd} splits K into chunks and hangs on NPU2 "
                         "(ERT_CMD_STATE_TIMEOUT, measured); use layout=head-first", hd, 128))
    compiled = c.get("compiled_for")
    if compiled is not None and tuple(compiled) != (s["Lq"], s["Lk"], hd):
        f.append(Finding("known_failure", "corrupt", f"kernel object compiled for "
                         f"(Lq, Lk, head_dim)={tuple(compiled)} launched at "
                         f"{(s['Lq'], s['Lk'], hd)}: NaN or garbage output; "
                         "recompile it for the launch sizes", 0, 0))
    _pad(f, "Lq", s["Lq"], q_tile)
    _pad(f, "Lk", s["Lk"], k_tile * cascade)
    return f


def _decode_attention(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
                      usage: dict[str, int]) -> list[Finding]:
    """One query per head against the cache: each column takes whole KV heads, streams their
    K and V in k_tile chunks (ping-pong), keeps the group's queries, scores (FP32) and output
    accumulator (FP32). Our model of a decode-attention launch, not a measured program."""
    f: list[Finding] = []
    kt, cols = int(c["k_tile"]), min(int(c["herd_n"]), s["kv_heads"])
    group, hd = s["heads"] // max(s["kv_heads"], 1), s["head_dim"]
    _herd(f, 1, cols, hw)
    if s["heads"] % s["kv_heads"]:
        f.append(Finding("divisible", "error", f"{s['heads']} query heads do not share "
                         f"{s['kv_heads']} KV heads evenly", s["heads"], s["kv_heads"]))
    l1 = BF16 * (group * hd + 2 * 2 * kt * hd) + FP32 * (group * kt + group * hd)
    _l1(f, l1, hw, f"queries {group}x{hd}, K and V chunks {kt}x{hd} bf16 twice, scores and "
        "accumulator FP32", "use a smaller k_tile")
    _shim(f, cols, 2, 1, hw)
    usage.update(tiles=cols, l1_bytes=l1)
    return f


# --- merging launches into one dispatch (a multi-launch ELF) ------------------------------

# FlashAttention is built as its own program (mlir-air flash_attention/kernel_fusion_based,
# with its own segment and cascade routing) and the measured deployment runs it alone in its
# dispatch. That it cannot share an ELF is our reading of that deployment, not a documented
# hardware limit.
OWN_ELF = frozenset({"flash_attention"})


def check_merge(launches: list[tuple[KernelSpec, Shape, dict[str, Any]]], hw: Hardware
                ) -> list[Finding]:
    """Why these launches cannot run as one dispatch; [] when they can.

    * Each launch must fit on its own: a launch whose herd, channels or memory do not fit
      makes the ELF fail too.
    * The launches run one after another and reuse the shim descriptors of aligned streams,
      but every unaligned tail keeps descriptors of its own for the whole ELF (NPU_FACTS:
      "BD pool exhausted by unaligned dims: pad to 1024-aligned or split the ELF"), so the
      ELF needs max(base) + sum(tails) descriptors per shim tile.
    * A kernel built as its own program (OWN_ELF) runs alone."""
    f: list[Finding] = []
    base = tails = 0
    for spec, shape, config in launches:
        if spec.where != "npu":
            f.append(Finding("merge", "error", f"{spec.name} runs on the host; a dispatch "
                             "holds NPU launches only", 0, 0))
            continue
        found, usage = check_with_usage(spec, shape, config, hw)
        for bad in blocking(found):
            f.append(Finding(bad.kind, bad.severity, f"{spec.name}: {bad.message}", bad.value,
                             bad.limit))
        base = max(base, usage.get("bd_base", 0))
        tails += usage.get("bd_tails", 0)
    if len(launches) > 1:
        alone = sorted({spec.name for spec, _, _ in launches} & OWN_ELF)
        for name in alone:
            f.append(Finding("merge", "error", f"{name} is built as its own program and runs "
                             "alone in its dispatch (as in the measured deployment); merge "
                             "the launches before and after it separately", len(launches), 1))
        if base + tails > hw.shim_bds:
            f.append(Finding("bds", "error", f"{len(launches)} launches in one ELF need "
                             f"{base} + {tails} (unaligned tails) = {base + tails} buffer "
                             f"descriptors per shim tile, {hw.shim_bds} exist ('Allocator "
                             "exhausted available buffer descriptor IDs'); pad the dims to "
                             "aligned sizes or split the ELF", base + tails, hw.shim_bds))
    return f


_FAMILY = {
    "gemm_bf16": _gemm, "gemm_fp32": _gemm, "gemv": _gemv,
    "rmsnorm": _streaming, "qk_norm": _streaming, "rope": _streaming,
    "silu_mul": _streaming, "add": _streaming, "bias_add": _streaming,
    "flash_attention": _attention, "npu_decode_attention": _decode_attention,
}
