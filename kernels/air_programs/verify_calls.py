"""The verifier's **extern** check (kernels.air_programs.air_verify): every micro-kernel call
against its declaration, the object its herd links, and, for upstream's kernels, the C
signature and the elements each pointer reaches (kernels.measured.upstream_kernels); for
our own (kernels/aie/), the signatures read from their sources.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

from ..measured import upstream_kernels
from .recording_trace import MemRef, Op
from .verify_accesses import _Context, _where


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
_C_TYPES = {"float*": "f32*", "bfloat16*": "bf16*", "int32_t*": "i32*", "int32_t": "i32",
            "int": "i32"}


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
