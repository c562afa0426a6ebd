"""The program verifier: what a compiler, the linker and the array would refuse in an emitted
MLIR-AIR program, found without mlir-air.

`verify(program)` runs the program's builder against the recording stand-in of the `air`
package (`kernels.air_programs.recording_builder`) and checks what it built:

- **build**: the builder runs, every `scf.for` ends in `scf.yield`, hierarchy bodies use
  only their own operands (isolated from above);
- **bounds**: every DMA, channel access and vector transfer stays inside its memref, over
  every launch, segment and herd index and every loop iteration;
- **elements**: a `dma_memcpy_nd` moves as many elements as it receives;
- **channel**: every channel is declared, put to and got from at the same indices with the
  same number of elements (a broadcast channel delivers each put to every index of its
  broadcast dimensions), a cascade channel joins two compute tiles;
- **extern**: every call matches its declaration's types, runs in a herd that links the
  object the declaration names, and, for an upstream micro-kernel, matches its C symbol,
  parameters, and the elements each pointer parameter reads or writes at the sizes it is
  compiled and called with (`kernels.measured.upstream_kernels`);
- **l1** / **l2**: each compute tile's allocations, ping-pong buffers counted twice, plus the
  stack fit its 64 KiB; each memory tile's fit 512 KiB;
- **coverage**: every element of every output the program's launches write is written.

Each finding is a `Violation`: the check, where, and what is wrong.
"""

from __future__ import annotations

import functools
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..definition.hardware import XDNA2, Hardware
from ..measured import upstream_kernels
from .recording_builder import (
    HIERARCHY,
    BuildError,
    Ix,
    MemRef,
    MemRefType,
    Op,
    Pattern,
    Region,
    Trace,
    Var,
    build,
)

CHECKS = ("build", "bounds", "elements", "channel", "extern", "l1", "l2", "coverage")

#: Enumerate at most this many index points (or output elements) to decide a check exactly.
ENUMERATE = 1 << 24


@dataclass(frozen=True)
class Violation:
    check: str            # one of CHECKS
    where: str
    message: str

    def line(self) -> str:
        return f"{self.check}: {self.where}: {self.message}"


# --- index points ----------------------------------------------------------------------------

def _live(region: Region) -> bool:
    """False when a loop around it never runs."""
    return all(v.count > 0 for v in region.enclosing())


def _trips(variables: Iterable[Var]) -> int:
    return math.prod(v.count for v in variables)


def _grid(variables: list[Var]) -> dict[Var, torch.Tensor]:
    """Every combination of the variables' values, as flat tensors."""
    if not variables:
        return {}
    axes = [v.start + v.step * torch.arange(v.count, dtype=torch.int64) for v in variables]
    mesh = torch.meshgrid(*axes, indexing="ij")
    return {v: m.reshape(-1) for v, m in zip(variables, mesh, strict=True)}


def _constant(ix: Ix, what: str) -> int:
    c = ix.constant()
    if c is None:
        raise BuildError(f"{what} {ix} is not a constant: the verifier needs static sizes "
                         "and strides")
    return c


@dataclass(frozen=True)
class Access:
    """The elements a pattern walks: `start` (over the op's index points) plus every
    sum(i_d * stride_d), i_d < size_d."""

    start: Ix
    sizes: tuple[int, ...]
    strides: tuple[int, ...]

    @staticmethod
    def of(pattern: Pattern | None, memref: MemRefType) -> Access:
        if pattern is None:
            return Access(Ix.const(0), (memref.numel,), (1,))
        sizes = tuple(_constant(s, "size") for s in pattern.sizes)
        strides = tuple(_constant(s, "stride") for s in pattern.strides)
        start = Ix.const(0)
        for off, stride in zip(pattern.offsets, strides, strict=True):
            start = Ix("+", (start, Ix("*", (off, stride))))
        return Access(start, sizes, strides)

    @property
    def count(self) -> int:
        return math.prod(self.sizes)

    def extent(self) -> tuple[int, int]:
        """The lowest and highest element relative to `start`."""
        lo = sum((s - 1) * t for s, t in zip(self.sizes, self.strides, strict=True) if t < 0)
        hi = sum((s - 1) * t for s, t in zip(self.sizes, self.strides, strict=True) if t > 0)
        return lo, hi

    def starts(self) -> torch.Tensor:
        variables = sorted(self.start.vars(), key=lambda v: v.uid)
        grid = _grid(variables)
        value = self.start.evaluate(grid)
        n = _trips(variables)
        return value.expand(n) if isinstance(value, torch.Tensor) else \
            torch.full((n,), int(value), dtype=torch.int64)

    def elements(self) -> torch.Tensor:
        """Every element it touches (with repeats), for a small access."""
        idx = self.starts()
        for size, stride in zip(self.sizes, self.strides, strict=True):
            idx = (idx[:, None] + torch.arange(size, dtype=torch.int64) * stride).reshape(-1)
        return idx

    def points(self) -> int:
        return _trips(self.start.vars())


