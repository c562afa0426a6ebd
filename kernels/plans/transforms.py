"""Plan transforms: each a pure function DispatchPlan -> DispatchPlan that keeps the
computation, and each the mechanics of one optimization skill.

* `reuse_buffers`: weights become static buffers written once; tensors produced and consumed
  on the device become intermediates, never synced to the host.
* `align_layouts`: the projections, RoPE and attention agree on one layout, so the host
  transposes between them go (a GEMM or attention output DMA can write either layout).
* `merge_dispatches`: consecutive launches of a layer become one dispatch (a multi-launch
  ELF), unless the checker finds the merge illegal (`check_merge`).
* `last_token_lm_head`: in prefill, the final norm of the last row on the host and the LM
  head as GEMV partitions, instead of the LM head GEMM over every row.
* `decode_attention_on_cpu`: decode attention against the KV cache on the host instead of
  an NPU launch.

The first three run the same kernels on the same data, so the emulator gives the same bits
(tested); the last two swap a kernel (GEMM -> GEMV, NPU -> CPU attention), so their outputs
differ by the numerics of the swapped kernel, and the tests bound that difference.
`IllegalTransform` carries the checker's findings when a transform cannot apply.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Literal

from ..definition.checker import Finding, check_merge, shared_configs
from ..definition.family import ProgramLayout
from ..definition.hardware import XDNA2, Hardware
from ..definition.registry import family
from ..definition.specs import SPECS, Decode, Prefill
from .plan import (
    Binding,
    Dispatch,
    DispatchPlan,
    HostStep,
    Launch,
    Layout,
    PlanBuilder,
    Step,
    last_token_head,
    on_host,
)


class IllegalTransform(ValueError):
    """A transform that cannot apply to this plan, with the reasons."""

    def __init__(self, transform: str, reason: str, findings: list[Finding] | None = None):
        self.transform, self.findings = transform, findings or []
        detail = "; ".join(f.message for f in self.findings)
        super().__init__(f"{transform}: {reason}" + (f": {detail}" if detail else ""))


def _with(plan: DispatchPlan, steps: list[Step], name: str,
          lm_head: Literal["full", "last-token"] | None = None) -> DispatchPlan:
    return replace(plan, steps=tuple(_host_crossings(steps)), history=(*plan.history, name),
                   lm_head=lm_head or plan.lm_head)


def _rebind(step: Step, fn: Callable[[Binding, Launch | HostStep], Binding]) -> Step:
    if isinstance(step, HostStep):
        return replace(step, bindings=tuple(fn(b, step) for b in step.bindings))
    return replace(step, launches=tuple(
        ln.with_bindings(tuple(fn(b, ln) for b in ln.bindings)) for ln in step.launches))


# --- buffer object reuse ---------------------------------------------------------------

def reuse_buffers(plan: DispatchPlan) -> DispatchPlan:
    """Static weights written once; device-to-device tensors never synced: a tensor an NPU
    launch wrote stays on the device for later launches, and is read back only when a host
    step (or the caller: the logits) needs it."""
    host_reads = {"logits"}
    for host in plan.host_steps:
        host_reads.update(b.tensor for b in host.bindings
                          if b.operand not in ("y", "o", "k_cache", "v_cache"))
    prefill = isinstance(plan.mode, Prefill)
    on_device: set[str] = set()
    steps: list[Step] = []
    for step in plan.steps:
        if isinstance(step, HostStep):
            on_device.difference_update(b.tensor for b in step.bindings
                                        if b.operand in ("y", "o", "k_cache", "v_cache"))
            steps.append(step)
            continue
        launches = []
        for ln in step.launches:
            roles = _roles(ln.kernel, ln.shape)
            bindings = []
            for b in ln.bindings:
                if b.tensor.startswith("w.") or (prefill and b.tensor.startswith("rope.")):
                    b = replace(b, kind="static")   # the prefill's table: positions 0..L-1
                elif roles[b.operand] == "output":
                    b = replace(b, kind="output" if b.tensor in host_reads else "intermediate")
                elif b.tensor in on_device:
                    b = replace(b, kind="intermediate")
                bindings.append(b)
            launches.append(ln.with_bindings(tuple(bindings)))
            on_device.update(b.tensor for b in ln.bindings if roles[b.operand] == "output")
        steps.append(replace(step, launches=tuple(launches)))
    return _with(plan, steps, "reuse_buffers")


# --- layout alignment ------------------------------------------------------------------

def align_layouts(plan: DispatchPlan) -> DispatchPlan:
    """Remove the host transposes around attention: every tensor between the Q/K/V
    projections and attention takes the layout of the attention program (seq-first at
    head_dim 64, head-first at 128); attention writes its output seq-first for the O GEMM."""
    transposes = [s for s in plan.host_steps if s.op == "transpose"]
    if not transposes:
        raise IllegalTransform("align_layouts", "the plan has no host transposes to remove")
    alias = {s.binding("y").tensor: s.binding("x").tensor for s in transposes}
    # the launch of each layer whose program is compiled for one layout (attention)
    attention = {ln.layer: ln for ln in plan.launches() if _program_layout(ln) is not None}
    chain: dict[str, Layout] = {}           # tensor -> the layout it now takes
    for step in plan.steps:
        for b, layer in _bindings_with_layer(step):
            ln = attention.get(layer)
            if ln is None:
                continue
            target = _layout_at(ln)
            if b.layout == "head-first" and not b.tensor.endswith(("_cache", ".oh")):
                chain[alias.get(b.tensor, b.tensor)] = target
    # A kernel that works in its output's layout (a bias add) feeding the chain takes the
    # chain's layout too (the GEMM before it writes that layout).
    for ln in plan.launches():
        if not family(ln.kernel).layout_follows_output:
            continue
        out = ln.spec.output(ln.shape_dict).name
        if ln.binding(out).tensor in chain:
            for op in ln.spec.operands(ln.shape_dict):
                if op.role == "input":
                    chain[ln.binding(op.name).tensor] = chain[ln.binding(out).tensor]

    def fn(b: Binding, owner: Launch | HostStep) -> Binding:
        tensor = alias.get(b.tensor, b.tensor)
        rule = _program_layout(owner) if isinstance(owner, Launch) else None
        if rule is not None and b.operand in rule.seq_first_outputs:
            return replace(b, tensor=tensor, layout="seq-first")
        if tensor.endswith(".oh"):
            return replace(b, tensor=tensor, layout="seq-first")
        if tensor in chain:
            return replace(b, tensor=tensor, layout=chain[tensor])
        return replace(b, tensor=tensor)

    def program(step: Step) -> Step:
        if isinstance(step, HostStep):
            return step
        return replace(step, launches=tuple(
            ln.with_config(layout=_layout_at(ln)) if _program_layout(ln) is not None else ln
            for ln in step.launches))

    steps = [program(_rebind(s, fn)) for s in plan.steps
             if not (isinstance(s, HostStep) and s.op == "transpose")]
    return _with(plan, steps, "align_layouts")


def _program_layout(ln: Launch) -> ProgramLayout | None:
    return family(ln.kernel).program_layout


def _layout_at(ln: Launch) -> Layout:
    rule = _program_layout(ln)
    assert rule is not None
    return rule.at(ln.shape_dict)


def _bindings_with_layer(step: Step) -> list[tuple[Binding, int | None]]:
    if isinstance(step, HostStep):
        return [(b, step.layer) for b in step.bindings]
    return [(b, ln.layer) for ln in step.launches for b in ln.bindings]


# --- merging ----------------------------------------------------------------------------

def merge(plan: DispatchPlan, first: int, last: int, name: str | None = None,
          hw: Hardware = XDNA2) -> DispatchPlan:
    """Steps first..last (inclusive, all dispatches, consecutive) as one dispatch; raises
    IllegalTransform with the checker's findings when the merged ELF cannot exist."""
    steps = list(plan.steps)
    group = steps[first:last + 1]
    if len(group) < 2 or not all(isinstance(s, Dispatch) for s in group):
        raise IllegalTransform("merge", f"steps {first}..{last} are not two or more "
                               "consecutive dispatches (a host step sits between them)")
    launches = [ln for d in group if isinstance(d, Dispatch) for ln in d.launches]
    together = sharing(launches, hw)
    if together is None:
        raise IllegalTransform("merge", f"{len(launches)} launches cannot share one ELF",
                               check_merge([(ln.spec, ln.shape_dict, ln.config_dict)
                                            for ln in launches], hw))
    merged = Dispatch(name or "+".join(ln.role for ln in together), together)
    return _with(plan, [*steps[:first], merged, *steps[last + 1:]], "merge")


