"""FlashAttention's MLIR-AIR program (mlir-air flash_attention/kernel_fusion_based,
attn_npu2.py): the launch layout over (q block, head group) with the sequences padded to the
walked lengths; the launch body's DDR-side puts of Q, K and V and gets of the output (upstream
issues them there, never in the segment); and the segment: a herd of q_tiles columns by
`cascade` rows streaming K and V through the memory tiles, attn_npu2.cc's micro-kernels, the
causal mask's q block from a counter each core keeps in L1, the partial softmax states merged
over cascade channels. The FlashAttention family (kernels.families.flash_attention) declares
it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

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
from ..definition.family import (
    BF16,
)
from ..definition.hardware import Hardware

if TYPE_CHECKING:
    from ..plans.plan import Launch



# --- the program -----------------------------------------------------------------------------
#
# mlir-air programming_examples/flash_attention/kernel_fusion_based/attn_npu2.py (e972f29), as
# our builder writes it. Its micro-kernels are attn_npu2.cc's extern "C" functions, compiled
# per tile (programming_examples/llms/shared/infra/external_kernels.py, compile_attn_npu2):
# lqp = the q block of one tile, lkp = the K/V chunk, dk = dv = the head-dim tile (= lkp, the
# V and output column tile may be narrower than head_dim), dk_full = dv_full = head_dim.

KERNEL_SOURCE = "programming_examples/flash_attention/kernel_fusion_based/attn_npu2.cc"


#: The native-bf16 build of attn_npu2.cc (ours; upstream has neither built nor measured it).
#: Upstream compiles it with -DAIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16 (the example's
#: Makefile, compile-kernel), which makes aie_api run its bf16 `aie::mmul<8, 8, 8>` on the
#: BFP16 MMA. Without that define AIE2P's bf16 MMA is 4x8x8, and the row count of the mmul is
#: a constexpr in matmul_vectorized_8x8x8_bf16_bf16 (`constexpr int r = 8;`), not a define:
#: our build replaces it by 4. The operands' memory layout does not change: the kernel reads
#: A and writes C as [k/s][m/r][r][s] and [n/t][m/r][r][t] row-major blocks, and an 8x8 block
#: is two 4x8 blocks one after the other; B's 8x8 blocks (s, t) are as before, and the
#: static_assert m % (2 r) == 0 still holds for every q block (lqp of 16 or more).
NATIVE_BF16_EDITS = (("constexpr int r = 8;", "constexpr int r = 4;"),)


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


def counter_slots(hd: int, dv: int) -> int:
    """The causal mask's counter in L1 (i32), in upstream's layout (attn_npu2.py): [0] the
    first q block of this launch iteration, [1] a flag set on the first iteration (L1 starts
    zeroed when the program is loaded), [2] the head group, and, with more than one V column
    tile, [3] the V column tile."""
    return 4 if hd // dv > 1 else 3


def l1_bytes(tq: int, k_tile: int, hd: int, dv: int) -> int:
    return sum(BF16 * math.prod(shape) for _, shape in l1_buffers(tq, k_tile, hd, dv)) \
        + 4 * counter_slots(hd, dv)


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


def externs(c: dict[str, Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The micro-kernels of a launch: with a sliding window (config window), the mask is
    apply_window_mask(g, q_block, kv_block, window_blocks) in place of apply_causal_mask, as
    attn_npu2.py's build_module(window=...) declares it (Xilinx/mlir-air e972f29)."""
    if c.get("window") is None:
        return EXTERNS
    return tuple(("apply_window_mask", ("g_l1", "i32", "i32", "i32"))
                 if sym == "apply_causal_mask" else (sym, args) for sym, args in EXTERNS)


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
    native = c.get("datapath", "bfp16") == "bf16"
    # lqp x lkp x dk x dv, dk_full; the native-bf16 build is its own object
    obj = f"attn_npu2_{'bf16_' if native else ''}{dims(tq, kt, kt, dv, hd)}.o"
    l2 = tuple(buf(f"qk{st}_l2", (kt, kt), BF16, "L2") for st in range(ns)) \
        + tuple(buf(f"v{st}_l2", (kt, dv), BF16, "L2") for st in range(ns)) \
        + (buf("o_l2", (q_tile, dv), BF16, "L2"),)
    l1 = tuple(buf(name, shape, BF16, "L1") for name, shape in l1_buffers(tq, kt, hd, dv)) \
        + (buf("ctr_l1", (counter_slots(hd, dv),), "i32", "L1"),)
    channels = (ChannelDecl("qk_in", (unroll, ns)),
                ChannelDecl("qk_to_l1", (unroll, ns, 1), (unroll, ns, nq)),
                ChannelDecl("v_in", (unroll, ns)),
                ChannelDecl("v_to_l1", (unroll, ns, 1), (unroll, ns, nq)),
                *(ChannelDecl(f"cascade_{k}", (nq, ns - 1), cascade=True)
                  for k in ("gp", "up", "sp")),
                ChannelDecl("o_to_l2", (nq, 1)), ChannelDecl("o_out", (unroll,)))
    defines: dict[str, Any] = {"BIT_WIDTH": 8, "lqp": tq, "lkp": kt, "dk": kt, "dk_full": hd,
                               "dv": dv, "dv_full": hd, "ROUND_CONV_EVEN": None}
    if not native:
        defines["AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16"] = None
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
        externs=tuple(Extern(sym, obj, args) for sym, args in externs(c)), channels=channels,
        flags={"omit_pingpong": "all", "compiled_for": (s["Lq"], s["Lk"], hd),
               "runtime_loop_tiling_sizes": [1, 1]},   # upstream's fa_headfirst / fa_temporal
        imports=("from air.dialects import scf",
                 "from air.dialects.affine import AffineIfOp, AffineYieldOp",
                 "from air.dialects.memref import load, store"),
        kernels=(KernelSource(obj, KERNEL_SOURCE, tuple(defines.items()),
                              edits=NATIVE_BF16_EDITS if native else ()),))