def _range(access: Access) -> tuple[int, int, bool]:
    """Lowest and highest element touched, and whether that is exact."""
    lo, hi = access.start.bounds()
    exact = access.start.linear() is not None
    if not exact and access.points() <= ENUMERATE:
        s = access.starts()
        lo, hi, exact = int(s.min()), int(s.max()), True
    elo, ehi = access.extent()
    return lo + elo, hi + ehi, exact


# --- the verifier -------------------------------------------------------------------------------

@dataclass
class _Context:
    trace: Trace
    namespace: dict[str, Any]
    program: Any
    hw: Hardware
    found: list[Violation] = field(default_factory=list)

    def add(self, check: str, where: str, message: str) -> None:
        self.found.append(Violation(check, where, message))


def _where(op: Op) -> str:
    return op.region.path().removeprefix("module/")


def _label(m: MemRef) -> str:
    return m.root.name


def verify_source(source: str, *, flags: dict[str, Any] | None = None,
                  outputs: Iterable[int] | dict[int, Any] = (), hw: Hardware = XDNA2,
                  upstream: bool = True) -> list[Violation]:
    """Every violation of one program source. `outputs`: the positions of the function
    arguments the program must write, whole or (a dict) their first so many elements or
    their (first, count) ranges (a padded buffer's data); `flags`: its compiler options
    (stack size, ping-pong)."""
    try:
        trace, namespace = build(source)
    except Exception as e:       # the builder's own refusal, or Python's on a broken program
        return [Violation("build", "module", f"{type(e).__name__}: {e}")]
    ctx = _Context(trace, namespace, None, hw)
    for err in trace.errors:
        ctx.add("build", "module", err)
    ops = [op for op in trace.ops if _live(op.region)]
    _check_bounds(ctx, ops)
    _check_elements(ctx, ops)
    _check_channels(ctx, ops)
    _check_calls(ctx, ops, upstream)
    _check_memory(ctx, trace, ops, flags or {})
    wanted = {k: [(0, v)] if isinstance(v, int) and v else list(v or [])
              for k, v in (outputs.items() if isinstance(outputs, dict)
                           else ((k, 0) for k in outputs))}
    _check_coverage(ctx, trace, ops, wanted)
    return ctx.found


def verify(program: Any, hw: Hardware = XDNA2, upstream: bool = True) -> list[Violation]:
    """Every violation of an emitted `kernels.air_programs.air.Program`."""
    names = [a[0] for a in program.arguments]
    outputs: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for launch, layout, wired in zip(program.launches, program.layouts, program.wiring,
                                     strict=True):
        for op, arg in zip(layout.operands, wired, strict=True):
            if op.role == "output":
                outputs[names.index(arg)] += data_ranges(launch.binding(op.name), op.numel,
                                                         program.head_dim)
    return verify_source(program.source, flags=program.flags, outputs=outputs, hw=hw,
                         upstream=upstream)


def data_ranges(binding: Any, numel: int, head_dim: int | None) -> list[tuple[int, int]]:
    """Where an operand's data lies in its buffer: all of it from the start, or, for a
    head-first operand whose sequence is padded from L to L_pad, L rows of each head at a
    stride of L_pad rows."""
    pad = getattr(binding, "seq_pad", None)
    if pad is None or binding.layout != "head-first" or not head_dim:
        return [(0, numel)]
    length, stored = pad
    heads = numel // (length * head_dim)
    return [(h * stored * head_dim, length * head_dim) for h in range(heads)]


