"""The program verifier (kernels.air_programs.air_verify) on programs written here: known-good ones
in the shapes of mlir-air's examples come out clean, and each check catches the known-bad program
made to break it. The programs are sources for mlir-air's builder, run against the recording
stand-in (kernels.air_programs.recording_builder)."""

from __future__ import annotations

import re
import textwrap

import pytest

from npu_deploy.cli.models import model_shape
from npu_deploy.kernels.air_programs.air import emit_plan
from npu_deploy.kernels.air_programs.air_verify import CHECKS, verify_programs, verify_source
from npu_deploy.kernels.air_programs.recording_builder import BuildError, build
from npu_deploy.kernels.definition.specs import Prefill
from npu_deploy.kernels.plans.optimize import optimize
from npu_deploy.kernels.plans.plan import baseline_plan

HEADER = """\
from air.dialects import arith
from air.dialects.affine import apply as affine_apply
from air.dialects.air import *
from air.dialects.func import CallOp, FuncOp
from air.dialects.memref import AllocOp, DeallocOp, subview
from air.dialects.scf import for_ as range_
from air.dialects.scf import yield_
from air.ir import *


def at(terms, constant=0):
    expr = AffineConstantExpr.get(constant)
    for i, (_, multiplier) in enumerate(terms):
        expr = AffineExpr.get_add(expr, AffineExpr.get_mul(AffineSymbolExpr.get(i),
                                                           AffineConstantExpr.get(multiplier)))
    return affine_apply(AffineMap.get(0, len(terms), [expr]), [v for v, _ in terms])


@module_builder
def build_module():
    bf16, f32, i32 = T.bf16(), T.f32(), T.i32()
    L1 = IntegerAttr.get(i32, MemorySpace.L1)
    L2 = IntegerAttr.get(i32, MemorySpace.L2)
"""


def program(body: str) -> str:
    return HEADER + textwrap.indent(textwrap.dedent(body), "    ")


# mlir-air's eltwise add (programming_examples/eltwise_add): N elements over a [herd_x, 1]
# herd, each tile a block of `tile` per round, an extern `add` over the block.
def eltwise_add(n: int = 65536, tile: int = 1024, herd_x: int = 8, rounds: int | None = None,
                declared: int | None = None, links: str = "add.o", out: int | None = None,
                stack: str = "") -> str:
    rounds = n // (tile * herd_x) if rounds is None else rounds
    declared = tile if declared is None else declared
    out = n if out is None else out
    return program(f"""
    add = FuncOp('eltwise_add_bf16', ([MemRefType.get([{declared}], bf16, memory_space=L1)] * 3
                                      + [i32], []), visibility='private')
    add.attributes['link_with'] = StringAttr.get('add.o')

    @FuncOp.from_py_func(MemRefType.get([{n}], bf16), MemRefType.get([{n}], bf16),
                         MemRefType.get([{out}], bf16))
    def eltwise(a, b, c):
        @launch(operands=[a, b, c], sizes=[1, 1])
        def go(lx, ly, lsx, lsy, a, b, c):
            @segment(name='seg', operands=[a, b, c])
            def seg(a, b, c):
                @herd(name='tiles', sizes=[{herd_x}, 1], operands=[a, b, c], link_with={links!r})
                def tiles(tx, ty, sx, sy, a, b, c):
                    a_l1 = AllocOp(MemRefType.get([{tile}], bf16, memory_space=L1), [], [])
                    b_l1 = AllocOp(MemRefType.get([{tile}], bf16, memory_space=L1), [], [])
                    c_l1 = AllocOp(MemRefType.get([{tile}], bf16, memory_space=L1), [], []){stack}
                    for i in range_(0, {rounds}):
                        offset = at([(i, {tile * herd_x}), (tx, {tile})])
                        dma_memcpy_nd(a_l1, a, src_offsets=[offset], src_sizes=[{tile}],
                                      src_strides=[1])
                        dma_memcpy_nd(b_l1, b, src_offsets=[offset], src_sizes=[{tile}],
                                      src_strides=[1])
                        CallOp(add, [a_l1, b_l1, c_l1, arith.ConstantOp(i32, {tile})])
                        dma_memcpy_nd(c, c_l1, dst_offsets=[offset], dst_sizes=[{tile}],
                                      dst_strides=[1])
                        yield_([])
    """)


