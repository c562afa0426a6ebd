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
from ..emulation.bf16_blas import block_exponents, exact_in_bf16_matmul
from ..emulation.numerics import BFP16EBS8, DEFAULT_TILE_K, _quantize_last_dim, to_bf16
from ..emulation.softmax import softmax_bf16, softmax_bfp16_bf16
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
from .flash_attention_program import l1_bytes, launch_in, launch_layout, launch_out, segment
from .gemm import BF16_DATAPATH_RATE

if TYPE_CHECKING:
    from ..performance.model import PerfParams


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
     "dv_tile": 64, "layout": "seq-first", "datapath": "bfp16"})

#: the matmul datapaths of Q@K^T and P@V: upstream's build (attn_npu2.cc's 8x8x8 mmul,
#: BFP16-emulated) or AIE2P's native bf16 MMA (4x8x8; our own build, unmeasured:
#: docs/hardware-facts.md#flashattention-on-the-native-bf16-datapath)
DATAPATHS = ("bfp16", "bf16")

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
    "cascade's output, row vectors (bf16), the causal mask's counter (i32)",
    "L2 per column: a K and a V chunk per cascade stage, the output block",
    "layout: seq-first at head_dim >= 128 hangs on NPU2 (use head-first)",
    "corrupt: a kernel object compiled for other (Lq, Lk, head_dim) than the launch",
    "padding (warning): Lq to q_tile, Lk to k_tile x cascade",
    "window: a sliding window (config window) a multiple of the K chunk (k_tile), as "
    "attn_npu2.py's build_module asserts; apply_window_mask keeps keys in (q - window, q]",
    "scale: the softmax scale (config scale) is attn_npu2.cc's compiled 1/sqrt(head_dim); "
    "any other is refused",
    "datapath: bfp16 (upstream's 8x8x8 BFP16-emulated mmul) or bf16 (native 4x8x8; ours, "
    "unmeasured)",
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
    # docs/hardware-facts.md#measured-kernel-throughput: 32 tiles for 4 q tiles and 4 cascade
    # stages -- the example's default of two heads per unroll.
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
             "and cascade), row vectors; bf16; the mask's counter", "use a smaller dv_tile or "
             "k_tile")
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
    if c.get("datapath", "bfp16") not in DATAPATHS:
        f.append(Finding("datapath", "error", f"datapath={c['datapath']!r}: FlashAttention's "
                         f"matmuls run on {' or '.join(DATAPATHS)}; use one of those", 0, 0))
    rules.pad(f, "Lq", s["Lq"], q_tile)
    rules.pad(f, "Lk", s["Lk"], k_tile * cascade)
    f += window_and_scale(s, c, k_tile)
    return f


def window(c: dict[str, Any]) -> int | None:
    """The launch's sliding window (config `window`; None: plain causal attention)."""
    w = c.get("window")
    return None if w is None else int(w)


def softmax_scale(head_dim: int) -> float:
    """The scale attn_npu2.cc compiles into its softmax: 1/sqrt(head_dim) (its combined
    log2e / sqrt(dk_full), Xilinx/mlir-air programming_examples/flash_attention/
    kernel_fusion_based/attn_npu2.cc, e972f29)."""
    return 1.0 / math.sqrt(head_dim)


def window_and_scale(s: Shape, c: dict[str, Any], k_tile: int) -> list[Finding]:
    """What the kernel's build takes of a model's attention: a sliding window that is a
    whole number of K chunks (attn_npu2.py's build_module asserts `window % lkp == 0`; the
    mask, apply_window_mask in attn_npu2.cc, is per block), and no softmax scale but its
    compiled 1/sqrt(head_dim) (Gemma 3's query_pre_attn_scalar equals head_dim on the 4B:
    upstream's programming_examples/llms/gemma3_4b_q4nx/README.md gives its scale 0.0625)."""
    f: list[Finding] = []
    w = window(c)
    if w is not None and (w <= 0 or w % k_tile):
        f.append(Finding("window", "error", f"sliding window {w} is not a positive multiple "
                         f"of the K chunk k_tile={k_tile} (attn_npu2.py masks whole blocks); "
                         "use a k_tile that divides it, or run this attention on the CPU",
                         w, k_tile))
    scale = c.get("scale")
    want = softmax_scale(s["head_dim"])
    if scale is not None and not math.isclose(float(scale), want, rel_tol=1e-6):
        f.append(Finding("unsupported", "error", f"softmax scale {float(scale):g}: "
                         f"attn_npu2.cc compiles 1/sqrt(head_dim)={want:g} into its softmax; "
                         "fold the ratio into the query (or its norm) on the host, or run "
                         "this attention on the CPU", 0, 0))
    return f


# --- search space ------------------------------------------------------------------------


def program_layout(head_dim: int) -> Layout:
    """The FlashAttention program for a head_dim: seq-first as measured at 64, head-first
    from 128 (seq-first hangs there: docs/hardware-facts.md#known-failure-symptoms)."""
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


