"""MLIR-AIR programs for the plan's dispatches, as Python sources for mlir-air's builder.

Two steps. `layout_of(launch)` says what one launch is on the array: its `air.launch` grid,
its herd, the buffers it allocates in L2 (the memory tiles) and L1 (each compute tile), its
loops, the channels it needs and the external micro-kernels it calls, all from the kernel
spec, the shape and the tile configuration; each kernel family declares it
(`kernels/families/`, with the parts in `kernels.air_programs.air_parts`), and the segment's body.
`emit_dispatch(dispatch)` writes one module with one function holding every launch of the
dispatch, in order, each as `air.launch` -> `air.segment` -> `air.herd`. A module says
what the program is, never where it runs: its arguments are named by operand, its function
(the ELF's instance name) by its kernels and its digest, so every layer's dispatch of the
same shapes is the same program, compiled once and loaded once, each layer running it on
buffers of its own, as upstream's LLM pipelines do (programming_examples/llms/shared/infra/
cache.py, `load_and_run`). `plan_programs(plan)` says how many distinct programs a plan
needs, against the contexts a process may hold (`Hardware.hw_contexts`). Every program
is an ELF (docs/hardware-facts.md#hardware-contexts-and-output-formats).
Never a bare herd: a bare herd next to
other launches is dropped silently on NPU2 (docs/hardware-facts.md#known-failure-symptoms,
"output all zeros after merging kernels"). Names of segments, herds and channels are prefixed
per launch (`s0_`, `s1_`...), and launches that bind the same tensor share one function
argument.

The structure follows mlir-air's programming examples (GEMM, GEMV, weighted RMSNorm, RoPE
half-split, SiLU x mul, eltwise add, FlashAttention kernel_fusion_based): L2 staging for
GEMM, streaming from DDR for the row and element-wise kernels, channels and a cascade for
FlashAttention. The micro-kernel objects (`mm_64x32x128_n4.o`...) are compiled per tile shape
from mlir-air's AIE kernel sources with Peano; their symbols carry the sizes, so two tile
shapes never clash in one ELF, and the module says how to build each (`KERNELS`: source and
defines). Decode attention follows mlir-air's attention_decode with micro-kernels of our own
(`kernels/aie/`, a KernelSource whose repository is npu-deploy).

Nothing here imports mlir-air: the sources are text, and `kernels.npu_runtime.xrt_runtime` builds
them.
"""

from __future__ import annotations

import hashlib
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..definition.hardware import XDNA2, Hardware
from ..definition.registry import FAMILIES
from ..plans.plan import Dispatch, DispatchPlan, Launch
from .air_parts import (
    DTYPES,
    ELEM_BYTES,
    Buffer,
    ChannelDecl,
    EmitError,
    Extern,
    KernelSource,
    LaunchLayout,
    Writer,
    cdiv,
    identifier,
    memref,
)


def layout_of(launch: Launch, hw: Hardware = XDNA2) -> LaunchLayout:
    family = FAMILIES.get(launch.kernel)
    if family is None or family.program is None:
        known = sorted(n for n, f in FAMILIES.items() if f.program is not None)
        raise EmitError(f"{launch.label}: no MLIR-AIR program for kernel {launch.kernel!r}; "
                        f"known: {', '.join(known)}")
    launch = launch.built()         # a dimension read at run time: at the maximum built for
    layout = family.program.layout(launch, {**launch.spec.tunables, **launch.config_dict}, hw)
    # a padded head-first operand holds L_pad rows per head: its buffer is that much larger
    stored = {op.name: op.numel // pad[0] * pad[1] for op in layout.operands
              if (pad := launch.binding(op.name).seq_pad) is not None}
    if not stored:
        return layout
    return replace(layout, padded={**layout.padded, **{
        name: max(n, layout.padded.get(name, 0)) for name, n in stored.items()}})


# --- writing the module ---------------------------------------------------------------------

#: The one output format of every program (`Program.flags`).
OUTPUT_FORMAT = "elf"
#: Stands for the function's name while the module is written: the name is the module's
#: digest with that stand-in, so it says what the program is and never where it runs.
_FUNCTION = "NPU_DEPLOY_FUNCTION"

