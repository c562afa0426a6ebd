"""The MLIR-AIR programs' DDR addressing, held to the layout each operand is bound in. The
evaluator of air_source_evaluator.py runs the emitted source's syntax tree symbolically and
lists, for each DMA (ChannelPut, ChannelGet, dma_memcpy_nd) that touches a function argument,
the flat elements its offsets, sizes and strides walk, in order. Those are compared with the
elements torch finds for the logical slice in the operand's physical layout: seq-first
[L, heads * head_dim] or head-first [heads, L, head_dim] for attention, row-major [M, N] or
[N / head_dim, M, head_dim] for a GEMM's C, and the position of each stored row for RoPE.
Every emitted program also uses only names it defines or imports, and keeps its hierarchy
bodies isolated from above. mlir-air is not installed here: nothing is built."""

from __future__ import annotations

import ast
import builtins
from collections.abc import Iterator
from typing import Any

import pytest
import torch
from air_source_evaluator import (
    STAR,
    Op,
    attention_elements,
    c_elements,
    covers_once,
    decorator_of,
    emit,
    follow,
    make_launch,
    touching,
    trace,
)

from npu_deploy.kernels import SPECS, XDNA2
from npu_deploy.kernels.air_programs.air import EmitError, emit_dispatch, pad_sequences
from npu_deploy.kernels.plans.plan import Dispatch

# --- FlashAttention --------------------------------------------------------------------------

ATTENTION = {"heads": 8, "kv_heads": 2, "Lq": 512, "Lk": 512, "head_dim": 64}
BOTH = ["seq-first", "head-first"]


ATTENTION_CASES = [   # shape, config: head_dim 64 in one tile; head_dim 128 in two head-dim
    (ATTENTION, {}),     # tiles and two V column tiles, a cache longer than the queries
    ({"heads": 4, "kv_heads": 2, "Lq": 256, "Lk": 512, "head_dim": 128}, {"dv_tile": 64}),
]


