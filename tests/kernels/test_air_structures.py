"""Three structures upstream found broken on NPU2, each moved to upstream's working form and
held there twice: the program we emit has upstream's structure, and the verifier refuses the
broken one (kernels.air_programs.verify_structure; docs/hardware-facts.md#known-failure-symptoms).

1. RoPE moves one row per DMA (rope_halfsplit.py: several rows per DMA, with a call per row
   on a window of each buffer, came back half zero or NaN): the window check.
2. RMSNorm's epilogue is two bf16 multiplies (weighted_rms_norm.py: no f32 vector multiply;
   attn_decode_npu2.py: no fma with a constant operand, no subf and fma of products in one
   body, which writes all zeros): the vector check.
3. FlashAttention's causal mask takes its q block from a counter in L1 and every DDR-side
   channel op is in the launch body (attn_npu2.py): the launch check.
"""

from __future__ import annotations

import ast

import pytest
import torch
from air_source_evaluator import emit, make_launch, trace, value
from test_air_verify import program

from npu_deploy.kernels import SPECS, XDNA2
from npu_deploy.kernels.air_programs.air import EmitError, emit_dispatch
from npu_deploy.kernels.air_programs.air_verify import verify, verify_source
from npu_deploy.kernels.air_programs.recording_builder import build
from npu_deploy.kernels.definition.checker import check
from npu_deploy.kernels.definition.registry import family
from npu_deploy.kernels.families import rmsnorm
from npu_deploy.kernels.performance.model import DEFAULT_PARAMS, launch_seconds
from npu_deploy.kernels.plans.plan import Dispatch

# --- 1. RoPE: one row per DMA ------------------------------------------------------------------

ROPE = {"rows": 9 * 128, "width": 64, "seq": 128}


def rope_program(rows_per_dma: int) -> str:
    """Upstream's rope_halfsplit.py on a [8, 1] herd: per DMA `rows_per_dma` rows of x, their
    LUT rows and the output rows; one call per row, on the whole row buffers at one row (its
    structure), on a window of each buffer at more (the form it found broken)."""
    block = 64 * rows_per_dma
    rounds = 4096 // (8 * block)
    if rows_per_dma == 1:
        calls = "CallOp(rope, [x_l1, lut_l1, y_l1, arith.ConstantOp(i32, 64)])"
    else:
        calls = f"""for r in range_(0, {rows_per_dma}):
                            row = at([(r, 64)])
                            views = [subview(b, [row], [64], [1]) for b in (x_l1, lut_l1, y_l1)]
                            CallOp(rope, [*views, arith.ConstantOp(i32, 64)])
                            yield_([])"""
    row_type = "MemRefType.get([64], bf16, memory_space=L1)" if rows_per_dma == 1 else \
        "MemRefType.get([64], bf16, layout=StridedLayoutAttr.get(" \
        "ShapedType.get_dynamic_size(), [1]), memory_space=L1)"
    return program(f"""
    rope = FuncOp('rope', ([{row_type}] * 3 + [i32], []), visibility='private')
    rope.attributes['link_with'] = StringAttr.get('rope.o')

    @FuncOp.from_py_func(*[MemRefType.get([4096], bf16)] * 3)
    def rope_rows(x, lut, y):
        @launch(operands=[x, lut, y], sizes=[1, 1])
        def go(lx, ly, lsx, lsy, x, lut, y):
            @segment(name='seg', operands=[x, lut, y])
            def seg(x, lut, y):
                @herd(name='tiles', sizes=[8, 1], operands=[x, lut, y], link_with='rope.o')
                def tiles(tx, ty, sx, sy, x, lut, y):
                    x_l1 = AllocOp(MemRefType.get([{block}], bf16, memory_space=L1), [], [])
                    lut_l1 = AllocOp(MemRefType.get([{block}], bf16, memory_space=L1), [], [])
                    y_l1 = AllocOp(MemRefType.get([{block}], bf16, memory_space=L1), [], [])
                    for i in range_(0, {rounds}):
                        offset = at([(i, {8 * block}), (tx, {block})])
                        dma_memcpy_nd(x_l1, x, src_offsets=[offset], src_sizes=[{block}],
                                      src_strides=[1])
                        dma_memcpy_nd(lut_l1, lut, src_offsets=[offset], src_sizes=[{block}],
                                      src_strides=[1])
                        {calls}
                        dma_memcpy_nd(y, y_l1, dst_offsets=[offset], dst_sizes=[{block}],
                                      dst_strides=[1])
                        yield_([])
    """)