def _accesses(op: Op) -> Iterator[tuple[MemRef, Pattern | None, str]]:
    roles = {"dma": ("dst", "src"), "put": ("src",), "get": ("dst",), "read": ("source",),
             "write": ("dest",), "subview": ("source",)}.get(op.kind, ())
    yield from zip(op.memrefs, op.patterns, roles, strict=False)


def _check_bounds(ctx: _Context, ops: list[Op]) -> None:
    for op in ops:
        for m, pattern, role in _accesses(op):
            try:
                access = Access.of(pattern, m.memref)
            except BuildError as e:
                ctx.add("build", _where(op), f"{op.kind} {role}: {e}")
                continue
            lo, hi, exact = _range(access)
            if lo < 0 or hi >= m.memref.numel:
                proven = "" if exact else " (could not be proven within: the offsets are " \
                                          "not affine and too many to enumerate)"
                ctx.add("bounds", _where(op),
                        f"{op.kind} {role} {_label(m)} ({m.memref}, {m.memref.numel} "
                        f"elements) reaches elements {lo}..{hi}{proven}")


def _check_elements(ctx: _Context, ops: list[Op]) -> None:
    for op in ops:
        if op.kind != "dma":
            continue
        try:
            dst, src = (Access.of(p, m.memref) for m, p in zip(op.memrefs, op.patterns,
                                                                 strict=True))
        except BuildError:
            continue                      # reported by the bounds check
        if dst.count != src.count:
            ctx.add("elements", _where(op),
                    f"dma_memcpy_nd moves {src.count} elements from {_label(op.memrefs[1])} "
                    f"into {dst.count} of {_label(op.memrefs[0])}")


def _per_index(op: Op, rank: int) -> dict[tuple[int, ...], int] | None:
    """Elements the op moves at each channel index, summed over every time it runs."""
    m, pattern = op.memrefs[0], op.patterns[0]
    try:
        count = Access.of(pattern, m.memref).count
    except BuildError:
        return None
    indices = list(op.indices) or [Ix.const(0)] * rank
    if len(indices) != rank:
        return None
    inside = sorted(set().union(*(i.vars() for i in indices)), key=lambda v: v.uid)
    repeats = _trips(v for v in op.region.enclosing() if v not in inside)
    grid = _grid(inside)
    values = [i.evaluate(grid) for i in indices]
    n = _trips(inside)
    cols = [v if isinstance(v, torch.Tensor) else torch.full((n,), int(v)) for v in values]
    out: dict[tuple[int, ...], int] = defaultdict(int)
    for point in zip(*(c.tolist() for c in cols), strict=True):
        out[tuple(point)] += count * repeats
    return dict(out)


