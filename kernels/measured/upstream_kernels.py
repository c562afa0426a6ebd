"""The C signatures of upstream's AIE micro-kernels, as data: what an extern call in one of our
MLIR-AIR programs must match to link against Xilinx/mlir-air's kernel sources.

`kernels/data/upstream_kernels.json` holds one entry per extern "C" function we may call,
read by hand from the source at one commit: the symbol, the file and the object upstream
compiles it into, the defines that size its buffers (with the source's defaults), whether a
define can rename it, and per parameter its type, how far the call reaches through it and
whether it reads or writes there. The reach is an expression over the defines and the int
arguments ("DIM_M*DIM_K", "row_offset+m"). It is evaluated here by a parser that accepts
arithmetic and nothing else, so the data file cannot run code. The same file lists the objects
upstream's LLM deployments compile and the operations they write inline instead.
"""

from __future__ import annotations

import ast
import functools
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .measurements import load

DATA = "upstream_kernels"


@dataclass(frozen=True)
class Blocks:
    """A parameter's L1 layout as a grid of blocks: `shape` outermost first (expressions or
    ints), `axes` naming each dimension."""
    shape: tuple[str | int, ...]
    axes: tuple[str, ...]


@dataclass(frozen=True)
class UpstreamParam:
    name: str
    type: str                   # "bf16*" | "f32*" | "i8*" | "i32"
    elements: str | None = None  # pointers: the reach through it, an expression
    access: str | None = None    # pointers: "read" | "write" | "readwrite"
    blocks: Blocks | None = None

    @property
    def pointer(self) -> bool:
        return self.type.endswith("*")


@dataclass(frozen=True)
class Requirement:
    """A condition the kernel's code relies on: `value` is a multiple of, equal to, or one of
    some numbers (a static_assert such as attn_npu2.cc's on dk_full)."""
    value: str
    multiple_of: int | None = None
    equals: int | None = None
    one_of: tuple[int, ...] | None = None


@dataclass(frozen=True)
class UpstreamKernel:
    symbol: str
    file: str                   # the source, a path in the upstream repository
    object: str                 # the .o upstream's build names it in
    defines: tuple[tuple[str, int | str], ...]   # (name, default), in the source's order
    suffix_define: str | None   # the define that renames the symbol, if any
    params: tuple[UpstreamParam, ...]
    requires: tuple[Requirement, ...]
    mmul: tuple[int, ...] | None  # the r, s, t of a blocked matmul layout
    declared_by: tuple[str, ...]  # the upstream builders that declare it, linking this object
    note: str

    def param(self, name: str) -> UpstreamParam:
        for p in self.params:
            if p.name == name:
                return p
        raise ValueError(f"{self.symbol} has no parameter {name!r}; it has "
                         f"{', '.join(p.name for p in self.params)}")

    @property
    def int_params(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.params if not p.pointer)

    def resolved(self, overrides: Mapping[str, int] | None = None) -> dict[str, int]:
        """The kernel's defines as the compiler sees them: `overrides` (the -D flags) over the
        source's defaults, a default that names another define taking that define's value."""
        overrides = overrides or {}
        unknown = set(overrides) - {name for name, _ in self.defines}
        if unknown:
            raise ValueError(f"{self.symbol} is sized by no define {', '.join(sorted(unknown))}; "
                             f"its defines are {', '.join(n for n, _ in self.defines) or 'none'}")
        values: dict[str, int] = {}
        for name, default in self.defines:
            if name in overrides:
                values[name] = overrides[name]
            else:
                values[name] = default if isinstance(default, int) else evaluate(default, values)
        return values


_OPERATORS: dict[type[ast.operator], Callable[[int, int], int]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
}


def evaluate(expression: str, names: Mapping[str, int]) -> int:
    """The value of an arithmetic `expression` over `names`. Only integers, names, + - * //
    and parentheses are accepted: anything else (a call, an attribute, a string) is refused
    before anything is evaluated."""
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise ValueError(f"not an expression: {expression!r}") from None

    def value(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.Name):
            if node.id not in names:
                raise ValueError(f"{expression!r} uses {node.id!r}, which is given no value "
                                 f"(given: {', '.join(sorted(names)) or 'nothing'})")
            return names[node.id]
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            left, right = value(node.left), value(node.right)
            if isinstance(node.op, ast.FloorDiv) and right == 0:
                raise ValueError(f"{expression!r} divides by zero")
            return _OPERATORS[type(node.op)](left, right)
        raise ValueError(f"{expression!r}: only integers, names, + - * // and parentheses "
                         f"are allowed, not {type(node).__name__}")
    return value(tree.body)