# A weight row broadcast from one memory-tile buffer to every tile of a [4, 1] herd, and a
# per-tile output through channels indexed by the tile (the channel pattern of mlir-air's
# GEMV and weighted RMSNorm).
def broadcast(gets_per_tile: int = 1, put_size: int = 512, herd_x: int = 4,
              index: str = "[tx, 0]") -> str:
    return program(f"""
    Channel('w_in', size=[1, 1])
    Channel('w_all', size=[1, 1], broadcast_shape=[{herd_x}, 1])
    Channel('y_out', size=[{herd_x}, 1])

    @FuncOp.from_py_func(MemRefType.get([512], bf16), MemRefType.get([{herd_x * 512}], bf16))
    def bcast(w, y):
        @launch(operands=[w, y], sizes=[1, 1])
        def go(lx, ly, lsx, lsy, w, y):
            ChannelPut('w_in', w, offsets=[0], sizes=[512], strides=[1])
            for t in range_(0, {herd_x}):
                ChannelGet('y_out', y, offsets=[at([(t, 512)])], sizes=[512], strides=[1],
                           indices=[t, 0])
                yield_([])

            @segment(name='seg', operands=[])
            def seg():
                w_l2 = AllocOp(MemRefType.get([512], bf16, memory_space=L2), [], [])
                ChannelGet('w_in', w_l2)
                ChannelPut('w_all', w_l2, offsets=[0], sizes=[{put_size}], strides=[1])

                @herd(name='tiles', sizes=[{herd_x}, 1], operands=[])
                def tiles(tx, ty, sx, sy):
                    w_l1 = AllocOp(MemRefType.get([512], bf16, memory_space=L1), [], [])
                    for g in range_(0, {gets_per_tile}):
                        ChannelGet('w_all', w_l1, indices={index})
                        yield_([])
                    ChannelPut('y_out', w_l1, indices=[tx, 0])
    """)


# The accumulator upstream's GEMM keeps across its herds: allocated in the segment with a
# leading dimension per herd axis, each core taking its own slab.
def accumulator(slab: str = "subview(acc, [tx, ty, 0, 0], [1, 1, 32, 32], [1, 1, 1, 1])",
                shape: str = "[2, 2, 32, 32]") -> str:
    return program(f"""
    zero = FuncOp('zero_f32', ([MemRefType.get([1, 1, 32, 32], f32, memory_space=L1)], []),
                  visibility='private')
    zero.attributes['link_with'] = StringAttr.get('mm.o')

    @FuncOp.from_py_func(MemRefType.get([4096], f32))
    def acc_only(c):
        @launch(operands=[c], sizes=[1, 1])
        def go(lx, ly, lsx, lsy, c):
            @segment(name='seg', operands=[c])
            def seg(c):
                acc = AllocOp(MemRefType.get({shape}, f32, memory_space=L1), [], [])

                @herd(name='h', sizes=[2, 2], operands=[acc, c], link_with='mm.o')
                def h(tx, ty, sx, sy, acc, c):
                    mine = {slab}
                    CallOp(zero, [mine])
                    dma_memcpy_nd(c, mine, dst_offsets=[at([(tx, 2048), (ty, 1024)])],
                                  dst_sizes=[1024], dst_strides=[1])
    """)