def test_the_window_check_refuses_rope_at_several_rows_per_dma():
    assert verify_source(rope_program(1), outputs=(2,), upstream=False) == []
    found = verify_source(rope_program(4), outputs=(2,), upstream=False)
    assert {v.check for v in found} == {"window"}, [v.line() for v in found]
    assert "@rope takes a window of" in found[0].message


def test_rope_moves_one_row_per_dma_and_rotates_the_whole_row_buffers():
    launch = make_launch("rope", ROPE, None, {"x": "seq-first", "y": "seq-first"})
    assert launch.config_dict["tile_rows"] == 1
    prog = emit_dispatch(Dispatch("one", (launch,)), XDNA2)
    assert verify(prog) == []
    width = ROPE["width"]
    (x, lut, y), ops = trace(prog.source)
    moved = [op for op in ops if op.kind == "dma_memcpy_nd"]
    assert moved and all(op.index("src_sizes" if op.ref(1) in (x, lut) else "dst_sizes")
                         == [width] for op in moved)
    trace_, _ = build(prog.source)
    assert not any(op.kind == "subview" for op in trace_.ops)


def test_rope_searches_checks_and_emits_one_row_per_dma_only():
    spec, rope = SPECS["rope"], family("rope")
    assert rope.candidates is not None
    assert {c["tile_rows"] for c in rope.candidates(spec, ROPE, XDNA2)} == {1}
    four = {**spec.tunables, "tile_rows": 4}
    assert [f.kind for f in check(spec, ROPE, four, XDNA2) if f.severity == "error"] == \
        ["known_failure"]
    with pytest.raises(EmitError, match="one row per DMA"):
        emit(make_launch("rope", ROPE, four))


def test_the_model_charges_rope_a_dma_block_per_row():
    """One row per DMA pays a block's issue cost per row: at 65536 rows of 64 on 8 tiles,
    8192 blocks a tile where four rows a block took 2048."""
    spec, shape = SPECS["rope"], {"rows": 65536, "width": 64, "seq": 65536}
    one = launch_seconds(spec, shape, {"herd_m": 8, "tile_rows": 1})
    four = launch_seconds(spec, shape, {"herd_m": 8, "tile_rows": 4})
    assert one - four == pytest.approx((8192 - 2048) * DEFAULT_PARAMS.stream_block_s)


# --- 2. RMSNorm: a bf16 epilogue ----------------------------------------------------------------