@dataclass(frozen=True)
class Program:
    """One dispatch's module: its source, the function (= the ELF instance name), the
    function's arguments (names, flat shapes, dtypes) with the plan tensor each one holds
    (`tensors`: "L0.q", or "logits[0:4096]" for a row range), per launch the argument each
    operand is wired to (`wiring`, in the spec's operand order), the objects it links.

    The source, and so the digest and the function, are the program's identity: its
    kernels, shapes, configurations and layouts, never its layer or role. Layer 0's
    q_proj and layer 1's (and a k_proj of the same shape) are one program, compiled once;
    what differs per dispatch is `tensors`, the buffers it runs on."""

    dispatch: str
    function: str
    source: str
    arguments: tuple[tuple[str, tuple[int, ...], str], ...]
    objects: tuple[str, ...]
    layouts: tuple[LaunchLayout, ...]
    tensors: tuple[str, ...] = ()
    wiring: tuple[tuple[str, ...], ...] = ()
    launches: tuple[Launch, ...] = ()
    head_dim: int | None = None        # the model's, for operands bound head-first

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    @property
    def air_launches(self) -> int:
        """The `air.launch` ops the module holds: one per plan launch, and more where a
        family adds one (fused-cast GEMM's cast)."""
        return sum(1 for line in self.source.splitlines() if line.lstrip().startswith("@launch("))

    @property
    def flags(self) -> dict[str, Any]:
        """The compiler options the launches ask for, merged (the strictest wins). Always an
        ELF: one output format per process (an ELF and an xclbin context in one process slow
        each other down), and a module of more than one `air.launch` is mis-run as xclbin
        (docs/hardware-facts.md#hardware-contexts-and-output-formats)."""
        out: dict[str, Any] = {"output_format": OUTPUT_FORMAT,
                               "instance_name": self.function, "stack_size": 1024,
                               "omit_pingpong": ""}
        tiling: list[int] | None = None
        for layout in self.layouts:
            out["stack_size"] = max(out["stack_size"], layout.flags.get("stack_size", 0))
            if layout.flags.get("omit_pingpong") == "all":
                out["omit_pingpong"] = "all"
            # aircc's --air-runtime-loop-tiling-sizes (the shim BD optimization's tiles), one
            # value for the ELF: the smallest any launch asks for, dimension by dimension
            sizes = layout.flags.get("runtime_loop_tiling_sizes")
            if sizes:
                tiling = list(sizes) if tiling is None else \
                    [min(a, b) for a, b in zip(tiling, sizes, strict=False)]
        if tiling is not None:
            out["runtime_loop_tiling_sizes"] = tiling
        return out


def _signature(ext: Extern, l1: tuple[Buffer, ...]) -> str:
    """An extern's argument types, as its FuncOp declares them."""
    by_name = {b.name: b for b in l1}
    return ", ".join("i32" if a == "i32" else by_name[a].window_type(ext.window)
                     if ext.window else by_name[a].slab_type() for a in ext.args)


def tensor_key(launch: Launch, b: Any) -> str:
    """The device buffer a binding names: its tensor, with its row range if it has one. A
    GEMM reads its weight as B = W^T ([K, N]), a buffer of its own ("w.L0.q_proj:KN"): a
    GEMV of the same weight reads W as it is."""
    key = b.tensor if b.rows is None else f"{b.tensor}[{b.rows[0]}:{b.rows[1]}]"
    if b.operand == FAMILIES[launch.kernel].transposed_weight and b.tensor.startswith("w."):
        key += ":KN"
    return key


def padded_sizes(pairs: list[tuple[Launch, LaunchLayout]]) -> dict[str, int]:
    """The flat elements each bound tensor's device buffer holds: its own, or more where a
    program walks past the end (a layout's `padded`), the most any of the launches needs.
    One size per tensor across a plan, so a buffer one program writes is the one the next
    reads."""
    sizes: dict[str, int] = {}
    for launch, layout in pairs:
        for op in layout.operands:
            key = tensor_key(launch, launch.binding(op.name))
            sizes[key] = max(sizes.get(key, 0), op.numel, layout.padded.get(op.name, 0))
    # every layer's tensor of one kind gets one size (the residual stream x.16 is written
    # by the last layer and read by no later GEMM, but its buffer is x.1's size), so the
    # last layer runs the program the others run
    kind = {key: _LAYER.sub(r"\1*", key) for key in sizes}
    most: dict[str, int] = {}
    for key, n in sizes.items():
        most[kind[key]] = max(most.get(kind[key], 0), n)
    return {key: most[kind[key]] for key in sizes}