def sharing(launches: list[Launch], hw: Hardware = XDNA2) -> tuple[Launch, ...] | None:
    """`launches` as one ELF can hold them (kernels.definition.checker.shared_configs: the GEMVs of
    one ELF on one object per symbol), or None when no configuration makes the ELF legal."""
    configs = _shared(tuple((ln.kernel, ln.shape, ln.config) for ln in launches), hw)
    if configs is None:
        return None
    out = []
    for ln, c in zip(launches, configs, strict=True):
        now = {**ln.spec.tunables, **ln.config_dict}
        changed = {k: v for k, v in c.items() if now.get(k) != v}
        out.append(ln.with_config(**changed) if changed else ln)
    return tuple(out)


@lru_cache(maxsize=8192)
def _shared(launches: tuple[tuple[str, tuple[tuple[str, int], ...], tuple[tuple[str, Any], ...]],
                            ...], hw: Hardware) -> tuple[dict[str, Any], ...] | None:
    """`shared_configs` of launches given as (kernel, shape, configuration) tuples, kept: it
    is a pure function of them and the hardware, and a decode plan asks it the same
    questions at every position and layer (a merge of decode plans was 0.5 s, most of it
    here, measured on the CPU). The dicts are copied by the caller's `with_config`."""
    configs = shared_configs([(SPECS[k], dict(s), dict(c)) for k, s, c in launches], hw)
    return None if configs is None else tuple(configs)


