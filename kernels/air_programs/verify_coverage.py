"""The verifier's **coverage** check (kernels.air_programs.air_verify): every element of every
output the program's launches write is written, holes reported as spans.
"""

from __future__ import annotations

import torch

from .recording_trace import Op, Region, Trace
from .verify_accesses import ENUMERATE, Access, _accesses, _Context

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
