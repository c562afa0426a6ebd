"""The verifier's **l1** and **l2** checks (kernels.air_programs.air_verify): each compute
tile's allocations (ping-pong buffers counted twice, per-core slabs of a shared
accumulator) plus the stack within its L1, each memory tile's within its L2.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from .recording_trace import HIERARCHY, MemRef, Op, Region, Trace
from .recording_values import MemRefType
from .verify_accesses import _Context, _trips, _where
from .verify_transfers import _per_index


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
