"""The MLIR-AIR programs: valid Python, and their structure (function, launches wrapped in
launch + segment, herd sizes, launch grids, L1 and L2 buffers, linked objects) read back
from the emitted source's syntax tree and held to the kernel spec, the tile configuration
and the checker's resource accounting. mlir-air is not installed here: nothing is built."""

from __future__ import annotations

import ast
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from npu_deploy.cli.models import model_shape
from npu_deploy.kernels import SPECS, XDNA2
from npu_deploy.kernels.air_programs.air import (
    EmitError,
    emit_dispatch,
    emit_plan,
    layout_of,
    write_programs,
)
from npu_deploy.kernels.definition.checker import check_with_usage
from npu_deploy.kernels.definition.registry import FAMILIES
from npu_deploy.kernels.definition.selection import select
from npu_deploy.kernels.definition.specs import Decode, KernelUse, Prefill
from npu_deploy.kernels.families.gemm_numerics import method_name
from npu_deploy.kernels.plans.optimize import optimize
from npu_deploy.kernels.plans.plan import Binding, Dispatch, Launch, baseline_plan

BYTES = {"bf16": 2, "f32": 4}


@dataclass
class Parsed:
    """What an emitted launch is, read from the syntax tree."""

    grid: list[int]
    segment: str
    herds: list[tuple[str, list[int], str]] = field(default_factory=list)   # name, sizes, link
    l1: list[tuple[list[int], str]] = field(default_factory=list)
    l2: list[tuple[list[int], str]] = field(default_factory=list)
    operands: list[str] = field(default_factory=list)