def elements(param: UpstreamParam, defines: Mapping[str, int], ints: Mapping[str, int]) -> int:
    """How many elements a call reaches through pointer `param` (one past the furthest it
    reads or writes), given the object's define values (`UpstreamKernel.resolved`) and the
    call's int arguments by parameter name."""
    if param.elements is None:
        raise ValueError(f"{param.name} is an {param.type} argument, not a buffer")
    return evaluate(param.elements, {**defines, **ints})


def unmet(kernel: UpstreamKernel, defines: Mapping[str, int],
          ints: Mapping[str, int] | None = None) -> list[str]:
    """The kernel's requirements that these define values and int arguments break, in
    words; a requirement over an int argument not given is not judged."""
    names = {**defines, **(ints or {})}
    broken = []
    for r in kernel.requires:
        try:
            v = evaluate(r.value, names)
        except ValueError:
            continue
        if r.multiple_of is not None and v % r.multiple_of:
            broken.append(f"{kernel.symbol}: {r.value} = {v} is not a multiple of {r.multiple_of}")
        if r.equals is not None and v != r.equals:
            broken.append(f"{kernel.symbol}: {r.value} = {v}, the code requires {r.equals}")
        if r.one_of is not None and v not in r.one_of:
            broken.append(f"{kernel.symbol}: {r.value} = {v}, the code compiles only "
                          f"{', '.join(map(str, r.one_of))}")
    return broken


def _param(row: dict[str, Any], blocks: dict[str, Any]) -> UpstreamParam:
    b = blocks.get(row["name"])
    return UpstreamParam(row["name"], row["type"], row.get("elements"), row.get("access"),
                         Blocks(tuple(b["shape"]), tuple(b["axes"])) if b else None)


def _kernel(row: dict[str, Any]) -> UpstreamKernel:
    layout = row.get("layout") or {}
    blocks = layout.get("params", {})
    return UpstreamKernel(
        symbol=row["symbol"], file=row["file"], object=row["object"],
        defines=tuple(row["defines"].items()), suffix_define=row["suffix_define"],
        params=tuple(_param(p, blocks) for p in row["params"]),
        requires=tuple(Requirement(**{**r, "one_of": tuple(r["one_of"])} if "one_of" in r
                                   else r) for r in row.get("requires", ())),
        mmul=tuple(layout["mmul"]) if "mmul" in layout else None,
        declared_by=tuple(row["declared_by"]), note=row["note"])


@functools.cache
def kernels() -> dict[str, UpstreamKernel]:
    """Every recorded kernel, by symbol."""
    return {row["symbol"]: _kernel(row) for row in load(DATA)["kernels"]}


def kernel(symbol: str) -> UpstreamKernel:
    """The upstream kernel named `symbol` (its base name, without a suffix)."""
    known = kernels()
    if symbol not in known:
        raise ValueError(f"no upstream kernel {symbol!r}; known: {', '.join(sorted(known))}")
    return known[symbol]


# A suffix is token-pasted onto a C identifier, so it must continue one.
_SUFFIX = re.compile(r"[A-Za-z0-9_]*")


def suffixed(symbol: str, suffix: str) -> str:
    """`symbol` as an object compiled with its suffix define set to `suffix` exports it
    (mm_aie2p.cc: -DSYM_SUFFIX=_m64 turns zero_f32_mn into zero_f32_mn_m64)."""
    k = kernel(symbol)
    if k.suffix_define is None:
        raise ValueError(f"{symbol} cannot be renamed: {k.file} has no suffix define. A "
                         f"second size of it needs an ELF of its own")
    if not _SUFFIX.fullmatch(suffix):
        raise ValueError(f"suffix {suffix!r} would not continue the C identifier {symbol}")
    return symbol + suffix


def provenance() -> str:
    """Where the signatures were read, in one line."""
    src = load(DATA)["source"]
    return f"{src['repository']} @ {src['commit'][:12]}, {src['date']}"
