"""GEMM, bf16 in with FP32 accumulation: C = A @ B with A the activations [M, K] and B a
weight read as [K, N], written bf16 (one cast of the FP32 accumulator) or FP32 (the LM head).
mlir-air programming_examples/matrix_multiplication (bf16_in_fp32_out, bf16_in_bf16_out):
A and B panels staged in the memory tiles, C accumulated in L1, the BFP16 MMA; measured by
the registry's GEMM pages, whose JSON this module's data files are ingested from."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..definition import rules
from ..definition.family import (
    BF16,
    FP32,
    Cost,
    KernelFamily,
    KernelSpec,
    Operand,
    Shape,
    TimedLaunch,
    Work,
    timed,
)
from ..definition.hardware import Hardware
from ..definition.rules import Finding
from ..measured.measurements import TO_BASE, Source, load, registry_json, scaled, table
from .gemm_numerics import LOW_PRECISION, METHODS, gemm_numerics, method_name, to_device
from .gemm_program import MMUL, PROGRAM, STACK_BYTES

if TYPE_CHECKING:
    from ..performance.model import PerfParams

# --- spec --------------------------------------------------------------------------------


def operands(out_bytes: int) -> Callable[[Shape], list[Operand]]:
    """A [M, K] and B [K, N] in bf16, C [M, N] in `out_bytes` per element."""
    return lambda s: [Operand("a", (s["M"], s["K"]), BF16, "input"),
                      Operand("b", (s["K"], s["N"]), BF16, "weight"),
                      Operand("c", (s["M"], s["N"]), out_bytes, "output")]


def flops(s: Shape) -> float:
    return 2.0 * s["M"] * s["K"] * s["N"]


# Upstream's recommended configuration for large GEMMs (the registry's GEMM pages): herd
# [herd_m, herd_n] = [8, 4], the full 32-tile array; tiles m64 / kl2 256 / kl1 32 / n128.
# `b_parts`: B stored as that many column blocks [b_parts, K, N / b_parts], so that the
# stride of B's K step is tile_k_l2 x N / b_parts (an LM head over a 150k vocabulary needs it).
TUNABLES = {"tile_m": 64, "tile_k_l2": 256, "tile_k_l1": 32, "tile_n": 128, "herd_m": 8,
            "herd_n": 4, "datapath": "bfp16", "b_parts": 1}

#: How each GEMM computes its output (upstream's `--method` / `--codegen`; their numerics
#: are `METHODS` below): bf16 out `fused-cast` (an FP32 GEMM, then a separate cast launch in
#: the same ELF), `drain` (the drain herd casts the FP32 accumulator once), `direct` (direct
#: codegen, a bf16 accumulator: the low-precision tier); FP32 out `external` (the hand-tuned
#: mm.o) or `direct` codegen (the same numerics, slower). The first is the default.
#: The configuration keys of upstream's registry rows (kernels/data/gemm_*.json).

CONFIG_KEYS = ("method", "tile_m", "tile_k_l2", "tile_k_l1", "tile_n", "herd_m", "herd_n")


def row_config(spec: KernelSpec, row: Mapping[str, Any]) -> dict[str, Any]:
    """The full configuration a registry row ran: its keys over the spec's defaults."""
    return {**spec.tunables, **{k: row[k] for k in CONFIG_KEYS}}



GEMM_BF16 = KernelSpec("gemm_bf16", "npu", "GEMM, bf16 in, FP32 accumulate, bf16 out",
                       ("M", "K", "N"), operands(BF16), flops,
                       {**TUNABLES, "method": "fused-cast"})
GEMM_FP32 = KernelSpec("gemm_fp32", "npu", "GEMM, bf16 in, FP32 accumulate and FP32 out",
                       ("M", "K", "N"), operands(FP32), flops,
                       {**TUNABLES, "method": "external"})

# --- checker rule -------------------------------------------------------------------------