#: A tensor's layer in its name: "L3." (a layer's own), "x.4" (the residual stream).
_LAYER = re.compile(r"(\bL|^x\.)\d+")


def sequence_padding(pairs: list[tuple[Launch, LaunchLayout]]) -> dict[int, int]:
    """L -> L_pad: the sequence length each head-first tensor of L positions is stored with
    on the device, the smallest multiple of L's blocks in every launch that walks it
    (`LaunchLayout.sequence`: a GEMM's tile_m x herd_m rows, FlashAttention's q and K/V
    tiles). One length per sequence, not per tensor: RoPE and the QK norm map their input's
    rows to their output's one to one, and FlashAttention's causal mask numbers q and K
    blocks alike, so every head-first tensor of a sequence shares its stride."""
    multiple: dict[int, int] = {}
    for _, layout in pairs:
        if layout.sequence is not None:
            length, m = layout.sequence
            multiple[length] = math.lcm(multiple.get(length, 1), m)
    return {length: cdiv(length, m) * m for length, m in multiple.items()}


def pad_sequences(dispatches: list[Dispatch], hw: Hardware = XDNA2) -> list[Dispatch]:
    """The dispatches with every head-first binding of a padded sequence marked (L, L_pad)
    (`Binding.seq_pad`), so that each program addresses it with L_pad rows per head.
    A plan holds one sequence (a prefill's L); a head-first operand whose launch does not
    say its length (the QK norm's rows are heads x L) is of that sequence."""
    lengths = sequence_padding([(ln, layout_of(ln, hw)) for d in dispatches
                                for ln in d.launches])
    padded = {length: pad for length, pad in lengths.items() if pad != length}
    if not padded:
        return list(dispatches)
    if len(lengths) > 1:
        raise EmitError(f"the launches walk sequences of {sorted(lengths)} positions; "
                        "padding their head-first tensors needs one sequence per plan")
    (length, pad), = padded.items()

    def launch_of(ln: Launch) -> Launch:
        return ln.with_bindings(tuple(
            replace(b, seq_pad=(length, pad)) if b.layout == "head-first" else b
            for b in ln.bindings))
    return [replace(d, launches=tuple(launch_of(ln) for ln in d.launches))
            for d in dispatches]


def _argument_names(dispatch: Dispatch, layouts: list[LaunchLayout],
                    sizes: dict[str, int] | None = None
                    ) -> tuple[dict[str, tuple[str, tuple[int, ...], str]], list[list[str]]]:
    """The function's arguments (one per bound tensor, in order of first use, keyed by the
    tensor, sized as `sizes` pads it) and, per launch, the argument each of its operands is
    wired to."""
    sizes = {**padded_sizes(list(zip(dispatch.launches, layouts, strict=True))),
             **(sizes or {})}
    args: dict[str, tuple[str, tuple[int, ...], str]] = {}
    wiring: list[list[str]] = []
    for launch, layout in zip(dispatch.launches, layouts, strict=True):
        names = []
        for op in layout.operands:
            b = launch.binding(op.name)
            key = tensor_key(launch, b)
            if key not in args:      # named by operand and order, never by tensor (a layer)
                args[key] = (f"arg{len(args)}_{op.name}", (sizes[key],), DTYPES[op.elem_bytes])
            names.append(args[key][0])
        wiring.append(names)
        for name, like, dtype in layout.scratch:     # device only, sized like its operand
            key = f"scratch:{launch.label}:{name}"
            like_key = tensor_key(launch, launch.binding(like))
            args[key] = (f"arg{len(args)}_{name}", args[like_key][1], dtype)
        for dim in layout.runtime:                  # a run-time dimension's value: one i32
            key = f"runtime:{launch.label}:{dim}"
            args[key] = (f"arg{len(args)}_{dim}", (1,), "i32")
    return args, wiring


def scratch_names(launch: Launch, layout: LaunchLayout,
                  by_tensor: dict[str, tuple[str, tuple[int, ...], str]]) -> dict[str, str]:
    """The function arguments of a launch's scratch buffers, by scratch name, and of its
    run-time dimensions' values, by dimension."""
    return {**{name: by_tensor[f"scratch:{launch.label}:{name}"][0]
               for name, _, _ in layout.scratch},
            **{dim: by_tensor[f"runtime:{launch.label}:{dim}"][0] for dim in layout.runtime}}


