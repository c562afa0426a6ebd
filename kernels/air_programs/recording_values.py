"""The values mlir-air's builder computes with, as the recording stand-in
(kernels.air_programs.recording_builder) models them: index expressions over the regions'
variables (`Var`, `Ix`: what `affine.apply` composes and the verifier evaluates), types and
attributes, affine maps; and `BuildError`, what the builder would refuse.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
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


def _rename(ix: Ix, mapping: dict[Var, Var]) -> Ix:
    if ix.op == "var":
        return Ix.var(mapping.get(ix.args[0], ix.args[0]))
    return Ix(ix.op, tuple(_rename(a, mapping) if isinstance(a, Ix) else a for a in ix.args))
