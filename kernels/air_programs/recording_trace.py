"""What the recording stand-in of mlir-air's builder (kernels.air_programs.recording_builder)
records instead of IR: the regions with their index variables and trip counts, the values and
memrefs with where each was defined, access patterns, operations, the trace, and the
insertion point the builder's calls append at.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from .recording_values import BuildError, Ix, MemRefType, Var, _rename

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
    """An SSA value: an index or integer (`ix`), a vector, or a memref. `op` is the compute
    op that produced it (None for an index, an argument or an allocation); `depends` the
    hierarchy and loop variables its value comes from, through every op before it (what
    the verifier follows a launch index by)."""

    def __init__(self, type_: Any, region: Region | None, ix: Ix | None = None,
                 what: str = "", op: Op | None = None,
                 depends: frozenset[Var] = frozenset()) -> None:
        self.type, self.region, self.ix, self.what = type_, region, ix, what
        self.op = op
        self._depends = depends

    @property
    def depends(self) -> frozenset[Var]:
        return frozenset(self.ix.vars()) | self._depends if self.ix is not None \
            else self._depends

    @property
    def result(self) -> Value:
        """The op's one result: the builder's OpView.result, for a value made by an
        `...Op` class (arith.AddIOp(a, b).result)."""
        return self


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

    #: alloc | dealloc | dma | put | get | call | read | write | subview | compute (an arith,
    #: math, vector or scf.if op on values: `callee` names it, `args` are its operands)
    kind: str
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
