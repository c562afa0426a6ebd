"""GEMM, bf16 in with FP32 accumulation: C = A @ B with A the activations [M, K] and B a
weight read as [K, N], written bf16 (one cast of the FP32 accumulator) or FP32 (the LM head).
mlir-air programming_examples/matrix_multiplication (bf16_in_fp32_out, bf16_in_bf16_out):
A and B panels staged in the memory tiles, C accumulated in L1, the BFP16 MMA; measured by
the registry's GEMM pages, whose JSON this module's data files are ingested from."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from ..air_programs.air_parts import (
    Buffer,
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
    memref,
    open_herd,
    stored_length,
)
from ..definition import rules
from ..definition.family import (
    BF16,
    FP32,
    AirProgram,
    Cost,
    EmulatedKernel,
    KernelFamily,
    KernelSpec,
    Numerics,
    Operand,
    Shape,
    Tensors,
    TimedLaunch,
    Work,
    timed,
)
from ..definition.hardware import Hardware
from ..definition.rules import Finding
from ..emulation.numerics import (
    Rounding,
    fp32_reference,
    gemm_bf16_native,
    gemm_bfp16,
    quantize_gemm_b,
)
from ..emulation.tensors import bound_layout, to_head_first
from ..measured.measurements import TO_BASE, Source, load, registry_json, scaled, table

if TYPE_CHECKING:
    from ..performance.model import PerfParams
    from ..plans.plan import Launch

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
#: The GEMM core's stack (the stack_size its programs ask aircc for), beside its L1 buffers.
STACK_BYTES = 2048

CONFIG_KEYS = ("method", "tile_m", "tile_k_l2", "tile_k_l1", "tile_n", "herd_m", "herd_n")


def row_config(spec: KernelSpec, row: Mapping[str, Any]) -> dict[str, Any]:
    """The full configuration a registry row ran: its keys over the spec's defaults."""
    return {**spec.tunables, **{k: row[k] for k in CONFIG_KEYS}}