RULES = (
    "method: fused-cast, drain or direct (bf16 out); external or direct (FP32 out)",
    "datapath: bfp16 (8x8x8 blocks) or bf16 (native 4x8x8)",
    "herd [herd_m, herd_n]: logical; herd_m <= 8 (one memory tile each), herd_n <= 4",
    "divisible (upstream's asserts): K by tile_k_l2, tile_k_l2 by tile_k_l1; tile_m and "
    "tile_n by 16, tile_k_l1 by 8 (the matmul microkernel's static asserts)",
    "corrupt: N not divisible by tile_n x herd_n writes a silently wrong C",
    "corrupt: an odd L1 K loop of 5 or more steps (tile_k_l2 / tile_k_l1) returned garbage "
    "at every measured shape",
    "L1: the FP32 accumulator and the A and B tiles twice; drain adds its bf16 drain buffer "
    "(72 KiB at tile_m 64: drain caps at 32); direct accumulates in bf16",
    "L2 per memory tile: an A panel and a B panel, both twice, and one herd row's C tiles",
    "memory-tile channels: A, B and the herd row's herd_n C streams in",
    "strides: a DMA stride (B's K step, tile_k_l2 x N) within the limit, in 4-byte words",
    "repeat: the K loop (K / tile_k_l2) within the DMA repeat limit",
    "known failure: herd_n 1 with tile_n 128 at N not 512-aligned fails at run time; and "
    "every configuration upstream measured failing (kernels/data/gemm_failures.json)",
    "padding (warning): M to tile_m x herd_m (the host pads the rows)",
)


def _known_failures() -> dict[tuple[Any, ...], dict[str, Any]]:
    """The measured failures of kernels/data/gemm_failures.json, by configuration."""
    return {_failure_key(r["family"], r, r): r for r in load("gemm_failures")["failures"]}


def _failure_key(family: str, s: Shape, c: dict[str, Any]) -> tuple[Any, ...]:
    return (family, s["M"], s["K"], s["N"], c.get("method"),
            *(int(c[k]) for k in ("tile_m", "tile_k_l2", "tile_k_l1", "tile_n", "herd_m",
                                  "herd_n")))


KNOWN_FAILURES = _known_failures()


def l1_bytes(method: str, out_bytes: int, tm: int, tk1: int, tn: int) -> int:
    """A compute tile's L1: the C accumulator (FP32; bf16 for the direct method's bf16 out),
    the A and B tiles ping-ponged, and for drain the bf16 buffer the accumulator is cast
    into, which the compiler keeps beside the others (upstream: 32 + 24 + 16 = 72 KiB at
    tile_m 64, tile_n 128)."""
    acc = BF16 if method == "direct" and out_bytes == BF16 else FP32
    need = tm * tn * acc + 2 * (tm * tk1 + tk1 * tn) * BF16
    if method == "drain":
        need += tm * tn * BF16
    return need


def l2_bytes(method: str, out_bytes: int, tm: int, tk2: int, tn: int, hn: int) -> int:
    """The busiest memory tile's L2. The compiler splits the segment's L2 buffers over the
    memory tiles by herd row and column: one holds an A panel [tile_m, tile_k_l2] and a B
    panel [tile_k_l2, tile_n], both double-buffered, and the C tiles of one herd row
    [herd_n, tile_m, tile_n] (FP32 for fused-cast, whose GEMM writes an FP32 scratch). The
    measured 2048^3 at 64/512/32/128 fills exactly 512 KiB."""
    c_bytes = FP32 if method == "fused-cast" else out_bytes
    return 2 * tm * tk2 * BF16 + 2 * tk2 * tn * BF16 + hn * tm * tn * c_bytes


def dma_words(elements: int) -> int:
    """A bf16 stride in the DMA's 4-byte words (upstream's Gemma3-4B sweep: tile_k_l2 x N =
    128 x 10240 compiles, 256 x 10240 does not: the limit counts words, not elements)."""
    return elements * BF16 // 4


