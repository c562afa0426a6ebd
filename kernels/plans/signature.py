"""A plan's arithmetic signature: a digest of what it computes, kernel by kernel, and of
nothing else.

Every value a plan produces is named by how it was computed: the kernel (or host op), its
shape, its configuration, and the values of its inputs, themselves named the same way back
to the plan's inputs (the tokens, the weights, the RoPE table, the KV cache a decode step
starts from). The signature is the digest of the values the runner returns (the logits and
the KV cache). Two plans with the same signature run the same kernels, with the same
configurations, on the same values, in the same dependency order: on a backend whose kernels
are deterministic functions of their inputs (the emulator's), they give the same bits. What a
signature leaves out is what changes a step's cost and never its result
(kernels.plans.plan_runner): the dispatches a launch is grouped in, whether a buffer is
static, intermediate, input or output, and the tensors' names.

With `layouts=False` it also leaves out the layouts tensors are stored in and the host
transposes between them: right for a backend whose kernels read an operand by its layout and
compute the same numbers in either (the emulator: `as_head_first` views; the bits are held
equal by tests/kernels/test_plans.py::test_transforms_that_keep_the_kernels_keep_the_bits),
not for one that compiles a program per layout. There, `layouts=True` keeps them.

pipeline.check_reuse uses it to reuse a token-set check for a plan that provably computes
what an earlier checked plan did.
"""

from __future__ import annotations

import hashlib

from ..definition.registry import family
from .steps import Binding, Dispatch, DispatchPlan, HostStep, Launch

#: Bump when what a signature covers changes: older signatures then never match.
VERSION = 1


def _digest(*parts: object) -> str:
    return hashlib.blake2b(repr(parts).encode(), digest_size=16).hexdigest()


class _Values:
    """Tensor name -> the digest of the value it holds now (whole, or as row pieces)."""

    def __init__(self) -> None:
        self.whole: dict[str, str] = {}
        self.pieces: dict[str, dict[tuple[int, int], str]] = {}

    def read(self, b: Binding, layouts: bool) -> str:
        name = b.tensor
        if name in self.pieces:
            value = _digest("pieces", sorted(self.pieces[name].items()))
        elif name in self.whole:
            value = self.whole[name]
        else:               # a plan input: tokens, a weight, the RoPE table, a KV cache
            value = _digest("input", name)
        placement = (b.layout, b.seq_pad) if layouts else ()
        return value if b.rows is None and not placement else _digest(value, b.rows,
                                                                      placement)

    def write(self, b: Binding, value: str) -> None:
        if b.rows is None:
            self.pieces.pop(b.tensor, None)
            self.whole[b.tensor] = value
        else:
            self.pieces.setdefault(b.tensor, {})[b.rows] = value

    def current(self, name: str) -> str | None:
        """What `name` holds before a step writes it: a value, the KV cache a decode step
        starts from (which kv_append extends), or nothing."""
        if name in self.pieces:
            return _digest("pieces", sorted(self.pieces[name].items()))
        if name not in self.whole and name.endswith(("k_cache", "v_cache")):
            return _digest("input", name)
        return self.whole.get(name)


def _numerics_config(ln: Launch, layouts: bool) -> tuple[tuple[str, object], ...]:
    """The launch's configuration; without `layouts`, less the program's layout (which
    layout a program reads its operands in: a placement, held bit-neutral on the emulator)."""
    if layouts or family(ln.kernel).program_layout is None:
        return ln.config
    return tuple(kv for kv in ln.config if kv[0] != "layout")


def plan_signature(plan: DispatchPlan, *, layouts: bool = True) -> str:
    """The digest of what `plan` computes (see the module docstring)."""
    values = _Values()
    for step in plan.steps:
        if isinstance(step, Dispatch):
            for ln in step.launches:
                _launch(ln, values, layouts)
        else:
            _host(step, values, layouts)
    outputs = sorted((name, values.current(name)) for name in
                     {*values.whole, *values.pieces}
                     if name == "logits" or name.endswith(("k_cache", "v_cache")))
    return _digest(VERSION, str(plan.mode), plan.lm_head, layouts, outputs)


def _launch(ln: Launch, values: _Values, layouts: bool) -> None:
    roles = {op.name: op.role for op in ln.spec.operands(ln.shape_dict)}
    inputs = tuple((b.operand, values.read(b, layouts)) for b in ln.bindings
                   if roles[b.operand] != "output")
    computed = _digest("launch", ln.kernel, ln.shape, _numerics_config(ln, layouts), inputs)
    for b in ln.bindings:
        if roles[b.operand] == "output":
            placement = (b.layout, b.seq_pad) if layouts else ()
            values.write(b, _digest(computed, b.operand, placement))


def _host(step: HostStep, values: _Values, layouts: bool) -> None:
    if step.op == "transpose" and not layouts:
        # a layout change only: the value is its input's
        values.write(step.binding("y"), values.read(step.binding("x"), layouts))
        return
    params = step.params if layouts else tuple(kv for kv in step.params if kv[0] != "to")
    # every operand's value as the step finds it: a step that appends to its output (the KV
    # cache) reads what was there
    seen = tuple((b.operand, values.read(b, layouts) if b.kind != "output"
                  else values.current(b.tensor)) for b in step.bindings)
    computed = _digest("host", step.op, step.shape, params, seen)
    for b in step.bindings:
        if b.kind == "output":
            values.write(b, _digest(computed, b.operand, b.layout if layouts else ()))


__all__ = ["VERSION", "plan_signature"]
