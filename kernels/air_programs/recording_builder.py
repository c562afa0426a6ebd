"""A recording stand-in of mlir-air's Python builder, to run our programs where mlir-air is
not installed.

mlir-air's builder traces a program once: `@launch`, `@segment` and `@herd` call their body
with block arguments (the hierarchy indices, the sizes, then one value per operand), `for_`
yields its induction variable once, and each op call appends an operation at the insertion
point. This module offers the same names with the same signatures (mlir-air e972f29:
python/air/dialects/_air_ops_ext.py for Launch, Segment, Herd, Channel, ChannelGet,
ChannelPut, DmaMemcpyNd and module_builder; the MLIR Python bindings' func, memref, scf,
arith, affine (apply, and affine.if with IntegerSet and InsertionPoint) and vector
builders) and records, instead of IR, what the verifier
(`kernels.air_programs.air_verify`) checks: the regions with their index variables and trip counts,
every allocation, DMA, channel access, micro-kernel call and vector transfer, and where each
value was defined (hierarchy bodies are isolated from above, as in the dialect).

An index value is an affine expression over the variables of the regions around it
(`Ix`): the builder's `affine.apply` composes them, the verifier evaluates them over
every index they can take. A call that upstream's builder would refuse (an unknown keyword,
a non-constant loop bound, a product of two indices) raises `BuildError`.

`installed()` puts the stand-in in `sys.modules` as `air` for the time of a `with` and
restores what was there.
"""

from __future__ import annotations

import itertools
import math
import sys
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any


class BuildError(Exception):
    """What mlir-air's builder or the MLIR verifier would refuse while the program builds."""


# --- index expressions ---------------------------------------------------------------------

@dataclass(frozen=True)
class Var:
    """A hierarchy index or loop induction variable: values start + step * k, k < count."""

    name: str
    start: int
    count: int
    step: int = 1
    uid: int = field(default_factory=itertools.count().__next__, compare=False)

    def __hash__(self) -> int:
        return self.uid


@dataclass(frozen=True)
class Ix:
    """An affine index expression: ('const', c) | ('var', Var) | ('+', a, b) | ('*', a, c) |
    ('//', a, c) (floordiv) | ('%', a, c) (mod), c a constant."""

    op: str
    args: tuple[Any, ...]

    @staticmethod
    def const(c: int) -> Ix:
        return Ix("const", (int(c),))

    @staticmethod
    def var(v: Var) -> Ix:
        return Ix("var", (v,))

    def constant(self) -> int | None:
        return self.args[0] if self.op == "const" else None

    def vars(self) -> set[Var]:
        if self.op == "var":
            return {self.args[0]}
        return set().union(*(a.vars() for a in self.args if isinstance(a, Ix)))

    def linear(self) -> tuple[int, dict[Var, int]] | None:
        """(constant, {variable: coefficient}) when the expression is a sum of multiples of
        variables; None with a floordiv or mod of a non-constant."""
        if self.op == "const":
            return self.args[0], {}
        if self.op == "var":
            return 0, {self.args[0]: 1}
        if self.op == "+":
            a, b = self.args[0].linear(), self.args[1].linear()
            if a is None or b is None:
                return None
            terms = dict(a[1])
            for v, c in b[1].items():
                terms[v] = terms.get(v, 0) + c
            return a[0] + b[0], {v: c for v, c in terms.items() if c}
        if self.op == "*":
            a = self.args[0].linear()
            c = self.args[1]
            return None if a is None else (a[0] * c, {v: k * c for v, k in a[1].items() if k})
        return None

    def evaluate(self, env: dict[Var, Any]) -> Any:
        """The value at `env` (ints, or torch tensors that broadcast)."""
        if self.op == "const":
            return self.args[0]
        if self.op == "var":
            return env[self.args[0]]
        if self.op == "+":
            return self.args[0].evaluate(env) + self.args[1].evaluate(env)
        if self.op == "*":
            return self.args[0].evaluate(env) * self.args[1]
        if self.op == "//":
            return self.args[0].evaluate(env) // self.args[1]
        return self.args[0].evaluate(env) % self.args[1]

    def bounds(self) -> tuple[int, int]:
        """Lowest and highest value over every value of its variables: exact for a linear
        expression and its floordiv or mod; otherwise an interval that contains them."""
        lin = self.linear()
        if lin is not None:
            lo = hi = lin[0]
            for v, c in lin[1].items():
                first, last = c * v.start, c * (v.start + v.step * (v.count - 1))
                lo, hi = lo + min(first, last), hi + max(first, last)
            return lo, hi
        if self.op == "+":
            (a, b), (c, d) = self.args[0].bounds(), self.args[1].bounds()
            return a + c, b + d
        if self.op == "*":
            a, b = self.args[0].bounds()
            return min(a * self.args[1], b * self.args[1]), max(a * self.args[1],
                                                                  b * self.args[1])
        a, b = self.args[0].bounds()
        if self.op == "//":
            return a // self.args[1], b // self.args[1]
        return (a % self.args[1], b % self.args[1]) if b - a < self.args[1] and \
            a % self.args[1] <= b % self.args[1] else (0, self.args[1] - 1)

    def __str__(self) -> str:
        if self.op == "const":
            return str(self.args[0])
        if self.op == "var":
            return self.args[0].name
        sym = {"//": "floordiv", "%": "mod"}.get(self.op, self.op)
        return f"({self.args[0]} {sym} {self.args[1]})"


def _add(a: Ix, b: Ix) -> Ix:
    if a.constant() is not None and b.constant() is not None:
        return Ix.const(a.args[0] + b.args[0])
    if a.constant() == 0:
        return b
    return a if b.constant() == 0 else Ix("+", (a, b))


