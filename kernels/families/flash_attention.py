"""Causal FlashAttention, GQA or MHA, for prefill. mlir-air programming_examples/
flash_attention/kernel_fusion_based (attn_npu2.py): a launch per (q block, head group), a
segment unrolled over heads, a herd of q_tiles columns by `cascade` rows that stream K and V
through the memory tiles and merge their partial softmax states over cascade channels. The
registry page FlashAttention_bf16.md measures it (1065-1131 GFLOP/s at Llama-3.2-1B's
prefill). It is built as its own program and runs alone in its dispatch."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch

from npu_deploy.oracle import reference as ref_ops

from ..air_programs.air_parts import (
    ChannelDecl,
    EmitError,
    Extern,
    KernelSource,
    LaunchLayout,
    Writer,
    alloc_l1,
    buf,
    cdiv,
    dims,
    free,
    head_rows,
    open_herd,
)
from ..definition import rules
from ..definition.family import (
    BF16,
    AirProgram,
    Cost,
    KernelFamily,
    KernelSpec,
    Layout,
    Numerics,
    Operand,
    ProgramLayout,
    Shape,
    Tensors,
    TimedLaunch,
    Work,
    timed,
)
from ..definition.hardware import Hardware
from ..definition.rules import Finding
from ..emulation.numerics import (
    BFP16EBS8,
    DEFAULT_TILE_K,
    _quantize_last_dim,
    softmax_bfp16,
    to_bf16,
)
from ..emulation.tensors import as_head_first, bound_layout, f32
from ..measured.measurements import (
    TO_BASE,
    Source,
    TableSource,
    load,
    markdown_tables,
    rows_at,
    scaled,
)

if TYPE_CHECKING:
    from ..performance.model import PerfParams
    from ..plans.plan import Launch

# --- spec: q [heads, Lq, d], k and v [kv_heads, Lk, d], o [heads, Lq, d] ---------------------


def operands(s: Shape) -> list[Operand]:
    lq, lk, d = s["Lq"], s["Lk"], s["head_dim"]
    return [Operand("q", (s["heads"], lq, d), BF16, "input"),
            Operand("k", (s["kv_heads"], lk, d), BF16, "input"),
            Operand("v", (s["kv_heads"], lk, d), BF16, "input"),
            Operand("o", (s["heads"], lq, d), BF16, "output")]


def flops(s: Shape) -> float:
    # QK^T and PV, each 2*Lq*Lk*d per head; causal prefill (Lq == Lk) does about half.
    full = 4.0 * s["heads"] * s["Lq"] * s["Lk"] * s["head_dim"]
    return full / 2 if s["Lq"] == s["Lk"] else full


FLASH_ATTENTION = KernelSpec(
    "flash_attention", "npu", "causal FlashAttention, GQA or MHA",
    ("heads", "kv_heads", "Lq", "Lk", "head_dim"), operands, flops,
    {"q_tile": 256, "k_tile": 64, "q_tiles": 4, "cascade": 4, "heads_per_unroll": 2,
     "dv_tile": 64, "layout": "seq-first"})

# --- checker rule -------------------------------------------------------------------------

#: the head dims attn_npu2.cc's softmax scale is written for (static_assert on dk_full)
SCALED_HEAD_DIMS = (64, 128, 256, 512)

RULES = (
    "unsupported: head_dim one of 64, 128, 256, 512 (attn_npu2.cc's static_assert on dk_full)",
    "herd: heads_per_unroll x q_tiles columns by cascade rows fit the array",
    "divisible: query heads over KV heads, heads by heads_per_unroll, q_tile into q_tiles",
    "causal mask: q blocks (q_tile / q_tiles) as long as the K chunks (k_tile)",
    "divisible: head_dim by k_tile and dv_tile; dv_tile by the 8-wide matmul",
    "L1: Q block in head-dim tiles, the K/Q relay, a V chunk, scores, the running and the "
    "cascade's output, row vectors (bf16)",
    "L2 per column: a K and a V chunk per cascade stage, the output block",
    "layout: seq-first at head_dim >= 128 hangs on NPU2 (use head-first)",
    "corrupt: a kernel object compiled for other (Lq, Lk, head_dim) than the launch",
    "padding (warning): Lq to q_tile, Lk to k_tile x cascade",
)


def check(spec: KernelSpec, s: Shape, c: dict[str, Any], hw: Hardware,
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
    rules.herd(f, cascade, cols, hw)
    # NPU_FACTS: 32 tiles for 4 q tiles and 4 cascade stages -- the example's default of two
    # heads per unroll.
    usage.update(tiles=cols * cascade)
    rules.heads_share_kv(f, s["heads"], s["kv_heads"])
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
    if hd not in SCALED_HEAD_DIMS:
        f.append(Finding("unsupported", "error", f"head_dim={hd}: attn_npu2.cc compiles its "
                         "softmax scale 1/sqrt(dk_full) only for dk_full "
                         f"{', '.join(map(str, SCALED_HEAD_DIMS))} (a static_assert); run this "
                         "attention on the CPU", hd, SCALED_HEAD_DIMS[0]))
    # L1 per tile: the program's buffers (l1_buffers, below), bf16, single buffers.
    l1 = l1_bytes(tq, k_tile, hd, dv_tile)
    rules.l1(f, l1, hw, f"Q {tq}x{hd} in {k_tile}-wide tiles, the K/Q relay {k_tile}x{k_tile}, "
             f"V {k_tile}x{dv_tile}, scores {tq}x{k_tile}, two {tq}x{dv_tile} outputs (running "
             "and cascade), row vectors; bf16", "use a smaller dv_tile or k_tile")
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
    rules.pad(f, "Lq", s["Lq"], q_tile)
    rules.pad(f, "Lk", s["Lk"], k_tile * cascade)
    return f


# --- search space ------------------------------------------------------------------------


def program_layout(head_dim: int) -> Layout:
    """The FlashAttention program for a head_dim: seq-first as measured at 64, head-first
    from 128 (NPU_FACTS: seq-first hangs there)."""
    return "head-first" if head_dim >= 128 else "seq-first"


def candidates(spec: KernelSpec, shape: Shape, hw: Hardware) -> Iterator[dict[str, Any]]:
    """Two heads per unroll as measured, else one (an odd head count). The K chunk is also
    the head-dim tile: heads narrower than 64 take a chunk that divides them, with q blocks
    as long (the causal mask needs them equal)."""
    layout = program_layout(shape["head_dim"])
    for chunk in (64, 32, 16):
        if chunk != 64 and shape["head_dim"] % chunk:
            continue
        if chunk == 16 and shape["head_dim"] % 32 == 0:
            continue    # attn_npu2.cc's softmax steps need q blocks (lqp) of 32 or more
        for per_unroll in (2, 1):
            yield {"layout": layout, "heads_per_unroll": per_unroll, "k_tile": chunk,
                   "q_tile": 4 * chunk, "q_tiles": 4, "dv_tile": chunk}


# --- numerics: both matmuls through the BFP16 datapath, the softmax in FP32, P as bf16 -----

def emulate(s: Shape, c: dict, x: Tensors, out: Tensors | None = None) -> Tensors:
    """Causal attention, all heads at once: S = QK^T and O = PV through the BFP16 datapath
    (exactly what `gemm_bfp16` computes per head: blocks along the K dim, exact K-tile sums
    rounded to FP32 and added in order), the softmax of S / sqrt(head_dim) in FP32 with P
    handed on as bf16 (`softmax_bf16`; computed fused with P's block conversion). K tiles of
    PV that lie wholly past a row block's causal limit hold zeros and are skipped."""
    fmt, tk = BFP16EBS8, DEFAULT_TILE_K
    h, hkv, lq, lk, d = s["heads"], s["kv_heads"], s["Lq"], s["Lk"], s["head_dim"]
    group, start = h // hkv, lk - lq
    # exact: FP64 K-tile sums, as gemm_bfp16 does; otherwise one FP32 BLAS call per product.
    exact = bool(c.get("exact_tiles", True))
    dtype = torch.float64 if exact else torch.float32
    q = as_head_first(f32(x["q"]), h, lq, d, bound_layout(c, "q", "head-first"))
    k = as_head_first(f32(x["k"]), hkv, lk, d, bound_layout(c, "k", "head-first"))
    v = as_head_first(f32(x["v"]), hkv, lk, d, bound_layout(c, "v", "head-first"))
    qq = _quantize_last_dim(q.reshape(-1, d), fmt).view(h, lq, d).to(dtype)
    kq = _quantize_last_dim(k.reshape(-1, d), fmt).view(hkv, lk, d)
    kq = kq.repeat_interleave(group, dim=0).to(dtype)
    vq = _quantize_last_dim(v.transpose(1, 2).reshape(-1, lk), fmt)
    vq = vq.view(hkv, d, lk).transpose(1, 2).repeat_interleave(group, dim=0).to(dtype)
    o = torch.empty(h, lq, d, dtype=torch.bfloat16)
    rows = max(1, (1 << 22) // max(h * lk, 1))          # bounds the FP64 scratch to ~32 MiB
    for r0 in range(0, lq, rows):
        r1 = min(lq, r0 + rows)
        # Keys past the block's last position are masked: their probabilities are exact
        # zeros, which form whole zero blocks and K tiles (upto is a multiple of tk), so
        # they are left out of both products.
        upto = min(lk, -(-(start + r1) // tk) * tk)
        if not exact:
            scores = torch.bmm(qq[:, r0:r1], kq[:, :upto].transpose(1, 2))
        else:
            scores = torch.zeros(h, r1 - r0, upto)
            for d0 in range(0, d, tk):
                scores += torch.bmm(qq[:, r0:r1, d0:d0 + tk],
                                    kq[:, :upto, d0:d0 + tk].transpose(1, 2)).float()
        valid = (torch.arange(r0, r1) + start + 1).clamp(max=upto).repeat(h)
        pq = softmax_bfp16(scores.view(-1, upto), valid, 1.0 / math.sqrt(d))
        pq = pq.view(h, r1 - r0, upto).to(dtype)
        if not exact:
            acc = torch.bmm(pq, vq[:, :upto])
        else:
            acc = torch.zeros(h, r1 - r0, d)
            for k0 in range(0, upto, tk):
                acc += torch.bmm(pq[:, :, k0:k0 + tk], vq[:, k0:k0 + tk]).float()
        o[:, r0:r1] = to_bf16(acc)
    if bound_layout(c, "o", "head-first") == "seq-first":
        return {"o": o.transpose(0, 1).reshape(lq, h * d)}
    return {"o": o}


def reference(s: Shape, c: dict, x: Tensors) -> Tensors:
    out = ref_ops.attention(f32(x["q"]), f32(x["k"]), f32(x["v"]), start=s["Lk"] - s["Lq"])
    return {"o": out}


# The chained BFP16 matmuls: measured worst excess over rtol alone, 3 seeds, 3.5e-2
# (mean|ref| 0.14).
NUMERICS = Numerics(emulate, reference, atol=5e-2)

# --- cost: the array's launch iterations over q blocks and head groups --------------------
#
# FlashAttention_bf16.md: the outer launch is sequential in time -- one iteration per q
# block (q_tile rows) and head group (heads_per_unroll heads, times the dv chunks of a
# head_dim wider than the tile) -- each on the whole herd of heads_per_unroll x q_tiles x
# cascade tiles. The causal mask saves nothing measurable (16384 causal 39.6 ms, non-causal
# 40.1 ms), so every block is computed; the launch itself has a large fixed cost (512x512
# with 2 heads takes 0.73 ms).

#: fitted coefficients and their starting values
COEFFICIENTS = (("fa_floor_s", 300e-6), ("fa_step_s", 30e-6), ("fa_tile_flops", 1.8e11))


def work(spec: KernelSpec, s: Shape, c: dict[str, Any], p: PerfParams) -> Work:
    """compute: the QK^T and PV blocks of every q block and head (a head_dim wider than
    dv_tile recomputes QK^T per dv chunk), causal or not, at the herd's per-tile rate, and a
    fixed cost per launch iteration (q block x head group)"""
    q_tile, hpu = int(c["q_tile"]), int(c["heads_per_unroll"])
    tiles = hpu * int(c["q_tiles"]) * int(c["cascade"])
    hd, dv = s["head_dim"], int(c.get("dv_tile") or c["k_tile"])
    chunks = math.ceil(hd / dv)
    lq = math.ceil(s["Lq"] / q_tile) * q_tile
    lk = math.ceil(s["Lk"] / (int(c["k_tile"]) * int(c["cascade"]))) * int(c["k_tile"]) \
        * int(c["cascade"])
    steps = lq // q_tile * math.ceil(s["heads"] * chunks / hpu)
    flops = 2.0 * s["heads"] * chunks * lq * lk * (hd + dv)
    return Work(flops / (tiles * p.fa_tile_flops) + steps * p.fa_step_s, 0.0)


def timed_launches() -> list[TimedLaunch]:
    """The tested shapes (at the harness's 256-row q blocks, 4 q tiles, 2 heads per unroll,
    4 cascade stages; a latency range gives its middle) and the q-tiling sweep at 2048
    causal (its GFLOP/s count the causal half)."""
    data = load("flash_attention")
    tables, page = data["tables"], data["source"]["path"]
    base = dict(FLASH_ATTENTION.tunables)
    out = []
    for r in tables["shapes"]["rows"]:
        s = {"heads": r["heads"], "kv_heads": r["kv_heads"], "Lq": r["Lq"], "Lk": r["Lk"],
             "head_dim": r["dk"]}
        lat = r["latency"]
        ms = sum(lat) / len(lat) if isinstance(lat, list) else lat
        out.append(timed("flash_attention", s, base, scaled(ms, TO_BASE["ms"]),
                         f"{page} (shapes)"))
    llama = {"heads": 32, "kv_heads": 8, "Lq": 2048, "Lk": 2048, "head_dim": 64}
    for r in tables["tiles"]["rows"]:
        config = {**base, "q_tile": r["lqp"], "q_tiles": r["nqt"], "heads_per_unroll": r["hpu"],
                  "cascade": r["ncs"], "k_tile": r["tile_q"], "dv_tile": r["tile_q"]}
        gflops = sum(r["gflops"]) / len(r["gflops"]) if isinstance(r["gflops"], list) \
            else r["gflops"]
        out.append(timed("flash_attention", llama, config,
                         flops(llama) / scaled(gflops, TO_BASE["GFLOP/s"]),
                         f"{page} (tiles)"))
    return out


COST = Cost(work, lambda p: p.fa_floor_s, COEFFICIENTS, timed_launches, in_elf="attention")


# --- the program -----------------------------------------------------------------------------
#
# mlir-air programming_examples/flash_attention/kernel_fusion_based/attn_npu2.py (e972f29), as
# our builder writes it. Its micro-kernels are attn_npu2.cc's extern "C" functions, compiled
# per tile (programming_examples/llms/shared/infra/external_kernels.py, compile_attn_npu2):
# lqp = the q block of one tile, lkp = the K/V chunk, dk = dv = the head-dim tile (= lkp, the
# V and output column tile may be narrower than head_dim), dk_full = dv_full = head_dim.

KERNEL_SOURCE = "programming_examples/flash_attention/kernel_fusion_based/attn_npu2.cc"


def l1_buffers(tq: int, k_tile: int, hd: int, dv: int) -> list[tuple[str, tuple[int, ...]]]:
    """Every L1 buffer of one tile (bf16, single buffers: upstream compiles with
    omit_pingpong): the q block in head-dim tiles, the K/Q relay, the V chunk, the scores
    (flat, as the matmuls take them), the running output and its row max and sum, the
    softmax's sum and rescale, and the cascade merge's incoming output and row vectors. The
    checker's L1 figure is their sum."""
    row = (tq, 1)
    return ([(f"q{c}_l1", (tq, k_tile)) for c in range(hd // k_tile)]
            + [("qk_l1", (k_tile, k_tile)), ("v_l1", (k_tile, dv)), ("g_l1", (tq * k_tile,)),
               ("gp_l1", (tq, dv)), ("up_l1", row), ("sp_l1", row), ("s_l1", row),
               ("r_l1", row), ("gpc_l1", (tq, dv)), ("upc_l1", row), ("spc_l1", row),
               ("ups_l1", row), ("rc_l1", row), ("rl_l1", row), ("st_l1", row)])


def l1_bytes(tq: int, k_tile: int, hd: int, dv: int) -> int:
    return sum(BF16 * math.prod(shape) for _, shape in l1_buffers(tq, k_tile, hd, dv))


#: attn_npu2.cc's extern "C" functions the program calls, with the L1 buffers (or i32) that
#: give each parameter's type
EXTERNS = (("zero_fill_g_bf16", ("g_l1",)), ("zero_fill_gp_bf16", ("gp_l1",)),
           ("zero_fill_sp_bf16", ("sp_l1",)), ("neg_inf_fill_up_bf16", ("up_l1",)),
           ("copy_tile", ("qk_l1", "q0_l1")), ("matmul_a_b_bf16", ("q0_l1", "qk_l1", "g_l1")),
           ("apply_causal_mask", ("g_l1", "i32", "i32")),
           ("fused_softmax", ("g_l1", "up_l1", "s_l1", "r_l1")), ("mul_r_gp", ("r_l1", "gp_l1")),
           ("matmul_g_b_bf16", ("g_l1", "v_l1", "gp_l1")),
           ("accum_sp_r_s", ("sp_l1", "r_l1", "s_l1")),
           ("vector_copy_32elems", ("i32", "s_l1", "sp_l1")),
           ("maximum_up_u_bf16", ("upc_l1", "up_l1")),
           ("exp_up_minus_u", ("upc_l1", "up_l1", "rc_l1")), ("add_gp_g", ("gp_l1", "gpc_l1")),
           ("div_gp_sp", ("spc_l1", "gpc_l1")))


def padded_lengths(launch: Launch, q_tile: int, kv_round: int) -> tuple[int, int]:
    """Lq and Lk as the program walks them: whole q tiles, and whole rounds of K/V chunks
    over the cascade stages. A prefill (Lq == Lk) walks both to one length, so that the
    causal mask numbers q and K blocks alike: its head-first operands' padded length
    (`Binding.seq_pad`), or its own. Padded keys (positions >= L) are zeros from the host's
    padding or rows computed from them; they lie after every real query, so the causal mask
    hides them from every row the host reads back (this program always masks: there is no
    non-causal variant), and only padded query rows, never read back, see them."""
    s = launch.shape_dict
    lq, lk = cdiv(s["Lq"], q_tile) * q_tile, cdiv(s["Lk"], kv_round) * kv_round
    if s["Lq"] == s["Lk"]:
        m = math.lcm(q_tile, kv_round)
        stored = {b.seq_pad[1] for b in launch.bindings if b.seq_pad is not None}
        lq = lk = stored.pop() if len(stored) == 1 else cdiv(s["Lq"], m) * m
        if lq % m or stored:
            raise EmitError(f"{launch.label}: the head-first operands are padded to "
                            f"{sorted({lq, *stored})} positions per head, not one multiple of "
                            f"the q tile and the K/V round ({m})")
    return lq, lk


def _heads_apart(launch: Launch, lq: int, lk: int) -> None:
    """Refuse a head-first operand whose heads the walk would run into one another: its
    rows per head must be the walked length (`kernels.air_programs.air.pad_sequences` pads them)."""
    s = launch.shape_dict
    for b in launch.bindings:
        walked, length = (lq, s["Lq"]) if b.operand in ("q", "o") else (lk, s["Lk"])
        if b.layout == "head-first" and walked > (length if b.seq_pad is None
                                                  else b.seq_pad[1]):
            raise EmitError(f"{launch.label}: {b.operand} is walked to {walked} positions per "
                            f"head but holds {length}: a head's last block would reach into "
                            "the next; pad the sequence (kernels.air_programs.air.pad_sequences)")


def launch_layout(launch: Launch, c: dict[str, Any], hw: Hardware) -> LaunchLayout:
    """A launch per (q block, head group x V column tile), a segment unrolled over
    heads_per_unroll heads, a herd of q_tiles columns by `cascade` rows. Each cascade stage
    takes a contiguous share of the K/V chunks; its memory-tile relay broadcasts Q blocks,
    then K chunks, and V chunks along the stage's row; the stages merge their partial
    softmax states over cascade channels, last to first, and the first sends the output."""
    s = launch.shape_dict
    hd, heads = s["head_dim"], s["heads"]
    q_tile, kt, nq, ns, unroll = (int(c[k]) for k in ("q_tile", "k_tile", "q_tiles",
                                                       "cascade", "heads_per_unroll"))
    dv = int(c.get("dv_tile") or kt)
    tq = q_tile // nq
    if tq != kt or hd % kt or hd % dv or ns < 2 or heads % unroll:
        raise EmitError(f"{launch.label}: FlashAttention needs q blocks as long as the K "
                        f"chunks (q_tile/q_tiles={tq}, k_tile={kt}), head_dim={hd} a multiple "
                        f"of k_tile and dv_tile={dv}, at least 2 cascade stages ({ns}) and "
                        f"heads={heads} a multiple of heads_per_unroll={unroll}")
    obj = f"attn_npu2_{dims(tq, kt, kt, dv, hd)}.o"    # lqp x lkp x dk x dv, dk_full
    l2 = tuple(buf(f"qk{st}_l2", (kt, kt), BF16, "L2") for st in range(ns)) \
        + tuple(buf(f"v{st}_l2", (kt, dv), BF16, "L2") for st in range(ns)) \
        + (buf("o_l2", (q_tile, dv), BF16, "L2"),)
    l1 = tuple(buf(name, shape, BF16, "L1") for name, shape in l1_buffers(tq, kt, hd, dv))
    channels = (ChannelDecl("qk_in", (unroll, ns)),
                ChannelDecl("qk_to_l1", (unroll, ns, 1), (unroll, ns, nq)),
                ChannelDecl("v_in", (unroll, ns)),
                ChannelDecl("v_to_l1", (unroll, ns, 1), (unroll, ns, nq)),
                *(ChannelDecl(f"cascade_{k}", (nq, ns - 1), cascade=True)
                  for k in ("gp", "up", "sp")),
                ChannelDecl("o_to_l2", (nq, 1)), ChannelDecl("o_out", (unroll,)))
    defines: dict[str, Any] = {"BIT_WIDTH": 8, "lqp": tq, "lkp": kt, "dk": kt, "dk_full": hd,
                               "dv": dv, "dv_full": hd, "ROUND_CONV_EVEN": None,
                               "AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16": None}
    lq, lk = padded_lengths(launch, q_tile, kt * ns)
    ops = tuple(launch.spec.operands(s))
    # the last q block and K/V chunk run past the data: a head-first operand holds the
    # padded length per head (air.pad_sequences), a seq-first one is padded at its end
    padded = {}
    for op in ops:
        length, stored = (s["Lq"], lq) if op.name in ("q", "o") else (s["Lk"], lk)
        if stored > length and launch.binding(op.name).layout == "seq-first":
            padded[op.name] = op.numel // length * stored
    head_first = any(b.layout == "head-first" for b in launch.bindings)
    return LaunchLayout(
        launch.kernel, launch.label, ops,
        grid=(lq // q_tile, heads // unroll * (hd // dv)), segment=(unroll, 1),
        herd=(nq, ns), l2=l2, l1=l1, loop=lk // (kt * ns), padded=padded,
        sequence=(s["Lq"], math.lcm(q_tile, kt * ns)) if head_first and s["Lq"] == s["Lk"]
        else None,
        externs=tuple(Extern(sym, obj, args) for sym, args in EXTERNS), channels=channels,
        flags={"omit_pingpong": "all", "compiled_for": (s["Lq"], s["Lk"], hd),
               "runtime_loop_tiling_sizes": [1, 1]},   # upstream's fa_headfirst / fa_temporal
        imports=("from air.dialects.affine import AffineIfOp, AffineYieldOp",),
        kernels=(KernelSource(obj, KERNEL_SOURCE, tuple(defines.items())),))


def _call(w: Writer, symbol: str, *args: str | int) -> None:
    """A micro-kernel call: L1 buffers by name, an int as an i32 constant."""
    given = (f"arith.ConstantOp(i32, {a})" if isinstance(a, int) else a for a in args)
    w(f"CallOp({symbol}, [{', '.join(given)}])")


def _when(var: str, value: int, has_else: bool = False) -> str:
    """affine.if var == value."""
    return (f"AffineIfOp(IntegerSet.get(0, 1, [AffineExpr.get_add(AffineSymbolExpr.get(0), "
            f"AffineConstantExpr.get({-value}))], [True]), cond_operands=[{var}]"
            f"{', has_else=True' if has_else else ''})")


def segment(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
            names: list[str], head_dim: int | None) -> None:
    s = launch.shape_dict
    nq, ns = layout.herd
    unroll = layout.segment[0] if layout.segment else 1
    hd, heads, kvh = s["head_dim"], s["heads"], s["kv_heads"]
    q_tile, dv = layout.l2[-1].shape
    kt = layout.l1[0].shape[1]
    tq, dkc, dvc, cps = q_tile // nq, hd // kt, hd // dv, layout.loop
    lq, lk = padded_lengths(launch, q_tile, kt * ns)
    _heads_apart(launch, lq, lk)
    group = heads // kvh
    if (lk - lq) % tq:
        raise EmitError(f"{launch.label}: the causal mask's block indices need the {lk - lq} "
                        f"earlier positions in whole blocks of {tq}")

    w("# which heads and V columns this segment takes")
    if dvc > 1:
        w(f"hg = at([(ly, 1)], divisor={dvc})  # head group; V column tile: dz")
        w(f"dz = at([(ly, 1), (hg, {-dvc})])")
    else:
        w("hg = at([(ly, 1)])  # head group")
    w(f"head = at([(hg, {unroll}), (gx, 1)])")
    w(f"kv_head = at([(head, 1)], divisor={group})  # GQA: {group} query heads per KV head")

    def cols(at_rows: str) -> str:        # the V column tile's first element of those rows
        return f"at([({at_rows}, 1), (dz, {dv})])" if dvc > 1 else at_rows

    q_at, qs = head_rows(launch, "q", "head", heads, lq, hd, [("lx", q_tile)])
    for st in range(ns):
        w(f"# stage {st}: the q block in {dkc} head-dim tile(s) per {tq}-row block, then K "
          f"chunks {st * cps}..{st * cps + cps - 1}, then V chunks")
        w(f"ChannelPut('{p}_qk_in', {arg['q']}, indices=[gx, {st}], offsets=[0, 0, 0, {q_at}], "
          f"sizes=[{nq}, {dkc}, {tq}, {kt}], strides=[{tq * qs}, {kt}, {qs}, 1])")
        k_at, ks = head_rows(launch, "k", "kv_head", kvh, lk, hd, [], st * cps * kt)
        w(f"ChannelPut('{p}_qk_in', {arg['k']}, indices=[gx, {st}], offsets=[0, 0, 0, {k_at}], "
          f"sizes=[{cps}, {dkc}, {kt}, {kt}], strides=[{kt * ks}, {kt}, {ks}, 1])")
        v_at, vs = head_rows(launch, "v", "kv_head", kvh, lk, hd, [], st * cps * kt)
        w(f"ChannelPut('{p}_v_in', {arg['v']}, indices=[gx, {st}], offsets=[0, 0, {cols(v_at)}], "
          f"sizes=[{cps}, {kt}, {dv}], strides=[{kt * vs}, {vs}, 1])")
    w("# memory-tile relays: each chunk re-tiled 8x8 for the matmuls, broadcast along the row")
    for st in range(ns):
        for name, n, width in (("qk", nq * dkc + cps * dkc, kt), ("v", cps, dv)):
            w(f"for i in range_(0, {n}):")
            w.indent()
            w(f"ChannelGet('{p}_{name}_in', {name}{st}_l2, indices=[gx, {st}])")
            w(f"ChannelPut('{p}_{name}_to_l1', {name}{st}_l2, indices=[gx, {st}, 0], "
              f"offsets=[0, 0, 0, 0], sizes=[{width // 8}, {kt // 8}, 8, 8], "
              f"strides=[8, {width * 8}, {width}, 1])")
            w("yield_([])")
            w.dedent()

    open_herd(w, p, layout, ["gx"], f"attend: {nq} q blocks x {ns} cascade stages")
    alloc_l1(w, layout.l1)
    _call(w, "zero_fill_gp_bf16", "gp_l1")
    _call(w, "zero_fill_sp_bf16", "sp_l1")
    _call(w, "neg_inf_fill_up_bf16", "up_l1")
    w("# every q block arrives on the stage's relay; each tile keeps its own")
    for qt in range(nq):
        for c in range(dkc):
            w(f"ChannelGet('{p}_qk_to_l1', qk_l1, indices=[gx, ty, tx])")
            w(f"mine = {_when('tx', qt)}")
            w("with InsertionPoint(mine.then_block):")
            w.indent()
            _call(w, "copy_tile", "qk_l1", f"q{c}_l1")
            w("AffineYieldOp([])")
            w.dedent()
    w(f"for j in range_(0, {cps}):")
    w.indent()
    _call(w, "zero_fill_g_bf16", "g_l1")
    for c in range(dkc):
        w(f"ChannelGet('{p}_qk_to_l1', qk_l1, indices=[gx, ty, tx])")
        _call(w, "matmul_a_b_bf16", f"q{c}_l1", "qk_l1", "g_l1")
    w(f"ChannelGet('{p}_v_to_l1', v_l1, indices=[gx, ty, tx])")
    w("# the mask takes the block indices: q block = launch q block x q_tiles + tx, KV "
      "block = stage x chunks per stage + j")
    first_q = (lk - lq) // tq
    q_block = f"at([(lx, {nq}), (tx, 1)], {first_q})" if first_q else f"at([(lx, {nq}), (tx, 1)])"
    _call(w, "apply_causal_mask", "g_l1", f"arith.index_cast(i32, {q_block})",
          f"arith.index_cast(i32, at([(ty, {cps}), (j, 1)]))")
    w("# online softmax: new row max (up), exp(G - max), the chunk's sum (s), the rescale (r)")
    _call(w, "fused_softmax", "g_l1", "up_l1", "s_l1", "r_l1")
    _call(w, "mul_r_gp", "r_l1", "gp_l1")                 # rescale the running output
    _call(w, "matmul_g_b_bf16", "g_l1", "v_l1", "gp_l1")  # and add P V
    _call(w, "accum_sp_r_s", "sp_l1", "r_l1", "s_l1")     # s += sum_so_far * r
    _call(w, "vector_copy_32elems", 0, "s_l1", "sp_l1")
    w("yield_([])")
    w.dedent()

    w("# cascade merge: the last stage sends its state down; the others merge the state from")
    w("# above with their own and pass it on; the first divides by the sum and sends it out")
    w(f"last = {_when('ty', ns - 1, True)}")
    w("with InsertionPoint(last.then_block):")
    w.indent()
    for kind in ("gp", "up", "sp"):
        w(f"ChannelPut('{p}_cascade_{kind}', {kind}_l1, indices=[tx, at([(ty, 1)], -1)])")
    w("AffineYieldOp([])")
    w.dedent()
    w("with InsertionPoint(last.else_block):")
    w.indent()
    for kind in ("gp", "up", "sp"):
        w(f"ChannelGet('{p}_cascade_{kind}', {kind}c_l1, indices=[tx, ty])")
    _call(w, "vector_copy_32elems", 0, "up_l1", "ups_l1")
    _call(w, "maximum_up_u_bf16", "upc_l1", "up_l1")
    _call(w, "exp_up_minus_u", "upc_l1", "up_l1", "rc_l1")
    _call(w, "exp_up_minus_u", "ups_l1", "up_l1", "rl_l1")
    _call(w, "mul_r_gp", "rc_l1", "gpc_l1")
    _call(w, "mul_r_gp", "rl_l1", "gp_l1")
    _call(w, "add_gp_g", "gp_l1", "gpc_l1")
    _call(w, "zero_fill_sp_bf16", "st_l1")
    _call(w, "accum_sp_r_s", "spc_l1", "rc_l1", "st_l1")
    _call(w, "accum_sp_r_s", "sp_l1", "rl_l1", "st_l1")
    _call(w, "vector_copy_32elems", 0, "st_l1", "spc_l1")
    w(f"first = {_when('ty', 0, True)}")
    w("with InsertionPoint(first.then_block):")
    w.indent()
    _call(w, "div_gp_sp", "spc_l1", "gpc_l1")
    w(f"ChannelPut('{p}_o_to_l2', gpc_l1, indices=[tx, 0], offsets=[0, 0, 0, 0], "
      f"sizes=[{tq // 8}, 8, {dv // 8}, 8], strides=[64, 8, {tq * 8}, 1])")
    w("AffineYieldOp([])")
    w.dedent()
    w("with InsertionPoint(first.else_block):")
    w.indent()
    for kind, b in (("gp", "gpc_l1"), ("up", "up_l1"), ("sp", "spc_l1")):
        w(f"ChannelPut('{p}_cascade_{kind}', {b}, indices=[tx, at([(ty, 1)], -1)])")
    w("AffineYieldOp([])")
    w.dedent()
    w("AffineYieldOp([])")
    w.dedent()
    free(w, layout.l1)
    w.dedent()

    w(f"for t in range_(0, {nq}):")
    w.indent()
    w(f"ChannelGet('{p}_o_to_l2', o_l2, indices=[t, 0], offsets=[at([(t, {tq})]), 0], "
      f"sizes=[{tq}, {dv}], strides=[{dv}, 1])")
    w("yield_([])")
    w.dedent()
    w(f"ChannelPut('{p}_o_out', o_l2, indices=[gx])")
    o_at, os_ = head_rows(launch, "o", "head", heads, lq, hd, [("lx", q_tile)])
    w(f"ChannelGet('{p}_o_out', {arg['o']}, indices=[gx], offsets=[0, {cols(o_at)}], "
      f"sizes=[{q_tile}, {dv}], strides=[{os_}, 1])")


# --- measured -----------------------------------------------------------------------------

SOURCE = Source("details/FlashAttention_bf16.md", markdown_tables(
    TableSource("shapes", "Tested shapes", "lq×lk",
                "tested shapes (heads-first harness): latency and GFLOP/s at lqp 256, 4 q "
                "tiles, 2 heads per unroll, 4 cascade stages"),
    TableSource("tiles", "tile choice vs performance", "lqp",
                "GFLOP/s at 2048 causal against the q tiling (lqp, nqt q tiles, hpu heads "
                "per unroll, ncs cascade stages)")))

FAMILIES = (KernelFamily(
    FLASH_ATTENTION, rules=RULES, check=check, candidates=candidates, numerics=NUMERICS,
    cost=COST, program=AirProgram(launch_layout, segment),
    data="flash_attention", source=SOURCE, head_first_alone=("q", "k", "v", "o"),
    measured=rows_at("flash_attention", "shapes",
                     lambda r: (r["heads"], r["kv_heads"], r["Lq"], r["Lk"], r["dk"], r["causal"]),
                     lambda s: (s["heads"], s["kv_heads"], s["Lq"], s["Lk"], s["head_dim"], True)),
    # Built as its own program (with its own segment and cascade routing), and the measured
    # deployment runs it alone in its dispatch: our reading, not a documented hardware limit.
    own_elf=True,
    program_layout=ProgramLayout(lambda s: program_layout(s["head_dim"]),
                                 seq_first_outputs=("o",)),
    exact_tiles=True),)