@pytest.mark.parametrize("source,outputs", [
    (eltwise_add(), (2,)),
    (eltwise_add(n=1 << 20, tile=4096, herd_x=8), (2,)),
    (broadcast(), (1,)),
    (accumulator(), (0,)),
], ids=["eltwise-add-64k", "eltwise-add-1m", "broadcast-row", "gemm-accumulator"])
def test_programs_in_upstreams_shapes_are_clean(source, outputs):
    assert verify_source(source, outputs=outputs, upstream=False) == []


@pytest.mark.parametrize("source,outputs,check,says", [
    # build
    (eltwise_add().replace("                        yield_([])\n", ""), (2,), "build",
     "no scf.yield"),
    (eltwise_add().replace("operands=[a, b, c], link_with", "operands=[a, b], link_with")
     .replace("def tiles(tx, ty, sx, sy, a, b, c)", "def tiles(tx, ty, sx, sy, a, b)"),
     (2,), "build", "above the isolated"),
    (eltwise_add().replace("sizes=[1, 1])\n        def go", "sizes=[1, 1], grid=[1])\n"
                           "        def go"), (2,), "build", "unexpected keyword"),
    # bounds: one round too many reads past the end of each input
    (eltwise_add(rounds=9), (2,), "bounds", "reaches elements 0..73727"),
    # elements: a 1024-element block moved into a 512-element buffer
    (eltwise_add().replace("dma_memcpy_nd(a_l1, a, src_offsets=[offset], src_sizes=[1024]",
                           "dma_memcpy_nd(a_l1, a, src_offsets=[offset], src_sizes=[512]")
     .replace("src_strides=[1])\n                        dma_memcpy_nd(b_l1",
              "src_strides=[1], dst_offsets=[0], dst_sizes=[1024], dst_strides=[1])\n"
              "                        dma_memcpy_nd(b_l1", 1), (2,), "elements", "moves 512"),
    # channel: a get nobody puts to, and a broadcast put of the wrong size
    (broadcast(gets_per_tile=2), (1,), "channel", "gets 1024 elements but 512"),
    (broadcast(put_size=256), (1,), "channel", "gets 512 elements but 256"),
    (broadcast(index="[tx, 1]"), (1,), "channel", "outside its [4, 1]"),
    # extern: declared for another block, and a herd that does not link its object
    (eltwise_add(declared=512), (2,), "extern", "declared memref<512xbf16, L1>"),
    (eltwise_add(links="mul.o"), (2,), "extern", "herd tiles links mul.o"),
    # l1: three 16 KiB ping-pong blocks and the stack; an accumulator shared without slabs
    (eltwise_add(n=1 << 20, tile=8192, herd_x=8), (2,), "l1", "> 65536"),
    (accumulator(slab="acc", shape="[32, 32]"), (), "l1", "without a slab per core"),
    (accumulator(slab="subview(acc, [ty, tx, 0, 0], [1, 1, 32, 32], [1, 1, 1, 1])"), (),
     "l1", "not the core's own indices"),
    # coverage: half the rounds leave the second half of the output unwritten
    (eltwise_add(rounds=4), (2,), "coverage", "elements 32768..65535 are never written"),
])
def test_each_check_catches_the_program_made_to_break_it(source, outputs, check, says):
    found = verify_source(source, outputs=outputs, upstream=False)
    assert check in [v.check for v in found], [v.line() for v in found]
    assert any(says in v.message for v in found if v.check == check), \
        [v.line() for v in found]


def test_an_l2_buffer_no_memory_tile_holds_is_caught():
    source = broadcast().replace("w_l2 = AllocOp(MemRefType.get([512]",
                                 "w_l2 = AllocOp(MemRefType.get([300000]")
    found = verify_source(source, outputs=(1,), upstream=False)
    assert "l2" in [v.check for v in found], [v.line() for v in found]


def test_a_cascade_channel_between_memory_tiles_is_caught():
    source = broadcast().replace("Channel('w_all', size=[1, 1], broadcast_shape=[4, 1])",
                                 "cw = Channel('w_all', size=[1, 1], broadcast_shape=[4, 1])\n"
                                 "    cw.attributes['channel_type'] = "
                                 "StringAttr.get('npu_cascade')")
    found = verify_source(source, outputs=(1,), upstream=False)
    assert any("cascade" in v.message for v in found if v.check == "channel")