def emit_dispatch(dispatch: Dispatch, hw: Hardware = XDNA2,
                  head_dim: int | None = None, sizes: dict[str, int] | None = None
                  ) -> Program:
    """The MLIR-AIR module of one dispatch: one function, one air.launch per launch.
    `head_dim` (the model's) is needed when an operand is bound head-first; `sizes` are the
    plan's padded tensor sizes (`padded_sizes`), this dispatch's own when not given. It is
    written for the dispatch as built (`Dispatch.built`): one program for every value of a
    dimension read at run time."""
    dispatch = dispatch.built()
    layouts = [layout_of(ln, hw) for ln in dispatch.launches]
    function = _FUNCTION
    by_tensor, wiring = _argument_names(dispatch, layouts, sizes)
    arguments = list(by_tensor.values())
    externs: dict[str, tuple[Extern, tuple[Buffer, ...]]] = {}
    for layout in layouts:
        for ext in layout.externs:
            first = externs.setdefault(ext.symbol, (ext, layout.l1))
            if _signature(*first) != _signature(ext, layout.l1):
                # one declaration per symbol: a call with other types fails func.call's verifier
                raise EmitError(f"{layout.label}: {ext.symbol} is called with "
                                f"{_signature(ext, layout.l1)} but declared with "
                                f"{_signature(*first)} by an earlier launch; a micro-kernel "
                                "compiled for other sizes needs a symbol of its own")
    objects = tuple(sorted({e.obj for e, _ in externs.values()}))
    kernels: dict[str, KernelSource] = {}
    for layout in layouts:
        for k in layout.kernels:
            if kernels.setdefault(k.obj, k) != k:
                raise EmitError(f"{layout.label}: {k.obj} is compiled as {k.recipe()} here and "
                                f"as {kernels[k.obj].recipe()} by an earlier launch; an object "
                                "of other sizes needs a name of its own")

    w = Writer()
    w('"""MLIR-AIR program of ' + f"{len(layouts)} launch(es): "
      + ", ".join(ly.kernel for ly in layouts) + ".")
    w("")
    w("Written by npu-deploy (kernels/air_programs/air.py) from a dispatch plan; one build")
    w("serves every dispatch of these shapes (each layer with buffers of its own). `python`")
    w(f"this file to print the module. Compile with mlir-air's XRT backend, output_format="
      f"{OUTPUT_FORMAT!r},")
    w(f"instance_name={function!r}; link objects: {', '.join(objects)}.")
    w('"""')
    w("")
    w("from air.dialects import arith")
    w("from air.dialects.affine import apply as affine_apply")
    w("from air.dialects.air import *  # noqa: F403 - launch, segment, herd, Channel, T, ...")
    w("from air.dialects.func import CallOp, FuncOp")
    w("from air.dialects.memref import AllocOp, DeallocOp, subview")
    w("from air.dialects.scf import for_ as range_")
    w("from air.dialects.scf import yield_")
    w("from air.ir import *  # noqa: F403 - MemRefType, IntegerAttr, AffineMap, ...")
    for line in sorted({imp for layout in layouts for imp in layout.imports}):
        w(line)        # what inline (direct codegen) code needs
    w("")
    w(f"FUNCTION = {function!r}")
    w(f"OBJECTS = {list(objects)!r}")
    # how each object is compiled: its mlir-air source and defines, for the build and the
    # verifier's check of each call against the kernel
    w(f"KERNELS = {{{', '.join(f'{o!r}: {k.recipe()!r}' for o, k in sorted(kernels.items()))}}}")
    w(f"LAUNCHES = {[ly.kernel for ly in layouts]!r}")
    w("")
    w("")
    w("def at(terms, constant=0, divisor=1):")
    w('    """(sum(value * multiplier) + constant) floordiv divisor, as an index')
    w('    (affine.apply)."""')
    w("    expr = AffineConstantExpr.get(constant)")
    w("    for i, (_, multiplier) in enumerate(terms):")
    w("        expr = AffineExpr.get_add(expr, AffineExpr.get_mul(AffineSymbolExpr.get(i),")
    w("                                                           "
      "AffineConstantExpr.get(multiplier)))")
    w("    if divisor != 1:")
    w("        expr = AffineExpr.get_floor_div(expr, AffineConstantExpr.get(divisor))")
    w("    return affine_apply(AffineMap.get(0, len(terms), [expr]), [v for v, _ in terms])")
    w("")
    w("")
    w("@module_builder")
    w("def build_module():")
    w.indent()
    w("bf16, f32, i32 = T.bf16(), T.f32(), T.i32()")
    if any(dtype == "i8" for _, _, dtype in arguments):     # packed 4-bit weights
        w("i8 = T.i8()")
    w("L1 = IntegerAttr.get(i32, MemorySpace.L1)")
    w("L2 = IntegerAttr.get(i32, MemorySpace.L2)")
    w("")
    w("# external micro-kernels, one symbol per compiled tile shape")
    for symbol, (ext, l1) in externs.items():
        w(f"{symbol} = FuncOp({symbol!r}, ([{_signature(ext, l1)}], []), "
          "visibility='private')")
        w(f"{symbol}.attributes['link_with'] = StringAttr.get({ext.obj!r})")
        w(f"{symbol}.attributes['llvm.emit_c_interface'] = UnitAttr.get()")
    for i, layout in enumerate(layouts):
        for c in layout.channels:
            ch = c if isinstance(c, ChannelDecl) else ChannelDecl(*c)
            shape = f", broadcast_shape={list(ch.broadcast)}" if ch.broadcast else ""
            w(f"{'cascade = ' if ch.cascade else ''}Channel('s{i}_{ch.name}', "
              f"size={list(ch.size)}{shape})")
            if ch.cascade:
                w("cascade.attributes['channel_type'] = StringAttr.get('npu_cascade')")
    w("")
    arg_types = ", ".join(memref(shape, dtype) for _, shape, dtype in arguments)
    w(f"@FuncOp.from_py_func({arg_types})")
    w(f"def {function}({', '.join(a for a, _, _ in arguments)}):")
    w.indent()
    for i, (launch, layout, names) in enumerate(zip(dispatch.launches, layouts, wiring,
                                                    strict=True)):
        _emit_launch(w, i, launch, layout, names, head_dim,
                     scratch_names(launch, layout, by_tensor))
    w.dedent()
    w.dedent()
    w("")
    w("")
    w('if __name__ == "__main__":')
    w("    print(build_module())")
    draft = "\n".join(w.lines) + "\n"
    function = program_name(layouts, hashlib.sha256(draft.encode()).hexdigest())
    return Program(dispatch.name, function, draft.replace(_FUNCTION, function),
                   tuple(arguments), objects, tuple(layouts), tuple(by_tensor),
                   tuple(tuple(names) for names in wiring), dispatch.launches, head_dim)


