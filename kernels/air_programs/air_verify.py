"""The program verifier: what a compiler, the linker and the array would refuse in an emitted
MLIR-AIR program, found without mlir-air.

`verify(program)` runs the program's builder against the recording stand-in of the `air`
package (`kernels.air_programs.recording_builder`) and checks what it built:

- **build**: the builder runs, every `scf.for` ends in `scf.yield`, hierarchy bodies use
  only their own operands (isolated from above);
- **bounds**: every DMA, channel access and vector transfer stays inside its memref, over
  every launch, segment and herd index and every loop iteration;
- **elements**: a `dma_memcpy_nd` moves as many elements as it receives;
- **channel**: every channel is declared, put to and got from at the same indices with the
  same number of elements (a broadcast channel delivers each put to every index of its
  broadcast dimensions), a cascade channel joins two compute tiles;
- **extern**: every call matches its declaration's types, runs in a herd that links the
  object the declaration names, and, for an upstream micro-kernel, matches its C symbol,
  parameters, and the elements each pointer parameter reads or writes at the sizes it is
  compiled and called with (`kernels.measured.upstream_kernels`);
- **window** / **vector** / **launch**: structures upstream found broken on NPU2 (a kernel
  writing through a window of a buffer one DMA moves whole; inline vector ops the AIE
  vector unit does not lower or lowers to zeros; a launch index reaching the array, a
  DDR-side channel op inside a segment), each with its upstream source in
  kernels.air_programs.verify_structure;
- **l1** / **l2**: each compute tile's allocations, ping-pong buffers counted twice, plus the
  stack fit its 64 KiB; each memory tile's fit 512 KiB;
- **coverage**: every element of every output the program's launches write is written.

Each finding is a `Violation`: the check, where, and what is wrong. The checks are in
kernels.air_programs.verify_transfers (bounds, elements, channel), verify_calls (extern),
verify_structure (window, vector, launch), verify_memory (l1, l2) and verify_coverage;
verify_accesses holds what they read a trace with.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..definition.hardware import XDNA2, Hardware
from .recording_builder import build
from .verify_accesses import CHECKS, ENUMERATE, Violation, _Context, _live
from .verify_calls import _check_calls
from .verify_coverage import _check_coverage
from .verify_memory import _check_memory
from .verify_structure import _check_structure
from .verify_transfers import _check_bounds, _check_channels, _check_elements


def verify_source(source: str, *, flags: dict[str, Any] | None = None,
                  outputs: Iterable[int] | dict[int, Any] = (), hw: Hardware = XDNA2,
                  upstream: bool = True) -> list[Violation]:
    """Every violation of one program source. `outputs`: the positions of the function
    arguments the program must write, whole or (a dict) their first so many elements or
    their (first, count) ranges (a padded buffer's data); `flags`: its compiler options
    (stack size, ping-pong)."""
    try:
        trace, namespace = build(source)
    except Exception as e:       # the builder's own refusal, or Python's on a broken program
        return [Violation("build", "module", f"{type(e).__name__}: {e}")]
    ctx = _Context(trace, namespace, None, hw)
    for err in trace.errors:
        ctx.add("build", "module", err)
    ops = [op for op in trace.ops if _live(op.region)]
    _check_bounds(ctx, ops)
    _check_elements(ctx, ops)
    _check_channels(ctx, ops)
    _check_calls(ctx, ops, upstream)
    _check_structure(ctx, ops)
    _check_memory(ctx, trace, ops, flags or {})
    wanted = {k: [(0, v)] if isinstance(v, int) and v else list(v or [])
              for k, v in (outputs.items() if isinstance(outputs, dict)
                           else ((k, 0) for k in outputs))}
    _check_coverage(ctx, trace, ops, wanted)
    return ctx.found


def verify(program: Any, hw: Hardware = XDNA2, upstream: bool = True) -> list[Violation]:
    """Every violation of an emitted `kernels.air_programs.air.Program`."""
    names = [a[0] for a in program.arguments]
    outputs: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for launch, layout, wired in zip(program.launches, program.layouts, program.wiring,
                                     strict=True):
        for op, arg in zip(layout.operands, wired, strict=True):
            if op.role == "output":
                outputs[names.index(arg)] += data_ranges(launch.binding(op.name), op.numel,
                                                         program.head_dim)
    return verify_source(program.source, flags=program.flags, outputs=outputs, hw=hw,
                         upstream=upstream)


def data_ranges(binding: Any, numel: int, head_dim: int | None) -> list[tuple[int, int]]:
    """Where an operand's data lies in its buffer: all of it from the start, or, for a
    head-first operand whose sequence is padded from L to L_pad, L rows of each head at a
    stride of L_pad rows."""
    pad = getattr(binding, "seq_pad", None)
    if pad is None or binding.layout != "head-first" or not head_dim:
        return [(0, numel)]
    length, stored = pad
    heads = numel // (length * head_dim)
    return [(h * stored * head_dim, length * head_dim) for h in range(heads)]


# --- many programs ---------------------------------------------------------------------------

_LAYER = re.compile(r"(?<![A-Za-z0-9])L\d+(?=[._])")


def structure(program: Any) -> str:
    """What a program's verdict depends on: its source with layer numbers folded (the
    dispatches of 30 layers are one program thirty times)."""
    return _LAYER.sub("L#", program.source)


def verify_programs(programs: Iterable[Any], hw: Hardware = XDNA2,
                    cache: dict[str, list[Violation]] | None = None
                    ) -> list[tuple[Any, list[Violation]]]:
    """Each program with its violations; programs of one structure are verified once."""
    cache = {} if cache is None else cache
    out = []
    for program in programs:
        key = structure(program)
        if key not in cache:
            cache[key] = verify(program, hw)
        out.append((program, cache[key]))
    return out


@dataclass(frozen=True)
class Verdict:
    """The verifier's findings over a set of programs."""

    results: tuple[tuple[Any, tuple[Violation, ...]], ...]

    @property
    def clean(self) -> int:
        return sum(1 for _, found in self.results if not found)

    def by_check(self) -> dict[str, int]:
        """Violations per check, counting each program once per check it fails."""
        out = dict.fromkeys(CHECKS, 0)
        for _, found in self.results:
            for check in {v.check for v in found}:
                out[check] += 1
        return out

    def as_json(self) -> dict[str, Any]:
        return {"programs": len(self.results), "clean": self.clean,
                "failing_by_check": self.by_check(),
                "violations": [{"dispatch": p.dispatch, "function": p.function,
                                "check": v.check, "where": v.where, "message": v.message}
                               for p, found in self.results for v in found]}


def check_programs(programs: Iterable[Any], hw: Hardware = XDNA2) -> Verdict:
    return Verdict(tuple((p, tuple(found)) for p, found in verify_programs(programs, hw)))


__all__ = ["CHECKS", "Verdict", "Violation", "check_programs", "structure", "verify",
           "verify_programs", "verify_source"]


# the checks live beside this module (verify_*.py); their names a caller reads come from here
__all__ = ["CHECKS", "ENUMERATE", "Verdict", "Violation", "check_programs", "data_ranges",
           "structure", "verify", "verify_programs", "verify_source"]