def merge_dispatches(plan: DispatchPlan, hw: Hardware = XDNA2) -> DispatchPlan:
    """Each run of consecutive dispatches of one layer (and the LM head's) merged as far as
    the checker allows: greedily, a run is closed when adding the next dispatch would make
    the ELF illegal under every configuration `sharing` tries."""
    out: list[Step] = []
    run: list[Dispatch] = []
    held: tuple[Launch, ...] = ()           # the run's launches, as the ELF will hold them
    merged_any = False

    def layer_of(d: Dispatch) -> int | None:
        return d.launches[0].layer

    def flush() -> None:
        nonlocal merged_any
        if len(run) > 1:
            merged_any = True
            out.append(Dispatch(_group_name(held), held))
        elif run:
            out.append(run[0])
        run.clear()

    for step in plan.steps:
        if not isinstance(step, Dispatch):
            flush()
            out.append(step)
            continue
        together = None
        if run and layer_of(run[0]) == layer_of(step):
            together = sharing([*held, *step.launches], hw)
        if run and together is None:
            flush()
        run.append(step)
        held = together if together is not None and len(run) > 1 else step.launches
    flush()
    if not merged_any:
        raise IllegalTransform("merge_dispatches", "no two consecutive dispatches can merge")
    return _with(plan, out, "merge_dispatches")


def _group_name(launches: tuple[Launch, ...]) -> str:
    layer = launches[0].layer
    where = "" if layer is None else f"L{layer}."
    return where + "+".join(ln.role for ln in launches)


# --- last-token LM head -----------------------------------------------------------------

def last_token_lm_head(plan: DispatchPlan, hw: Hardware = XDNA2) -> DispatchPlan:
    """Prefill needs the logits of the last position only: the final norm of that row on
    the host, the LM head as GEMV partitions. The baseline already runs it so
    (`baseline_plan`); this is for a plan built with the full LM head."""
    if not isinstance(plan.mode, Prefill) or plan.lm_head != "full":
        raise IllegalTransform("last_token_lm_head", "applies to a prefill plan whose LM head "
                               "runs over the whole sequence")
    steps: list[Step] = []
    x_name = norm_weight = None
    for step in plan.steps:
        if isinstance(step, Dispatch):
            kept = []
            for ln in step.launches:
                if ln.role == "final_norm":
                    x_name, norm_weight = ln.binding("x").tensor, ln.binding("weight").tensor
                elif ln.role != "lm_head":
                    kept.append(ln)
            if kept:
                steps.append(replace(step, launches=tuple(kept)))
            continue
        steps.append(step)
    if x_name is None or norm_weight is None:
        raise IllegalTransform("last_token_lm_head", "the plan has no final norm")
    b = PlanBuilder(plan.args, hw)
    last_token_head(b, x_name, norm_weight)
    steps.extend(b.steps)
    return _with(plan, steps, "last_token_lm_head", lm_head="last-token")