def _scale(a: Ix, op: str, b: Ix) -> Ix:
    if a.constant() is None and b.constant() is not None and op == "*":
        a, b = b, a
    if op == "*" and a.constant() is not None:
        a, b = b, a
    c = b.constant()
    if c is None:
        raise BuildError(f"affine expressions multiply or divide by constants only: {a} "
                         f"{op} {b}")
    if a.constant() is not None:
        x = a.args[0]
        return Ix.const(x * c if op == "*" else x // c if op == "//" else x % c)
    if op == "*":
        return a if c == 1 else Ix.const(0) if c == 0 else Ix("*", (a, c))
    if c <= 0:
        raise BuildError(f"{op} by {c}: affine floordiv and mod take a positive constant")
    return a if op == "//" and c == 1 else Ix(op, (a, c))


# --- types and attributes --------------------------------------------------------------------

@dataclass(frozen=True)
class Type:
    name: str                         # bf16 | f32 | i32 | index | vector | memref

    @property
    def nbytes(self) -> int:
        return {"bf16": 2, "f32": 4, "i32": 4, "index": 8, "i8": 1}.get(self.name, 0)

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True)
class MemRefType:
    shape: tuple[int, ...]
    element: Type
    space: str                        # L3 (DDR) | L2 (memory tile) | L1 (compute tile)

    @staticmethod
    def get(shape: Sequence[int], element_type: Type, layout: Any = None,
            memory_space: Any = None, loc: Any = None) -> MemRefType:
        if not all(isinstance(d, int) and d > 0 for d in shape):
            raise BuildError(f"memref shape {list(shape)}: static positive sizes only")
        space = "L3" if memory_space is None else _SPACE_NAMES.get(
            int(getattr(memory_space, "value", -1)), "?")
        if space == "?":
            raise BuildError(f"memory_space {memory_space!r} is not an air.MemorySpace")
        return MemRefType(tuple(shape), element_type, space)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    def __str__(self) -> str:
        where = "" if self.space == "L3" else f", {self.space}"
        return f"memref<{'x'.join(map(str, self.shape))}x{self.element}{where}>"


@dataclass(frozen=True)
class VectorType:
    shape: tuple[int, ...]
    element: Type

    @staticmethod
    def get(shape: Sequence[int], element_type: Type, *, scalable: Any = None,
            scalable_dims: Any = None, loc: Any = None) -> VectorType:
        return VectorType(tuple(shape), element_type)


class MemorySpace:
    """air.MemorySpace: where an allocation lives (upstream's enum values)."""

    L3, L2, L1 = 0, 1, 2


_SPACE_NAMES = {MemorySpace.L3: "L3", MemorySpace.L2: "L2", MemorySpace.L1: "L1"}


@dataclass(frozen=True)
class Attr:
    kind: str
    value: Any

    @staticmethod
    def get(*args: Any, **kwargs: Any) -> Attr:        # pragma: no cover - replaced below
        raise NotImplementedError


def _attr_class(kind: str, arity: int) -> type:
    def get(*args: Any, context: Any = None) -> Attr:
        if len(args) != arity:
            raise TypeError(f"{kind}.get takes {arity} argument(s), got {len(args)}")
        return Attr(kind, args[-1] if args else None)
    return type(kind, (), {"get": staticmethod(get)})


IntegerAttr = _attr_class("IntegerAttr", 2)
StringAttr = _attr_class("StringAttr", 1)
UnitAttr = _attr_class("UnitAttr", 0)


class _Types:
    """air.extras.types, imported by programs as `T`: T.bf16(), T.f32(), ..."""

    def __getattr__(self, name: str) -> Callable[[], Type]:
        if name not in ("bf16", "f32", "i32", "i8", "index"):
            raise AttributeError(f"T.{name}: not an element type the programs use")
        return lambda: Type(name)


# --- affine maps -----------------------------------------------------------------------------

class AffineExpr:
    def __init__(self, op: str, args: tuple[Any, ...]) -> None:
        self.op, self.args = op, args

    @staticmethod
    def get_add(a: AffineExpr, b: AffineExpr) -> AffineExpr:
        return AffineExpr("+", (a, b))

    @staticmethod
    def get_mul(a: AffineExpr, b: AffineExpr) -> AffineExpr:
        return AffineExpr("*", (a, b))

    @staticmethod
    def get_floor_div(a: AffineExpr, b: AffineExpr) -> AffineExpr:
        return AffineExpr("//", (a, b))

    @staticmethod
    def get_mod(a: AffineExpr, b: AffineExpr) -> AffineExpr:
        return AffineExpr("%", (a, b))

    def substitute(self, dims: list[Ix], syms: list[Ix]) -> Ix:
        if self.op == "const":
            return Ix.const(self.args[0])
        if self.op in ("dim", "sym"):
            pool = dims if self.op == "dim" else syms
            if self.args[0] >= len(pool):
                raise BuildError(f"affine map uses {self.op} {self.args[0]} of {len(pool)}")
            return pool[self.args[0]]
        a, b = (x.substitute(dims, syms) for x in self.args)
        return _add(a, b) if self.op == "+" else _scale(a, self.op, b)


class AffineConstantExpr:
    @staticmethod
    def get(value: int, context: Any = None) -> AffineExpr:
        return AffineExpr("const", (int(value),))


class AffineSymbolExpr:
    @staticmethod
    def get(position: int, context: Any = None) -> AffineExpr:
        return AffineExpr("sym", (position,))


class AffineDimExpr:
    @staticmethod
    def get(position: int, context: Any = None) -> AffineExpr:
        return AffineExpr("dim", (position,))