def norm_body(epilogue: str) -> str:
    """One core's RMSNorm of a 64-element row in L1, with the FP32 sum of squares of
    attn_decode_npu2.py's inline RMSNorm and the epilogue given (its vectors: x and g bf16,
    xf and gf their extf'd f32, rstd_vec the bf16 rstd, rstd_f32 the f32 one)."""
    return program(f"""
    @FuncOp.from_py_func(MemRefType.get([64], bf16), MemRefType.get([64], bf16),
                         MemRefType.get([64], bf16))
    def norm(a, w, o):
        @launch(operands=[a, w, o], sizes=[1, 1])
        def go(lx, ly, lsx, lsy, a, w, o):
            @segment(name='seg', operands=[a, w, o])
            def seg(a, w, o):
                @herd(name='h', sizes=[1, 1], operands=[a, w, o])
                def h(tx, ty, sx, sy, a, w, o):
                    x_l1 = AllocOp(MemRefType.get([64], bf16, memory_space=L1), [], [])
                    w_l1 = AllocOp(MemRefType.get([64], bf16, memory_space=L1), [], [])
                    y_l1 = AllocOp(MemRefType.get([64], bf16, memory_space=L1), [], [])
                    acc_l1 = AllocOp(MemRefType.get([16], f32, memory_space=L1), [], [])
                    dma_memcpy_nd(x_l1, a)
                    dma_memcpy_nd(w_l1, w)
                    vec, vec_f32 = VectorType.get([16], bf16), VectorType.get([16], f32)
                    ident = AffineMapAttr.get(AffineMap.get_identity(1))
                    zero, zero_f32 = arith.ConstantOp(bf16, 0.0), arith.ConstantOp(f32, 0.0)
                    c0 = at([])
                    transfer_write(None, broadcast(vec_f32, zero_f32), acc_l1, [c0], ident,
                                   [True])
                    for j in range_(0, 4):
                        xf = arith.extf(vec_f32, transfer_read(vec, x_l1, [at([(j, 16)])],
                                                               ident, zero, [True]))
                        acc = transfer_read(vec_f32, acc_l1, [c0], ident, zero_f32, [True])
                        transfer_write(None, fma(xf, xf, acc), acc_l1, [c0], ident, [True])
                        yield_([])
                    total = reduction(f32, 'add', transfer_read(vec_f32, acc_l1, [c0], ident,
                                                                zero_f32, [True]))
                    rstd_f32 = math_dialect.rsqrt(arith.addf(arith.divf(
                        total, arith.ConstantOp(f32, 64.0)), arith.ConstantOp(f32, 1e-5)))
                    rstd_vec = broadcast(vec, arith.truncf(bf16, rstd_f32))
                    for j in range_(0, 4):
                        lane = at([(j, 16)])
                        x = transfer_read(vec, x_l1, [lane], ident, zero, [True])
                        g = transfer_read(vec, w_l1, [lane], ident, zero, [True])
                        xf, gf = arith.extf(vec_f32, x), arith.extf(vec_f32, g)
                        {epilogue}
                        transfer_write(None, y, y_l1, [lane], ident, [True])
                        yield_([])
                    dma_memcpy_nd(o, y_l1)
    """).replace("from air.ir import *\n", "from air.ir import *\nfrom air.dialects import "
                 "math as math_dialect\nfrom air.dialects.vector import broadcast, fma, "
                 "reduction, transfer_read, transfer_write\n")


@pytest.mark.parametrize("epilogue,says", [
    # f32 vector multiplies
    ("y = arith.truncf(vec, arith.mulf(arith.mulf(xf, broadcast(vec_f32, rstd_f32)), gf))",
     "arith.mulf on f32 vectors"),
    # the multiply as an fma onto a constant zero
    ("y = arith.truncf(vec, fma(fma(xf, gf, broadcast(vec_f32, zero_f32)), "
     "broadcast(vec_f32, rstd_f32), broadcast(vec_f32, zero_f32)))", "constant operand"),
    # a product split into bf16 high and low parts (subf) and fmas of products, in one body
    ("p = fma(xf, gf, transfer_read(vec_f32, acc_l1, [c0], ident, zero_f32, [True]))\n"
     "                        p_hi = arith.extf(vec_f32, arith.truncf(vec, p))\n"
     "                        p_lo = arith.extf(vec_f32, arith.truncf(vec, arith.subf(p, p_hi)))\n"
     "                        r = broadcast(vec_f32, rstd_f32)\n"
     "                        y = arith.truncf(vec, fma(p_lo, r, fma(p_hi, r, p)))",
     "writes all zeros"),
], ids=["f32-mulf", "fma-onto-constant", "subf-and-fma-of-products"])
def test_the_vector_check_refuses_the_epilogues_upstream_found_broken(epilogue, says):
    upstream = norm_body("y = arith.mulf(arith.mulf(x, rstd_vec), g)")
    assert verify_source(upstream, outputs=(2,), upstream=False) == []
    found = verify_source(norm_body(epilogue), outputs=(2,), upstream=False)
    assert {v.check for v in found} == {"vector"}, [v.line() for v in found]
    assert any(says in v.message for v in found), [v.line() for v in found]