def _call(w: Writer, symbol: str, *args: str | int) -> None:
    """A micro-kernel call: L1 buffers by name, an int as an i32 constant."""
    given = (f"arith.ConstantOp(i32, {a})" if isinstance(a, int) else a for a in args)
    w(f"CallOp({symbol}, [{', '.join(given)}])")


def _when(var: str, value: int, has_else: bool = False) -> str:
    """affine.if var == value."""
    return (f"AffineIfOp(IntegerSet.get(0, 1, [AffineExpr.get_add(AffineSymbolExpr.get(0), "
            f"AffineConstantExpr.get({-value}))], [True]), cond_operands=[{var}]"
            f"{', has_else=True' if has_else else ''})")


@dataclass(frozen=True)
class _Walk:
    """What the launch body, the segment and the herd of one launch share: its sizes (q block
    of tq rows per tile, head-dim tiles dkc, V column tiles dvc, K/V chunks per stage cps),
    the walked lengths and the head grouping."""

    nq: int
    ns: int
    unroll: int
    hd: int
    heads: int
    kvh: int
    q_tile: int
    kt: int
    dv: int
    cps: int
    lq: int
    lk: int

    @property
    def tq(self) -> int:
        return self.q_tile // self.nq

    @property
    def dkc(self) -> int:
        return self.hd // self.kt

    @property
    def dvc(self) -> int:
        return self.hd // self.dv

    @property
    def group(self) -> int:
        return self.heads // self.kvh

    @property
    def first_q(self) -> int:
        """The causal mask's q block of the first query: the Lk - Lq earlier positions in
        whole blocks (0 for a prefill)."""
        return (self.lk - self.lq) // self.tq


def _walk(launch: Launch, layout: LaunchLayout) -> _Walk:
    s = launch.shape_dict
    nq, ns = layout.herd
    q_tile, dv = layout.l2[-1].shape
    kt = layout.l1[0].shape[1]
    lq, lk = padded_lengths(launch, q_tile, kt * ns)
    _heads_apart(launch, lq, lk)
    walk = _Walk(nq, ns, layout.segment[0] if layout.segment else 1, s["head_dim"], s["heads"],
                 s["kv_heads"], q_tile, kt, dv, layout.loop, lq, lk)
    if (lk - lq) % walk.tq:
        raise EmitError(f"{launch.label}: the causal mask's block indices need the {lk - lq} "
                        f"earlier positions in whole blocks of {walk.tq}")
    return walk


def _cols(f: _Walk, at_rows: str) -> str:
    """The V column tile's first element of those rows."""
    return f"at([({at_rows}, 1), (dz, {f.dv})])" if f.dvc > 1 else at_rows