def stride_words(f: list[Finding], name: str, words: int, hw: Hardware) -> None:
    if not 1 <= words <= hw.max_stride:
        f.append(Finding("stride", "error", f"{name} needs a DMA stride of {words} 4-byte "
                         f"words, outside [1, {hw.max_stride}] (aie.dma_bd stride check); use "
                         "a smaller tile_k_l2, or store B in column blocks (b_parts)", words,
                         hw.max_stride))


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
          usage: dict[str, int]) -> list[Finding]:
    out_bytes = spec.output(s).elem_bytes
    M, K, N = s["M"], s["K"], s["N"]
    tm, tk2, tk1, tn, hm, hn = (int(c[k]) for k in
                                ("tile_m", "tile_k_l2", "tile_k_l1", "tile_n", "herd_m", "herd_n"))
    method = method_name(spec.name, s, c)
    parts = int(c.get("b_parts", 1))
    f: list[Finding] = []
    if method not in METHODS[spec.name]:
        f.append(Finding("method", "error", f"method={method!r}: {spec.name} runs "
                         f"{' or '.join(METHODS[spec.name])}", 0, 0))
    if c.get("datapath", "bfp16") not in ("bfp16", "bf16"):
        f.append(Finding("datapath", "error", f"datapath={c['datapath']!r}: the AIE2P matmul "
                         "runs bfp16 (8x8x8 blocks) or bf16 (native 4x8x8)", 0, 0))
    # The herd is logical: herd_m rows of tiles take their A panels from one memory tile
    # each (the array has one per column), herd_n columns share the B panels.
    if hm > hw.cols or hn > hw.rows or hm < 1 or hn < 1:
        f.append(Finding("herd", "error", f"herd [herd_m {hm}, herd_n {hn}] does not fit "
                         f"{hw.name}: herd_m takes one memory tile per row (at most "
                         f"{hw.cols}), herd_n at most {hw.rows}", hm * hn, hw.tiles))
    for name, tile, step in (("tile_m", tm, 2 * MMUL), ("tile_n", tn, 2 * MMUL),
                             ("tile_k_l1", tk1, MMUL)):
        if tile <= 0 or tile % step:
            f.append(Finding("divisible", "error", f"{name}={tile} is not a multiple of "
                             f"{step} (the matmul microkernel asserts it for its "
                             f"{MMUL}x{MMUL}x{MMUL} MMA)", tile, step))
    if tk1 <= 0 or tk2 % tk1:
        f.append(Finding("divisible", "error", f"tile_k_l2={tk2} is not a multiple of "
                         f"tile_k_l1={tk1}", tk2, tk1))
    elif (tk2 // tk1) % 2 and tk2 // tk1 >= 5:
        f.append(Finding("k_tiling", "corrupt", f"tile_k_l2 / tile_k_l1 = {tk2}/{tk1} = "
                         f"{tk2 // tk1} L1 K steps: every odd count of 5 or more measured on "
                         "NPU2 returned garbage without an error (the registry's SmolVLA "
                         "sweeps); use an even count or 3", tk2 // tk1, 4))
    if tk2 <= 0 or K % tk2:
        f.append(Finding("divisible", "error", f"K={K} is not divisible by tile_k_l2={tk2} "
                         "(the builder asserts it); pick a tile_k_l2 that divides K", K, tk2))
    span_n = tn * hn
    if parts < 1 or N % parts or (N // parts) % span_n:
        if parts > 1:
            f.append(Finding("divisible", "error", f"b_parts={parts} must split N={N} into "
                             f"blocks that tile_n x herd_n = {span_n} divides", N, parts))
    if N % span_n:
        options = sorted({t * h for t in range(16, 257, 16) for h in range(1, hw.rows + 1)
                          if N % (t * h) == 0})[-3:]
        f.append(Finding("divisible", "corrupt", f"N={N} is not divisible by tile_n x herd_n = "
                         f"{tn}x{hn} = {span_n}: the hardware writes a silently corrupt output "
                         f"(cosine ~0.02); pick tile_n x herd_n dividing N (e.g. "
                         f"{', '.join(map(str, options)) or 'pad N'})", N, span_n))
    l1 = l1_bytes(method, out_bytes, tm, tk1, tn)
    rules.l1(f, l1, hw, f"{method}: C {tm}x{tn}, A {tm}x{tk1} and B {tk1}x{tn} twice"
             + (", the bf16 drain buffer" if method == "drain" else ""),
             "use a smaller tile_m or tile_n" + (" (drain: tile_m 32)" if method == "drain"
                                                 else ""), stack=STACK_BYTES)
    l2 = l2_bytes(method, out_bytes, tm, tk2, tn, hn)
    usage.update(tiles=hm * hn, l1_bytes=l1, l2_bytes=l2)
    if l2 > hw.l2_bytes:
        f.append(Finding("l2", "error", f"L2 capacity exceeded: {l2 / 1024:.0f} KiB in one "
                         f"memory tile (A {tm}x{tk2} and B {tk2}x{tn} double-buffered, C "
                         f"{hn}x{tm}x{tn}) > {hw.l2_bytes // 1024} KiB; use a smaller "
                         "tile_k_l2, tile_m or tile_n", l2, hw.l2_bytes))
    # A memory tile takes A and B from the shim and the C tiles of its herd row, one
    # stream per tile; it sends A along the row, B down the column and C to the shim.
    mem_in = 2 + hn
    # what the ELF checks count per memory tile: its channels, two descriptors each (ping-pong)
    usage.update(memtile_in=mem_in, memtile_out=3, memtile_bds=2 * (mem_in + 3))
    if mem_in > hw.memory_dma.inputs:
        f.append(Finding("channels", "error", f"a memory tile would need {mem_in} input DMA "
                         f"channels (A, B and {hn} C tiles) for herd_n={hn}, it has "
                         f"{hw.memory_dma.inputs} ('out of channels'); use herd_n <= "
                         f"{hw.memory_dma.inputs - 2}", mem_in, hw.memory_dma.inputs))
    if hn == 1 and tn == 128 and N % 512:
        f.append(Finding("known_failure", "error", f"herd_n=1 with tile_n=128 at N={N} (not "
                         "512-aligned) fails at run time on NPU2 (measured: the cast paths "
                         "assume the full array); use herd_n 4 and a smaller tile_n", N, 512))
    rules.pad(f, "M", M, tm * hm)
    rules.repeat(f, "the K loop", K // max(tk2, 1), hw, "use a larger tile_k_l2")
    for name, elems in ((f"B's K step (tile_k_l2 x N{'/b_parts' if parts > 1 else ''})",
                         tk2 * N // max(parts, 1)), ("A's row block (K x tile_m)", K * tm)):
        stride_words(f, name, dma_words(elems), hw)
    rules.bds(f, streams=3, tails=int(M % (tm * hm) != 0), hw=hw, usage=usage)
    # A configuration upstream saw fail that no rule above explains: its measurement.
    known = KNOWN_FAILURES.get(_failure_key(spec.name, s, {**c, "method": method}))
    if known is not None and not any(x.kind == known["explained_by"] for x in f):
        f.append(Finding("known_failure", "corrupt" if known["outcome"] == "corrupt"
                         else "error", f"measured on NPU2: {known['outcome']} "
                         f"({known['note']}; {known['page']})", 0, 0))
    return f


# --- search space -----------------------------------------------------------------------------

#: What the search tries per dim (upstream's sweeps: tile_m {32, 64, 128}, tile_k_l2 64 to
#: 512, tile_n to 256; the SmolVLA shapes' 16, 48, 80, 96, 240).
TILE_M = (64, 32, 16, 48, 128)
TILE_K_L1 = (32, 64, 48, 16)
TILE_K_L2_MAX = 1024


def candidates(spec: KernelSpec, s: Shape, hw: Hardware) -> Iterator[dict[str, Any]]:
    """The configurations worth checking at a shape: each method; (tile_m, herd_m) that
    divide M (padding M only when none does); every (tile_n, herd_n) dividing N; tile_k_l2
    dividing K and tile_k_l1 dividing it. Upstream's default comes first."""
    M, K, N = s["M"], s["K"], s["N"]
    # M: the rows padded to the microkernel's 16 (a sequence of 50 runs as 64, as upstream
    # pads SmolVLA's), then the two largest herds per tile_m that divide them.
    rows = -(-M // (2 * MMUL)) * 2 * MMUL
    ms = [pair for tm in TILE_M
          for pair in [(tm, hm) for hm in range(hw.cols, 0, -1) if rows % (tm * hm) == 0][:2]]
    # K: tile_k_l2 dividing K; tile_k_l1 32, as upstream's every sweep fixes it, unless no
    # tile_k_l2 takes it (K = 720 or 1440 need 48: the registry's SmolVLA rows).
    k2s = [k2 for k2 in range(min(K, TILE_K_L2_MAX), 7, -8) if K % k2 == 0]
    k1s = TILE_K_L1[:1] if any(k2 % TILE_K_L1[0] == 0 for k2 in k2s) else TILE_K_L1[1:]
    ks = [(k2, k1) for k2 in k2s for k1 in k1s
          if k2 % k1 == 0 and not ((k2 // k1) % 2 and k2 // k1 >= 5)]
    default = {k: spec.tunables[k] for k in ("tile_m", "tile_k_l2", "tile_k_l1", "tile_n",
                                             "herd_m", "herd_n")}
    yield {**default, "method": spec.tunables["method"], "b_parts": 1}
    # B in column blocks only when no whole-N stride fits the DMA (the fewest that do).
    fits = [p for p in (1, 2, 4, 8, 16, 32, 64) if N % p == 0
            and any(dma_words(k2 * N // p) <= hw.max_stride for k2, _ in ks)]
    parts = fits[0] if fits else 1
    ns = _n_tiles(N // parts, hw)
    if not (fits and ns):
        # An N with few factors of 2 (Gemma 3's vocabulary, 262208 = 64 x 4097, as its
        # prefill LM head over every position): the blocks that fit the stride leave no
        # tile_n x herd_n dividing them. Search the blocks and every tile_k_l1 together.
        wide = [(k2, k1) for k2 in k2s for k1 in TILE_K_L1
                if k2 % k1 == 0 and not ((k2 // k1) % 2 and k2 // k1 >= 5)]
        split = _column_blocks(N, wide, hw)
        if split is not None:
            parts, ns = split
            ks = wide
    for method in METHODS[spec.name]:
        for tm, hm in ms:
            for tn, hn in ns:
                for k2, k1 in ks:
                    yield {"method": method, "tile_m": tm, "tile_k_l2": k2, "tile_k_l1": k1,
                           "tile_n": tn, "herd_m": hm, "herd_n": hn, "b_parts": parts}

def _n_tiles(n: int, hw: Hardware) -> list[tuple[int, int]]:
    """(tile_n, herd_n) for one block of B n columns wide: every tile_n (multiples of 16 to
    256), with the widest herd_n that divides."""
    return [pair for tn in (128, *range(256, 15, -16))
            for pair in [(tn, hn) for hn in range(hw.rows, 0, -1) if n % (tn * hn) == 0][:1]]


def _column_blocks(N: int, ks: list[tuple[int, int]], hw: Hardware
                   ) -> tuple[int, list[tuple[int, int]]] | None:
    """The fewest column blocks of B (b_parts) whose K step some (tile_k_l2, tile_k_l1) in
    `ks` keeps within the DMA stride and that some tile_n x herd_n divides, with those
    tilings; None when no count up to 64 does."""
    for p in (1, 2, 4, 8, 16, 32, 64):
        ns = _n_tiles(N // p, hw) if N % p == 0 else []
        if ns and any(dma_words(k2 * N // p) <= hw.max_stride for k2, _ in ks):
            return p, ns
    return None


# --- cost: the weight and activation DMA against the tiles' matmuls, plus the cast ---------
#
# Upstream's GEMM pages measure it (every shape, method, tile and herd, and the tile sweeps
# in their notes): a launch pays a floor (64x32x720: "115.9 us for 3.3 MFLOP is ~100%
# per-launch floor"); A panels are re-read from DDR for every N block and B panels for
# every M block, each DMA run (an A panel row of tile_k_l2, a B panel row of herd_n x
# tile_n) paying a burst overhead -- which is why tile_n is the dominant lever and why the
# 64x12288x960 connector is weight-DMA-bound; each tile multiplies its tile_m x K x tile_n
# block per launch iteration and syncs once per L2 K step (small tile_k_l2 costs); direct
# codegen multiplies slower than the hand-tuned mm.o; fused-cast writes an FP32 C and
# runs a separate memory-bound cast launch.

# The native bf16 MMA does 4x8x8 MACs per instruction where the BFP16 one does 8x8x8 (aie_api,
# AIE2P): half the compute rate. Inferred from the instruction shapes, never measured.
BF16_DATAPATH_RATE = 0.5

#: The fitted coefficients and where their fit starts: a ~100 us dispatch floor and ~30-58 GB/s DDR
#: (docs/hardware-facts.md#dispatch-and-host-costs), its best GEMM (9.8 TFLOP/s) over the 32 tiles,
#: upstream's "~1.5-1.7x" for direct codegen; a burst, a K step and the cast launch as orders of
#: magnitude.
COEFFICIENTS = (("gemm_floor_s", 100e-6), ("ddr_bw", 40e9), ("dma_burst_bytes", 256.0),
                ("tile_flops", 3e11), ("k_step_s", 1e-6), ("direct_slowdown", 1.6),
                ("cast_floor_s", 100e-6), ("cast_bw", 40e9))


def work(spec: KernelSpec, s: Shape, c: dict[str, Any], p: PerfParams) -> Work:
    """memory: A re-read per N block and B per M block, each DMA run paying a burst
    overhead, and C written, at the DDR bandwidth; compute: each tile's tile_m x K x tile_n
    block per launch iteration at the tile's matmul rate (slower with direct codegen, half
    with the bf16 datapath) and a sync per L2 K step; fused-cast adds its separate cast
    launch (FP32 C read, bf16 written)"""
    M, K, N = s["M"], s["K"], s["N"]
    tm, tk2, tn, hm, hn = (int(c[k]) for k in ("tile_m", "tile_k_l2", "tile_n", "herd_m",
                                                "herd_n"))
    method = method_name(spec.name, s, c)
    if method not in METHODS[spec.name]:
        raise ValueError(f"{spec.name}: method={method!r}; known: "
                         f"{', '.join(METHODS[spec.name])}")
    rows, cols = tm * hm, tn * hn
    Mp, Kp, Np = _up(M, rows), _up(K, tk2), _up(N, cols)
    m_blocks, n_blocks = Mp // rows, Np // cols
    c_bytes = FP32 if method == "fused-cast" else spec.output(s).elem_bytes
    burst = p.dma_burst_bytes
    a = Mp * Kp * BF16 * n_blocks * (1 + burst / (tk2 * BF16))
    b = Kp * Np * BF16 * m_blocks * (1 + burst / (cols * BF16))
    memory = (a + b + Mp * Np * c_bytes) / p.ddr_bw
    compute = m_blocks * n_blocks * (2.0 * tm * Kp * tn / p.tile_flops + Kp / tk2 * p.k_step_s)
    if method == "direct":
        compute *= p.direct_slowdown
    if c.get("datapath", "bfp16") == "bf16":
        compute /= BF16_DATAPATH_RATE
    cast = p.cast_floor_s + M * N * (FP32 + BF16) / p.cast_bw if method == "fused-cast" else 0.0
    return Work(compute, memory, cast)


def _up(n: int, step: int) -> int:
    return math.ceil(n / step) * step


def timed_launches(name: str) -> Callable[[], list[TimedLaunch]]:
    """Every row of the family's page with a throughput: seconds = 2 M K N / GFLOP/s (a
    fused-cast figure includes its cast launch)."""
    def launches() -> list[TimedLaunch]:
        out = []
        for r in table(name, "shapes"):
            if r["gflops"] is None:
                continue
            s = {"M": r["M"], "K": r["K"], "N": r["N"]}
            out.append(timed(name, s, {k: r[k] for k in CONFIG_KEYS},
                             flops(s) / scaled(r["gflops"], TO_BASE["GFLOP/s"]),
                             f"{load(name)['source']['path']} (shapes)"))
        return out
    return launches


def cost(name: str) -> Cost:
    return Cost(work, lambda p: p.gemm_floor_s, COEFFICIENTS, timed_launches(name))



# --- measured -----------------------------------------------------------------------------

SOURCE_BF16 = Source("details/GEMM_bf16_in_bf16_out.json", registry_json(
    "GFLOP/s and mean_rel_L1 of every measured shape, method (fused-cast, drain: FP32 "
    "accumulate and one cast; direct: per-L2-tile bf16) and tile; herd [herd_m, herd_n]"))
SOURCE_FP32 = Source("details/GEMM_bf16_in_fp32_out.json", registry_json(
    "GFLOP/s and mean_rel_L1 of every measured shape, method (external mm.o, direct "
    "codegen) and tile; herd [herd_m, herd_n]"))


def measured_best(name: str) -> Callable[[Shape], dict[str, Any] | None]:
    """The registry row of upstream's fastest high-precision method at a shape, if measured."""
    best: dict[tuple[int, int, int], dict[str, Any]] = {}
    for row in table(name, "shapes"):
        if row["best"] and row["tier"] == "high" and row["gflops"] is not None:
            best[row["M"], row["K"], row["N"]] = row
    return lambda s: best.get((s["M"], s["K"], s["N"]))


def first_launch_only(s: Shape) -> str | None:
    """Observed failing at K = 4864, 8960 and 11008 (the Down projections of Qwen2.5-0.5B,
    1.5B and 3B); GEMMs at K = 896 run correctly as launches 1-4 of Qwen2.5-0.5B's ELFs, so
    the rule starts above 1024; where between 896 and 4864 it starts is not known
    (docs/hardware-facts.md#known-failure-symptoms, from upstream's Qwen2.5 prefill
    builders)."""
    if s["K"] > 1024 and s["K"] % 512:
        return (f"with K={s['K']} (above 1024, not a multiple of 512) gives all-NaN unless it "
                "is the first launch of its ELF (measured upstream); start a new ELF with it")
    return None


def preferred(spec: KernelSpec, s: Shape) -> dict[str, Any]:
    """Upstream's default at a shape: its recommended tiles and full 8 x 4 herd, the method
    `auto` picks, and drain's tile_m 32."""
    method = method_name(spec.name, s, {"method": "auto"})
    return {**spec.tunables, "method": method, **({"tile_m": 32} if method == "drain" else {})}


def _family(spec: KernelSpec, out_dtype: torch.dtype, source: Source) -> KernelFamily:
    return KernelFamily(
        spec, rules=RULES, check=check, candidates=candidates,
        numerics=gemm_numerics(spec.name, out_dtype),
        cost=cost(spec.name), program=PROGRAM, data=spec.name, source=source,
        transposed_weight="b", exact_tiles=True, measured=measured_best(spec.name),
        measured_config=True,
        low_precision=LOW_PRECISION[spec.name],
        preferred=lambda s: preferred(spec, s), first_launch_only=first_launch_only,
        to_device=to_device,
        numerics_changes=(((("gemm_datapath", "bf16"),),
                           "the GEMMs on the native bf16 datapath, without BFP16 blocks"),))


FAMILIES = (_family(GEMM_BF16, torch.bfloat16, SOURCE_BF16),
            _family(GEMM_FP32, torch.float32, SOURCE_FP32))