def _check_channels(ctx: _Context, ops: list[Op]) -> None:
    by_channel: dict[str, list[Op]] = defaultdict(list)
    for op in ops:
        if op.kind in ("put", "get"):
            by_channel[op.channel].append(op)     # type: ignore[index]
    for name, used in by_channel.items():
        if name not in ctx.trace.channels:
            ctx.add("channel", _where(used[0]), f"channel {name!r} is used but not declared")
    for name, chan in ctx.trace.channels.items():
        used = by_channel.get(name, [])
        puts = [op for op in used if op.kind == "put"]
        gets = [op for op in used if op.kind == "get"]
        if not puts or not gets:
            ctx.add("channel", name, f"channel {name!r} is {'never put to' if not puts else ''}"
                    f"{' and ' if not puts and not gets else ''}"
                    f"{'never got from' if not gets else ''}: a DMA on it waits forever")
            continue
        size = tuple(chan.size)
        shape = tuple(chan.broadcast_shape) if chan.broadcast_shape else size
        put_at: dict[tuple[int, ...], int] = defaultdict(int)
        got_at: dict[tuple[int, ...], int] = defaultdict(int)
        for ops_, table, bound in ((puts, put_at, size), (gets, got_at, shape)):
            for op in ops_:
                counts = _per_index(op, len(size))
                if counts is None:
                    ctx.add("channel", _where(op), f"{op.kind} on {name!r}: indices "
                            f"{[str(i) for i in op.indices]} do not match the channel's "
                            f"size {list(size)}")
                    continue
                for idx, n in counts.items():
                    if any(not 0 <= i < b for i, b in zip(idx, bound, strict=True)):
                        ctx.add("channel", _where(op), f"{op.kind} on {name!r} at index "
                                f"{list(idx)}, outside its {list(bound)}")
                    table[idx] += n
        # a get at index g receives the put at g with each broadcast dimension at 0
        source = {g: tuple(gi if s == b else 0 for gi, s, b in zip(g, size, shape,
                                                                      strict=True))
                  for g in got_at}
        for g, n in sorted(got_at.items()):
            if put_at.get(source[g], 0) != n:
                ctx.add("channel", name, f"{name!r} index {list(g)} gets {n} elements but "
                        f"{put_at.get(source[g], 0)} are put to it"
                        + (f" (at {list(source[g])}, broadcast)" if source[g] != g else ""))
        for p in sorted(set(put_at) - set(source.values())):
            ctx.add("channel", name, f"{name!r} index {list(p)} is put {put_at[p]} elements "
                    "nobody gets")
        if chan.channel_type == "npu_cascade":
            for op in used:
                if op.region.herd() is None or op.memrefs[0].memref.space != "L1":
                    ctx.add("channel", _where(op), f"cascade channel {name!r} used outside a "
                            "compute tile: a cascade joins neighbouring cores' L1")


def _check_calls(ctx: _Context, ops: list[Op], upstream: bool) -> None:
    for op in ops:
        if op.kind != "call":
            continue
        f, where = op.callee, _where(op)
        if len(op.args) != len(f.inputs):
            ctx.add("extern", where, f"@{f.name} called with {len(op.args)} arguments, "
                    f"declared with {len(f.inputs)}")
            continue
        for i, (a, t) in enumerate(zip(op.args, f.inputs, strict=True)):
            got = a.type if hasattr(a, "type") else type(a).__name__
            if got != t:
                ctx.add("extern", where, f"@{f.name} argument {i} is {got}, declared {t}")
        herd = op.region.herd()
        link = f.attributes.get("link_with")
        obj = getattr(link, "value", None)
        if herd is None:
            ctx.add("extern", where, f"@{f.name} called outside a herd")
        elif obj is None:
            ctx.add("extern", where, f"@{f.name} declares no link_with object")
        elif obj not in (herd.link_with or "").split(","):
            ctx.add("extern", where, f"@{f.name} is in {obj} but herd {herd.name} links "
                    f"{herd.link_with or 'nothing'}")
        if upstream:
            for problem in _upstream_call(ctx, op):
                ctx.add("extern", where, problem)


