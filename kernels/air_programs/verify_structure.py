"""The verifier's checks of structures upstream found broken on NPU2
(kernels.air_programs.air_verify; docs/hardware-facts.md#known-failure-symptoms): programs
that build, but that the compiler lowers wrongly or refuses late.

- **window**: a micro-kernel writes through a `memref.subview` window of a core's L1 buffer
  that a DMA or channel moves whole. Upstream's RoPE moved several rows per DMA with a call
  per row on such windows, and the air dependency pass mis-scheduled the calls' writes
  under the one output DMA (programming_examples/rope_halfsplit/rope_halfsplit.py;
  kernel_registry/details/RoPE_bf16.md: at 2 rows per DMA it failed to place, at 4 half the
  rows came back zero or NaN). It moves one row per DMA and calls the kernel on the whole
  row buffers.
- **vector**: inline vector code the AIE vector unit does not lower, or lowers wrongly: an
  f32 vector `arith.mulf` (programming_examples/weighted_rms_norm/weighted_rms_norm.py: f32
  vector elementwise multiply is not legalized), a `vector.fma` with a constant operand
  (programming_examples/attention_decode/attn_decode_npu2.py: an f32 one is not legalizable
  on AIE2P; we refuse any, as the programs need none), and
  a loop body in which both a vector `arith.subf` and a `vector.fma` take a product
  (attn_decode_npu2.py: subf after mulf together with fma after mulf in one body compiles
  to an ELF that writes all zeros; an fma's result counts as a product here too, since it
  is one multiply-accumulate).
- **launch**: a launch index reaching what the array runs. A launch is the host's loop: its
  indices exist in the runtime sequence that drives the shim DMAs, while the cores and the
  memory tiles run the same configuration for every launch iteration. So a launch index
  may address DDR (a DMA's DDR side, moved to the shim by the compiler), and nothing else:
  not a call's argument, a store, an scf.if condition, an affine.if, a vector index, or the
  L1/L2 side or the index of a transfer below the launch. Upstream's FlashAttention keeps
  the q block in an L1 counter instead (programming_examples/flash_attention/
  kernel_fusion_based/attn_npu2.py). Its attention programs also issue every DDR-side
  channel put and get in the launch body, not in a segment (attn_npu2.py,
  programming_examples/attention_decode/attn_decode_npu2.py); so must ours.
"""

from __future__ import annotations

from collections import defaultdict

from .recording_trace import MemRef, Op, Region, Value
from .recording_values import Var
from .verify_accesses import _Context, _label, _where

# --- window ---------------------------------------------------------------------------------


def _check_windows(ctx: _Context, ops: list[Op]) -> None:
    """A call on a window (subview) of a core's own L1 buffer that a DMA or channel moves."""
    moved = {id(m.root) for op in ops if op.kind in ("dma", "put", "get") for m in op.memrefs}
    for op in ops:
        if op.kind != "call" or op.region.herd() is None:
            continue
        for a in op.args:
            if not isinstance(a, MemRef) or a.view is None:
                continue
            whole = a.view.memrefs[0].root
            held_by_core = whole.region is not None and whole.region.herd() is not None
            if whole.memref.space == "L1" and held_by_core and id(whole) in moved:
                ctx.add("window", _where(op),
                        f"@{op.callee.name} takes a window of {_label(whole)} "
                        f"({whole.memref}), which a DMA moves whole: the compiler orders the "
                        "call's writes wrongly against that DMA (upstream's RoPE at several "
                        "rows per DMA returned rows of zeros); move one row per DMA and call "
                        "on the whole buffer")


# --- vector -----------------------------------------------------------------------------------

def _made_by(value: object, *names: str) -> Op | None:
    """The compute op (one of `names`) that made `value`, if one did."""
    op = getattr(value, "op", None)
    return op if op is not None and op.kind == "compute" and op.callee in names else None


def _constant(value: object) -> bool:
    """An arith constant, or a vector broadcast of one."""
    if _made_by(value, "arith.constant"):
        return True
    spread = _made_by(value, "vector.broadcast")
    return spread is not None and _constant(spread.args[0])


def _element(value: object) -> str | None:
    t = getattr(value, "type", None)
    shape = getattr(t, "shape", None)
    return None if shape is None else str(t.element)   # type: ignore[union-attr]