# --- decode attention on the host -------------------------------------------------------

def decode_attention_on_cpu(plan: DispatchPlan) -> DispatchPlan:
    """Each launch whose kernel has a host counterpart (decode attention: one query against
    the cache) becomes that host step."""
    if not isinstance(plan.mode, Decode):
        raise IllegalTransform("decode_attention_on_cpu", "applies to a decode plan")
    steps: list[Step] = []
    moved = 0
    for step in plan.steps:
        if isinstance(step, Dispatch) and any(family(ln.kernel).host_alternative
                                              for ln in step.launches):
            if len(step.launches) != 1:
                raise IllegalTransform("decode_attention_on_cpu", f"{step.name} holds other "
                                       "launches; move attention before merging")
            steps.append(on_host(step.launches[0]))
            moved += 1
        else:
            steps.append(step)
    if not moved:
        raise IllegalTransform("decode_attention_on_cpu", "no decode attention on the NPU")
    return _with(plan, steps, "decode_attention_on_cpu")


def _host_crossings(steps: list[Step]) -> list[Step]:
    """Where a tensor now crosses between the NPU and a host step, the launch's binding
    says so: a tensor a host step reads is read back after the launch that wrote it
    (output), and one a host step wrote is written before the launch that reads it
    (input). An intermediate there would be a device buffer nobody filled."""
    host_reads: set[str] = set()
    host_writes: set[str] = set()
    for step in steps:
        if isinstance(step, HostStep):
            for b in step.bindings:
                (host_writes if b.kind == "output" else host_reads).add(b.tensor)

    def fn(b: Binding, owner: Launch | HostStep) -> Binding:
        if isinstance(owner, HostStep) or b.kind != "intermediate":
            return b
        roles = _roles(owner.kernel, owner.shape)
        if roles[b.operand] == "output" and b.tensor in host_reads:
            return replace(b, kind="output")
        if roles[b.operand] != "output" and b.tensor in host_writes:
            return replace(b, kind="input")
        return b
    crossing = host_reads | host_writes
    # a step none of whose intermediates crosses is kept as it is (`fn` would rebuild it
    # equal): most steps of a plan, and a plan is rebuilt at every decode position
    return [_rebind(step, fn) if isinstance(step, Dispatch) and any(
        b.kind == "intermediate" and b.tensor in crossing
        for ln in step.launches for b in ln.bindings) else step for step in steps]


@lru_cache(maxsize=4096)
def _roles(kernel: str, shape: tuple[tuple[str, int], ...]) -> dict[str, str]:
    """Operand name -> role (input, output, ...) of `kernel` at `shape`; read-only."""
    return {op.name: op.role for op in SPECS[kernel].operands(dict(shape))}


@dataclass(frozen=True)
class Transform:
    name: str
    skill: str                       # the optimization skill whose mechanics this is
    apply: Callable[[DispatchPlan], DispatchPlan]
    preserves: str                   # "bits" (same kernels) or "numerics" (a kernel swapped)


TRANSFORMS: dict[str, Transform] = {t.name: t for t in [
    Transform("align_layouts", "layout-alignment", align_layouts, "bits"),
    Transform("reuse_buffers", "buffer-object-reuse", reuse_buffers, "bits"),
    Transform("last_token_lm_head", "last-token-lm-head", last_token_lm_head, "numerics"),
    Transform("decode_attention_on_cpu", "decode-attention-on-cpu", decode_attention_on_cpu,
              "numerics"),
    # "numerics": a GEMV whose K differs from its ELF's other GEMVs moves to mv_bf16.o (sharing)
    Transform("merge_dispatches", "multi-kernel-merging", merge_dispatches, "numerics"),
]}
