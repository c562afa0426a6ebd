"""The verifier's checks of data movement (kernels.air_programs.air_verify): **bounds** (every
DMA, channel access and vector transfer inside its memref at every index), **elements** (a
`dma_memcpy_nd` moves as many elements as it receives) and **channel** (puts and gets that
match, cascades between compute tiles).
"""

from __future__ import annotations

from collections import defaultdict

import torch

from .recording_trace import Op
from .recording_values import BuildError, Ix
from .verify_accesses import Access, _accesses, _Context, _grid, _label, _range, _trips, _where


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