def _upstream_call(ctx: _Context, op: Op) -> list[str]:
    """The call against the upstream kernel its object is compiled from (the program's
    KERNELS names each object's mlir-air source and defines): the C symbol, with the suffix
    define's renaming; a parameter per argument, of its type; every pointer's buffer at least
    as long as the kernel reaches through it at these defines and int arguments; the
    kernel's requirements on them."""
    f = op.callee
    obj = getattr(f.attributes.get("link_with"), "value", None)
    recipe = (ctx.namespace.get("KERNELS") or {}).get(obj)
    if recipe is None:
        return [f"@{f.name} links {obj}, which the program gives no upstream source to "
                "compile from (KERNELS): no mlir-air kernel defines it"]
    defines = dict(recipe.get("defines") or {})
    if recipe.get("repository", "Xilinx/mlir-air") == "npu-deploy":
        return _own_call(f, op, recipe["source"], defines)
    candidates = [k for k in upstream_kernels.kernels().values()
                  if k.file == recipe.get("source")]
    for k in candidates:
        suffix = defines.get(k.suffix_define, "") if k.suffix_define else ""
        if f.name == k.symbol + str(suffix or ""):
            break
    else:
        known = ", ".join(sorted(k.symbol for k in candidates)) or "none recorded"
        return [f"@{f.name} is not a symbol {recipe.get('source')} exports at these defines "
                f"(its symbols: {known})"]
    if len(op.args) != len(k.params):
        return [f"@{f.name} is called with {len(op.args)} arguments; {k.symbol} in {k.file} "
                f"takes {len(k.params)} ({', '.join(p.name for p in k.params)})"]
    problems = []
    ints: dict[str, int] = {}
    for a, p in zip(op.args, k.params, strict=True):
        if p.pointer:
            elem = getattr(getattr(a, "memref", None), "element", None)
            if str(elem) + "*" != p.type:
                problems.append(f"@{f.name} passes {getattr(a, 'type', a)} as {p.name}, a "
                                f"{p.type} in {k.file}")
        elif str(getattr(a, "type", "")) != p.type:
            problems.append(f"@{f.name} passes {getattr(a, 'type', a)} as {p.name}, an {p.type}")
        elif getattr(a, "ix", None) is not None and a.ix.constant() is not None:
            ints[p.name] = a.ix.constant()
    if problems:
        return problems
    # -DNAME=VALUE: a number as the compiler reads it, whether written as int or text
    sizes = {name: int(v) for name, v in defines.items() if name in dict(k.defines)
             and str(v).lstrip("-").isdigit()}
    try:
        values = k.resolved(sizes)
    except ValueError as e:
        return [f"@{f.name}: {e}"]
    for a, p in zip(op.args, k.params, strict=True):
        if not p.pointer:
            continue
        try:
            need = upstream_kernels.elements(p, values, ints)
        except ValueError:
            continue                       # reaches by an int argument that is not constant
        if need > a.memref.numel:
            problems.append(f"@{f.name} reaches {need} elements through {p.name} "
                            f"({p.elements} at {k.file}'s defines), its buffer {a.memref} "
                            f"holds {a.memref.numel}")
    return problems + [f"@{f.name}: {u}" for u in upstream_kernels.unmet(k, values, ints)]


#: A C parameter's type as the call passes it.
_C_TYPES = {"float*": "f32*", "bfloat16*": "bf16*", "int32_t": "i32", "int": "i32"}


@functools.cache
def own_signatures(source: str) -> dict[str, tuple[str, ...]]:
    """The extern "C" functions of one of our own micro-kernel sources (kernels/aie/), as
    `void SYM(name)(params)`: name -> its parameter types (f32*, bf16*, i32)."""
    text = (Path(__file__).parent.parent.parent / source).read_text()
    out = {}
    for name, params in re.findall(r"void\s+SYM\((\w+)\)\s*\(([^)]*)\)", text):
        types = []
        for param in filter(None, (p.strip() for p in params.split(","))):
            c = re.sub(r"\b(const|__restrict)\b", "", param).rsplit(None, 1)[0]
            c = c.replace(" ", "") + ("*" if param.split()[-1].startswith("*") else "")
            types.append(_C_TYPES.get(c, c))
        out[name] = tuple(types)
    return out


def _own_call(f: Any, op: Op, source: str, defines: dict[str, Any]) -> list[str]:
    """A call of one of our own kernels, held to its source's signature: the symbol with
    its SYM_SUFFIX, a parameter per argument, of its type."""
    try:
        known = own_signatures(source)
    except OSError:
        return [f"@{f.name}: its source {source} is not in the package"]
    base = f.name.removesuffix(str(defines.get("SYM_SUFFIX", "")))
    if base not in known:
        return [f"@{f.name} is not a symbol {source} exports (its symbols: "
                f"{', '.join(sorted(known)) or 'none'})"]
    want = known[base]
    got = tuple(f"{a.memref.element}*" if isinstance(a, MemRef) else str(getattr(a, "type", ""))
                for a in op.args)
    if got != want:
        return [f"@{f.name} is called with ({', '.join(got)}); {base} in {source} takes "
                f"({', '.join(want)})"]
    return []


def _footprint(buffers: list[tuple[MemRef, bool]]) -> int:
    return sum(m.memref.numel * m.memref.element.nbytes * (2 if pingpong else 1)
               for m, pingpong in buffers)