def test_every_check_has_a_known_bad_program():
    caught = {"build", "bounds", "elements", "channel", "extern", "l1", "l2", "coverage"}
    # window, vector and launch: the structures upstream found broken, in
    # test_air_structures.py
    upstreams_failures = {"window", "vector", "launch"}
    assert set(CHECKS) == caught | upstreams_failures


def test_the_stand_in_refuses_what_the_builder_refuses():
    with pytest.raises(BuildError, match="multiply or divide by constants"):
        build(program("""
        @FuncOp.from_py_func(MemRefType.get([64], bf16))
        def f(a):
            @launch(operands=[a], sizes=[2, 2])
            def go(lx, ly, lsx, lsy, a):
                x = affine_apply(AffineMap.get(0, 2, [AffineExpr.get_mul(
                    AffineSymbolExpr.get(0), AffineSymbolExpr.get(1))]), [lx, ly])
        """))
    # the stand-in leaves no trace of itself in sys.modules
    import sys
    assert "air.dialects.air" not in sys.modules or \
        "stand-in" not in (sys.modules["air.dialects.air"].__doc__ or "")


# --- the attention programs we emit ----------------------------------------------------------

def _attention_program(model: str, mode):
    from npu_deploy.cli.models import model_shape
    from npu_deploy.kernels import XDNA2
    from npu_deploy.kernels.air_programs.air import emit_dispatch
    from npu_deploy.kernels.plans.plan import baseline_plan

    _, args = model_shape(model)
    plan = baseline_plan(model, args, mode, XDNA2)
    dispatch = next(d for d in plan.dispatches
                    if any(ln.kernel == "flash_attention" for ln in d.launches))
    return emit_dispatch(dispatch, XDNA2, args.head_dim)


@pytest.mark.parametrize("model", ["smollm2-135m", "qwen3-0.6b"])   # head_dim 64 and 128
def test_flash_attention_at_prefill_passes_every_check(model):
    from npu_deploy.kernels.air_programs.air_verify import verify
    from npu_deploy.kernels.definition.specs import Prefill

    program = _attention_program(model, Prefill(256))
    assert [v.line() for v in verify(program)] == []


def test_flash_attention_merges_its_stages_over_balanced_cascade_channels():
    from npu_deploy.kernels.air_programs.air_verify import verify
    from npu_deploy.kernels.definition.specs import Prefill

    program = _attention_program("qwen3-0.6b", Prefill(256))
    trace, _ = build(program.source)
    cascades = {n for n, c in trace.channels.items() if c.channel_type == "npu_cascade"}
    assert cascades == {"s0_cascade_gp", "s0_cascade_up", "s0_cascade_sp"}
    # each is put by one stage and got by the next: dropping the last stage's put starves it
    source = program.source.replace(
        "ChannelPut('s0_cascade_gp', gp_l1, indices=[tx, at([(ty, 1)], -1)])", "pass", 1)
    assert source != program.source
    found = verify_source(source, outputs=(3,), flags=program.flags)
    assert any(v.check == "channel" and "s0_cascade_gp" in v.message for v in found), \
        [v.line() for v in found]
    assert verify(program) == []


DECODE_MODELS = ["smollm2-135m", "qwen2.5-0.5b", "qwen3-0.6b", "llama-3.2-3b"]  # groups 3, 7,
#                                                      2, 3; head_dim 64, 64, 128, 128