def _check_vectors(ctx: _Context, ops: list[Op]) -> None:
    bodies: dict[Region, dict[str, Op]] = defaultdict(dict)
    for op in ops:
        if op.kind != "compute" or op.region.herd() is None:
            continue
        vector = _element(op.args[0]) if op.args else None
        if op.callee == "arith.mulf" and vector == "f32":
            ctx.add("vector", _where(op), "arith.mulf on f32 vectors: the AIE vector unit does "
                    "not legalize an f32 elementwise multiply; multiply bf16 vectors "
                    "(weighted_rms_norm.py)")
        if op.callee == "vector.fma":
            if any(_constant(a) for a in op.args):
                ctx.add("vector", _where(op), "vector.fma with a constant operand: not "
                        "legalizable to aievec on AIE2P (attn_decode_npu2.py)")
            if any(_made_by(a, "arith.mulf", "vector.fma") for a in op.args):
                bodies[op.region].setdefault("fma", op)
        if op.callee == "arith.subf" and vector is not None and \
                any(_made_by(a, "arith.mulf", "vector.fma") for a in op.args):
            bodies[op.region].setdefault("subf", op)
    for region, found in bodies.items():
        if len(found) == 2:
            ctx.add("vector", region.path().removeprefix("module/"),
                    "a vector arith.subf and a vector.fma each take a product in one loop "
                    "body: Peano compiles that to an ELF that writes all zeros "
                    "(attn_decode_npu2.py); keep the epilogue to bf16 multiplies")


# --- launch -----------------------------------------------------------------------------------

def _launch_vars(region: Region) -> tuple[Region | None, set[Var]]:
    """The hierarchy op below the launch the region is in (its segment or herd, None in the
    launch body), and the launch's index variables."""
    chain = list(region.chain())
    launch = next((r for r in chain if r.kind == "launch"), None)
    if launch is None:
        return None, set()
    below = next((r for r in chain if r.kind in ("segment", "herd")), None)
    found = set(launch.vars)
    # inside an affine.if, a launch index it narrows is its narrowed copy
    found |= {copy for r in chain for v, copy in r.narrows.items() if v in found}
    return below, found


def _uses(op: Op) -> set[Var]:
    """The variables what the array runs takes from this op: every side of a transfer but
    DDR's, its channel indices, a call's or a store's operands, an scf.if's or an
    affine.if's condition."""
    used: set[Var] = set()
    for m, p in zip(op.memrefs, op.patterns, strict=False):
        if m.memref.space != "L3" and p is not None:
            used |= set().union(*(o.vars() for o in p.offsets))
    for i in op.indices:
        used |= i.vars()
    if op.kind in ("call", "write") or op.callee in ("scf.if", "affine.if"):
        for a in op.args:
            if isinstance(a, Value) and not isinstance(a, MemRef):
                used |= a.depends
    return used


def _check_launch(ctx: _Context, ops: list[Op]) -> None:
    for op in ops:
        below, launch = _launch_vars(op.region)
        if below is None:
            continue                         # the launch body: the host's side
        where = _where(op)
        if op.kind in ("put", "get") and op.memrefs[0].memref.space == "L3":
            ctx.add("launch", where, f"Channel{'Put' if op.kind == 'put' else 'Get'}"
                    f"({op.channel!r}) moves DDR buffer {_label(op.memrefs[0])} inside "
                    f"{below.kind} {below.name}: issue DDR-side channel ops in the launch "
                    "body, as upstream's attention programs do")
        bad = _uses(op) & launch
        if bad:
            what = op.callee.name if op.kind == "call" else op.callee or op.kind
            names = ", ".join(sorted(v.name for v in bad))
            ctx.add("launch", where, f"{what} takes launch index {names} inside "
                    f"{below.kind} {below.name}: the array runs one configuration for every "
                    "launch iteration; count iterations in L1 (upstream's FlashAttention "
                    "counter) or use the index only in a DMA's DDR addressing")


def _check_structure(ctx: _Context, ops: list[Op]) -> None:
    _check_windows(ctx, ops)
    _check_vectors(ctx, ops)
    _check_launch(ctx, ops)