@pytest.mark.parametrize("layout", BOTH)
@pytest.mark.parametrize("shape,config", ATTENTION_CASES, ids=["hd64", "hd128-dv64"])
def test_flash_attention_moves_each_heads_rows_in_its_layout(
        shape: dict[str, int], config: dict[str, Any], layout: str) -> None:
    """Q, K and V reach the compute tiles through each cascade stage's memory-tile relay,
    which forwards them in k_tile x k_tile chunks (qk) and k_tile x dv_tile chunks (v), in
    the order they arrive: per stage, the q block (q tile by q tile, head-dim tile by
    head-dim tile: chunk n goes to the herd column n // head-dim tiles), then the stage's K
    chunks, and its V chunks. Each L3 -> L2 transfer, cut into those chunks, must be the
    head's rows at the right physical elements; the output write the q block's rows."""
    s = shape
    launch = make_launch("flash_attention", s, config, {o: layout for o in "qkvo"})
    c = {**SPECS["flash_attention"].tunables, **launch.config_dict}
    q_tile, kt, nq, ns, unroll = (c[k] for k in ("q_tile", "k_tile", "q_tiles", "cascade",
                                                  "heads_per_unroll"))
    hd, dv = s["head_dim"], c.get("dv_tile") or kt
    group, tq, dkc, dvc = s["heads"] // s["kv_heads"], q_tile // nq, hd // kt, hd // dv
    cps = -(-s["Lk"] // (kt * ns))                # K/V chunks per cascade stage
    (q, k, v, o), ops = trace(emit(launch))
    q_phys = attention_elements(s["heads"], s["Lq"], hd, layout)
    kv_phys = attention_elements(s["kv_heads"], s["Lk"], hd, layout)
    blocks = s["Lq"] // q_tile

    def head_of(op: Op) -> tuple[int, int]:     # launch y: head group x V column tile; the
        group_of, dz = divmod(op.env["ly"], dvc)  # channel's first index: the head in the group
        return group_of * unroll + op.index("indices")[0], dz

    # every DDR-side transfer is in the launch body (upstream's attention programs issue them
    # there), with the head of the group as the channel's first index
    ddr = [op for op in ops if op.kind in ("ChannelPut", "ChannelGet")
           and op.ref(1) in (q, k, v, o)]
    assert ddr and all("gx" not in op.env for op in ddr)
    # Q: each stage's relay gets the whole q block, q tile by q tile, head-dim tile by tile
    moves = touching(ops, "ChannelPut", q, 1)
    assert len(moves) == blocks * s["heads"] * dvc * ns
    for op in moves:
        (head, dz), (h, stage) = head_of(op), op.index("indices")
        assert 0 <= h < unroll and 0 <= stage < ns
        rows = q_phys[head, op.env["lx"] * q_tile:(op.env["lx"] + 1) * q_tile]
        chunks = rows.reshape(nq, tq, dkc, kt).permute(0, 2, 1, 3)    # [q tile, hd tile, ...]
        assert torch.equal(op.pattern(), chunks.reshape(-1)), (op.env, stage)
    for key in {(op.env["lx"], *head_of(op), op.index("indices")[1]) for op in moves}:
        once = [op.pattern() for op in moves if (op.env["lx"], *head_of(op),
                                                 op.index("indices")[1]) == key]
        assert len(once) == 1
    # K and V: stage st takes chunks st x cps .. st x cps + cps - 1 of the head's KV head
    for arg, width in ((k, kt), (v, dv)):
        moves = [op for op in ops if op.kind == "ChannelPut" and op.ref(1) == arg]
        assert len(moves) == blocks * s["heads"] * dvc * ns
        for op in moves:
            (head, dz), (_, stage) = head_of(op), op.index("indices")
            first = stage * cps * kt
            rows = kv_phys[head // group, first:first + cps * kt]
            if arg == k:           # each chunk in head-dim tiles, as the relay forwards it
                want = rows.reshape(cps, kt, dkc, kt).permute(0, 2, 1, 3)
            else:                  # the V column tile of this launch
                want = rows[:, dz * dv:(dz + 1) * dv]
            assert torch.equal(op.pattern(), want.reshape(-1)), (arg, op.env, stage)
        # every stage of every head together reads each row of its KV head once
        per_head = {}
        for op in moves:
            per_head.setdefault(head_of(op), []).append(op.pattern())
        for (head, dz), patterns in per_head.items():
            want = kv_phys[head // group][:, dz * width:(dz + 1) * width] if arg == v \
                else kv_phys[head // group]
            got = torch.cat(patterns).reshape(blocks, -1).unique(dim=0)  # same per q block
            assert got.shape[0] == 1 and torch.equal(got[0].sort().values,
                                                     want.reshape(-1).sort().values)
    # the output: each launch writes its q block's rows of its head and V column tile
    writes = touching(ops, "ChannelGet", o, 1)
    assert len(writes) == blocks * s["heads"] * dvc
    for op in writes:
        head, dz = head_of(op)
        rows = q_phys[head, op.env["lx"] * q_tile:(op.env["lx"] + 1) * q_tile]
        assert torch.equal(op.pattern(), rows[:, dz * dv:(dz + 1) * dv].reshape(-1)), op.env
    assert covers_once([op.pattern() for op in writes], q_phys.numel())


# --- decode attention ------------------------------------------------------------------------

DECODE = {"heads": 9, "kv_heads": 3, "Lq": 1, "Lk": 128, "head_dim": 64}
DECODE_CASES = [   # shape, config: one launch of 3 columns; two launches of 2 columns;
    (DECODE, None),   # a cache whose length is not a multiple of k_tile (the usual decode)
    ({"heads": 8, "kv_heads": 4, "Lq": 1, "Lk": 128, "head_dim": 64}, {"k_tile": 64, "herd_n": 2}),
    ({**DECODE, "Lk": 129}, {"k_tile": 64, "herd_n": 3}),
]


@pytest.mark.parametrize("layout", BOTH)
@pytest.mark.parametrize("shape,config", DECODE_CASES,
                         ids=["one-launch", "two-launches", "partial-last-chunk"])
def test_decode_attention_reads_each_kv_head_from_the_cache_in_its_layout(
        shape: dict[str, int], config: dict[str, Any] | None, layout: str) -> None:
    """Each column's relay carries its KV head's K rows, in order, then its V rows (the
    herd takes all scores before any value), every row of the cache once; the group's
    queries come from, and its output goes to, the group's rows."""
    s = shape
    launch = make_launch("npu_decode_attention", s, config, {"k": layout, "v": layout})
    c = {**SPECS["npu_decode_attention"].tunables, **launch.config_dict}
    cols = min(c["herd_n"], s["kv_heads"])
    group, hd, lk = s["heads"] // s["kv_heads"], s["head_dim"], s["Lk"]
    (q, k, v, o, length), ops = trace(emit(launch))
    kv_phys = attention_elements(s["kv_heads"], lk, hd, layout)
    q_phys = attention_elements(s["heads"], 1, hd, "head-first")     # Lq = 1: either layout

    def kv_head(op: Op) -> int:
        (column,) = op.index("indices")
        return op.env["lx"] * cols + column

    rows = [op for op in ops if op.kind == "ChannelPut" and op.ref(1) in (k, v)]
    assert len(rows) == 2 * s["kv_heads"] * lk
    by_head: dict[int, list[tuple[str, torch.Tensor]]] = {}
    for op in rows:
        by_head.setdefault(kv_head(op), []).append((op.ref(1), op.pattern()))
    assert sorted(by_head) == list(range(s["kv_heads"]))
    for head, moved in by_head.items():
        assert [name for name, _ in moved] == [k] * lk + [v] * lk, head
        for i, (_, pattern) in enumerate(moved):
            assert torch.equal(pattern, kv_phys[head, i % lk]), (head, i)
    for arg in (k, v):
        assert covers_once([op.pattern() for op in rows if op.ref(1) == arg], kv_phys.numel())
    for arg, kind in ((q, "ChannelPut"), (o, "ChannelGet")):      # the group's q and o
        moves = touching(ops, kind, arg, 1)
        assert len(moves) == s["kv_heads"]
        for op in moves:
            kv = kv_head(op)
            assert torch.equal(op.pattern(), q_phys[kv * group:(kv + 1) * group].reshape(-1))
    # every column reads the step's length (one i32, the last argument) after its queries
    puts = [op for op in ops if op.kind == "ChannelPut" and op.ref(1) in (q, length)]
    assert [op.ref(1) for op in puts] == [q, length] * s["kv_heads"]
    assert all(op.pattern().tolist() == [0] for op in puts if op.ref(1) == length)


# --- GEMM's C --------------------------------------------------------------------------------

GEMM = {"M": 256, "K": 256, "N": 384}
TILES = {"tile_m": 64, "tile_k_l2": 256, "tile_k_l1": 32, "herd_m": 2}
C_CASES = [   # layout, tile_n, herd_n, head_dim
    ("seq-first", 64, 2, None),
    ("head-first", 64, 2, 64),      # span 128: two whole heads per block
    ("head-first", 64, 1, 64),      # span 64 = head_dim
    ("head-first", 32, 1, 64),      # span 32: half a head per block
    ("head-first", 64, 1, 128),     # span 64: half a head per block
]


def c_drains(source: str, rows: int, span: int) -> list[tuple[Op, torch.Tensor, torch.Tensor]]:
    """Each DMA that drains a C block from the memory tile to DDR, with the logical row and
    column of C each element it moves holds. A fused-cast GEMM drains into its FP32 scratch
    (C's layout; its cast launch is element-wise), the other methods into C. c_l2 is
    [herd_m, tile_m, span] row-major: its element p is C[lx * rows + p // span,
    ly * span + p % span], read in the source pattern's order."""
    (_, _, c, *scratch), ops = trace(source)
    c = scratch[0] if scratch else c
    out = []
    for op in touching(ops, "dma_memcpy_nd", c, 0):
        if op.ref(1) == "c_l2":
            src = op.pattern("src_", whole=rows * span)
            out.append((op, op.env["lx"] * rows + src // span, op.env["ly"] * span + src % span))
    return out


@pytest.mark.parametrize("layout,tile_n,herd_n,head_dim", C_CASES,
                         ids=[f"{c[0]}-span{c[1] * c[2]}-hd{c[3]}" for c in C_CASES])
def test_gemm_drains_each_c_block_to_its_elements(layout: str, tile_n: int, herd_n: int,
                                                  head_dim: int | None) -> None:
    M, N = GEMM["M"], GEMM["N"]
    config = {**TILES, "tile_n": tile_n, "herd_n": herd_n}
    launch = make_launch("gemm_bf16", GEMM, config, {"c": layout})
    rows, span = TILES["tile_m"] * TILES["herd_m"], tile_n * herd_n
    phys = c_elements(M, N, layout, head_dim)
    drains = c_drains(emit(launch, head_dim), rows, span)
    assert len(drains) == (M // rows) * (N // span)
    for op, m, n in drains:
        assert torch.equal(op.pattern("dst_"), phys[m, n]), op.env
    assert covers_once([op.pattern("dst_") for op, _, _ in drains], M * N)


@pytest.mark.parametrize("tile_n,herd_n,head_dim,match", [
    (32, 3, 64, "divide one another"),      # span 96 and 64
    (64, 2, None, "needs the model's head_dim"),
    (64, 2, 256, "dividing N"),              # 384 is not whole heads of 256
])
def test_a_head_first_c_the_dma_cannot_write_is_refused(tile_n: int, herd_n: int,
                                                        head_dim: int | None,
                                                        match: str) -> None:
    launch = make_launch("gemm_bf16", GEMM, {**TILES, "tile_n": tile_n, "herd_n": herd_n},
                         {"c": "head-first"})
    with pytest.raises(EmitError, match=match):
        emit(launch, head_dim)


@pytest.mark.parametrize("tile_n,herd_n", [(64, 2), (32, 1)], ids=["whole-heads", "half-head"])
def test_a_head_first_c_of_a_padded_sequence_keeps_each_head_in_its_rows(tile_n: int,
                                                                         herd_n: int) -> None:
    """M = 100 in blocks of 128 rows: C is stored [heads, L_pad, hd] with L_pad = 128, and
    C[m, n] (head h = n // hd) lands at h * L_pad * hd + m * hd + n mod hd, every padded
    row of each head inside its own head: no element written twice."""
    M, K, N, hd = 100, 256, 384, 64
    config = {**TILES, "tile_n": tile_n, "herd_n": herd_n}
    (dispatch,) = pad_sequences([Dispatch("one", (make_launch(
        "gemm_bf16", {"M": M, "K": K, "N": N}, config, {"c": "head-first"}),))])
    launch = dispatch.launches[0]
    assert launch.binding("c").seq_pad == (M, 128)
    rows, span, pad = TILES["tile_m"] * TILES["herd_m"], tile_n * herd_n, 128
    drains = c_drains(emit_dispatch(dispatch, XDNA2, hd).source, rows, span)
    assert len(drains) == (pad // rows) * (N // span)
    for op, m, n in drains:
        assert torch.equal(op.pattern("dst_"), n // hd * pad * hd + m * hd + n % hd), op.env
    assert covers_once([op.pattern("dst_") for op, _, _ in drains], N // hd * pad * hd)


def test_a_head_first_c_whose_heads_would_overlap_is_refused() -> None:
    launch = make_launch("gemm_bf16", {"M": 100, "K": 256, "N": 384},
                         {**TILES, "tile_n": 64, "herd_n": 2}, {"c": "head-first"})
    with pytest.raises(EmitError, match="pad the sequence"):
        emit(launch, 64)


# --- RoPE ------------------------------------------------------------------------------------

ROPE = {"rows": 9 * 128, "width": 64, "seq": 128}


@pytest.mark.parametrize("layout", BOTH)
def test_rope_reads_the_table_row_of_each_stored_rows_position(layout: str) -> None:
    s = ROPE
    launch = make_launch("rope", s, None, {"x": layout, "y": layout})
    c = {**SPECS["rope"].tunables, **launch.config_dict}
    tile_rows, hm, width, seq = c["tile_rows"], c["herd_m"], s["width"], s["seq"]
    heads = s["rows"] // seq
    (x, _, _), ops = trace(emit(launch))
    # the position of each stored row of x: [seq, heads, hd] or [heads, seq, hd]
    positions = torch.arange(seq)[:, None].expand(seq, heads) if layout == "seq-first" \
        else torch.arange(seq)[None, :].expand(heads, seq)
    position = positions.reshape(-1)
    table = torch.arange(seq * width).reshape(seq, width)
    # one LUT row ([cos | sin] of the position, rope_halfsplit.cc's layout) per row
    reads = [op for op in ops if op.kind == "dma_memcpy_nd" and op.ref(0) == "lut_l1"]
    assert len(reads) == s["rows"]
    seen = []
    for op in reads:
        j = op.index("dst_offsets")[0] // width              # the row of the block it fills
        row = (op.env["i"] * hm + op.env["tx"]) * tile_rows + j
        assert torch.equal(op.pattern("src_"), table[position[row]]), (op.env, j)
        assert torch.equal(op.pattern("dst_"), torch.arange(width) + j * width)
        seen.append(row)
    assert sorted(seen) == list(range(s["rows"]))
    # rope(input, lut, output, dims) once per row, on the whole row buffers: one row per DMA,
    # as upstream's rope_halfsplit.py moves it
    assert tile_rows == 1
    calls = [op for op in ops if op.kind == "CallOp"]
    assert len(calls) == s["rows"]
    for op in calls:
        assert [ast.unparse(a) for a in op.call.args[1].elts] == \
            ["x_l1", "lut_l1", "y_l1", f"arith.ConstantOp(i32, {width})"]
    # ...and the block of x it goes with is those rows
    blocks = touching(ops, "dma_memcpy_nd", x, 1)
    assert len(blocks) == s["rows"] // tile_rows
    for op in blocks:
        first = (op.env["i"] * hm + op.env["tx"]) * tile_rows * width
        assert torch.equal(op.pattern("src_"), torch.arange(tile_rows * width) + first)


# --- bias add --------------------------------------------------------------------------------

BIAS = {"rows": 128, "width": 1152}


@pytest.mark.parametrize("layout", BOTH)
def test_bias_add_adds_each_elements_bias_column(layout: str) -> None:
    s, hd = BIAS, 64
    launch = make_launch("bias_add", s, None, {"x": layout, "y": layout})
    (x, _, _), ops = trace(emit(launch, hd))
    n = s["rows"] * s["width"]
    # the bias column of each element of x, in the layout x is stored in
    columns = torch.arange(s["width"]).expand(s["rows"], s["width"])
    if layout == "head-first":
        columns = columns.reshape(s["rows"], -1, hd).transpose(0, 1)
    column = columns.reshape(-1)
    assert not [op for op in ops if op.kind == "CallOp"]        # inline, as upstream
    stores = [op for op in ops if op.kind == "transfer_write"]
    firsts = []
    for op in stores:
        e = op.env["e"]                     # the element of x the vector starts at
        assert e == op.env["offset"] + op.env["lane"]
        if e < n:                           # the last round's vectors run into the padding
            assert torch.equal(column[e:e + 16], op.env["column"] + torch.arange(16)), e
            firsts.append(e)
    assert sorted(firsts) == list(range(0, n, 16))


def test_a_head_first_bias_add_needs_head_dim() -> None:
    launch = make_launch("bias_add", BIAS, None, {"x": "head-first", "y": "head-first"})
    with pytest.raises(EmitError, match="head_dim"):
        emit(launch)


# --- GELU: a 2-D herd (herd_rows rows), compute inline ------------------------------------------

GELU = {"rows": 128, "width": 1536}


@pytest.mark.parametrize("herd_rows", [2, 1, 4])
def test_gelu_moves_every_element_in_and_out_once_over_a_two_dimensional_herd(
        herd_rows: int) -> None:
    s = GELU
    launch = make_launch("gelu", s, {"herd_m": 4, "herd_rows": herd_rows, "tile": 1024})
    (x, y), ops = trace(emit(launch))
    n = s["rows"] * s["width"]
    reads, writes = touching(ops, "dma_memcpy_nd", x, 1), touching(ops, "dma_memcpy_nd", y, 0)
    assert len(reads) == len(writes) == n // 1024
    assert covers_once([op.pattern("src_") for op in reads], n)
    assert covers_once([op.pattern("dst_") for op in writes], n)
    # each tile (tx, ty) writes back the very block it read
    for r, w in zip(reads, writes, strict=True):
        assert r.env == w.env and torch.equal(r.pattern("src_"), w.pattern("dst_"))
    assert {(op.env["tx"], op.env["ty"]) for op in reads} == \
        {(tx, ty) for tx in range(4) for ty in range(herd_rows)}
    assert not [op for op in ops if op.kind == "CallOp"]        # no micro-kernel


PARTIAL = {"rows": 2 * 64, "width": 128, "seq": 64}      # Phi-4-mini's head: 96 of 128


def test_a_partial_rotary_calls_rope_partial_with_the_rotated_dims() -> None:
    """rope_partial(input, lut, output, dims, rope_dims) once per row, on the same row
    buffers and LUT rows (head_dim wide) as rope (rope_halfsplit.cc)."""
    config = {**SPECS["rope"].tunables, "herd_m": 8, "rope_dim": 96}
    launch = make_launch("rope", PARTIAL, config)
    source = emit(launch)
    (_, _, _), ops = trace(source)
    calls = [op for op in ops if op.kind == "CallOp"]
    assert len(calls) == PARTIAL["rows"]
    for op in calls:
        assert ast.unparse(op.call.args[0]) == "rope_partial"
        assert [ast.unparse(a) for a in op.call.args[1].elts] == \
            ["x_l1", "lut_l1", "y_l1", "arith.ConstantOp(i32, 128)", "arith.ConstantOp(i32, 96)"]
    reads = [op for op in ops if op.kind == "dma_memcpy_nd" and op.ref(0) == "lut_l1"]
    assert all(op.pattern("dst_").numel() == 128 for op in reads)
    assert undefined(source) == []


@pytest.mark.parametrize("rope_dim,ok", [(96, True), (128, True), (64, True), (48, False),
                                         (112, False), (0, True)])
def test_the_checker_holds_rope_partial_to_whole_vectors(rope_dim: int, ok: bool) -> None:
    """rope_dims a multiple of 32 (16-lane halves) and the copied tail of 16-lane vectors;
    0 (no rope_dim) rotates the whole row."""
    from npu_deploy.kernels.definition.checker import check
    from npu_deploy.kernels.definition.rules import blocking

    config = {**SPECS["rope"].tunables, "herd_m": 8, "rope_dim": rope_dim}
    found = blocking(check(SPECS["rope"], PARTIAL, config, XDNA2))
    assert (not found) == ok, found
    if not ok:
        assert any("rope_partial" in f.message for f in found)


# --- names -----------------------------------------------------------------------------------

PROGRAMS = [
    ("gemm_bf16", {"M": 2048, "K": 2048, "N": 2048}, {"tile_m": 64, "tile_k_l2": 256,
                                                       "tile_k_l1": 32, "tile_n": 128,
                                                       "herd_m": 8, "herd_n": 4}, {}),
    ("gemm_bf16", GEMM, {**TILES, "tile_n": 64, "herd_n": 2}, {"c": "head-first"}),
    ("gemm_bf16", GEMM, {**TILES, "tile_n": 32, "herd_n": 1}, {"c": "head-first"}),
    ("gemm_fp32", {"M": 128, "K": 576, "N": 1536}, None, {}),
    ("gemv", {"M": 2048, "K": 2048}, None, {}),
    ("rmsnorm", {"rows": 128, "width": 576}, None, {}),
    ("qk_norm", {"rows": 2048, "width": 128}, None, {}),
    ("rope", ROPE, None, {}),
    ("rope", ROPE, None, {"x": "head-first", "y": "head-first"}),
    ("silu_mul", {"rows": 128, "width": 1536}, None, {}),
    ("add", {"rows": 128, "width": 576}, None, {}),
    ("bias_add", {"rows": 128, "width": 1152}, None, {}),
    ("bias_add", BIAS, None, {"x": "head-first", "y": "head-first"}),
    ("gelu", GELU, None, {}),
    ("flash_attention", {"heads": 32, "kv_heads": 8, "Lq": 2048, "Lk": 2048, "head_dim": 64},
     {}, {}),
    ("flash_attention", ATTENTION, {}, {o: "head-first" for o in "qkvo"}),
    ("npu_decode_attention", {"heads": 9, "kv_heads": 3, "Lq": 1, "Lk": 129, "head_dim": 64},
     None, {}),
    ("npu_decode_attention", DECODE, None, {"k": "head-first", "v": "head-first"}),
]


def _bound(stmts: list[ast.stmt]) -> set[str]:
    """The names a scope binds: assignments, loop targets, defs, imports (not star), not
    looking into nested functions."""
    names: set[str] = set()
    for stmt in stmts:
        for node in _in_scope(stmt):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.FunctionDef):
                names.add(node.name)
            elif isinstance(node, ast.ImportFrom | ast.Import):
                names |= {a.asname or a.name for a in node.names if a.name != "*"}
    return names


def _in_scope(node: ast.AST) -> Iterator[ast.AST]:
    """`node` and what it holds that runs in its scope: a nested function's decorators and
    defaults, not its body."""
    yield node
    if isinstance(node, ast.FunctionDef):
        for sub in (*node.decorator_list, *node.args.defaults):
            yield from _in_scope(sub)
        return
    for child in ast.iter_child_nodes(node):
        yield from _in_scope(child)


def undefined(source: str) -> list[tuple[str, str]]:
    """(scope, name) for each name a program reads that nothing in reach defines. The bodies
    of air.launch, air.segment and air.herd are isolated from above: they see the module's
    and build_module's names (helpers, types, micro-kernel declarations) and their own, not
    the values of the regions around them, which must come in as operands."""
    tree = ast.parse(source)
    module = (set(dir(builtins)) | STAR | _bound(tree.body), "module")
    missing: list[tuple[str, str]] = []

    def check(body: list[ast.stmt], scopes: list[tuple[set[str], str]]) -> None:
        visible = set().union(*(names for names, _ in scopes))
        for stmt in body:
            for node in _in_scope(stmt):
                if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) \
                        and node.id not in visible:
                    missing.append((scopes[-1][1], node.id))
                if isinstance(node, ast.FunctionDef):
                    own = _bound(node.body) | {a.arg for a in node.args.args}
                    outer = scopes[:2] if decorator_of(node) is not None else scopes
                    check(node.body, [*outer, (own, node.name)])

    check(tree.body, [module])
    return missing


@pytest.mark.slow         # every kernel program built and read: ~12 s in all
@pytest.mark.parametrize("kernel,shape,config,layouts", PROGRAMS,
                         ids=[f"{p[0]}-{'-'.join(sorted(set(p[3].values()))) or 'seq-first'}"
                              for p in PROGRAMS])
def test_every_program_uses_only_names_it_defines_or_imports(
        kernel: str, shape: dict[str, int], config: dict[str, Any] | None,
        layouts: dict[str, str]) -> None:
    source = emit(make_launch(kernel, shape, config, layouts), head_dim=64)
    assert "from air.dialects import arith" in source.splitlines()
    assert undefined(source) == []
    assert follow(source) > 0          # every index it computes is in reach


def test_the_name_check_sees_a_missing_import_and_a_value_from_above() -> None:
    source = emit(make_launch("bias_add", BIAS))        # its size arguments: arith constants
    without = source.replace("from air.dialects import arith\n", "")
    assert undefined(source) == [] and "arith" in {name for _, name in undefined(without)}
    source = emit(make_launch("gemv", {"M": 2048, "K": 2048}))
    # the herd reads the launch index lx: taken away from its operands, it is a value from above
    leaky = source.replace("sizes=[8, 1], operands=[lx, ly, ", "sizes=[8, 1], operands=[") \
        .replace("(tx, ty, hsx, hsy, lx, ly, ", "(tx, ty, hsx, hsy, ")
    assert leaky != source
    assert {name for _, name in undefined(leaky)} == {"lx"}
    with pytest.raises(KeyError, match="lx"):
        follow(leaky)


def test_decode_attention_refuses_columns_without_a_kv_head() -> None:
    launch = make_launch("npu_decode_attention", {**DECODE, "heads": 12, "kv_heads": 3},
                         {"k_tile": 64, "herd_n": 2}, {})
    with pytest.raises(EmitError, match="3 KV heads over herd_n=2"):
        emit(launch)


@pytest.mark.parametrize("parts,tile_n,herd_n", [(2, 64, 1), (3, 32, 2), (1, 64, 2)])
def test_gemm_reads_b_stored_in_column_blocks(parts: int, tile_n: int, herd_n: int) -> None:
    """B as b_parts column blocks [b_parts, K, N / b_parts] (the layout the NPU backend writes,
    `column_blocks`): every K step of every launch column reads its window of B."""
    from npu_deploy.kernels.families.gemm_numerics import column_blocks

    K, N = GEMM["K"], GEMM["N"]
    config = {**TILES, "tile_k_l2": 64, "tile_n": tile_n, "herd_n": herd_n, "b_parts": parts}
    (_, b, *_), ops = trace(emit(make_launch("gemm_bf16", GEMM, config)))
    logical = torch.arange(K * N).reshape(K, N)            # B[k, n] -> its logical index
    stored = column_blocks(logical, parts).reshape(-1)      # the buffer the NPU gets
    tk2, span = config["tile_k_l2"], tile_n * herd_n
    reads = [op for op in touching(ops, "dma_memcpy_nd", b, 1)]
    assert len(reads) == (GEMM["M"] // (TILES["tile_m"] * TILES["herd_m"])) * (N // span) \
        * (K // tk2)
    for op in reads:
        k0, n0 = op.env["k2"] * tk2, op.env["ly"] * span
        window = logical[k0:k0 + tk2, n0:n0 + span].reshape(-1)
        assert torch.equal(stored[op.pattern("src_")], window), op.env


# --- GEMM: the micro-kernel's blocked L1 layout -------------------------------------------------

def kernel_block(rows: int, cols: int) -> torch.Tensor:
    """[rows, cols]: where mm_aie2p.cc keeps each element of an L1 tile (8 x 8 blocks of 64
    contiguous elements, row-major inside). Its pointer walk (matmul_vectorized_2x2_mmul)
    reads A's block (z, i) at (i * rowA + z) * 64 -- blocks ordered [k / 8][m / 8] -- B's
    block (i, j) at (j * colA + i) * 64 and C's (z, j) at (j * rowA + z) * 64: the column
    block outermost for all three."""
    r, c = torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij")
    return ((c // 8) * (rows // 8) + r // 8) * 64 + (r % 8) * 8 + c % 8


GEMM_METHODS = [("gemm_bf16", "drain"), ("gemm_bf16", "fused-cast"), ("gemm_bf16", "direct"),
                ("gemm_fp32", "external")]


@pytest.mark.parametrize("kernel,method", GEMM_METHODS, ids=[f"{k}-{m}" for k, m in GEMM_METHODS])
def test_gemm_tiles_land_where_the_micro_kernel_reads_them(kernel: str, method: str) -> None:
    """Every L2 -> L1 DMA of A and B puts element (i, k) of the core's logical tile where
    mm_aie2p.cc reads it, and the L1 -> L2 drain takes element (i, j) of C from where the
    kernel wrote it to the core's place in the herd row's C tiles."""
    config = {**TILES, "tile_n": 64, "herd_n": 2, "method": method}
    tm, tk1, tk2, tn, hn = 64, 32, 256, 64, 2
    span = tn * hn
    _, ops = trace(emit(make_launch(kernel, GEMM, config)))
    a_at, b_at, c_at = kernel_block(tm, tk1), kernel_block(tk1, tn), kernel_block(tm, tn)
    m, k = torch.meshgrid(torch.arange(tm), torch.arange(tk1), indexing="ij")
    a_dmas = touching(ops, "dma_memcpy_nd", "a_l1", 0)
    assert a_dmas
    for op in a_dmas:
        # a_l2 is [herd_m, tile_m, tile_k_l2]: the core's rows tx, its K1 step k1
        src = op.pattern("src_")
        want = op.env["tx"] * tm * tk2 + m * tk2 + op.env["k1"] * tk1 + k
        assert torch.equal(src[a_at], want), op.env
    k, n = torch.meshgrid(torch.arange(tk1), torch.arange(tn), indexing="ij")
    b_dmas = touching(ops, "dma_memcpy_nd", "b_l1", 0)
    assert b_dmas
    for op in b_dmas:
        # b_l2 is [tile_k_l2, herd_n x tile_n]: the K1 step's rows, the core's columns ty
        src = op.pattern("src_")
        want = (op.env["k1"] * tk1 + k) * span + op.env["ty"] * tn + n
        assert torch.equal(src[b_at], want), op.env
    i, j = torch.meshgrid(torch.arange(tm), torch.arange(tn), indexing="ij")
    drains = touching(ops, "dma_memcpy_nd", "c_l2", 0)
    assert len(drains) == 2 * hn * (GEMM["M"] // (tm * 2)) * (GEMM["N"] // span)
    for op in drains:
        # c_l2 is [herd_m, tile_m, herd_n x tile_n]
        written = torch.full((tm * tn,), -1)
        written[op.pattern("src_")] = op.pattern("dst_")
        want = op.env["tx"] * tm * span + i * span + op.env["ty"] * tn + j
        assert torch.equal(written[c_at], want), op.env