def test_rmsnorm_emits_upstreams_epilogue_and_emulates_its_roundings():
    shape = {"rows": 64, "width": 2048}
    launch = make_launch("rmsnorm", shape)
    prog = emit_dispatch(Dispatch("one", (launch,)), XDNA2)
    assert verify(prog) == []
    trace_, _ = build(prog.source)
    computed = [op.callee for op in trace_.ops if op.kind == "compute"]
    assert "arith.subf" not in computed and computed.count("vector.fma") == 1
    assert "arith.mulf(arith.mulf(x, rstd_vec), g)" in prog.source
    # the emulator rounds where the program does: rstd, x * rstd and its product with the
    # weight each to bf16, the sum of squares in FP32
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 2048, generator=g).to(torch.bfloat16)
    w = (1.0 + 0.1 * torch.randn(2048, generator=g)).to(torch.bfloat16)
    got = rmsnorm.emulate(shape, {"eps": 1e-5}, {"x": x, "weight": w})["y"]
    xf = x.float()
    rstd = torch.rsqrt((xf * xf).sum(-1, keepdim=True) / 2048 + 1e-5).to(torch.bfloat16)
    want = ((x * rstd).to(torch.bfloat16) * w).to(torch.bfloat16)
    assert torch.equal(got, want)


# --- 3. FlashAttention: the causal mask's counter, DDR traffic in the launch body -------------

def attention_program(herd_reads_launch: bool = False, segment_puts: bool = False,
                      if_on_launch: bool = False) -> str:
    """A two-iteration launch whose core numbers its launch iteration for a mask call: from
    a counter in L1 it bumps each time (attn_npu2.py's structure), or from the launch index
    (`herd_reads_launch`); its input put in the launch body, or in the segment."""
    put = "ChannelPut('x_in', x, offsets=[at([(lx, 64)])], sizes=[64], strides=[1])"
    mask = "arith.index_cast(i32, lx)" if herd_reads_launch else \
        "load(ctr_l1, [at([])])"
    gate = ("AffineIfOp(IntegerSet.get(0, 1, [AffineExpr.get_add(AffineSymbolExpr.get(0), "
            "AffineConstantExpr.get(0))], [True]), cond_operands=[lx])") if if_on_launch \
        else "AffineIfOp(IntegerSet.get(0, 1, [AffineExpr.get_add(AffineSymbolExpr.get(0), " \
             "AffineConstantExpr.get(0))], [True]), cond_operands=[tx])"
    source = program(f"""
    mask = FuncOp('apply_causal_mask', ([MemRefType.get([64], bf16, memory_space=L1), i32,
                                          i32], []), visibility='private')
    mask.attributes['link_with'] = StringAttr.get('attn.o')
    Channel('x_in', size=[1])
    Channel('x_to_l1', size=[1])

    @FuncOp.from_py_func(MemRefType.get([128], bf16))
    def attend(x):
        @launch(operands=[x], sizes=[2, 1])
        def go(lx, ly, lsx, lsy, x):
            {"" if segment_puts else put}
            @segment(name='seg', operands=[lx, x])
            def seg(lx, x):
                {put if segment_puts else ""}
                x_l2 = AllocOp(MemRefType.get([64], bf16, memory_space=L2), [], [])
                ChannelGet('x_in', x_l2)
                ChannelPut('x_to_l1', x_l2)

                @herd(name='h', sizes=[1, 1], operands=[lx], link_with='attn.o')
                def h(tx, ty, sx, sy, lx):
                    g_l1 = AllocOp(MemRefType.get([64], bf16, memory_space=L1), [], [])
                    ctr_l1 = AllocOp(MemRefType.get([1], i32, memory_space=L1), [], [])
                    ChannelGet('x_to_l1', g_l1)
                    CallOp(mask, [g_l1, {mask}, arith.ConstantOp(i32, 0)])
                    only = {gate}
                    with InsertionPoint(only.then_block):
                        AffineYieldOp([])
                    store(arith.AddIOp(load(ctr_l1, [at([])]), arith.ConstantOp(i32, 1)).result,
                          ctr_l1, [at([])])
    """)
    return source.replace("from air.ir import *\n", "from air.ir import *\nfrom air.dialects "
                          "import scf\nfrom air.dialects.affine import AffineIfOp, "
                          "AffineYieldOp\nfrom air.dialects.memref import load, store\n")