def launch_in(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
              names: list[str], head_dim: int | None) -> None:
    """The launch body before the segment: which heads and V column tile this launch
    iteration takes, and every DDR-side put of Q, K and V, per head of the unroll group (the
    channel index) and cascade stage, as attn_npu2.py issues them."""
    f = _walk(launch, layout)
    w("# which heads and V columns this launch iteration takes")
    if f.dvc > 1:
        w(f"hg = at([(ly, 1)], divisor={f.dvc})  # head group; V column tile: dz")
        w(f"dz = at([(ly, 1), (hg, {-f.dvc})])")
    else:
        w("hg = at([(ly, 1)])  # head group")
    for h in range(f.unroll):
        w(f"head{h} = at([(hg, {f.unroll})], {h})" if h else f"head{h} = at([(hg, {f.unroll})])")
        w(f"kv_head{h} = at([(head{h}, 1)], divisor={f.group})  # GQA: {f.group} query heads "
          "per KV head")
    for h in range(f.unroll):
        q_at, qs = head_rows(launch, "q", f"head{h}", f.heads, f.lq, f.hd, [("lx", f.q_tile)])
        for st in range(f.ns):
            w(f"# head {h} of the group, stage {st}: the q block in {f.dkc} head-dim tile(s) "
              f"per {f.tq}-row block, then K chunks {st * f.cps}..{st * f.cps + f.cps - 1}, "
              "then V chunks")
            w(f"ChannelPut('{p}_qk_in', {arg['q']}, indices=[{h}, {st}], offsets=[0, 0, 0, "
              f"{q_at}], sizes=[{f.nq}, {f.dkc}, {f.tq}, {f.kt}], strides=[{f.tq * qs}, "
              f"{f.kt}, {qs}, 1])")
            k_at, ks = head_rows(launch, "k", f"kv_head{h}", f.kvh, f.lk, f.hd, [],
                                 st * f.cps * f.kt)
            w(f"ChannelPut('{p}_qk_in', {arg['k']}, indices=[{h}, {st}], offsets=[0, 0, 0, "
              f"{k_at}], sizes=[{f.cps}, {f.dkc}, {f.kt}, {f.kt}], strides=[{f.kt * ks}, "
              f"{f.kt}, {ks}, 1])")
            v_at, vs = head_rows(launch, "v", f"kv_head{h}", f.kvh, f.lk, f.hd, [],
                                 st * f.cps * f.kt)
            w(f"ChannelPut('{p}_v_in', {arg['v']}, indices=[{h}, {st}], offsets=[0, 0, "
              f"{_cols(f, v_at)}], sizes=[{f.cps}, {f.kt}, {f.dv}], strides=[{f.kt * vs}, "
              f"{vs}, 1])")


def launch_out(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
               names: list[str], head_dim: int | None) -> None:
    """The launch body after the segment: each head's output block from its memory tile to
    DDR (after the segment that produces it, as attn_npu2.py orders them), with the heads
    `launch_in` named."""
    f = _walk(launch, layout)
    for h in range(f.unroll):
        o_at, os_ = head_rows(launch, "o", f"head{h}", f.heads, f.lq, f.hd, [("lx", f.q_tile)])
        w(f"ChannelGet('{p}_o_out', {arg['o']}, indices=[{h}], offsets=[0, {_cols(f, o_at)}], "
          f"sizes=[{f.q_tile}, {f.dv}], strides=[{os_}, 1])")


def _counter_start(w: Writer, f: _Walk) -> None:
    """On the first launch iteration (the flag in [1] still 0), the counter is set: the
    first q block, the head group and the V column tile at 0."""
    w("# the causal mask's counter: this core's own count of launch iterations (the array")
    w("# runs one configuration for all of them, so it never sees the launch index)")
    for slot in range(counter_slots(f.hd, f.dv)):
        w(f"ctr{slot} = at([], {slot})" if slot else "ctr0 = at([])")
    w("first_run = arith.CmpIOp(arith.CmpIPredicate.eq, load(ctr_l1, [ctr1]), "
      "arith.ConstantOp(i32, 0))")
    w("boot = scf.IfOp(first_run)")
    w("with InsertionPoint(boot.then_block):")
    w.indent()
    w(f"store(arith.ConstantOp(i32, {f.first_q}), ctr_l1, [ctr0])")
    w("store(arith.ConstantOp(i32, 1), ctr_l1, [ctr1])")
    for slot in range(2, counter_slots(f.hd, f.dv)):
        w(f"store(arith.ConstantOp(i32, 0), ctr_l1, [ctr{slot}])")
    w("scf.YieldOp([])")
    w.dedent()