@dataclass(frozen=True)
class AffineMap:
    dims: int
    symbols: int
    exprs: tuple[AffineExpr, ...]

    @staticmethod
    def get(dim_count: int, symbol_count: int, exprs: Sequence[AffineExpr],
            context: Any = None) -> AffineMap:
        return AffineMap(dim_count, symbol_count, tuple(exprs))

    @staticmethod
    def get_identity(n_dims: int, context: Any = None) -> AffineMap:
        return AffineMap(n_dims, 0, tuple(AffineDimExpr.get(i) for i in range(n_dims)))


class StridedLayoutAttr:
    """A memref layout of strides and an offset (a core's slab of a segment-scope buffer is
    declared with one, as upstream's GEMM declares its C subview's type); the stand-in keeps
    it as an attribute and compares memref types without it."""

    @staticmethod
    def get(offset: int, strides: Sequence[int], context: Any = None) -> Attr:
        return Attr("StridedLayoutAttr", (int(offset), tuple(int(s) for s in strides)))


class ShapedType:
    @staticmethod
    def get_dynamic_size() -> int:
        return -(1 << 63)            # MLIR's ShapedType::kDynamic


class AffineMapAttr:
    @staticmethod
    def get(value: AffineMap) -> AffineMap:
        return value


# --- the trace -------------------------------------------------------------------------------

HIERARCHY = ("launch", "segment", "herd")


@dataclass(eq=False)
class Region:
    """A body the builder traced: the function, a hierarchy op, or an scf.for."""

    kind: str                                  # func | launch | segment | herd | for | if
    name: str
    parent: Region | None
    vars: tuple[Var, ...] = ()
    sizes: tuple[int, ...] = ()
    link_with: str | None = None
    terminated: bool = False                   # scf.for: yield_ was called

    def chain(self) -> Iterator[Region]:
        r: Region | None = self
        while r is not None:
            yield r
            r = r.parent

    narrows: dict[Var, Var] = field(default_factory=dict)   # affine.if: var -> its range here

    def enclosing(self) -> tuple[Var, ...]:
        """The index variables of every region around (and of) this one; a variable an
        affine.if narrows counts as its narrowed copy only."""
        narrowed = {v for r in self.chain() for v in r.narrows}
        return tuple(v for r in self.chain() for v in r.vars if v not in narrowed)

    def rename(self, ix: Ix) -> Ix:
        """`ix` with each variable an enclosing affine.if narrows replaced by its copy."""
        for r in reversed(list(self.chain())):
            if r.narrows and ix.vars() & set(r.narrows):
                ix = _rename(ix, r.narrows)
        return ix

    def visible(self) -> list[Region]:
        """The regions whose values may be used here: up to and including the nearest
        hierarchy op (isolated from above), or the function."""
        out = []
        for r in self.chain():
            out.append(r)
            if r.kind in HIERARCHY or r.kind == "func":
                break
        return out

    def herd(self) -> Region | None:
        return next((r for r in self.chain() if r.kind == "herd"), None)

    def path(self) -> str:
        return "/".join(r.name for r in reversed(list(self.chain())))


class Value:
    """An SSA value: an index or integer (`ix`), a vector, or a memref."""

    def __init__(self, type_: Any, region: Region | None, ix: Ix | None = None,
                 what: str = "") -> None:
        self.type, self.region, self.ix, self.what = type_, region, ix, what


class MemRef(Value):
    """A memref value: a function argument, an allocation, or a hierarchy block argument
    standing for one (`root` is the argument or allocation it is)."""

    def __init__(self, type_: MemRefType, region: Region | None, name: str,
                 root: MemRef | None = None, view: Op | None = None) -> None:
        super().__init__(type_, region, what=name)
        self.name = name
        self.root: MemRef = root.root if root is not None else self
        #: the memref.subview this memref is (a root of its own, inside `view.memrefs[0]`)
        self.view: Op | None = view if root is None else root.view

    @property
    def memref(self) -> MemRefType:
        return self.type


@dataclass(frozen=True)
class Pattern:
    """An access pattern: element sum((offset_d + i_d) * stride_d) for i_d < size_d; no
    sizes means the whole memref, contiguously."""

    offsets: tuple[Ix, ...]
    sizes: tuple[Ix, ...]
    strides: tuple[Ix, ...]


@dataclass(eq=False)
class Op:
    """One recorded operation, in the region it was built in."""

    kind: str             # alloc | dealloc | dma | put | get | call | read | write | subview
    region: Region
    memrefs: tuple[MemRef, ...] = ()
    patterns: tuple[Pattern | None, ...] = ()
    channel: str | None = None
    indices: tuple[Ix, ...] = ()
    callee: Any = None
    args: tuple[Any, ...] = ()
    lanes: int = 0