# --- numerics: both matmuls through the BFP16 datapath (or native bf16), the softmax in FP32,
# P as bf16 --------------------------------------------------------------------------------

#: query rows per step of a sequence long enough to be split (see `emulate`)
_ROW_BLOCK = 64


def batch_parts(kv_heads: int, rows: int) -> int:
    """Into how many parts the fast path splits each KV head's stacked query rows (`rows`)
    so that its batched matmuls hand torch's threads an equal share: SmolLM2-135M's 3 KV
    heads as 6 batches on 2 threads take 20 ms a layer per matmul against 24 ms as 3 at 2048
    tokens (measured on the CPU). Each score and output is the same dot product either way."""
    threads = torch.get_num_threads()
    parts = threads // math.gcd(kv_heads, threads)
    return parts if parts > 1 and rows % parts == 0 else 1


def emulate(s: Shape, c: dict, x: Tensors, out: Tensors | None = None) -> Tensors:
    """Causal attention, all heads at once: S = QK^T and O = PV through the BFP16 datapath
    (exactly what `gemm_bfp16` computes per head: blocks along the K dim, exact K-tile sums
    rounded to FP32 and added in order), the softmax of S / sqrt(head_dim) in FP32 with P
    handed on as bf16 (`softmax_bf16`; computed fused with P's block conversion). K tiles of
    PV that lie wholly past a row block's causal limit hold zeros and are skipped.
    `datapath` "bf16" (the native 4x8x8 MMA) leaves out the block conversion of Q, K, V and
    P: the bf16 operands are multiplied as they are (their products are exact in FP32), with
    the same tile sums, softmax and bf16 carries."""
    fmt, tk = BFP16EBS8, DEFAULT_TILE_K
    native = c.get("datapath", "bfp16") == "bf16"

    def blocks(t: torch.Tensor) -> torch.Tensor:
        return to_bf16(t).to(torch.float32) if native else _quantize_last_dim(t, fmt)
    h, hkv, lq, lk, d = s["heads"], s["kv_heads"], s["Lq"], s["Lk"], s["head_dim"]
    group, start = h // hkv, lk - lq
    win = window(c)
    # exact: FP64 K-tile sums, as gemm_bfp16 does; otherwise one FP32 BLAS call per product.
    exact = bool(c.get("exact_tiles", True))
    dtype = torch.float64 if exact else torch.float32
    q = as_head_first(f32(x["q"]), h, lq, d, bound_layout(c, "q", "head-first"))
    k = as_head_first(f32(x["k"]), hkv, lk, d, bound_layout(c, "k", "head-first"))
    v = as_head_first(f32(x["v"]), hkv, lk, d, bound_layout(c, "v", "head-first"))
    qq = blocks(q.reshape(-1, d)).view(h, lq, d).to(dtype)
    kq = blocks(k.reshape(-1, d)).view(hkv, lk, d).to(dtype)
    vq = blocks(v.transpose(1, 2).reshape(-1, lk))
    vq = vq.view(hkv, d, lk).transpose(1, 2).contiguous().to(dtype)
    o = torch.empty(h, lq, d, dtype=torch.bfloat16)
    rows = max(1, (1 << 22) // max(h * lk, 1))          # bounds the FP64 scratch to ~32 MiB
    if rows < lq:
        # split anyway: blocks of _ROW_BLOCK rows skip more of the masked keys (0.096 s
        # against 0.114 s at 2048 tokens, SmolLM2-135M's heads, measured on the CPU)
        rows = min(rows, _ROW_BLOCK)
    # The fast path's scores and P, one buffer each for every step: a fresh one per step
    # costs the page faults of a new allocation each time.
    scratch = torch.empty(h * min(rows, lq) * lk) if not exact else None
    p_bits = torch.empty(h * min(rows, lq) * lk, dtype=torch.bfloat16) \
        if scratch is not None and not native else None
    split_k, split_v = _Repeated(kq), _Repeated(vq)
    # PV as a bf16 matmul where that adds the same exact products in FP32 as the FP32 one
    # (`exact_in_bf16_matmul`; P's range is known once the step's softmax is done)
    v_low, v_high = block_exponents(vq.transpose(1, 2)) if p_bits is not None else (0, 0)
    split_v16 = _Repeated(vq.to(torch.bfloat16)) if p_bits is not None else None
    for r0 in range(0, lq, rows):
        r1 = min(lq, r0 + rows)
        n = r1 - r0
        # Keys past the block's last position are masked: their probabilities are exact
        # zeros, which form whole zero blocks and K tiles (upto is a multiple of tk), so
        # they are left out of both products.
        upto = min(lk, -(-(start + r1) // tk) * tk)
        # The query heads that share a KV head, stacked: [kv_heads, group * n, d] (head
        # kv * group + g's rows at g * n, as `o` holds them), one batch per KV head. Each
        # score and each output is the sum over the same K (d; upto) as with a batch per
        # query head, so the same bits.
        qg = qq[:, r0:r1].reshape(hkv, group * n, d)
        if scratch is not None:
            # each KV head's rows in `parts` batches (`batch_parts`), its K and V repeated
            parts = batch_parts(hkv, group * n)
            kb = split_k[parts]
            scores = torch.bmm(qg.view(hkv * parts, -1, d), kb[:, :upto].transpose(1, 2),
                               out=scratch[:h * n * upto].view(hkv * parts, -1, upto))
        else:
            scores = torch.zeros(hkv, group * n, upto)
            for d0 in range(0, d, tk):
                scores += torch.bmm(qg[:, :, d0:d0 + tk],
                                    kq[:, :upto, d0:d0 + tk].transpose(1, 2)).float()
        valid = (torch.arange(r0, r1) + start + 1).clamp(max=upto).repeat(h)
        if win is not None:
            _mask_window(scores.view(-1, upto), (torch.arange(r0, r1) + start).repeat(h), win)
        scale = softmax_scale(d)
        if native:
            pq = softmax_bf16(scores.view(-1, upto).float(), valid, scale).float()
        else:
            p16, p_low = softmax_bfp16_bf16(
                scores.view(-1, upto), valid, scale,
                out=None if p_bits is None else p_bits[:h * n * upto].view(-1, upto))
            if split_v16 is not None and exact_in_bf16_matmul(p_low, 127, v_low, v_high,
                                                              upto):
                # P <= 1: its largest exponent field is at most 127
                o[:, r0:r1] = torch.bmm(p16.view(hkv * parts, -1, upto),
                                        split_v16[parts][:, :upto]).view(h, n, d)
                continue
            pq = p16.float()
        pq = pq.view(hkv, group * n, upto).to(dtype)
        if not exact:
            acc = torch.bmm(pq.view(hkv * parts, -1, upto), split_v[parts][:, :upto])
        else:
            acc = torch.zeros(hkv, group * n, d)
            for k0 in range(0, upto, tk):
                acc += torch.bmm(pq[:, :, k0:k0 + tk], vq[:, k0:k0 + tk]).float()
        o[:, r0:r1] = to_bf16(acc).view(h, n, d)
    if bound_layout(c, "o", "head-first") == "seq-first":
        return {"o": o.transpose(0, 1).reshape(lq, h * d)}
    return {"o": o}


def _mask_window(scores: torch.Tensor, positions: torch.Tensor, win: int) -> None:
    """Writes -inf over the scores of keys at or before position - win (scores [R, keys],
    one row per query position), as apply_window_mask does in the bf16 scores before the
    softmax (attn_npu2.cc, e972f29): a row keeps the keys in (position - win, position]."""
    old = torch.arange(scores.shape[1])[None, :] <= (positions - win)[:, None]
    scores.masked_fill_(old, float("-inf"))


class _Repeated(dict[int, torch.Tensor]):
    """K or V [kv_heads, L, d] with each KV head repeated `parts` times (the key), made on
    first use."""

    def __init__(self, t: torch.Tensor) -> None:
        super().__init__({1: t})
        self.t = t

    def __missing__(self, parts: int) -> torch.Tensor:
        kv, *rest = self.t.shape
        self[parts] = self.t.unsqueeze(1).expand(kv, parts, *rest).reshape(kv * parts, *rest)
        return self[parts]


def reference(s: Shape, c: dict, x: Tensors) -> Tensors:
    out = ref_ops.attention(f32(x["q"]), f32(x["k"]), f32(x["v"]), start=s["Lk"] - s["Lq"],
                            scale=c.get("scale"), window=window(c))
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
    dv_tile recomputes QK^T per dv chunk), causal or not, at the herd's per-tile rate (at
    the native bf16 datapath's rate, gemm's BF16_DATAPATH_RATE, for datapath "bf16"), and a
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
    matmul = flops / (tiles * p.fa_tile_flops)
    if c.get("datapath", "bfp16") == "bf16":
        matmul /= BF16_DATAPATH_RATE
    return Work(matmul + steps * p.fa_step_s, 0.0)


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
    cost=COST, program=AirProgram(launch_layout, segment, launch_in=launch_in,
                                  launch_out=launch_out),
    data="flash_attention", source=SOURCE, head_first_alone=("q", "k", "v", "o"),
    numerics_changes=(((("attention_datapath", "bf16"),), "FlashAttention's two matmuls on "
                       "the native bf16 datapath (4x8x8), without rounding Q, K, V and P to "
                       "BFP16 blocks"),),
    measured=rows_at("flash_attention", "shapes",
                     lambda r: (r["heads"], r["kv_heads"], r["Lq"], r["Lk"], r["dk"], r["causal"]),
                     lambda s: (s["heads"], s["kv_heads"], s["Lq"], s["Lk"], s["head_dim"], True)),
    # Built as its own program (with its own segment and cascade routing), and the measured
    # deployment runs it alone in its dispatch: our reading, not a documented hardware limit.
    own_elf=True, attention_datapath=True,
    program_layout=ProgramLayout(lambda s: program_layout(s["head_dim"]),
                                 seq_first_outputs=("o",)),
    exact_tiles=True),)