def program_name(layouts: list[LaunchLayout], digest: str) -> str:
    """The function (and ELF instance) name of a module: its kernels, in order, each once
    (at most three, then how many launches), and its digest's first ten hex digits."""
    kinds = list(dict.fromkeys(ly.kernel for ly in layouts))
    head = "_".join(kinds[:3]) + (f"_x{len(layouts)}" if len(kinds) > 3 else "")
    return identifier(f"{head}_{digest[:10]}")


def _emit_launch(w: Writer, i: int, launch: Launch, layout: LaunchLayout,
                 names: list[str], head_dim: int | None,
                 scratch: dict[str, str] | None = None) -> None:
    p = f"s{i}"
    scratch = scratch or {}
    ops = ", ".join([*names, *scratch.values()])
    w(f"# launch {i}: {layout.kernel} {launch.shape_dict}, "
      f"herd {layout.herd[0]}x{layout.herd[1]}, grid {layout.grid[0]}x{layout.grid[1]}")
    w(f"@launch(operands=[{ops}], sizes={list(layout.grid)})")
    w(f"def {p}_launch(lx, ly, lsx, lsy, {ops}):")
    w.indent()
    program = FAMILIES[launch.kernel].program
    assert program is not None          # layout_of found one
    arg = {**dict(zip((o.name for o in layout.operands), names, strict=True)), **scratch}
    if program.launch_in is not None:
        program.launch_in(w, p, launch, layout, arg, names, head_dim)
    seg_sizes = f", sizes={list(layout.segment)}" if layout.segment else ""
    seg_ids = "gx, gy, gsx, gsy, " if layout.segment else ""
    w(f"@segment(name='{p}_segment', operands=[lx, ly, {ops}]{seg_sizes})")
    w(f"def {p}_segment({seg_ids}lx, ly, {ops}):")
    w.indent()
    for b in layout.l2:
        w(f"{b.name} = AllocOp({memref(b.shape, b.dtype, 'L2')}, [], [])")
    program.segment(w, p, launch, layout, arg, names, head_dim)
    for b in layout.l2:
        w(f"DeallocOp({b.name})")
    w.dedent()
    if program.launch_out is not None:
        program.launch_out(w, p, launch, layout, arg, names, head_dim)
    w.dedent()
    w("")
    if program.after is not None:
        program.after(w, p, launch, layout, arg, names, head_dim)