#: The matmul microkernel (mm_aie2p.cc) asserts m % (2 r) == 0, k % s == 0 and n % (2 t) == 0
#: for its r x s x t = 8 x 8 x 8 MMA: tile_m and tile_n multiples of 16, tile_k_l1 of 8.
MMUL = 8

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
    # N (of one block of B): every tile_n (multiples of 16 to 256), the widest herd_n dividing.
    ns = [pair for tn in (128, *range(256, 15, -16))
          for pair in [(tn, hn) for hn in range(hw.rows, 0, -1)
                       if (N // parts) % (tn * hn) == 0][:1]]
    for method in METHODS[spec.name]:
        for tm, hm in ms:
            for tn, hn in ns:
                for k2, k1 in ks:
                    yield {"method": method, "tile_m": tm, "tile_k_l2": k2, "tile_k_l1": k1,
                           "tile_n": tn, "herd_m": hm, "herd_n": hn, "b_parts": parts}

# --- numerics: both operands through the BFP16 MMA, FP32 accumulation (kernels.emulation.numerics)
# ---

# Static weights converted to the block format once, as a deployment writes them once.
# Keyed by the tensor's storage and version, and holding the tensor so the key stays unique.
_STATIC_B: dict[tuple[int, int, tuple[int, ...]], tuple[torch.Tensor, torch.Tensor]] = {}
_STATIC_B_MAX = 1024


def _static_b(b: torch.Tensor) -> torch.Tensor:
    key = (b.data_ptr(), b._version, tuple(b.shape))
    hit = _STATIC_B.get(key)
    if hit is None:
        if len(_STATIC_B) >= _STATIC_B_MAX:
            _STATIC_B.clear()
        hit = _STATIC_B[key] = (b, quantize_gemm_b(b))
    return hit[1]


# How each of mlir-air's GEMM methods carries the MMA's FP32 partial sums to C: the config key
# `method` (registry pages GEMM_bf16_in_bf16_out.md and GEMM_bf16_in_fp32_out.md; the code
# behind each: kernels.emulation.numerics [S8]).


@dataclass(frozen=True)
class Method:
    """`bf16_partials`: the L1 C tile is bf16, so the accumulator is rounded to bf16 once per
    L1 K tile; `cast`: the rounding of the one cast to a bf16 output."""

    bf16_partials: bool = False
    cast: Rounding = "nearest_even"


METHODS: dict[str, dict[str, Method]] = {
    "gemm_bf16": {
        # FP32 in the L1 C tile across all of K (as drain, below), written FP32 and cast by a second
        # launch whose vectorized truncf sets no rounding mode: a core then rounds toward -inf
        # (numerics [S7]). The registry ran both methods at 8 shapes: fused-cast 9.7e-3 to 9.9e-3 at
        # every one, drain 9.3e-3 to 9.5e-3; emulated at those shapes, a floor cast gives 9.70e-3 to
        # 9.89e-3 and a nearest-even one 9.27e-3 to 9.48e-3 (at 512^3 the gap is 4.4e-4 and the
        # standard deviation over 6 seeds 2e-5). Toward zero gives the same mean_rel_L1 as floor:
        # these figures cannot tell the two apart.
        "fused-cast": Method(cast="floor"),
        # FP32 in the L1 C tile across all of K; the drain herd casts it once with mm.o's
        # f32_to_bf16 (conv_even).
        "drain": Method(),
        # Direct codegen keeps the L1 C tile in bf16. Its transform hoists C's extf/truncf pair
        # out of the innermost loop only (the MMAs of one L1 K tile), so C is rounded once per
        # tile_k_l1 of K, not once per L2 tile as the page's prose says; the page's own direct
        # rows follow K, not tile_k_l2 (K = 2048 at tile_k_l2 128, 256 and 512: 1.28e-2 to
        # 1.3e-2; K = 3584 at tile_k_l2 32, 112 L2 tiles: 1.48e-2, below K = 4096 at 32 L2
        # tiles: 1.54e-2). Rounded per L1 tile, the emulation lands within 3.1% of each of the
        # 16 direct rows; per L2 tile, at 0.59x to 1.0x of them (benchmarks/
        # gemm_method_numerics.py). The rounding is to nearest: floor would give 3e-2 and more.
        "direct": Method(bf16_partials=True),
    },
    # FP32 out: the L1 C tile is the output, FP32 across all of K, no cast; external (mm.o) and
    # direct codegen are bit-identical on NPU2 (the fp32-out page).
    "gemm_fp32": {"external": Method(), "direct": Method()},
}
#: The methods of the low-precision tier (bf16 partial sums); the others accumulate in FP32
#: across all of K and cast once.
LOW_PRECISION = {name: tuple(k for k, m in methods.items() if m.bf16_partials)
                 for name, methods in METHODS.items()}


#: upstream's `--method auto` for bf16 out: fused-cast from M K N >= 4e9, else drain
AUTO_FUSED_CAST_MKN = 4e9


def method_name(kernel: str, s: Shape, c: Mapping[str, Any]) -> str:
    """The method configuration `c` runs: the first of METHODS when it names none, and for
    upstream's `auto`, its rule (fused-cast from M x K x N >= 4e9, else drain)."""
    name = str(c.get("method") or next(iter(METHODS[kernel])))
    if name == "auto":
        name = next(iter(METHODS[kernel])) if "drain" not in METHODS[kernel] else \
            "fused-cast" if s["M"] * s["K"] * s["N"] >= AUTO_FUSED_CAST_MKN else "drain"
    return name


def method(kernel: str, s: Shape, c: Mapping[str, Any]) -> Method:
    """The numerics of the method configuration `c` runs."""
    methods, name = METHODS[kernel], method_name(kernel, s, c)
    if name not in methods:
        raise ValueError(f"{kernel}: method must be one of {', '.join(methods)}, got "
                         f"{name!r}")
    return methods[name]


def emulate(kernel: str, out_dtype: torch.dtype) -> EmulatedKernel:
    def run(s: Shape, c: dict, x: Tensors, out: Tensors | None = None) -> Tensors:
        head_first = bound_layout(c, "c", "seq-first") == "head-first"
        span_n = int(c["tile_n"]) * int(c["herd_n"])
        m = method(kernel, s, c)
        exact = bool(c.get("exact_tiles", True))
        if c.get("datapath", "bfp16") == "bf16":
            cm = gemm_bf16_native(x["a"], x["b"], tile_k=int(c["tile_k_l1"]),
                                  out_dtype=out_dtype, exact_tiles=exact,
                                  bf16_partials=m.bf16_partials, cast=m.cast)
        else:
            b_q = _static_b(x["b"]) if c.get("static_b") else None
            dest = None if out is None else out["c"]
            if dest is not None and (head_first or not dest.is_contiguous()
                                     or dest.dtype != out_dtype or s["N"] % span_n):
                dest = None
            cm = gemm_bfp16(x["a"], x["b"], tile_k=int(c["tile_k_l1"]), out_dtype=out_dtype,
                            exact_tiles=exact, bf16_partials=m.bf16_partials, cast=m.cast,
                            b_quantized=b_q,
                            out=None if dest is None else dest.view(*x["a"].shape[:-1], -1))
        if s["N"] % span_n:
            cm = misplaced_columns(cm, span_n)
        # A head-first C is written by the output DMA as [N / head_dim, M, head_dim].
        return {"c": to_head_first(cm, int(c["head_dim"])) if head_first else cm}
    return run


def misplaced_columns(c: torch.Tensor, span_n: int) -> torch.Tensor:
    """What a GEMM whose N is not a multiple of tile_n x herd_n writes. NPU_FACTS: the output
    is silently corrupt (cosine ~0.02). The mechanism is our reading, not a measurement: the
    output DMA walks C as if its rows were N rounded up to the tile span, so row r lands
    r x (padding) elements early and every row after the first is shifted."""
    rows, n = c.reshape(-1, c.shape[-1]).shape
    padded = -(-n // span_n) * span_n
    wide = torch.zeros(rows, padded, dtype=c.dtype)
    wide[:, :n] = c.reshape(rows, n)
    return wide.reshape(-1)[:rows * n].reshape(c.shape).contiguous()


def column_blocks(b: torch.Tensor, parts: int) -> torch.Tensor:
    """B [K, N] as the NPU reads it with `b_parts`: `parts` column blocks [parts, K, N/parts]
    one after the other (the emulator computes on B as it is)."""
    k, n = b.shape
    return b.reshape(k, parts, n // parts).permute(1, 0, 2).contiguous()


def to_device(c: dict[str, Any], operand: str, t: torch.Tensor) -> torch.Tensor:
    """B in `b_parts` column blocks for the NPU; every other operand as bound."""
    parts = int(c.get("b_parts", 1))
    return column_blocks(t, parts) if operand == "b" and parts > 1 else t


def reference(s: Shape, c: dict[str, Any], x: Tensors) -> Tensors:
    return {"c": fp32_reference(x["a"], x["b"])}


def unit_scale(t: torch.Tensor, s: Shape) -> torch.Tensor:
    """Weights randn / sqrt(K): with activations randn, outputs of unit scale (mlir-air's GEMM
    harness scales both operands so, and its outputs have std 1/sqrt(K))."""
    return t / math.sqrt(s["K"])


# Phase-1 atol by precision tier, from mlir-air's tier-aware table (GEMM_bf16_in_bf16_out.md:
# rtol 1.6e-2 for both; atol 1.5e-3 for the FP32-accumulate methods, 4e-3 for direct), set
# there from the worst |out - ref| measured at Down, 2048x8192x2048, with A and B both
# randn/sqrt(K): outputs of std 1/sqrt(K). Our seeded inputs scale B alone (`unit_scale`), so
# every output is sqrt(K) times upstream's, std 1, and the same check at that shape reads
# atol x sqrt(8192): 0.136 and 0.362. We keep those in units of the output's std at every
# shape rather than rescale upstream's atol by each shape's sqrt(K): held fixed in absolute
# terms, it tightens against the outputs as K shrinks, and upstream's harness then fails
# correct high-precision GEMMs on near-zero elements at K <= 1024 (its Qwen3 Gate/Up and
# SmolVLA notes).
# The emulator's worst excess over rtol alone (unit-scale outputs, computed on the CPU): the
# FP32-accumulate methods 0.035 to 0.047 at every shape tried, K 512 to 16384; direct 0.04 to
# 0.09 at K <= 2048, 0.12 to 0.23 at K = 8192 (more elements, a larger worst), 0.19 to 0.24
# at K = 16384. So the tight tier rejects the direct method where it has many K tiles, which
# is upstream's reason for the split (tests/kernels/test_gemm_methods.py), and a
# configuration of the direct method is checked with its own tier.
_UPSTREAM_ATOL_K = 8192
ATOL = 1.5e-3 * math.sqrt(_UPSTREAM_ATOL_K)
ATOL_BF16_PARTIALS = 4e-3 * math.sqrt(_UPSTREAM_ATOL_K)


def gemm_numerics(kernel: str, out_dtype: torch.dtype) -> Numerics:
    """The GEMM's numerics for one output type: each method emulated, and the looser tier for
    the methods that round their partial sums to bf16."""
    loose = {name: ATOL_BF16_PARTIALS for name in LOW_PRECISION[kernel]}
    return Numerics(emulate(kernel, out_dtype), reference, ATOL, weights=unit_scale,
                    atol_by=("method", loose) if loose else None)

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

#: The fitted coefficients and where their fit starts: NPU_FACTS' ~100 us floor and ~30-58
#: GB/s DDR, its best GEMM (9.8 TFLOP/s) over the 32 tiles, upstream's "~1.5-1.7x" for
#: direct codegen; a burst, a K step and the cast launch as orders of magnitude.
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


# --- the program: launch over C blocks, A and B panels in L2, C in L1 ---------------------

#: mlir-air's matmul micro-kernel (programming_examples/matrix_multiplication/*/mm_aie2p.cc),
#: compiled with Peano once per tile shape: DIM_M, DIM_K, DIM_N are baked in, and SYM_SUFFIX
#: renames its symbols so that objects of two tile shapes never clash in one module
#: (llms/shared/infra/external_kernels.py compile_gemm_mm, which builds mm_m64.o with `_m64`).
MM_SOURCE = "programming_examples/matrix_multiplication/bf16_in_fp32_out/mm_aie2p.cc"


@dataclass(frozen=True)
class MicroKernel:
    """One compiled variant of mm_aie2p.cc: its object, symbols and L1 element types."""

    obj: str
    suffix: str
    acc: str                          # the C tile's element type: f32, or bf16 (direct)
    defines: tuple[tuple[str, str], ...]

    @property
    def matmul(self) -> str:
        return f"op_has_no_registered_library_name{self.suffix}"

    @property
    def zero(self) -> str:
        return f"zero_f32_mn{self.suffix}"

    @property
    def cast(self) -> str:
        return f"f32_to_bf16_mn{self.suffix}"


def micro_kernel(kernel: str, method: str, tm: int, tk1: int, tn: int, hn: int,
                 datapath: str = "bfp16") -> MicroKernel:
    """The object a GEMM launch links. The FP32-accumulating methods share one per tile shape
    and herd_n (`mm_64x32x128_n4.o`, symbols `..._64x32x128_n4`): a core's C slab is declared
    with its strides within the [herd_m, herd_n, ...] accumulator (upstream's
    StridedLayoutAttr), and the first of them is herd_n x tile_m x tile_n, so two herd_n
    need two declarations, hence two symbols. The direct method of a bf16 output keeps its
    C tile in bf16 (rounded once per call, i.e. per L1 K tile), so its object is the same
    source compiled with bf16 C (`combos`); the native bf16 datapath leaves out the BFP16
    emulation."""
    bf16_acc = kernel == "gemm_bf16" and method == "direct"
    tag = ("bf16acc_" if bf16_acc else "") + ("native_" if datapath == "bf16" else "")
    shape = f"{dims(tm, tk1, tn)}_n{hn}"
    defines = [("BIT_WIDTH", "8"), ("DIM_M", str(tm)), ("DIM_K", str(tk1)),
               ("DIM_N", str(tn)), ("DIM_M_DIV_4", str(tm // 4)),
               ("DIM_M_DIV_8", str(tm // 8)), ("DIM_N_DIV_4", str(tn // 4)),
               ("DIM_N_DIV_8", str(tn // 8)), ("SYM_SUFFIX", f"_{tag}{shape}")]
    if datapath != "bf16":
        defines.append(("AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16", "1"))
    if bf16_acc:
        defines.append(("combos(X)", f"X(bfloat16, bf16, bfloat16, bf16, {MMUL}, {MMUL}, "
                                     f"{MMUL})"))
    return MicroKernel(f"mm_{tag}{shape}.o", f"_{tag}{shape}", "bf16" if bf16_acc else "f32",
                       tuple(defines))


def zero_symbol(mk: MicroKernel, tm: int, tn: int) -> str:
    """zero_f32_mn zeroes an FP32 C; a bf16 C has only the shape-named fill of the file's
    `zero_vectorized_c_func` (no SYM_SUFFIX: two bf16-C objects of one tile_m x tile_n in a
    module would share it)."""
    return mk.zero if mk.acc == "f32" else \
        f"linalg_fill_bf16_view1x1x{tn // MMUL}x{tm // MMUL}x{MMUL}x{MMUL}xbf16as2"


def blocked_a(tm: int, tk1: int) -> tuple[int, ...]:
    """A [tile_m, tile_k_l1] as mm_aie2p.cc reads it: [k / s][m / r][r][s] (r = s = 8), after
    upstream's [1, 1] herd dimensions."""
    return (1, 1, tk1 // MMUL, tm // MMUL, MMUL, MMUL)


def blocked_b(tk1: int, tn: int) -> tuple[int, ...]:
    """B [tile_k_l1, tile_n] as the kernel reads it: [n / t][k / s][s][t]."""
    return (1, 1, tn // MMUL, tk1 // MMUL, MMUL, MMUL)


def blocked_c(tm: int, tn: int) -> tuple[int, ...]:
    """C [tile_m, tile_n] as the kernel reads and writes it: [n / t][m / r][r][t]."""
    return (tn // MMUL, tm // MMUL, MMUL, MMUL)


def launch_layout(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    s = launch.shape_dict
    M, K, N = s["M"], s["K"], s["N"]
    tm, tk2, tk1, tn, hm, hn = (int(c[k]) for k in
                                ("tile_m", "tile_k_l2", "tile_k_l1", "tile_n", "herd_m", "herd_n"))
    out = launch.spec.output(s).elem_bytes
    method = method_name(launch.kernel, s, c)
    mk = micro_kernel(launch.kernel, method, tm, tk1, tn, hn, str(c.get("datapath", "bfp16")))
    # mlir-air GEMM: launch over output blocks, A and B panels staged in the memory tiles
    # per K2 step, tiles of K1 moved into L1 in the kernel's blocked layout, C accumulated
    # in L1 (one slab per core of a segment-scope buffer) and drained.
    # fused-cast: the GEMM drains an FP32 C into a device scratch, and a second launch casts
    # it to bf16 (upstream's build_module_gemm_cast; its drain herd has no room for a cast
    # buffer at tile_m 64: 72 KiB)
    fused = method == "fused-cast"
    l2 = (buf("a_l2", (hm, tm, tk2), BF16, "L2", True), buf("b_l2", (tk2, hn * tn), BF16,
          "L2", True), buf("c_l2", (hm, tm, hn * tn), FP32 if fused else out, "L2"))
    l1: tuple[Buffer, ...] = (
        buf("a_l1", blocked_a(tm, tk1), BF16, "L1", True, "compute"),
        buf("b_l1", blocked_b(tk1, tn), BF16, "L1", True, "compute"),
        buf("c_l1", (hm, hn, *blocked_c(tm, tn)), mk.acc, "L1", herd_axes=2))
    tail = (Extern(mk.cast, mk.obj, ("c_l1", "c_out_l1")),) \
        if out == BF16 and mk.acc == "f32" and not fused else ()
    if tail:
        # drain's bf16 buffer stays beside the accumulator and A and B (upstream's 72 KiB at
        # tile_m 64); for the other methods it lives in the drain phase only
        l1 += (buf("c_out_l1", (1, 1, *blocked_c(tm, tn)), BF16, "L1",
                   phase="all" if method == "drain" else "drain"),)
    # M rounds up to whole rounds of tile_m x herd_m rows: A is read and C written past the
    # data, row-major to the end of the buffer (the host pads), head-first to each head's
    # padded length (`kernels.air_programs.air.pad_sequences`, a multiple of the rounds)
    head_first = launch.binding("c").layout == "head-first"
    rows = stored_length(launch, "c", cdiv(M, tm * hm) * tm * hm) if head_first \
        else cdiv(M, tm * hm) * tm * hm
    padded = {"a": rows * K} if rows > M else {}
    if rows > M and not head_first:
        padded["c"] = rows * N
    return LaunchLayout(
        launch.kernel, launch.label, tuple(launch.spec.operands(s)),
        grid=(rows // (tm * hm), cdiv(N, tn * hn)), segment=None, herd=(hm, hn), l2=l2, l1=l1,
        loop=cdiv(K, tk2), inner=tk2 // tk1,
        externs=(Extern(zero_symbol(mk, tm, tn), mk.obj, ("c_l1",)),
                 Extern(mk.matmul, mk.obj, ("a_l1", "b_l1", "c_l1")), *tail),
        kernels=(KernelSource(mk.obj, MM_SOURCE, mk.defines),),
        # upstream's GEMM builds and its LLM ELFs pass [2, 2] (BD-ID recycling)
        flags={"stack_size": STACK_BYTES, "runtime_loop_tiling_sizes": [2, 2]}, padded=padded,
        sequence=(M, tm * hm) if head_first else None,
        scratch=(("c_f32", "c", "f32"),) if fused else (),
        imports=CAST_IMPORTS if fused else ())


def _slab(w: Writer, c_l1: Buffer) -> str:
    """This core's slab of the accumulator: memref.subview at [tx, ty, 0, ...]."""
    rest = len(c_l1.shape) - c_l1.herd_axes
    w(f"c_tile = subview({c_l1.name}, [tx, ty{', 0' * rest}], {list(c_l1.slab)}, "
      f"{[1] * len(c_l1.shape)})")
    return "c_tile"


def segment(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
            names: list[str], head_dim: int | None) -> None:
    """mlir-air GEMM (matrix_multiplication/*/run.py): the C accumulator is allocated in the
    segment, [herd_m, herd_n, ...] in L1, and each core works on its slab; a herd zeroes
    them; per K2 step the segment stages A and B panels in L2 and a herd multiplies them K1
    by K1, its DMAs re-blocking A and B into the kernel's layout; a last herd casts (bf16
    out) and drains C, un-blocked, through L2 to DDR."""
    s = launch.shape_dict
    K, N = s["K"], s["N"]
    a_l2, b_l2, c_l2 = layout.l2
    a_l1, b_l1, c_l1 = layout.l1[:3]
    rest = layout.l1[3:]
    hm, hn = layout.herd           # upstream's sizes=[herd_m, herd_n]: tx splits M, ty N
    tk1, tm = a_l1.shape[2] * MMUL, a_l1.shape[3] * MMUL
    tn, tk2 = b_l1.shape[2] * MMUL, a_l2.shape[2]
    span = hn * tn
    w(f"{c_l1.name} = AllocOp({memref(c_l1.shape, c_l1.dtype, 'L1')}, [], [])  "
      "# a slab per core, kept across the K loop")
    open_herd(w, p, layout, [c_l1.name], "zero the accumulators")
    call(w, layout.externs[0], names={c_l1.name: _slab(w, c_l1)})
    w.dedent()
    w(f"for k2 in range_(0, {layout.loop}):")
    w.indent()
    w(f"dma_memcpy_nd({a_l2.name}, {arg['a']}, src_offsets=[0, at([(lx, {hm * tm * K}), "
      f"(k2, {tk2})])], src_sizes=[{hm * tm}, {tk2}], src_strides=[{K}, 1])")
    # B is stored as b_parts column blocks [b_parts, K, N / b_parts]: launch column ly is
    # block ly // (blocks per part), and a K step moves tile_k_l2 rows of one block.
    parts = int(launch.config_dict.get("b_parts", 1))
    np_ = N // parts
    if parts > 1:
        w(f"part = at([(ly, 1)], divisor={np_ // span})")
        w(f"dma_memcpy_nd({b_l2.name}, {arg['b']}, src_offsets=[0, at([(part, {K * np_ - np_}), "
          f"(k2, {tk2 * np_}), (ly, {span})])], src_sizes=[{tk2}, {span}], "
          f"src_strides=[{np_}, 1])")
    else:
        w(f"dma_memcpy_nd({b_l2.name}, {arg['b']}, src_offsets=[0, at([(k2, {tk2 * N}), "
          f"(ly, {span})])], src_sizes=[{tk2}, {span}], src_strides=[{N}, 1])")
    open_herd(w, p, layout, [a_l2.name, b_l2.name, c_l1.name], f"multiply one K2 step of {tk2}")
    alloc_l1(w, (a_l1, b_l1))
    tile = _slab(w, c_l1)
    w(f"for k1 in range_(0, {layout.inner}):")
    w.indent()
    # A [tile_m, tile_k_l1] at (tx, k1) of the panel [herd_m, tile_m, tile_k_l2], walked in
    # the kernel's order [k / 8][m / 8][8][8]
    w(f"dma_memcpy_nd({a_l1.name}, {a_l2.name}, src_offsets=[tx, 0, 0, 0, at([(k1, {tk1})])], "
      f"src_sizes=[1, {tk1 // MMUL}, {tm // MMUL}, {MMUL}, {MMUL}], "
      f"src_strides=[{tm * tk2}, {MMUL}, {MMUL * tk2}, {tk2}, 1])")
    # B [tile_k_l1, tile_n] at (k1, ty) of the panel [tile_k_l2, herd_n x tile_n], walked
    # [n / 8][k / 8][8][8]
    w(f"dma_memcpy_nd({b_l1.name}, {b_l2.name}, src_offsets=[0, 0, at([(k1, {tk1})]), "
      f"at([(ty, {tn})])], src_sizes=[{tn // MMUL}, {tk1 // MMUL}, {MMUL}, {MMUL}], "
      f"src_strides=[{MMUL}, {MMUL * span}, {span}, 1])")
    call(w, layout.externs[1], names={c_l1.name: tile})
    w("yield_([])")
    w.dedent()
    free(w, (a_l1, b_l1))
    w.dedent()
    w("yield_([])")
    w.dedent()
    open_herd(w, p, layout, [c_l2.name, c_l1.name], "drain C to the memory tile")
    out = _slab(w, c_l1)
    if rest:
        alloc_l1(w, rest)
        call(w, extern(layout, "f32_to_bf16"), names={c_l1.name: out})
        out = rest[0].name
    # the blocked tile [n / 8][m / 8][8][8] read back in row order (m / 8, 8, n / 8, 8) into
    # the core's [tile_m, tile_n] of the herd row's C tiles
    w(f"dma_memcpy_nd({c_l2.name}, {out}, dst_offsets=[tx, 0, at([(ty, {tn})])], "
      f"dst_sizes=[1, {tm}, {tn}], dst_strides=[{tm * span}, {span}, 1], "
      f"src_offsets=[0, 0, 0, 0], src_sizes=[{tm // MMUL}, {MMUL}, {tn // MMUL}, {MMUL}], "
      f"src_strides=[{MMUL * MMUL}, {MMUL}, {tm * MMUL}, 1])")
    free(w, rest)
    w.dedent()
    drain_c(w, launch, arg.get("c_f32", arg["c"]), c_l2.name, hm * tm, span, head_dim)
    w(f"DeallocOp({c_l1.name})")


# --- fused-cast's second launch: the FP32 scratch cast to the bf16 C -----------------------

CAST_IMPORTS = ("from air.dialects.vector import transfer_read, transfer_write",
                "from air.ir import AffineMapAttr, VectorType")
CAST_LANES = 16          # upstream's cast: arith.truncf over 16-wide vectors
CAST_TILE = 2048         # its default tile_n: elements per DMA block


def cast_launch(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
                names: list[str], head_dim: int | None) -> None:
    """Upstream's `_build_cast_module` (matrix_multiplication/bf16_in_bf16_out/run.py): the
    C scratch and C taken as flat buffers (the cast is element-wise, so the scratch holds C
    in C's own layout), a [herd_x, 1] herd of cores each owning a contiguous chunk, moved
    into L1 a block at a time and truncated to bf16 by vectors."""
    if "c_f32" not in arg:
        return
    c = next(o for o in layout.operands if o.name == "c")
    n = max(c.numel, layout.padded.get("c", 0))
    herd_x = next(h for h in (8, 4, 2, 1) if n % (h * CAST_LANES) == 0)
    chunk = n // herd_x
    block = math.gcd(chunk, CAST_TILE)
    s_, c_ = arg["c_f32"], arg["c"]
    w(f"# launch {p}c: fused-cast's cast of {layout.label}'s FP32 C to bf16, "
      f"herd {herd_x}x1")
    w(f"@launch(operands=[{s_}, {c_}], sizes=[1, 1])")
    w(f"def {p}c_launch(lx, ly, lsx, lsy, {s_}, {c_}):")
    w.indent()
    w(f"@segment(name='{p}c_segment', operands=[{s_}, {c_}])")
    w(f"def {p}c_segment({s_}, {c_}):")
    w.indent()
    w(f"@herd(name='{p}c_herd', sizes=[{herd_x}, 1], operands=[{s_}, {c_}])")
    w(f"def {p}c_herd(tx, ty, hsx, hsy, {s_}, {c_}):")
    w.indent()
    w(f"f_l1 = AllocOp(MemRefType.get([{block}], f32, memory_space=L1), [], [])")
    w(f"b_l1 = AllocOp(MemRefType.get([{block}], bf16, memory_space=L1), [], [])")
    w(f"vf, vb = VectorType.get([{CAST_LANES}], f32), VectorType.get([{CAST_LANES}], bf16)")
    w("identity = AffineMapAttr.get(AffineMap.get_identity(1))")
    w("zero = arith.ConstantOp(f32, 0.0)")
    w(f"for i in range_(0, {chunk // block}):")
    w.indent()
    w(f"offset = at([(tx, {chunk}), (i, {block})])")
    w(f"dma_memcpy_nd(f_l1, {s_}, src_offsets=[offset], src_sizes=[{block}], "
      "src_strides=[1])")
    w(f"for j in range_(0, {block // CAST_LANES}):")
    w.indent()
    w(f"lane = at([(j, {CAST_LANES})])")
    w("x = transfer_read(vf, f_l1, [lane], identity, zero, [True])")
    w("transfer_write(None, arith.truncf(vb, x), b_l1, [lane], identity, [True])")
    w("yield_([])")
    w.dedent()
    w(f"dma_memcpy_nd({c_}, b_l1, dst_offsets=[offset], dst_sizes=[{block}], "
      "dst_strides=[1])")
    w("yield_([])")
    w.dedent()
    w("DeallocOp(f_l1)")
    w("DeallocOp(b_l1)")
    w.dedent()
    w.dedent()
    w.dedent()
    w("")


def drain_c(w: Writer, launch: Launch, c: str, c_l2: str, rows: int, span: int,
             head_dim: int | None) -> None:
    """The C block [rows, span] at (lx, ly) from the memory tile to DDR: row-major [M, N],
    or head-first [N / head_dim, M, head_dim] when C is bound head-first (the DMA does the
    transpose the host would otherwise do)."""
    N = launch.shape_dict["N"]
    M = stored_length(launch, "c", launch.shape_dict["M"])    # rows per head on the device
    if launch.binding("c").layout != "head-first":
        w(f"dma_memcpy_nd({c}, {c_l2}, dst_offsets=[0, at([(lx, {rows * N}), (ly, {span})])], "
          f"dst_sizes=[{rows}, {span}], dst_strides=[{N}, 1])")
        return
    if M % rows:
        raise EmitError(f"{launch.label}: C is bound head-first with {M} rows per head, not a "
                        f"multiple of tile_m x herd_m ({rows}): the last block of a head would "
                        "write into the next; pad the sequence "
                        "(kernels.air_programs.air.pad_sequences)")
    hd = head_dim
    if hd is None or N % hd:
        raise EmitError(f"{launch.label}: C is bound head-first; the program needs the "
                        f"model's head_dim (got {hd}) dividing N={N}")
    if span % hd == 0:      # whole heads per block: a 3-D pattern on both sides
        w(f"dma_memcpy_nd({c}, {c_l2}, dst_offsets=[0, 0, at([(ly, {span // hd * M * hd}), "
          f"(lx, {rows * hd})])], dst_sizes=[{span // hd}, {rows}, {hd}], "
          f"dst_strides=[{M * hd}, {hd}, 1], src_offsets=[0, 0, 0], "
          f"src_sizes=[{span // hd}, {rows}, {hd}], src_strides=[{hd}, {span}, 1])")
    elif hd % span == 0:    # a slice of one head: head = n0 // hd, column n0 mod hd
        w(f"head = at([(ly, {span})], divisor={hd})")
        w(f"dma_memcpy_nd({c}, {c_l2}, dst_offsets=[0, at([(head, {M * hd - hd}), "
          f"(ly, {span}), (lx, {rows * hd})])], dst_sizes=[{rows}, {span}], "
          f"dst_strides=[{hd}, 1])")
    else:
        raise EmitError(f"{launch.label}: a head-first C needs tile_n x herd_n ({span}) and "
                        f"head_dim ({hd}) to divide one another")


PROGRAM = AirProgram(launch_layout, segment, after=cast_launch)

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
    (programming_examples/llms/qwen25_0_5b/ARCHITECTURE.md, qwen25_1_5b and qwen25_3b
    *_prefill.py: 'the Down GEMM (K=hidden, non-512-aligned) produces all-NaN when it is not
    the first launch of a stitched ELF')."""
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
        to_device=to_device)


FAMILIES = (_family(GEMM_BF16, torch.bfloat16, SOURCE_BF16),
            _family(GEMM_FP32, torch.float32, SOURCE_FP32))
