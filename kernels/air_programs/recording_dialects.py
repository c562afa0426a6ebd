"""The recording stand-ins of the MLIR Python bindings' builders an mlir-air program calls
besides air's own: func, memref, scf, affine (apply, affine.if with IntegerSet and
InsertionPoint), arith, math and vector. Each records into the trace
(kernels.air_programs.recording_trace) what the verifier checks; kernels.air_programs.
recording_builder installs them as `air.dialects.*`.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .recording_trace import MemRef, Op, Pattern, Region, Value, _Builder, _memref, _use, index_of
from .recording_values import (
    AffineExpr,
    AffineMap,
    BuildError,
    Ix,
    MemRefType,
    Type,
    Var,
    VectorType,
    _add,
    _scale,
)

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
    if region.kind != "for" and not region.name.startswith("scf.if"):
        raise BuildError(f"scf.yield outside an scf.for or scf.if (in {region.path()})")
    region.terminated = True


class IfOp:
    """scf.if on a value known only at run time (an i1 from arith.CmpIOp): its then (and
    else) block is traced once, every index keeping its range, as either branch may run.
    The condition is recorded as an op (`scf.if`) that reads it."""

    def __init__(self, cond: Any, results_: Any = None, *, hasElse: bool = False,  # noqa: N803
                 loc: Any = None, ip: Any = None) -> None:
        parent = _Builder.here()
        _use(cond, "scf.if condition")
        _compute("scf.if", None, cond)
        self.then_block = Region("if", "scf.if.then", parent)
        self.else_block: Region | None = Region("if", "scf.if.else", parent) if hasElse \
            else None


def YieldOp(results_: Sequence[Any] = (), *, loc: Any = None, ip: Any = None) -> None:  # noqa: N802
    """scf.yield, by its class name (upstream ends scf.if blocks with scf.YieldOp([]))."""
    yield_(results_)



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
        _compute("affine.if", None, *cond_operands)
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
        if exc[0] is None and self.block.kind == "if" and not self.block.terminated:
            _Builder.trace.errors.append(   # type: ignore[union-attr]
                f"{self.block.path()}: block has no terminator (affine.yield or scf.yield)")


def AffineYieldOp(results: Sequence[Any] = (), *, loc: Any = None,  # noqa: N802
                  ip: Any = None) -> None:
    region = _Builder.here()
    if region.kind != "if" or region.name.startswith("scf.if"):
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


def _compute(name: str, type_: Any, *operands: Any, ix: Ix | None = None) -> Value:
    """The result of op `name` on `operands` (already checked visible), recorded as a
    "compute" op: the verifier reads which op made each value, and the variables it comes
    from."""
    region = _Builder.here()
    op = _Builder.record(Op("compute", region, callee=name, args=tuple(operands)))
    depends = frozenset().union(*(getattr(o, "depends", frozenset()) for o in operands))
    return Value(type_, region, ix, name, op=op, depends=depends)


#: arith.CmpIPredicate: the comparisons of arith.cmpi, by MLIR's enum values
CmpIPredicate = types.SimpleNamespace(eq=0, ne=1, slt=2, sle=3, sgt=4, sge=5, ult=6, ule=7,
                                      ugt=8, uge=9)


class _Arith:
    @staticmethod
    def ConstantOp(result: Any, value: Any, *, loc: Any = None,  # noqa: N802
                   ip: Any = None) -> Value:
        ix = Ix.const(value) if isinstance(value, int) and not isinstance(value, bool) \
            else None
        return _compute("arith.constant", result, ix=ix)

    @staticmethod
    def index_cast(out: Any, in_: Any, *, loc: Any = None, ip: Any = None) -> Value:
        ix = index_of(in_, "arith.index_cast")
        return Value(out, _Builder.here(), ix, "index_cast",
                     depends=getattr(in_, "depends", frozenset()))

    @staticmethod
    def _float(name: str) -> Callable[..., Value]:
        def op(lhs: Any, rhs: Any, *, fastmath: Any = None, loc: Any = None,
               ip: Any = None) -> Value:
            for v in (lhs, rhs):
                _use(v, f"arith.{name}")
            return _compute(f"arith.{name}", getattr(lhs, "type", None), lhs, rhs)
        return op

    @staticmethod
    def _integer(name: str) -> Callable[..., Value]:
        """arith.AddIOp / SubIOp / MulIOp (lhs, rhs): an integer or index value; an index
        expression when both operands are (a product needs a constant side)."""
        def op(lhs: Any, rhs: Any, *, overflowFlags: Any = None, loc: Any = None,  # noqa: N803
               ip: Any = None) -> Value:
            for v in (lhs, rhs):
                _use(v, f"arith.{name}")
            a, b = getattr(lhs, "ix", None), getattr(rhs, "ix", None)
            ix = None
            if a is not None and b is not None:
                if name == "addi":
                    ix = _add(a, b)
                elif name == "subi":
                    ix = _add(a, _scale(b, "*", Ix.const(-1)))
                elif a.constant() is not None or b.constant() is not None:
                    ix = _scale(a, "*", b)
            return _compute(f"arith.{name}", getattr(lhs, "type", None), lhs, rhs, ix=ix)
        return op

    @staticmethod
    def CmpIOp(predicate: Any, lhs: Any, rhs: Any, *, loc: Any = None,  # noqa: N802
               ip: Any = None) -> Value:
        if predicate not in vars(CmpIPredicate).values():
            raise BuildError(f"arith.cmpi: {predicate!r} is not an arith.CmpIPredicate")
        for v in (lhs, rhs):
            _use(v, "arith.cmpi")
        return _compute("arith.cmpi", Type("i1"), lhs, rhs)


def _convert(name: str) -> Callable[..., Value]:
    """arith.truncf / arith.extf: (result type, operand)."""
    def op(out: Any, in_: Any, *, fastmath: Any = None, roundingmode: Any = None,
           loc: Any = None, ip: Any = None) -> Value:
        _use(in_, f"arith.{name}")
        return _compute(f"arith.{name}", out, in_)
    return op


arith = types.SimpleNamespace(
    ConstantOp=_Arith.ConstantOp, index_cast=_Arith.index_cast,
    truncf=_convert("truncf"), extf=_convert("extf"),
    CmpIOp=_Arith.CmpIOp, CmpIPredicate=CmpIPredicate,
    AddIOp=_Arith._integer("addi"), SubIOp=_Arith._integer("subi"),
    MulIOp=_Arith._integer("muli"),
    **{n: _Arith._float(n) for n in ("addf", "subf", "mulf", "divf", "maximumf",
                                     "minimumf")})


def _unary(name: str) -> Callable[..., Value]:
    def op(operand: Any, *, fastmath: Any = None, loc: Any = None, ip: Any = None) -> Value:
        _use(operand, name)
        return _compute(name, getattr(operand, "type", None), operand)
    return op


def broadcast(vector: VectorType, source: Any, *, loc: Any = None, ip: Any = None) -> Value:
    _use(source, "vector.broadcast")
    return _compute("vector.broadcast", vector, source)


def fma(lhs: Any, rhs: Any, acc: Any, *, loc: Any = None, ip: Any = None) -> Value:
    """vector.fma: lhs * rhs + acc, lane by lane (upstream's f32 dot products on extf'd bf16
    vectors, matvec_cascade.py and attn_decode_npu2.py)."""
    for v in (lhs, rhs, acc):
        _use(v, "vector.fma")
    return _compute("vector.fma", getattr(acc, "type", None), lhs, rhs, acc)


def reduction(dest: Any, kind: Any, vector: Any, *, acc: Any = None, fastmath: Any = None,
              loc: Any = None, ip: Any = None) -> Value:
    """vector.reduction (dest, kind, vector): the lanes of `vector` combined by `kind` into a
    scalar of type `dest` (weighted_rms_norm's sum of squares)."""
    _use(vector, "vector.reduction")
    if acc is not None:
        _use(acc, "vector.reduction")
    return _compute(f"vector.reduction {kind}", dest, vector,
                    *(() if acc is None else (acc,)))


def load(memref: Any, indices: Sequence[Any], *, nontemporal: Any = None, loc: Any = None,
         ip: Any = None) -> Value:
    """memref.load: one element (upstream's FlashAttention reads its L1 counter so)."""
    m = _memref(memref, "memref.load")
    pattern = _vector_pattern(m, indices, 1, "memref.load")
    op = _Builder.record(Op("read", _Builder.here(), (m,), (pattern,), lanes=1))
    return Value(m.memref.element, _Builder.here(), None, "memref.load", op=op,
                 depends=frozenset(pattern.offsets[0].vars()))


def store(value: Any, memref: Any, indices: Sequence[Any], *, nontemporal: Any = None,
          loc: Any = None, ip: Any = None) -> Op:
    """memref.store: one element."""
    _use(value, "memref.store")
    m = _memref(memref, "memref.store")
    return _Builder.record(Op("write", _Builder.here(), (m,),
                              (_vector_pattern(m, indices, 1, "memref.store"),),
                              args=(value,), lanes=1))


def _lanes(vector: Any) -> int:
    return math.prod(vector.shape) if isinstance(vector, VectorType) else 1


def transfer_read(vector: VectorType, source: Any, indices: Sequence[Any],
                  permutation_map: Any, padding: Any, in_bounds: Any = None, mask: Any = None,
                  *, loc: Any = None, ip: Any = None) -> Value:
    m = _memref(source, "vector.transfer_read")
    pattern = _vector_pattern(m, indices, _lanes(vector), "vector.transfer_read")
    op = _Builder.record(Op("read", _Builder.here(), (m,), (pattern,), lanes=_lanes(vector)))
    return Value(vector, _Builder.here(), None, "vector.transfer_read", op=op,
                 depends=frozenset(pattern.offsets[0].vars()))


def transfer_write(result: Any, vector: Any, source: Any, indices: Sequence[Any],
                   permutation_map: Any, in_bounds: Any = None, mask: Any = None, *,
                   loc: Any = None, ip: Any = None) -> Op:
    _use(vector, "vector.transfer_write")
    m = _memref(source, "vector.transfer_write")
    lanes = _lanes(vector.type) if isinstance(vector, Value) else 1
    return _Builder.record(Op("write", _Builder.here(), (m,),
                              (_vector_pattern(m, indices, lanes, "vector.transfer_write"),),
                              args=(vector,), lanes=lanes))


def _vector_pattern(m: MemRef, indices: Sequence[Any], lanes: int, what: str) -> Pattern:
    """The elements a vector transfer touches: `lanes` contiguous from the row-major index."""
    if len(indices) != len(m.memref.shape):
        raise BuildError(f"{what}: {len(indices)} indices for a rank-{len(m.memref.shape)} "
                         "memref")
    flat = Ix.const(0)
    for i, dim in zip(indices, m.memref.shape, strict=True):
        flat = _add(_scale(flat, "*", Ix.const(dim)), index_of(i, what))
    return Pattern((flat,), (Ix.const(lanes),), (Ix.const(1),))