@dataclass(eq=False)
class Trace:
    """What one program built: its functions, channels, declared externs and ops."""

    ops: list[Op] = field(default_factory=list)
    channels: dict[str, Any] = field(default_factory=dict)
    externs: dict[str, Any] = field(default_factory=dict)
    functions: list[tuple[str, Region, tuple[MemRef, ...]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class _Builder:
    """The insertion point: the trace being built and the region ops go into."""

    trace: Trace | None = None
    region: Region | None = None

    @classmethod
    def here(cls) -> Region:
        if cls.region is None or cls.trace is None:
            raise BuildError("operation built outside a function (no insertion point)")
        return cls.region

    @classmethod
    def record(cls, op: Op) -> Op:
        assert cls.trace is not None
        cls.trace.ops.append(op)
        return op

    @classmethod
    @contextmanager
    def inside(cls, region: Region) -> Iterator[Region]:
        saved = cls.region
        cls.region = region
        try:
            yield region
        finally:
            cls.region = saved


def _use(value: Any, what: str) -> Any:
    """Check that `value`, used by an op here, is visible here (not from above an isolated
    hierarchy body), as the dialect's verifier would."""
    region = _Builder.here()
    if isinstance(value, Value) and value.region is not None and \
            value.region not in region.visible():
        raise BuildError(f"{what} uses {value.what or 'a value'} defined in "
                         f"{value.region.path()}, above the isolated {region.path()}: pass "
                         "it as an operand")
    return value


def index_of(value: Any, what: str) -> Ix:
    """An index operand as an expression: a Python int, or an index/i32 value."""
    if isinstance(value, bool):
        raise BuildError(f"{what}: {value!r} is not an index")
    if isinstance(value, int):
        return Ix.const(value)
    if isinstance(value, Value) and value.ix is not None:
        _use(value, what)
        return _Builder.here().rename(value.ix)
    raise BuildError(f"{what}: {value!r} is not an index value")


def _memref(value: Any, what: str) -> MemRef:
    if not isinstance(value, MemRef):
        raise BuildError(f"{what}: {value!r} is not a memref")
    _use(value, what)
    return value


def _pattern(memref: MemRef, offsets: Sequence[Any], sizes: Sequence[Any],
             strides: Sequence[Any], what: str) -> Pattern | None:
    if (offsets and len(offsets) != len(sizes)) or len(strides) != len(sizes):
        raise BuildError(f"{what}: offsets, sizes and strides of different lengths "
                         f"({len(offsets)}, {len(sizes)}, {len(strides)})")
    if not sizes:
        return None
    offs = [index_of(o, what) for o in offsets] or [Ix.const(0)] * len(sizes)
    return Pattern(tuple(offs), tuple(index_of(s, what) for s in sizes),
                   tuple(index_of(s, what) for s in strides))


# --- hierarchy ---------------------------------------------------------------------------------

def _region_op(kind: str, default_sizes: Sequence[int]) -> Callable[..., Any]:
    def op(name: str | None = None, sizes: Sequence[Any] = tuple(default_sizes),
           async_token: Any = None, async_dependencies: Sequence[Any] = (),
           operands: Sequence[Any] = (), attributes: dict[str, Any] | None = None,
           loc: Any = None, ip: Any = None, **extra: Any) -> Callable[[Callable[..., Any]], Any]:
        if kind != "herd" and "link_with" in extra:
            raise TypeError(f"{kind}() got an unexpected keyword argument 'link_with'")
        unknown = set(extra) - {"link_with"}
        if unknown:
            raise TypeError(f"{kind}() got an unexpected keyword argument "
                            f"{sorted(unknown)[0]!r}")
        given = [index_of(s, f"{kind} sizes").constant() for s in sizes]
        counts = [c for c in given if c is not None and c >= 1]
        if len(counts) != len(given):
            raise BuildError(f"{kind} {name or ''}: sizes must be positive constants")
        for o in operands:
            _use(o, f"{kind} {name or ''} operand")

        def build(body: Callable[..., Any]) -> Any:
            parent = _Builder.here()
            label = name or body.__name__
            ids = tuple(Var(f"{label}.{axis}", 0, c) for axis, c in zip("xyzw", counts,
                                                                     strict=False))
            region = Region(kind, label, parent, ids, tuple(c for c in counts if c),
                            extra.get("link_with"))
            args: list[Any] = [Value(Type("index"), region, Ix.var(v), v.name) for v in ids]
            args += [Value(Type("index"), region, Ix.const(c), f"{label} size")
                     for c in counts]
            for o in operands:
                if isinstance(o, MemRef):
                    args.append(MemRef(o.memref, region, o.name, root=o))
                elif isinstance(o, Value):
                    args.append(Value(o.type, region, o.ix, o.what))
                else:
                    raise BuildError(f"{kind} {label}: operand {o!r} is not a value")
            with _Builder.inside(region):
                body(*args)
            return region
        return build
    op.__name__ = kind
    return op


launch = _region_op("launch", ())
segment = _region_op("segment", ())
herd = _region_op("herd", (1, 1))


def module_builder(module_function: Callable[..., Any]) -> Callable[..., Trace]:
    def build(*args: Any, **kwargs: Any) -> Trace:
        saved = _Builder.trace, _Builder.region
        _Builder.trace = Trace()
        _Builder.region = Region("module", "module", None)
        try:
            module_function(*args, **kwargs)
            return _Builder.trace
        finally:
            _Builder.trace, _Builder.region = saved
    build.__name__ = module_function.__name__
    return build


# --- channels and DMAs ---------------------------------------------------------------------

class Channel:
    def __init__(self, sym_name: str, broadcast_shape: Sequence[int] | None = None,
                 size: Sequence[int] | None = None, loc: Any = None, ip: Any = None, *,
                 buffer_resources: int | None = None) -> None:
        if _Builder.trace is None:
            raise BuildError(f"Channel {sym_name!r} declared outside a module")
        if sym_name in _Builder.trace.channels:
            raise BuildError(f"channel {sym_name!r} declared twice (symbol redefinition)")
        self.name = sym_name
        self.size = tuple(size) if size is not None else (1, 1)
        self.broadcast_shape = tuple(broadcast_shape) if broadcast_shape is not None else None
        self.attributes: dict[str, Any] = {}
        _Builder.trace.channels[sym_name] = self

    @property
    def channel_type(self) -> str:
        attr = self.attributes.get("channel_type")
        return attr.value if isinstance(attr, Attr) else "dma_stream"


def _channel_op(kind: str, chan_name: str, memref: Any, offsets: Sequence[Any],
                sizes: Sequence[Any], strides: Sequence[Any], indices: Sequence[Any],
                pad_before: Any, pad_after: Any) -> Op:
    what = f"Channel{'Put' if kind == 'put' else 'Get'}({chan_name!r})"
    if (pad_before is None) != (pad_after is None):
        raise ValueError("pad_before and pad_after must both be specified or both omitted")
    m = _memref(memref, what)
    return _Builder.record(Op(kind, _Builder.here(), (m,),
                              (_pattern(m, offsets, sizes, strides, what),),
                              channel=chan_name,
                              indices=tuple(index_of(i, what) for i in indices)))


def ChannelGet(chan_name: str, dst: Any, offsets: Sequence[Any] = (),  # noqa: N802
               sizes: Sequence[Any] = (), strides: Sequence[Any] = (),
               indices: Sequence[Any] = (), async_token: Any = None,
               async_dependencies: Sequence[Any] = (), pad_before: Any = None,
               pad_after: Any = None, loc: Any = None, ip: Any = None) -> Op:
    return _channel_op("get", chan_name, dst, offsets, sizes, strides, indices, pad_before,
                       pad_after)


def ChannelPut(chan_name: str, src: Any, offsets: Sequence[Any] = (),  # noqa: N802
               sizes: Sequence[Any] = (), strides: Sequence[Any] = (),
               indices: Sequence[Any] = (), dest: Any = None, async_token: Any = None,
               async_dependencies: Sequence[Any] = (), pad_before: Any = None,
               pad_after: Any = None, loc: Any = None, ip: Any = None) -> Op:
    return _channel_op("put", chan_name, src, offsets, sizes, strides, indices, pad_before,
                       pad_after)


def dma_memcpy_nd(dst: Any, src: Any, async_dependencies: Sequence[Any] = (),
                  async_token: Any = None, dst_offsets: Sequence[Any] = (),
                  dst_sizes: Sequence[Any] = (), dst_strides: Sequence[Any] = (),
                  src_offsets: Sequence[Any] = (), src_sizes: Sequence[Any] = (),
                  src_strides: Sequence[Any] = (), pad_before: Any = None,
                  pad_after: Any = None) -> Op:
    if (pad_before is None) != (pad_after is None):
        raise ValueError("pad_before and pad_after must both be specified or both omitted")
    d, s = _memref(dst, "dma_memcpy_nd dst"), _memref(src, "dma_memcpy_nd src")
    return _Builder.record(Op(
        "dma", _Builder.here(), (d, s),
        (_pattern(d, dst_offsets, dst_sizes, dst_strides, "dma_memcpy_nd dst"),
         _pattern(s, src_offsets, src_sizes, src_strides, "dma_memcpy_nd src"))))


# --- func, memref, scf, arith, affine, vector --------------------------------------------------

class FuncOp:
    """func.func: a private declaration (an external micro-kernel), or, through
    `from_py_func`, the program's function."""

    def __init__(self, name: str, type: Any, *, visibility: str | None = None,  # noqa: A002
                 body_builder: Any = None, loc: Any = None, ip: Any = None) -> None:
        if isinstance(type, tuple):
            inputs, results = type
        else:
            inputs, results = type.inputs, type.results
        self.name, self.inputs, self.results = name, tuple(inputs), tuple(results)
        self.visibility = visibility
        self.attributes: dict[str, Any] = {}
        if _Builder.trace is None:
            raise BuildError(f"func {name!r} declared outside a module")
        if name in _Builder.trace.externs:
            raise BuildError(f"func {name!r} declared twice (symbol redefinition)")
        _Builder.trace.externs[name] = self

    @staticmethod
    def from_py_func(*inputs: Any, results: Any = None, name: str | None = None
                     ) -> Callable[[Callable[..., Any]], Any]:
        def build(body: Callable[..., Any]) -> Any:
            trace = _Builder.trace
            if trace is None:
                raise BuildError("a function built outside a module")
            label = name or body.__name__
            region = Region("func", label, _Builder.here())
            names = body.__code__.co_varnames[:len(inputs)]
            args = tuple(MemRef(t, region, names[i] if i < len(names) else f"argument {i}")
                         for i, t in enumerate(inputs))
            if not all(isinstance(t, MemRefType) and t.space == "L3" for t in inputs):
                raise BuildError(f"{label}: function arguments are DDR memrefs")
            trace.functions.append((label, region, args))
            with _Builder.inside(region):
                body(*args)
            return region
        return build


def CallOp(calleeOrResults: Any, argumentsOrCallee: Any, arguments: Any = None,  # noqa: N802
           *, loc: Any = None, ip: Any = None) -> Op:
    if not isinstance(calleeOrResults, FuncOp):
        raise BuildError("CallOp: callee must be a declared FuncOp")
    args = tuple(_use(a, f"call @{calleeOrResults.name}") for a in argumentsOrCallee)
    return _Builder.record(Op("call", _Builder.here(), callee=calleeOrResults, args=args))


def AllocOp(memref: MemRefType, dynamicSizes: Sequence[Any], symbolOperands: Sequence[Any],  # noqa: N802,N803
            *, alignment: Any = None, loc: Any = None, ip: Any = None) -> MemRef:
    if not isinstance(memref, MemRefType):
        raise BuildError(f"memref.alloc of {memref!r}: not a MemRefType")
    region = _Builder.here()
    m = MemRef(memref, region, f"alloc {memref} in {region.path()}")
    _Builder.record(Op("alloc", region, (m,)))
    return m


def DeallocOp(memref: Any, *, loc: Any = None, ip: Any = None) -> Op:  # noqa: N802
    m = _memref(memref, "memref.dealloc")
    return _Builder.record(Op("dealloc", _Builder.here(), (m,)))


def subview(source: Any, offsets: Sequence[Any], sizes: Sequence[Any],
            strides: Sequence[Any], *, result_type: Any = None, loc: Any = None,
            ip: Any = None) -> MemRef:
    """memref.subview: a window of `source`, offsets and sizes per dimension."""
    m = _memref(source, "memref.subview")
    shape = m.memref.shape
    if not len(offsets) == len(sizes) == len(strides) == len(shape):
        raise BuildError(f"memref.subview of a rank-{len(shape)} memref with "
                         f"{len(offsets)} offsets, {len(sizes)} sizes, {len(strides)} strides")
    dims = [index_of(s, "memref.subview size").constant() for s in sizes]
    steps = [index_of(s, "memref.subview stride").constant() for s in strides]
    if any(d is None or d < 1 for d in dims) or any(t is None for t in steps):
        raise BuildError("memref.subview: static sizes and strides only")
    row = [math.prod(shape[i + 1:]) for i in range(len(shape))]
    pattern = Pattern(tuple(index_of(o, "memref.subview offset") for o in offsets),
                      tuple(Ix.const(d) for d in dims),     # type: ignore[arg-type]
                      tuple(Ix.const(t * r) for t, r in zip(steps, row, strict=True)))  # type: ignore[operator]
    region = _Builder.here()
    op = _Builder.record(Op("subview", region, (m,), (pattern,)))
    view = MemRef(MemRefType(tuple(dims), m.memref.element, m.memref.space),  # type: ignore[arg-type]
                  region, f"subview of {m.root.name}", view=op)
    return view


def for_(start: Any, stop: Any = None, step: Any = None, iter_args: Any = None, *,
         loc: Any = None, ip: Any = None) -> Iterator[Value]:
    """scf.for: the body is traced once, with the induction variable as an index."""
    if stop is None:
        start, stop = 0, start
    step = 1 if step is None else step
    bounds = [index_of(x, "scf.for bound").constant() for x in (start, stop, step)]
    if any(b is None for b in bounds):
        raise BuildError("scf.for with bounds that are not constants: the verifier needs "
                         "static trip counts")
    lo, hi, st = (int(b) for b in bounds)     # type: ignore[arg-type]
    if st <= 0:
        raise BuildError(f"scf.for step {st}: must be positive")
    parent = _Builder.here()
    iv = Var(f"for@{len(list(parent.chain()))}", lo, max(0, -(-(hi - lo) // st)), st)
    region = Region("for", iv.name, parent, (iv,) if iv.count else ())
    with _Builder.inside(region):
        yield Value(Type("index"), region, Ix.var(iv), "induction variable")
    if not region.terminated:
        _Builder.trace.errors.append(   # type: ignore[union-attr]
            f"scf.for in {parent.path()}: body has no scf.yield terminator")


def yield_(results: Sequence[Any] = (), *, loc: Any = None, ip: Any = None) -> None:
    region = _Builder.here()
    if region.kind != "for":
        raise BuildError(f"scf.yield outside an scf.for (in {region.path()})")
    region.terminated = True


def _rename(ix: Ix, mapping: dict[Var, Var]) -> Ix:
    if ix.op == "var":
        return Ix.var(mapping.get(ix.args[0], ix.args[0]))
    return Ix(ix.op, tuple(_rename(a, mapping) if isinstance(a, Ix) else a for a in ix.args))


@dataclass(frozen=True)
class IntegerSet:
    """The condition of an affine.if: each expression >= 0, or == 0 where `eq` says so."""

    dims: int
    symbols: int
    exprs: tuple[AffineExpr, ...]
    eq: tuple[bool, ...]

    @staticmethod
    def get(num_dims: int, num_symbols: int, exprs: Sequence[AffineExpr],
            eq_flags: Sequence[bool], context: Any = None) -> IntegerSet:
        if len(exprs) != len(eq_flags):
            raise BuildError(f"IntegerSet: {len(exprs)} constraints, {len(eq_flags)} flags")
        return IntegerSet(num_dims, num_symbols, tuple(exprs), tuple(eq_flags))


def _interval(var: Var, lo: int, hi: int) -> Var:
    return Var(f"{var.name}|{lo}..{hi}", lo, max(0, hi - lo + 1))


class AffineIfOp:
    """affine.if over hierarchy and loop indices: its then (and else) block is traced once,
    with each index the condition bounds narrowed to the values that take that branch. The
    stand-in takes conditions whose constraints each bound one index (+-index + constant),
    and an else branch that is an interval (the verifier counts transfers per index)."""

    def __init__(self, cond: IntegerSet, results_: Any = None, *,
                 cond_operands: Sequence[Any] = (), has_else: bool = False,
                 loc: Any = None, ip: Any = None) -> None:
        parent = _Builder.here()
        ops = [index_of(v, "affine.if operand") for v in cond_operands]
        if len(ops) != cond.dims + cond.symbols:
            raise BuildError(f"affine.if: {len(ops)} operands for a set of {cond.dims} dims "
                             f"and {cond.symbols} symbols")
        ranges: dict[Var, tuple[int, int]] = {}
        for expr, eq in zip(cond.exprs, cond.eq, strict=True):
            lin = expr.substitute(ops[:cond.dims], ops[cond.dims:]).linear()
            if lin is None or len(lin[1]) > 1 or any(abs(c) != 1 for c in lin[1].values()):
                raise BuildError("affine.if: the stand-in takes constraints on one index "
                                 "each (+-index + constant)")
            if not lin[1]:
                if lin[0] < 0 or (eq and lin[0] != 0):
                    ranges[Var("never", 0, 1)] = (1, 0)
                continue
            (var, c), = lin[1].items()
            if var.step != 1:
                raise BuildError(f"affine.if on {var.name}: stepped loops are not taken")
            lo, hi = ranges.get(var, (var.start, var.start + var.count - 1))
            bound = -lin[0] * c                  # c * v + k >= 0: v >= -k (c 1), v <= k (c -1)
            if eq:
                lo, hi = max(lo, bound), min(hi, bound)
            elif c == 1:
                lo = max(lo, bound)
            else:
                hi = min(hi, bound)
            ranges[var] = (lo, hi)
        narrowed = {v: r for v, r in ranges.items()
                    if v.name == "never" or r != (v.start, v.start + v.count - 1)}
        self.then_block = self._block(parent, "then", narrowed)
        self.else_block: Region | None = None
        if has_else:
            if len(narrowed) > 1:
                raise BuildError("affine.if with an else: the stand-in takes a condition "
                                 "that narrows one index")
            rest: dict[Var, tuple[int, int]] = {} if narrowed else \
                {Var("never", 0, 1): (1, 0)}          # always true: the else never runs
            for v, (lo, hi) in narrowed.items():
                first, last = v.start, v.start + v.count - 1
                if v.name == "never" or lo > hi:
                    continue                          # the else branch takes everything
                if lo > first and hi < last:
                    raise BuildError(f"affine.if on {v.name}: the else branch is not an "
                                     "interval")
                rest[v] = (hi + 1, last) if lo == first else (first, lo - 1)
            self.else_block = self._block(parent, "else", rest)

    @staticmethod
    def _block(parent: Region, name: str, ranges: dict[Var, tuple[int, int]]) -> Region:
        mapping = {v: _interval(v, lo, hi) for v, (lo, hi) in ranges.items()}
        return Region("if", f"if.{name}", parent, tuple(mapping.values()),
                      narrows=mapping)


class InsertionPoint:
    """Build into a block (an affine.if branch) for the time of a `with`."""

    def __init__(self, block: Region) -> None:
        self.block = block

    def __enter__(self) -> Region:
        self._inside = _Builder.inside(self.block)
        return self._inside.__enter__()

    def __exit__(self, *exc: Any) -> None:
        self._inside.__exit__(*exc)


def AffineYieldOp(results: Sequence[Any] = (), *, loc: Any = None,  # noqa: N802
                  ip: Any = None) -> None:
    region = _Builder.here()
    if region.kind != "if":
        raise BuildError(f"affine.yield outside an affine.if (in {region.path()})")
    region.terminated = True


def affine_apply(map: AffineMap, mapOperands: Sequence[Any], *,  # noqa: A002,N803
                 loc: Any = None, ip: Any = None) -> Value:
    if len(map.exprs) != 1:
        raise BuildError("affine.apply takes a map with one result")
    ops = [index_of(v, "affine.apply operand") for v in mapOperands]
    if len(ops) != map.dims + map.symbols:
        raise BuildError(f"affine.apply: {len(ops)} operands for a map of {map.dims} dims "
                         f"and {map.symbols} symbols")
    ix = map.exprs[0].substitute(ops[:map.dims], ops[map.dims:])
    return Value(Type("index"), _Builder.here(), ix, "affine.apply")


class _Arith:
    @staticmethod
    def ConstantOp(result: Any, value: Any, *, loc: Any = None,  # noqa: N802
                   ip: Any = None) -> Value:
        ix = Ix.const(value) if isinstance(value, int) and not isinstance(value, bool) \
            else None
        return Value(result, _Builder.here(), ix, f"constant {value!r}")

    @staticmethod
    def index_cast(out: Any, in_: Any, *, loc: Any = None, ip: Any = None) -> Value:
        return Value(out, _Builder.here(), index_of(in_, "arith.index_cast"), "index_cast")

    @staticmethod
    def _float(name: str) -> Callable[..., Value]:
        def op(lhs: Any, rhs: Any, *, fastmath: Any = None, loc: Any = None,
               ip: Any = None) -> Value:
            for v in (lhs, rhs):
                _use(v, f"arith.{name}")
            return Value(getattr(lhs, "type", None), _Builder.here(), None, f"arith.{name}")
        return op


def _convert(name: str) -> Callable[..., Value]:
    """arith.truncf / arith.extf: (result type, operand)."""
    def op(out: Any, in_: Any, *, fastmath: Any = None, roundingmode: Any = None,
           loc: Any = None, ip: Any = None) -> Value:
        _use(in_, f"arith.{name}")
        return Value(out, _Builder.here(), None, f"arith.{name}")
    return op


arith = types.SimpleNamespace(
    ConstantOp=_Arith.ConstantOp, index_cast=_Arith.index_cast,
    truncf=_convert("truncf"), extf=_convert("extf"),
    **{n: _Arith._float(n) for n in ("addf", "subf", "mulf", "divf", "maximumf",
                                     "minimumf")})


def _unary(name: str) -> Callable[..., Value]:
    def op(operand: Any, *, fastmath: Any = None, loc: Any = None, ip: Any = None) -> Value:
        _use(operand, name)
        return Value(getattr(operand, "type", None), _Builder.here(), None, name)
    return op


def broadcast(vector: VectorType, source: Any, *, loc: Any = None, ip: Any = None) -> Value:
    _use(source, "vector.broadcast")
    return Value(vector, _Builder.here(), None, "vector.broadcast")


def fma(lhs: Any, rhs: Any, acc: Any, *, loc: Any = None, ip: Any = None) -> Value:
    """vector.fma: lhs * rhs + acc, lane by lane (upstream's f32 dot products on extf'd bf16
    vectors, matvec_cascade.py and attn_decode_npu2.py)."""
    for v in (lhs, rhs, acc):
        _use(v, "vector.fma")
    return Value(getattr(acc, "type", None), _Builder.here(), None, "vector.fma")


def reduction(dest: Any, kind: Any, vector: Any, *, acc: Any = None, fastmath: Any = None,
              loc: Any = None, ip: Any = None) -> Value:
    """vector.reduction (dest, kind, vector): the lanes of `vector` combined by `kind` into a
    scalar of type `dest` (weighted_rms_norm's sum of squares)."""
    _use(vector, "vector.reduction")
    if acc is not None:
        _use(acc, "vector.reduction")
    return Value(dest, _Builder.here(), None, f"vector.reduction {kind}")


def _lanes(vector: Any) -> int:
    return math.prod(vector.shape) if isinstance(vector, VectorType) else 1


def transfer_read(vector: VectorType, source: Any, indices: Sequence[Any],
                  permutation_map: Any, padding: Any, in_bounds: Any = None, mask: Any = None,
                  *, loc: Any = None, ip: Any = None) -> Value:
    m = _memref(source, "vector.transfer_read")
    pattern = _vector_pattern(m, indices, _lanes(vector), "vector.transfer_read")
    _Builder.record(Op("read", _Builder.here(), (m,), (pattern,), lanes=_lanes(vector)))
    return Value(vector, _Builder.here(), None, "vector.transfer_read")


def transfer_write(result: Any, vector: Any, source: Any, indices: Sequence[Any],
                   permutation_map: Any, in_bounds: Any = None, mask: Any = None, *,
                   loc: Any = None, ip: Any = None) -> Op:
    _use(vector, "vector.transfer_write")
    m = _memref(source, "vector.transfer_write")
    lanes = _lanes(vector.type) if isinstance(vector, Value) else 1
    return _Builder.record(Op("write", _Builder.here(), (m,),
                              (_vector_pattern(m, indices, lanes, "vector.transfer_write"),),
                              lanes=lanes))


def _vector_pattern(m: MemRef, indices: Sequence[Any], lanes: int, what: str) -> Pattern:
    """The elements a vector transfer touches: `lanes` contiguous from the row-major index."""
    if len(indices) != len(m.memref.shape):
        raise BuildError(f"{what}: {len(indices)} indices for a rank-{len(m.memref.shape)} "
                         "memref")
    flat = Ix.const(0)
    for i, dim in zip(indices, m.memref.shape, strict=True):
        flat = _add(_scale(flat, "*", Ix.const(dim)), index_of(i, what))
    return Pattern((flat,), (Ix.const(lanes),), (Ix.const(1),))


# --- installing it as `air` ----------------------------------------------------------------------

def _modules() -> dict[str, types.ModuleType]:
    def module(name: str, **names: Any) -> types.ModuleType:
        m = types.ModuleType(name, "npu-deploy's recording stand-in of mlir-air's " + name)
        m.__dict__.update(names)
        m.__all__ = [n for n in names if not n.startswith("_")]   # type: ignore[attr-defined]
        return m

    ir = module("air.ir", MemRefType=MemRefType, VectorType=VectorType, IntegerAttr=IntegerAttr,
                StringAttr=StringAttr, UnitAttr=UnitAttr, AffineMap=AffineMap,
                AffineMapAttr=AffineMapAttr, AffineExpr=AffineExpr,
                StridedLayoutAttr=StridedLayoutAttr, ShapedType=ShapedType,
                AffineConstantExpr=AffineConstantExpr, AffineSymbolExpr=AffineSymbolExpr,
                AffineDimExpr=AffineDimExpr, IntegerSet=IntegerSet,
                InsertionPoint=InsertionPoint)
    air = module("air.dialects.air", launch=launch, segment=segment, herd=herd,
                 Channel=Channel, ChannelGet=ChannelGet, ChannelPut=ChannelPut,
                 dma_memcpy_nd=dma_memcpy_nd, module_builder=module_builder, T=_Types(),
                 MemorySpace=MemorySpace)
    arith_m = module("air.dialects.arith", **vars(arith))
    mods = {
        "air.ir": ir,
        "air.dialects.air": air,
        "air.dialects.arith": arith_m,
        "air.dialects.affine": module("air.dialects.affine", apply=affine_apply,
                                      AffineIfOp=AffineIfOp, AffineYieldOp=AffineYieldOp),
        "air.dialects.func": module("air.dialects.func", FuncOp=FuncOp, CallOp=CallOp),
        "air.dialects.memref": module("air.dialects.memref", AllocOp=AllocOp,
                                      DeallocOp=DeallocOp, subview=subview),
        "air.dialects.scf": module("air.dialects.scf", for_=for_, yield_=yield_),
        "air.dialects.math": module("air.dialects.math", tanh=_unary("math.tanh"),
                                    exp=_unary("math.exp"), rsqrt=_unary("math.rsqrt")),
        "air.dialects.vector": module("air.dialects.vector", broadcast=broadcast, fma=fma,
                                      reduction=reduction,
                                      transfer_read=transfer_read,
                                      transfer_write=transfer_write),
    }
    dialects = module("air.dialects", **{k.rsplit(".", 1)[1]: v for k, v in mods.items()
                                         if k.startswith("air.dialects.")})
    root = module("air", ir=ir, dialects=dialects)
    return {"air": root, "air.dialects": dialects, **mods}


@contextmanager
def installed() -> Iterator[None]:
    """The stand-in as `air` in sys.modules for the time of the `with`."""
    mods = _modules()
    saved = {name: sys.modules.get(name) for name in mods}
    sys.modules.update(mods)
    try:
        yield
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def build(source: str, filename: str = "<program>") -> tuple[Trace, dict[str, Any]]:
    """Run a program's source against the stand-in: its trace and its module namespace
    (FUNCTION, OBJECTS, ...). Raises BuildError (or what Python raises) where mlir-air's
    builder would fail."""
    namespace: dict[str, Any] = {"__name__": "npu_deploy_air_program"}
    with installed():
        exec(compile(source, filename, "exec"), namespace)   # noqa: S102 - our own program
        builder = namespace.get("build_module")
        if builder is None:
            raise BuildError("the program defines no build_module")
        trace = builder()
    if not isinstance(trace, Trace):
        raise BuildError("build_module is not decorated with @module_builder")
    return trace, namespace