def _counter_step(w: Writer, f: _Walk) -> None:
    """After each launch iteration: the V column tile ([3]) wraps into the head group ([2]),
    which wraps into the next q block ([0] += q_tiles), in the launch grid's order (its last
    index fastest, as attn_npu2.py counts it)."""
    groups = f.heads // f.unroll

    def wrap(slot: int, size: int, then: Callable[[], None]) -> None:
        w(f"nxt{slot} = arith.AddIOp(load(ctr_l1, [ctr{slot}]), arith.ConstantOp(i32, 1))"
          ".result")
        w(f"wrapped{slot} = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.sge, nxt{slot}, "
          f"arith.ConstantOp(i32, {size})))")
        w(f"with InsertionPoint(wrapped{slot}.then_block):")
        w.indent()
        w(f"store(arith.ConstantOp(i32, 0), ctr_l1, [ctr{slot}])")
        then()
        w("scf.YieldOp([])")
        w.dedent()
        w(f"counting{slot} = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.slt, nxt{slot}, "
          f"arith.ConstantOp(i32, {size})))")
        w(f"with InsertionPoint(counting{slot}.then_block):")
        w.indent()
        w(f"store(nxt{slot}, ctr_l1, [ctr{slot}])")
        w("scf.YieldOp([])")
        w.dedent()

    def next_q() -> None:
        w("store(arith.AddIOp(load(ctr_l1, [ctr0]), arith.ConstantOp(i32, "
          f"{f.nq})).result, ctr_l1, [ctr0])")

    def next_group() -> None:
        wrap(2, groups, next_q)

    w("# count this launch iteration: V column tile, then head group, then q block")
    if f.dvc > 1:
        wrap(3, f.dvc, next_group)
    else:
        next_group()


def segment(w: Writer, p: str, launch: Launch, layout: LaunchLayout, arg: dict[str, str],
            names: list[str], head_dim: int | None) -> None:
    f = _walk(launch, layout)
    nq, ns, kt, tq, dkc, cps, dv = f.nq, f.ns, f.kt, f.tq, f.dkc, f.cps, f.dv
    w("# memory-tile relays: Q, K and V from the launch body, each chunk re-tiled 8x8 for the")
    w("# matmuls, broadcast along the stage's row")
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
    _counter_start(w, f)
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
    w("# the mask's q block: the counter's first q block of this iteration + tx")
    w("q_block = arith.AddIOp(load(ctr_l1, [ctr0]), arith.index_cast(i32, tx)).result")
    w(f"for j in range_(0, {cps}):")
    w.indent()
    _call(w, "zero_fill_g_bf16", "g_l1")
    for c in range(dkc):
        w(f"ChannelGet('{p}_qk_to_l1', qk_l1, indices=[gx, ty, tx])")
        _call(w, "matmul_a_b_bf16", f"q{c}_l1", "qk_l1", "g_l1")
    w(f"ChannelGet('{p}_v_to_l1', v_l1, indices=[gx, ty, tx])")
    w("# the mask takes the block indices: the q block, and KV block = stage x chunks per "
      "stage + j")
    kv_block = f"arith.index_cast(i32, at([(ty, {cps}), (j, 1)]))"
    window = launch.config_dict.get("window")
    if window is None:
        _call(w, "apply_causal_mask", "g_l1", "q_block", kv_block)
    else:
        w("# a sliding window: keys in (q - window, q], the window in K chunks")
        _call(w, "apply_window_mask", "g_l1", "q_block", kv_block, int(window) // kt)
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
    _counter_step(w, f)
    free(w, layout.l1)
    w.dedent()

    w(f"for t in range_(0, {nq}):")
    w.indent()
    w(f"ChannelGet('{p}_o_to_l2', o_l2, indices=[t, 0], offsets=[at([(t, {tq})]), 0], "
      f"sizes=[{tq}, {dv}], strides=[{dv}, 1])")
    w("yield_([])")
    w.dedent()
    w(f"ChannelPut('{p}_o_out', o_l2, indices=[gx])")