@pytest.mark.parametrize("context", [None, 1000])        # built for the step, or for 1024
@pytest.mark.parametrize("position", [255, 256, 300])   # Lk 256, 257 and 301: a whole
@pytest.mark.parametrize("model", DECODE_MODELS)        # k_tile and a tail of 1 and 45
def test_decode_attention_passes_every_check(model, position, context):
    from npu_deploy.cli.models import model_shape
    from npu_deploy.kernels import XDNA2
    from npu_deploy.kernels.air_programs.air import emit_dispatch
    from npu_deploy.kernels.air_programs.air_verify import verify
    from npu_deploy.kernels.definition.specs import Decode
    from npu_deploy.kernels.plans.plan import baseline_plan

    _, args = model_shape(model)
    plan = baseline_plan(model, args, Decode(position, context), XDNA2)
    dispatch = next(d for d in plan.dispatches
                    if any(ln.kernel == "npu_decode_attention" for ln in d.launches))
    program = emit_dispatch(dispatch, XDNA2, args.head_dim)
    assert [v.line() for v in verify(program)] == []
    # the length is read at run time, never built in: the kernels take it from L1 (the
    # score row's padding counts no key), and the K/V loops run to the length built for
    built = 1024 if context else position + 1
    assert re.search(r"CallOp\(decode_attn_softmax_\w+, \[s_l1, len_l1\]\)", program.source)
    assert f"range_(0, {built})" in program.source
    assert f"i32, {position + 1})" not in program.source


def test_decode_attention_that_outgrows_l1_is_caught_by_the_checker_and_the_verifier():
    """The score rows grow with the cache: where they no longer fit a tile's 64 KiB, the
    checker says so, and the verifier finds the same buffers too large."""
    from npu_deploy.kernels import SPECS, XDNA2
    from npu_deploy.kernels.air_programs.air import emit_dispatch, layout_of
    from npu_deploy.kernels.air_programs.air_verify import verify
    from npu_deploy.kernels.definition.checker import check_with_usage
    from npu_deploy.kernels.plans.plan import Binding, Dispatch, Launch

    shape = {"heads": 14, "kv_heads": 2, "Lq": 1, "Lk": 2500, "head_dim": 64}
    config = {"k_tile": 64, "herd_n": 8}
    spec = SPECS["npu_decode_attention"]
    launch = Launch("npu_decode_attention", "L0.attention", 0, tuple(sorted(shape.items())),
                    tuple(sorted(config.items())),
                    tuple(Binding(o.name, f"t.{o.name}", "output" if o.role == "output"
                                  else "input") for o in spec.operands(shape)))
    findings, usage = check_with_usage(spec, shape, {**spec.tunables, **config}, XDNA2)
    assert [f.kind for f in findings if f.severity == "error"] == ["l1"]
    assert usage["l1_bytes"] == layout_of(launch).l1_bytes() > XDNA2.l1_bytes
    found = verify(emit_dispatch(Dispatch("big", (launch,)), XDNA2))
    assert [v.check for v in found] == ["l1"]


def own_kernel_call(args: str, types: str) -> str:
    return program(f"""
    soft = FuncOp('decode_attn_softmax_t', ([{types}], []), visibility='private')
    soft.attributes['link_with'] = StringAttr.get('decode_attn_t.o')

    @FuncOp.from_py_func(MemRefType.get([64], f32))
    def f(a):
        @launch(operands=[a], sizes=[1, 1])
        def go(lx, ly, lsx, lsy, a):
            @segment(name='seg', operands=[a])
            def seg(a):
                @herd(name='h', sizes=[1, 1], operands=[a], link_with='decode_attn_t.o')
                def h(tx, ty, sx, sy, a):
                    s_l1 = AllocOp(MemRefType.get([2, 32], f32, memory_space=L1), [], [])
                    dma_memcpy_nd(s_l1, a)
                    CallOp(soft, [{args}])
                    dma_memcpy_nd(a, s_l1)
    """).replace("@module_builder", "KERNELS = {'decode_attn_t.o': {'source': "
                 "'kernels/aie/decode_attention.cc', 'defines': {'SYM_SUFFIX': '_t'}, "
                 "'repository': 'npu-deploy'}}\n\n\n@module_builder")