def _moved_in_loop(ops: list[Op], inside: Region) -> set[int]:
    """Allocations a DMA or channel moves inside a loop within `inside`: the compiler
    double-buffers them."""
    out: set[int] = set()
    for op in ops:
        if op.kind not in ("dma", "put", "get"):
            continue
        chain = list(op.region.chain())
        if inside not in chain:
            continue
        loops = chain[:chain.index(inside)]
        if any(r.kind == "for" for r in loops):
            out.update(id(m.root) for m in op.memrefs)
    return out


def _check_memory(ctx: _Context, trace: Trace, ops: list[Op], flags: dict[str, Any]) -> None:
    """L1 per compute tile, L2 per memory tile. The compiler allocates a core's L1 buffers
    statically: every herd of one name in a segment runs on the same cores, so their
    buffers add up (upstream's drain at tile_m 64 needs 72 KiB: its cast buffer beside the
    accumulator and the A and B tiles)."""
    omit = flags.get("omit_pingpong") == "all"
    stack = int(flags.get("stack_size", 1024))
    cores: dict[tuple[Any, str], dict[int, tuple[MemRef, bool]]] = defaultdict(dict)
    segments: dict[Region, list[MemRef]] = defaultdict(list)
    for op in ops:
        if op.kind != "alloc":
            continue
        m = op.memrefs[0]
        space = m.memref.space
        owner = op.region.herd() if space == "L1" else \
            next((r for r in op.region.chain() if r.kind in HIERARCHY), None)
        if space == "L1" and owner is None:
            for herd, share in _slabs(ctx, ops, m):
                cores[_cores(herd)][id(m)] = (share, False)
        elif space == "L2" and (owner is None or owner.kind != "segment"):
            ctx.add("l2", _where(op), f"L2 allocation {m.memref} outside a segment")
        elif space == "L1" and owner is not None:
            pingpong = not omit and id(m) in _moved_in_loop(ops, owner)
            cores[_cores(owner)][id(m)] = (m, pingpong)
        elif owner is not None:
            segments[owner].append(m)
    for (segment, name), held in cores.items():
        sized = list(held.values())
        total = _footprint(sized)
        if total + stack > ctx.hw.l1_bytes:
            where = f"{segment.path().removeprefix('module/')}/{name}"
            ctx.add("l1", where, f"{total} bytes of L1 buffers on each core of herd {name} "
                    f"({_listing(sized)}) + {stack} of stack = {total + stack} > "
                    f"{ctx.hw.l1_bytes} per compute tile")
    for region, buffers in segments.items():
        moved = set() if omit else _moved_in_loop(ops, region)
        for buffer in buffers:
            pp = id(buffer) in moved
            pieces = _parts(ops, buffer)
            piece = buffer.memref.numel * buffer.memref.element.nbytes * (2 if pp else 1) \
                // pieces
            if piece > ctx.hw.l2_bytes:
                ctx.add("l2", region.path().removeprefix("module/"),
                        f"L2 buffer {buffer.memref}{' x2 (ping-pong)' if pp else ''}"
                        f"{f' in {pieces} parts' if pieces > 1 else ''}: {piece} bytes in "
                        f"one memory tile > {ctx.hw.l2_bytes}")
        total = _footprint([(b, id(b) in moved) for b in buffers])
        if total > ctx.hw.l2_bytes * ctx.hw.cols:
            ctx.add("l2", region.path().removeprefix("module/"),
                    f"{total} bytes of L2 > {ctx.hw.cols} memory tiles x {ctx.hw.l2_bytes}")


def _cores(herd: Region) -> tuple[Any, str]:
    """The cores a herd runs on: its name within its segment (or launch)."""
    return next((r for r in herd.chain() if r.kind in ("segment", "launch")), herd), herd.name


def _parts(ops: list[Op], m: MemRef) -> int:
    """The pieces the compiler splits an L2 buffer into over the memory tiles (mlir-air's L2
    memref splitting follows the accesses): one per channel index that moves it, or per core
    whose DMA reads or writes its own part, at most one per memory tile."""
    most = 1
    for op in ops:
        if not any(x.root is m.root for x in op.memrefs):
            continue
        if op.kind in ("put", "get") and op.indices:
            most = max(most, len(_per_index(op, len(op.indices)) or {}))
        herd = op.region.herd()
        if op.kind == "dma" and herd is not None:
            side = next(p for x, p in zip(op.memrefs, op.patterns, strict=True)
                        if x.root is m.root)
            used = set().union(*(o.vars() for o in side.offsets)) if side else set()
            most = max(most, _trips(v for v in herd.vars if v in used))
    return most


