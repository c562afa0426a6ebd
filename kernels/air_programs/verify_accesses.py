"""What the program verifier (kernels.air_programs.air_verify) reads a trace with: the checks and
their `Violation`s, the index points a region's variables take (enumerated up to `ENUMERATE`),
the `Access` of a DMA, channel or vector op over them, and the context a verification
collects its findings in.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..definition.hardware import Hardware
from .recording_trace import MemRef, Op, Pattern, Region, Trace
from .recording_values import BuildError, Ix, MemRefType, Var

CHECKS = ("build", "bounds", "elements", "channel", "extern", "window", "vector", "launch",
          "l1", "l2", "coverage")

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


def _accesses(op: Op) -> Iterator[tuple[MemRef, Pattern | None, str]]:
    roles = {"dma": ("dst", "src"), "put": ("src",), "get": ("dst",), "read": ("source",),
             "write": ("dest",), "subview": ("source",)}.get(op.kind, ())
    yield from zip(op.memrefs, op.patterns, roles, strict=False)