def test_a_call_of_our_own_kernel_is_held_to_its_source():
    length = "AllocOp(MemRefType.get([1], i32, memory_space=L1), [], [])"
    good = own_kernel_call(f"s_l1, {length}", "MemRefType.get([2, 32], f32, memory_space=L1), "
                           "MemRefType.get([1], i32, memory_space=L1)")
    assert verify_source(good, outputs=(0,)) == []
    bad = own_kernel_call("s_l1, arith.ConstantOp(i32, 40)",
                          "MemRefType.get([2, 32], f32, memory_space=L1), i32")
    found = verify_source(bad, outputs=(0,))
    assert [v.check for v in found] == ["extern"]
    assert "decode_attn_softmax in kernels/aie/decode_attention.cc takes (f32*, i32*)" \
        in found[0].message


def test_a_prefill_no_tile_divides_verifies_clean_in_gemm_rope_and_flash_attention():
    """L = 300 is no multiple of a GEMM's tile_m x herd_m or of FlashAttention's tiles: the
    programs pad (seq-first at the end, head-first per head) and every one is clean."""
    _, args = model_shape("smollm2-135m")
    base = baseline_plan("smollm2-135m", args, Prefill(300))
    kernels, found = set(), []
    for plan in (base, optimize(base).plan):
        for prog, violations in verify_programs(emit_plan(plan)):
            kernels |= {ln.kernel for ln in prog.launches}
            # the calls' match with upstream's kernels is the extern check's own business
            # (the row kernels' move to upstream's symbols is separate from padding)
            found += [(prog.dispatch, v.line()) for v in violations if v.check != "extern"]
    assert {"gemm_bf16", "rope", "flash_attention"} <= kernels
    assert not found, found[:5]


def test_coverage_asks_for_the_data_of_a_padded_head_first_output_not_its_padding():
    """A head-first output padded from L to L_pad rows per head holds data at L rows of
    each head: those must be written, the padding rows need not be."""
    from npu_deploy.kernels.air_programs.air_verify import data_ranges
    from npu_deploy.kernels.plans.plan import Binding

    b = Binding("o", "t.o", "output", "head-first", seq_pad=(100, 128))
    assert data_ranges(b, 4 * 100 * 64, 64) == [(h * 128 * 64, 100 * 64) for h in range(4)]
    half = eltwise_add(rounds=4)             # writes elements 0..32767 of 65536
    assert verify_source(half, outputs={2: [(0, 6400), (8192, 6400)]}, upstream=False) == []
    found = verify_source(half, outputs={2: [(0, 6400), (40000, 6400)]}, upstream=False)
    assert [v.check for v in found] == ["coverage"]
    assert "elements 40000..46399 are never written" in found[0].message


def test_an_output_two_rounds_write_is_a_race():
    """Rounds that overlap (the stride of a round smaller than what it writes) write some
    elements twice: one head's padded rows landing on the next head's, for instance."""
    source = eltwise_add().replace("offset = at([(i, 8192), (tx, 1024)])",
                                   "offset = at([(i, 7168), (tx, 1024)])")
    found = verify_source(source, outputs={2: [(0, 57344)]}, upstream=False)
    assert any("written more than once" in v.message for v in found if v.check == "coverage")


def test_rope_partial_programs_verify_clean():
    """tiny-phi3 (96 of 128 dims rotated): its RoPE programs call rope_partial with the
    signature upstream's rope_halfsplit.cc gives it (three rows, dims, rope_dims), and the
    verifier finds nothing in them."""
    _, args = model_shape("tiny-phi3")
    plan = baseline_plan("tiny-phi3", args, Prefill(128))
    ropes = [(prog, found) for prog, found in verify_programs(emit_plan(plan))
             if any(ln.kernel == "rope" for ln in prog.launches)]
    assert ropes and all("rope_partial" in prog.source for prog, _ in ropes)
    assert [v.line() for _, found in ropes for v in found] == []