def _slabs(ctx: _Context, ops: list[Op], m: MemRef) -> list[tuple[Region, MemRef]]:
    """An L1 buffer allocated outside a herd (an accumulator that lives across herds, as
    upstream's GEMM keeps it) has one leading dimension per herd axis, and each core takes its
    own slab with memref.subview at its herd indices: the herds that use it, each with the
    slab a core holds."""
    shape = m.memref.shape
    out: list[tuple[Region, MemRef]] = []
    for op in ops:
        herd = op.region.herd()
        if herd is None or not any(x.root is m for x in op.memrefs) and \
                not any(getattr(a, "root", None) is m for a in op.args):
            continue
        lead = len(herd.sizes)
        if op.kind != "subview" or tuple(shape[:lead]) != herd.sizes:
            ctx.add("l1", _where(op), f"L1 buffer {m.memref} allocated outside herd "
                    f"{herd.name} ({'x'.join(map(str, herd.sizes))}) is used without a slab "
                    "per core: allocate it with one leading dimension per herd axis and "
                    "take memref.subview at the core's indices")
            continue
        offsets = op.patterns[0].offsets[:lead]    # type: ignore[union-attr]
        if [o.linear() for o in offsets] != [(0, {v: 1}) for v in herd.vars]:
            ctx.add("l1", _where(op), f"subview of {m.memref} in herd {herd.name} takes "
                    f"slab {[str(o) for o in offsets]}, not the core's own indices")
            continue
        slab = MemRef(MemRefType(shape[lead:], m.memref.element, "L1"), herd, m.name)
        if all(h is not herd for h, _ in out):
            out.append((herd, slab))
    return out


def _listing(sized: list[tuple[MemRef, bool]]) -> str:
    return ", ".join(f"{m.memref}{' x2' if pp else ''}" for m, pp in sized)


# --- coverage -------------------------------------------------------------------------------

def _radix(access: Access) -> tuple[int, int] | None:
    """When the access walks a contiguous range exactly once (its offsets' variables and its
    sizes form a mixed radix), that range as (first, count); else None."""
    lin = access.start.linear()
    if lin is None:
        return None
    first = lin[0] + sum(c * v.start for v, c in lin[1].items())
    gens = [(c * v.step, v.count) for v, c in lin[1].items()]
    gens += list(zip(access.strides, access.sizes, strict=True))
    gens = sorted((g, n) for g, n in gens if n > 1)
    span = 1
    for g, n in gens:
        if g != span:
            return None
        span *= n
    return first, span