def _kw(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _decorator(fn: ast.FunctionDef, name: str) -> ast.Call | None:
    for d in fn.decorator_list:
        if isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == name:
            return d
    return None


def _alloc(node: ast.AST) -> tuple[list[int], str, str] | None:
    """AllocOp(MemRefType.get([..], dtype, memory_space=L1), [], []) -> shape, dtype, space."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
            and node.func.id == "AllocOp"):
        return None
    ty = node.args[0]
    assert isinstance(ty, ast.Call)
    space = _kw(ty, "memory_space")
    assert isinstance(space, ast.Name)
    return ast.literal_eval(ty.args[0]), ty.args[1].id, space.id   # type: ignore[attr-defined]


def parse(source: str) -> tuple[ast.FunctionDef, list[Parsed]]:
    tree = ast.parse(source)
    module = next(n for n in tree.body if isinstance(n, ast.FunctionDef)
                  and n.name == "build_module")
    func = next(n for n in module.body if isinstance(n, ast.FunctionDef)
                and any(isinstance(d, ast.Call) and ast.unparse(d.func) == "FuncOp.from_py_func"
                        for d in n.decorator_list))
    launches = []
    for node in func.body:
        assert isinstance(node, ast.FunctionDef), "only launches in the function"
        call = _decorator(node, "launch")
        assert call is not None, f"{node.name} is not an air.launch"
        segments = [n for n in node.body if isinstance(n, ast.FunctionDef)]
        assert len(segments) == 1 and _decorator(segments[0], "segment") is not None
        seg_call = _decorator(segments[0], "segment")
        assert seg_call is not None
        parsed = Parsed(ast.literal_eval(_kw(call, "sizes")),  # type: ignore[arg-type]
                        ast.literal_eval(_kw(seg_call, "name")),  # type: ignore[arg-type]
                        operands=[ast.unparse(o) for o in _kw(call, "operands").elts])  # type: ignore[union-attr]
        for sub in ast.walk(segments[0]):
            if isinstance(sub, ast.FunctionDef) and (h := _decorator(sub, "herd")) is not None:
                link = _kw(h, "link_with")            # none: the herd's code is all inline
                parsed.herds.append((ast.literal_eval(_kw(h, "name")),  # type: ignore[arg-type]
                                     ast.literal_eval(_kw(h, "sizes")),  # type: ignore[arg-type]
                                     "" if link is None else ast.literal_eval(link)))
            if isinstance(sub, ast.Assign) and (a := _alloc(sub.value)) is not None:
                (parsed.l1 if a[2] == "L1" else parsed.l2).append((a[0], a[1]))
        # no herd outside a segment: every herd decorator sits in the segment's subtree
        herds_anywhere = [n for n in ast.walk(node) if isinstance(n, ast.FunctionDef)
                          and _decorator(n, "herd") is not None]
        assert len(herds_anywhere) == len(parsed.herds) >= 1
        launches.append(parsed)
    return func, launches


def launch_of(kernel: str, shape: dict[str, int], config: dict | None = None) -> Launch:
    spec = SPECS[kernel]
    config = config if config is not None else select(KernelUse(kernel, spec, shape), XDNA2).config
    bindings = tuple(Binding(o.name, f"t.{o.name}", "input" if o.role != "output" else "output")
                     for o in spec.operands(shape))
    return Launch(kernel, kernel, 0, tuple(sorted(shape.items())),
                  tuple(sorted(config.items())), bindings)


def nbytes(buffers: list[tuple[list[int], str]]) -> int:
    return sum(math.prod(shape) * BYTES[dtype] for shape, dtype in buffers)


CASES = [
    ("gemm_bf16", {"M": 2048, "K": 2048, "N": 2048}, {"tile_m": 64, "tile_k_l2": 256,
                                                       "tile_k_l1": 32, "tile_n": 128,
                                                       "herd_m": 8, "herd_n": 4}),
    ("gemm_fp32", {"M": 128, "K": 576, "N": 1536}, None),
    ("gemv", {"M": 2048, "K": 2048}, None),
    ("gemv_fp32", {"M": 16384, "K": 576}, None),
    ("rmsnorm", {"rows": 128, "width": 576}, None),
    ("qk_norm", {"rows": 2048, "width": 128}, None),
    ("rope", {"rows": 128 * 9, "width": 64, "seq": 128}, None),
    ("silu_mul", {"rows": 128, "width": 1536}, None),
    ("add", {"rows": 128, "width": 576}, None),
    ("bias_add", {"rows": 128, "width": 1152}, None),
    ("gelu", {"rows": 128, "width": 1536}, None),
    ("flash_attention", {"heads": 32, "kv_heads": 8, "Lq": 2048, "Lk": 2048, "head_dim": 64}, {}),
    ("npu_decode_attention", {"heads": 9, "kv_heads": 3, "Lq": 1, "Lk": 129, "head_dim": 64},
     None),
]


@pytest.mark.parametrize("kernel,shape,config", CASES, ids=[c[0] for c in CASES])
def test_each_kernel_emits_its_spec_and_config(kernel, shape, config):
    launch = launch_of(kernel, shape, config)
    c = {**SPECS[kernel].tunables, **launch.config_dict}
    program = emit_dispatch(Dispatch(f"one {kernel}", (launch,)))
    func, (parsed, *after) = parse(program.source)
    # = the ELF instance name: what the program is (its kernel, its digest), not the dispatch
    assert func.name == program.function
    assert re.fullmatch(rf"{kernel}_[0-9a-f]{{10}}", program.function)
    assert parsed.segment == "s0_segment" and all(h[0] == "s0_herd" for h in parsed.herds)
    # one function argument per operand, in the spec's order, with its element count; a
    # fused-cast GEMM adds its FP32 C scratch and a second launch that casts it to C; a
    # dimension read at run time (decode attention's Lk) one i32
    args = [ast.literal_eval(a.args[0]) for a in func.decorator_list[0].args]  # type: ignore[attr-defined]
    operands = [math.prod(o.dims) for o in SPECS[kernel].operands(shape)]
    fused = kernel == "gemm_bf16" and method_name(kernel, shape, c) == "fused-cast"
    runtime = [1] * len(FAMILIES[kernel].runtime_dims)
    assert [math.prod(a) for a in args] == \
        operands + ([operands[-1]] if fused else []) + runtime
    assert [a.segment for a in after] == (["s0c_segment"] if fused else [])
    findings, usage = check_with_usage(SPECS[kernel], shape, c, XDNA2)
    assert not [f for f in findings if f.severity != "warning"]
    herd = parsed.herds[0][1]
    unroll = c["heads_per_unroll"] if kernel == "flash_attention" else 1   # segment sizes
    assert herd[0] * herd[1] * unroll == usage["tiles"]
    assert set(program.objects) == {h[2] for h in parsed.herds} - {""}
    # the L1 the program allocates is what the checker counted (ping-pong twice)
    assert layout_of(launch).l1_bytes() == usage["l1_bytes"] <= XDNA2.l1_bytes
    pingpong = {b.name for b in layout_of(launch).l1 if b.pingpong}
    assert len(parsed.l1) == len(layout_of(launch).l1)
    if kernel.startswith("gemm"):
        M, K, N = shape["M"], shape["K"], shape["N"]
        tm, tk1, tk2, tn = c["tile_m"], c["tile_k_l1"], c["tile_k_l2"], c["tile_n"]
        hm, hn = c["herd_m"], c["herd_n"]
        assert parsed.grid == [math.ceil(M / (tm * hm)), math.ceil(N / (tn * hn))]
        assert herd == [hm, hn] and len(parsed.herds) == 3     # zero, multiply, drain
        # A, B and C in L1 in mm_aie2p.cc's blocked layout (8 x 8 blocks); C one slab per
        # core of a segment-scope [herd_m, herd_n, ...] accumulator
        assert ([1, 1, tk1 // 8, tm // 8, 8, 8], "bf16") in parsed.l1
        assert ([1, 1, tn // 8, tk1 // 8, 8, 8], "bf16") in parsed.l1
        assert ([hm, hn, tn // 8, tm // 8, 8, 8], "f32") in parsed.l1
        assert ([hm, tm, tk2], "bf16") in parsed.l2 and ([tk2, hn * tn], "bf16") in parsed.l2
        assert f"for k2 in range_(0, {math.ceil(K / tk2)})" in program.source
        assert f"for k1 in range_(0, {tk2 // tk1})" in program.source
        assert program.objects == (f"mm_{tm}x{tk1}x{tn}_n{hn}.o",)
    elif kernel in ("gemv", "gemv_fp32"):
        tm, mi, hm, K = c["tile_m"], c["m_input"], c["herd_m"], shape["K"]
        assert parsed.grid == [math.ceil(shape["M"] / (tm * hm)), 1] and herd == [hm, 1]
        # matvec.py: m_input whole rows of W, all of x, the tile's outputs (FP32: ours)
        out = "f32" if kernel == "gemv_fp32" else "bf16"
        assert sorted(parsed.l1) == sorted([([mi, K], "bf16"), ([K], "bf16"), ([tm], out)])
        assert not parsed.l2
        if kernel == "gemv_fp32":       # our own mv_f32.cc, from this package
            assert program.objects == (f"mv_f32_m{tm}.o",)
            assert "'source': 'kernels/aie/mv_f32.cc'" in program.source
            return
        # mv.cc compiled as upstream's compile_mv(tile_m) compiles it
        assert program.objects == (f"mv_m{tm}.o",)
        assert "'source': 'programming_examples/matrix_vector_multiplication/bf16/mv.cc', " \
               f"'defines': {{'DIM_M_OUTPUT': {tm}}}" in program.source
    elif kernel == "flash_attention":
        tq = c["q_tile"] // c["q_tiles"]
        assert herd == [c["q_tiles"], c["cascade"]]
        assert parsed.grid == [shape["Lq"] // c["q_tile"], shape["heads"] // c["heads_per_unroll"]]
        assert ([tq, shape["head_dim"]], "bf16") in parsed.l1
        assert nbytes(parsed.l2) == usage["l2_bytes"]
        assert program.flags["omit_pingpong"] == "all"
        # attn_npu2.cc compiled per tile, with the defines upstream's compile_attn_npu2 passes
        obj = f"attn_npu2_{tq}x{c['k_tile']}x{c['k_tile']}x{c['dv_tile']}x{shape['head_dim']}.o"
        assert program.objects == (obj,)
        assert f"KERNELS = {{'{obj}': {{'source': 'programming_examples/flash_attention/" \
            "kernel_fusion_based/attn_npu2.cc'" in program.source
    elif kernel == "npu_decode_attention":
        assert herd == [min(c["herd_n"], shape["kv_heads"]), 1]
    else:       # streamed from DDR: herd_m columns (by herd_rows rows, 1 unless set), no L2
        assert herd == [c["herd_m"], c.get("herd_rows", 1)] and parsed.grid == [1, 1]
        assert not parsed.l2
        # a row block is flat: tile_rows rows of width, one after the other
        block = [c["tile_rows"] * shape["width"]] if "tile_rows" in c else [c["tile"]]
        inputs = [o for o in SPECS[kernel].operands(shape) if o.role == "input"]
        assert sum(1 for b in parsed.l1 if b[0] == block) >= len(inputs) + 1
        assert {f"{o.name}_l1" for o in inputs} <= pingpong
    assert program.flags["instance_name"] == program.function
    assert program.flags["output_format"] == "elf"        # one format, whatever the launches


def test_a_merged_dispatch_is_one_function_with_a_launch_per_kernel(tmp_path: Path):
    _, args = model_shape("smollm2-135m")
    plan = optimize(baseline_plan("smollm2-135m", args, Prefill(128), XDNA2), XDNA2).plan
    merged = next(d for d in plan.dispatches if len(d.launches) >= 6)
    program = emit_dispatch(merged)
    func, launches = parse(program.source)
    assert len(launches) == len(merged.launches)
    # names prefixed per slice: no two launches share a segment, herd or channel name
    assert [p.segment for p in launches] == [f"s{i}_segment" for i in range(len(launches))]
    assert all(h[0] == f"s{i}_herd" for i, p in enumerate(launches) for h in p.herds)
    # arguments rewired: a tensor bound by several launches is one argument of the function
    params = [a.arg for a in func.args.args]
    tensors = {b.tensor for ln in merged.launches for b in ln.bindings}
    assert len(params) == len(tensors) == len(set(params))
    for ln, parsed in zip(merged.launches, launches, strict=True):
        layout = layout_of(ln)
        assert parsed.herds[0][1] == list(layout.herd) and parsed.grid == list(layout.grid)
        for op, name in zip(layout.operands, parsed.operands, strict=True):
            producer = next(j for j, other in enumerate(merged.launches)
                            if any(b.tensor == ln.binding(op.name).tensor for b in other.bindings))
            first = launches[producer].operands
            assert name in first          # the same argument as the first launch binding it
    # several launches: the ELF flow, the instance named after the function
    assert program.flags == {**program.flags, "output_format": "elf",
                             "instance_name": func.name}
    # one declaration per micro-kernel symbol, each linked from its object
    tree = ast.parse(program.source)
    declared = [n.targets[0].id for n in ast.walk(tree) if isinstance(n, ast.Assign)  # type: ignore[attr-defined]
                and isinstance(n.value, ast.Call) and ast.unparse(n.value.func) == "FuncOp"]
    assert len(declared) == len(set(declared)) > 0
    written = write_programs([program], tmp_path / "air")
    path = tmp_path / "air" / written[0]["file"]
    assert path.read_text() == program.source and written[0]["sha256"] == program.digest
    compile(path.read_text(), str(path), "exec")


@pytest.mark.slow
@pytest.mark.parametrize("model", ["smollm2-135m", "qwen2.5-0.5b", "qwen3-0.6b"])
@pytest.mark.parametrize("mode", [Prefill(256), Decode(256)], ids=["prefill", "decode"])
def test_every_dispatch_of_baseline_and_optimized_plans_emits(model, mode):
    _, args = model_shape(model)
    base = baseline_plan(model, args, mode, XDNA2)
    for plan in (base, optimize(base, XDNA2).plan):
        programs = emit_plan(plan)
        assert len(programs) == len(plan.dispatches)
        # one instance name per distinct program, and one program per name
        assert len({p.function for p in programs}) == len({p.digest for p in programs})
        for program, dispatch in zip(programs, plan.dispatches, strict=True):
            _, launches = parse(program.source)
            assert len(launches) == len(dispatch.launches)


def test_a_kernel_with_no_program_is_refused_by_name():
    launch = launch_of("decode_attention", {"heads": 9, "kv_heads": 3, "Lq": 1, "Lk": 8,
                                            "head_dim": 64}, {})
    with pytest.raises(EmitError, match="no MLIR-AIR program for kernel 'decode_attention'"):
        emit_dispatch(Dispatch("host", (launch,)))


@pytest.mark.parametrize("method,tile_m", [("drain", 32), ("fused-cast", 64)])
def test_a_gemm_programs_l1_is_what_the_checker_counts_for_its_method(method, tile_m):
    shape = {"M": 2048, "K": 2048, "N": 2048}
    config = {**SPECS["gemm_bf16"].tunables, "method": method, "tile_m": tile_m}
    launch = launch_of("gemm_bf16", shape, config)
    _, usage = check_with_usage(SPECS["gemm_bf16"], shape, config, XDNA2)
    assert layout_of(launch).l1_bytes() == usage["l1_bytes"] <= XDNA2.l1_bytes


def test_a_merged_dispatch_declares_each_micro_kernel_with_the_types_it_is_called_with():
    """Qwen2.5-0.5B's q, k and v bias adds run on the same block but add biases of width 896
    and 128: upstream writes them inline, so the merged dispatch declares no micro-kernel for
    them. An upstream symbol is one name for every size (silu_and_mul_bf16 takes n at run
    time), so two launches that hand it L1 buffers of other sizes would declare it twice
    with other types, which func.call's verifier refuses: the emitter refuses it first."""
    from npu_deploy.kernels.plans.transforms import TRANSFORMS
    from npu_deploy.models import CATALOG

    args = CATALOG["qwen2.5-0.5b"].args
    plan = baseline_plan("qwen2.5-0.5b", args, Prefill(256), XDNA2)
    for name in ("align_layouts", "reuse_buffers", "merge_dispatches"):
        plan = TRANSFORMS[name].apply(plan)
    merged = next(d for d in plan.dispatches if any(ln.role == "k_bias" for ln in d.launches))
    program = emit_dispatch(merged, XDNA2)
    assert "bias_add" not in " ".join(program.objects)
    assert not [ln for ln in program.source.splitlines() if "FuncOp('bias_add" in ln]
    # the guard: one symbol, L1 tiles of two sizes
    shape = {"rows": 128, "width": 1536}
    two = tuple(launch_of("silu_mul", shape, {"herd_m": 8, "tile": tile}) for tile in (2048, 1024))
    with pytest.raises(EmitError, match="declared with .* by an earlier launch"):
        emit_dispatch(Dispatch("two", two), XDNA2)