# --- a plan's programs as files ---------------------------------------------------------------

def on_device(plan: DispatchPlan, hw: Hardware = XDNA2
              ) -> tuple[list[Dispatch], dict[str, int]]:
    """A plan's dispatches as the device runs them: the sequence padded where its programs
    walk past it (`pad_sequences`), and every tensor's buffer sized once for the whole plan
    (`padded_sizes`), so a buffer one program writes is the one the next reads."""
    dispatches = pad_sequences(list(plan.dispatches), hw)
    return dispatches, padded_sizes([(ln, layout_of(ln, hw)) for d in dispatches
                                     for ln in d.launches])


def emit_plan(plan: DispatchPlan, hw: Hardware = XDNA2) -> list[Program]:
    dispatches, sizes = on_device(plan, hw)
    return [emit_dispatch(d, hw, plan.args.head_dim, sizes) for d in dispatches]


@dataclass(frozen=True)
class ProgramSet:
    """A plan's programs as the device holds them: one build per distinct source, each
    with the dispatches that run it (every layer, and every role of the same shapes)."""

    programs: tuple[Program, ...]               # one per dispatch, in plan order

    @property
    def distinct(self) -> dict[str, list[Program]]:
        """digest -> the dispatches' programs that share that build, in first-use order."""
        out: dict[str, list[Program]] = {}
        for p in self.programs:
            out.setdefault(p.digest, []).append(p)
        return out

    def within(self, hw: Hardware = XDNA2) -> bool:
        """Whether every distinct program fits the hardware contexts a process keeps open,
        so a run of the plan never reloads one (`Hardware.hw_contexts`)."""
        return len(self.distinct) <= hw.hw_contexts

    def multi_launch(self) -> list[Program]:
        """The distinct programs of more than one `air.launch` (ELF only)."""
        return [ps[0] for ps in self.distinct.values() if ps[0].air_launches > 1]

    def largest_buffer(self) -> tuple[int, str]:
        """The largest buffer object any program binds, in bytes, and its plan tensor."""
        best = (0, "")
        for p in self.programs:
            for (_, shape, dtype), tensor in zip(p.arguments, p.tensors, strict=True):
                nbytes = math.prod(shape) * ELEM_BYTES[dtype]
                best = max(best, (nbytes, tensor))
        return best


def plan_programs(plan: DispatchPlan, hw: Hardware = XDNA2) -> ProgramSet:
    return ProgramSet(tuple(emit_plan(plan, hw)))


def write_programs(programs: list[Program], directory: Path, *,
                   by_digest: bool = False) -> list[dict[str, Any]]:
    """Each distinct program once, as DIRECTORY/<function>.py (the function name carries
    the digest); what was written, per dispatch, for the log (`by_digest` is kept for
    callers that name files by digest; the names agree)."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    written: set[str] = set()
    for prog in programs:
        path = directory / (f"{prog.function}-{prog.digest[:12]}.py" if by_digest
                            else f"{prog.function}.py")
        if path.name not in written:
            path.write_text(prog.source)
            written.add(path.name)
        out.append({"dispatch": prog.dispatch, "file": path.name, "function": prog.function,
                    "launches": len(prog.layouts), "air_launches": prog.air_launches,
                    "objects": list(prog.objects), "sha256": prog.digest})
    return out


__all__ = ["OUTPUT_FORMAT", "Buffer", "EmitError", "Extern", "LaunchLayout", "Program",
           "ProgramSet", "emit_dispatch", "emit_plan", "identifier", "layout_of",
           "plan_programs", "program_name", "pad_sequences", "padded_sizes",
           "sequence_padding", "tensor_key", "write_programs"]