def _check_coverage(ctx: _Context, trace: Trace, ops: list[Op],
                    outputs: dict[int, list[tuple[int, int]]]) -> None:
    """Each output's data is written: `outputs[position]` lists its (first, count) ranges
    (empty: the whole buffer); a padded buffer's padding need not be."""
    if not trace.functions:
        ctx.add("build", "module", "the program builds no function")
        return
    _, _, args = trace.functions[0]
    for position, required in sorted(outputs.items()):
        arg = args[position]
        writes = [Access.of(p, m.memref) for op in ops for m, p, role in _accesses(op)
                  if m.root is arg and role == "dst"]
        # launches run one after another: only writes of one launch can race
        launch_of = [_launch(op.region) for op in ops for m, _, role in _accesses(op)
                     if m.root is arg and role == "dst"]
        size = arg.memref.numel
        wanted = [(a, min(a + c, size)) for a, c in required if a < size] or [(0, size)]
        n = max(b for _, b in wanted)
        ranges = [r for r in (_radix(a) for a in writes) if r is not None]
        twice: list[tuple[int, int]] = []
        if writes and len(ranges) == len(writes):
            covered, holes = 0, []
            for first, count in sorted(ranges):
                if first > covered:
                    holes.append((covered, first))
                covered = max(covered, first + count)
            if covered < n:
                holes.append((covered, n))
            for group in set(launch_of):
                mine = sorted(r for r, g in zip(ranges, launch_of, strict=True) if g is group)
                end = 0
                for first, count in mine:
                    if first < end:
                        twice.append((first, min(end, first + count)))
                    end = max(end, first + count)
        elif n <= ENUMERATE and sum(a.points() * a.count for a in writes) <= 4 * ENUMERATE:
            written = torch.zeros(n, dtype=torch.bool)
            for group in set(launch_of):
                times = torch.zeros(n, dtype=torch.int32)
                for a, g in zip(writes, launch_of, strict=True):
                    if g is group:
                        e = a.elements()
                        times += torch.bincount(e[(e >= 0) & (e < n)],
                                                minlength=n).to(torch.int32)
                written |= times > 0
                twice += _spans((times > 1).nonzero().reshape(-1).tolist())
            holes = _spans((~written).nonzero().reshape(-1).tolist())
        else:
            ctx.add("coverage", arg.name, f"cannot tell whether all {n} elements of output "
                    f"{arg.name} are written: its writes are not affine and too many to "
                    "enumerate")
            continue
        missing = sorted((max(a, lo), min(b, hi)) for a, b in holes for lo, hi in wanted
                         if max(a, lo) < min(b, hi))
        raced = sorted((max(a, lo), min(b, hi)) for a, b in twice for lo, hi in wanted
                       if max(a, lo) < min(b, hi))
        if raced:
            shown = ", ".join(f"{a}..{b - 1}" for a, b in raced[:3])
            ctx.add("coverage", arg.name, f"output {arg.name} ({arg.memref}): elements "
                    f"{shown} are written more than once (two cores or rounds race for them)")
        if missing:
            shown = ", ".join(f"{a}..{b - 1}" for a, b in missing[:3])
            more = f" and {len(missing) - 3} more ranges" if len(missing) > 3 else ""
            ctx.add("coverage", arg.name, f"output {arg.name} ({arg.memref}): elements "
                    f"{shown}{more} are never written")


def _launch(region: Region) -> Region:
    return next((r for r in region.chain() if r.kind == "launch"), region)


def _spans(holes: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for h in holes:
        if out and out[-1][1] == h:
            out[-1] = (out[-1][0], h + 1)
        else:
            out.append((h, h + 1))
    return out


# --- many programs ---------------------------------------------------------------------------

_LAYER = re.compile(r"(?<![A-Za-z0-9])L\d+(?=[._])")


def structure(program: Any) -> str:
    """What a program's verdict depends on: its source with layer numbers folded (the
    dispatches of 30 layers are one program thirty times)."""
    return _LAYER.sub("L#", program.source)


def verify_programs(programs: Iterable[Any], hw: Hardware = XDNA2,
                    cache: dict[str, list[Violation]] | None = None
                    ) -> list[tuple[Any, list[Violation]]]:
    """Each program with its violations; programs of one structure are verified once."""
    cache = {} if cache is None else cache
    out = []
    for program in programs:
        key = structure(program)
        if key not in cache:
            cache[key] = verify(program, hw)
        out.append((program, cache[key]))
    return out


@dataclass(frozen=True)
class Verdict:
    """The verifier's findings over a set of programs."""

    results: tuple[tuple[Any, tuple[Violation, ...]], ...]

    @property
    def clean(self) -> int:
        return sum(1 for _, found in self.results if not found)

    def by_check(self) -> dict[str, int]:
        """Violations per check, counting each program once per check it fails."""
        out = dict.fromkeys(CHECKS, 0)
        for _, found in self.results:
            for check in {v.check for v in found}:
                out[check] += 1
        return out

    def as_json(self) -> dict[str, Any]:
        return {"programs": len(self.results), "clean": self.clean,
                "failing_by_check": self.by_check(),
                "violations": [{"dispatch": p.dispatch, "function": p.function,
                                "check": v.check, "where": v.where, "message": v.message}
                               for p, found in self.results for v in found]}


def check_programs(programs: Iterable[Any], hw: Hardware = XDNA2) -> Verdict:
    return Verdict(tuple((p, tuple(found)) for p, found in verify_programs(programs, hw)))


__all__ = ["CHECKS", "Verdict", "Violation", "check_programs", "structure", "verify",
           "verify_programs", "verify_source"]