@pytest.mark.parametrize("kwargs,says", [
    ({"herd_reads_launch": True}, "apply_causal_mask takes launch index"),
    ({"segment_puts": True}, "ChannelPut('x_in') moves DDR buffer x inside segment seg"),
    ({"if_on_launch": True}, "affine.if takes launch index"),
], ids=["mask-from-the-launch-index", "ddr-put-in-the-segment", "affine-if-on-the-launch"])
def test_the_launch_check_refuses_what_only_the_host_knows_reaching_the_array(kwargs, says):
    assert verify_source(attention_program(), upstream=False) == []
    found = verify_source(attention_program(**kwargs), upstream=False)
    assert {v.check for v in found} == {"launch"}, [v.line() for v in found]
    assert any(says in v.message for v in found), [v.line() for v in found]


ATTENTION_CASES = [   # a prefill of two q blocks and four head groups; a query block after
    ({"heads": 8, "kv_heads": 2, "Lq": 512, "Lk": 512, "head_dim": 64}, {}),  # 256 earlier
    ({"heads": 4, "kv_heads": 2, "Lq": 256, "Lk": 512, "head_dim": 128},      # positions, in
     {"dv_tile": 64}),                                                        # 2 V col tiles
]


@pytest.mark.parametrize("shape,config", ATTENTION_CASES, ids=["prefill", "cached-dv64"])
def test_flash_attention_masks_each_block_from_its_l1_counter(shape, config):
    """Every core of every launch iteration, run in the launch grid's order with its L1
    starting at zero, hands apply_causal_mask its q block (launch q block x q_tiles + tx,
    after the earlier positions' blocks) and its KV block (stage x chunks per stage + j),
    though nothing below the launch reads the launch index; Q, K, V and O move between DDR
    and the memory tiles in the launch body only."""
    launch = make_launch("flash_attention", shape, config, {o: "head-first" for o in "qkvo"})
    prog = emit_dispatch(Dispatch("one", (launch,)), XDNA2, shape["head_dim"])
    assert [v.line() for v in verify(prog)] == []
    c = {**SPECS["flash_attention"].tunables, **launch.config_dict}
    nq, ns, kt, q_tile = c["q_tiles"], c["cascade"], c["k_tile"], c["q_tile"]
    tq, cps = q_tile // nq, -(-shape["Lk"] // (kt * ns))
    first_q = (shape["Lk"] - shape["Lq"]) // tq
    args, ops = trace(prog.source)
    masks = [op for op in ops if op.kind == "CallOp"
             and ast.unparse(op.call.args[0]) == "apply_causal_mask"]
    groups = shape["heads"] // c["heads_per_unroll"] * (shape["head_dim"] // (c["dv_tile"] or kt))
    assert len(masks) == shape["Lq"] // q_tile * groups * c["heads_per_unroll"] * nq * ns * cps
    for op in masks:
        q_block, kv_block = (value(a, op.env) for a in op.call.args[1].elts[1:])
        e = op.env
        assert (q_block, kv_block) == (e["lx"] * nq + e["tx"] + first_q,
                                       e["ty"] * cps + e["j"]), e
    ddr = [op for op in ops if op.kind in ("ChannelPut", "ChannelGet") and op.ref(1) in args]
    assert ddr and all("gx" not in op.env for op in ddr)
