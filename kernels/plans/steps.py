"""What a dispatch plan is made of: which kernels run in which NPU dispatch, which tensors stay
on the device, which ops stay on the CPU.

A `DispatchPlan` is an ordered list of steps. A `Dispatch` is one NPU submission (one ELF)
holding one or more `Launch`es of registry kernels with their configurations; a `HostStep`
runs on the CPU (embedding lookup, a layout transpose, decode attention against the KV cache,
the final norm of the last row, KV-cache bookkeeping). Every operand of every step is bound to
a named tensor with a `Binding` that says how the tensor lives:

* ``static``: a weight in a device buffer written once and kept;
* ``intermediate``: produced and consumed on the device, never synced to the host;
* ``input``: written from the host before the step (a weight that is re-uploaded is one);
* ``output``: read back to the host after the step;

and in which layout: ``seq-first`` ([L, heads*head_dim], the GEMM layout) or ``head-first``
([heads, L, head_dim]).

Only data and what a step says of itself: nothing here selects, checks or prices, so the
performance model (kernels.performance.model) can read a plan without importing the planner.
`kernels.plans.plan` builds the baseline plan (and re-exports these names).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from npu_deploy.models.config import ModelArgs

from ..definition.family import Layout
from ..definition.registry import HOST_KERNELS, family
from ..definition.specs import SPECS, KernelSpec, Mode, Shape

Kind = Literal["static", "intermediate", "input", "output"]
KINDS: tuple[Kind, ...] = ("static", "intermediate", "input", "output")


@dataclass(frozen=True)
class Binding:
    """Operand `operand` of a step reads or writes tensor `tensor`, rows [row0, row1) of it
    when `rows` is set (an LM head partition)."""

    operand: str
    tensor: str
    kind: Kind
    layout: Layout = "seq-first"
    rows: tuple[int, int] | None = None
    #: a head-first tensor of a sequence of L positions stored [heads, L_pad, head_dim] on
    #: the device: (L, L_pad). Set on a plan's launches by `kernels.air_programs.air.pad_sequences`
    #: when a program walks the sequence in blocks that L is not a multiple of; None: unpadded
    seq_pad: tuple[int, int] | None = None
    #: an input whose tensor holds `width` values where the operand reads more: zeros past
    #: them (a 4-bit GEMV's x, its K rounded up to whole blocks: kernels.plans.plan
    #: `block_k`); on the device the tensor's buffer is the operand's size (air
    #: `padded_sizes`), written `width` values deep, zero past them. None: the operand's own
    width: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"binding {self.operand}->{self.tensor}: kind must be one of "
                             f"{KINDS}, got {self.kind!r}")


class _Bound:
    """What launches and host steps share: a role in a layer, a shape, bound operands."""

    role: str
    layer: int | None
    shape: tuple[tuple[str, int], ...]
    bindings: tuple[Binding, ...]

    @property
    def shape_dict(self) -> Shape:
        return dict(self.shape)

    @property
    def label(self) -> str:
        where = "" if self.layer is None else f"L{self.layer}."
        return f"{where}{self.role}"

    def binding(self, operand: str) -> Binding:
        for b in self.bindings:
            if b.operand == operand:
                return b
        raise KeyError(f"{self.label}: no binding for operand {operand!r}")


@dataclass(frozen=True)
class Launch(_Bound):
    """One launch of a registry kernel: the role it plays, its shape, its configuration."""

    kernel: str
    role: str
    layer: int | None
    shape: tuple[tuple[str, int], ...]
    config: tuple[tuple[str, Any], ...]
    bindings: tuple[Binding, ...]

    @property
    def spec(self) -> KernelSpec:
        return SPECS[self.kernel]

    @property
    def config_dict(self) -> dict[str, Any]:
        return dict(self.config)

    def with_bindings(self, bindings: tuple[Binding, ...]) -> Launch:
        return replace(self, bindings=bindings)

    def with_config(self, **changes: Any) -> Launch:
        return replace(self, config=tuple(sorted({**self.config_dict, **changes}.items())))

    def built(self) -> Launch:
        """The launch as its program is built: each dimension its family takes at run time
        (`KernelFamily.runtime_dims`) at the maximum its configuration names (a decode
        attention's cache length at the context it is built for). The launches of every
        value up to that maximum share this form, hence one program; without the maximum
        in its configuration, a launch is built for its own value."""
        config, shape = self.config_dict, self.shape_dict
        built = dict(shape)
        for dim, key in family(self.kernel).runtime_dims:
            most = config.get(key)
            if most is None:
                continue
            if shape[dim] > int(most):
                raise ValueError(f"{self.label}: {dim}={shape[dim]} is past the {key} "
                                 f"{most} its program is built for; build it for a larger "
                                 f"{key}")
            built[dim] = int(most)
        return self if built == shape else replace(self, shape=tuple(sorted(built.items())))

    def runtime_values(self) -> dict[str, int]:
        """This launch's values of the dimensions its program reads at run time."""
        shape = self.shape_dict
        return {dim: shape[dim] for dim, _ in family(self.kernel).runtime_dims}


@dataclass(frozen=True)
class Dispatch:
    """One NPU submission: an ELF with one or more launches, run in order."""

    name: str
    launches: tuple[Launch, ...]

    def built(self) -> Dispatch:
        """The dispatch as its program is built (`Launch.built`)."""
        launches = tuple(ln.built() for ln in self.launches)
        return self if launches == self.launches else replace(self, launches=launches)


# Host ops a plan may hold: the kernel families that run on the host (the embedding lookup,
# decode attention), and the plan's own bookkeeping (what each does is in
# kernels.plans.plan_runner).
HOST_OPS = (*HOST_KERNELS, "transpose", "final_norm_last_row", "kv_store", "kv_append")
#: the configuration a launch moved to the host hands its host op (decode attention's
#: sliding window and softmax scale)
HOST_PARAMS = ("window", "scale")


@dataclass(frozen=True)
class HostStep(_Bound):
    """A step on the CPU. `op` is one of HOST_OPS."""

    op: str
    role: str
    layer: int | None
    shape: tuple[tuple[str, int], ...]
    bindings: tuple[Binding, ...]
    params: tuple[tuple[str, Any], ...] = ()
    #: why a launch the plan wanted on the NPU runs here instead: the checker's findings
    #: against its configuration (empty: host work by design, or moved by a transform)
    reason: str = ""

    def __post_init__(self) -> None:
        if self.op not in HOST_OPS:
            raise ValueError(f"host step {self.role}: unknown op {self.op!r}; known: {HOST_OPS}")

    @property
    def params_dict(self) -> dict[str, Any]:
        return dict(self.params)


Step = Dispatch | HostStep


def on_host(ln: Launch, reason: str = "") -> HostStep:
    """The launch's work as its family's host op (decode attention against the KV cache):
    the host reads every operand and writes the output. The one way a launch leaves the NPU,
    for the baseline's fallback and for `transforms.decode_attention_on_cpu`."""
    host_op = family(ln.kernel).host_alternative
    if host_op is None:
        raise ValueError(f"{ln.label}: {ln.kernel} has no host counterpart")
    # what the host op needs of the launch's configuration: its sliding window and scale
    params = {k: v for k, v in ln.config_dict.items() if k in HOST_PARAMS and v is not None}
    return HostStep(host_op, ln.role, ln.layer, ln.shape,
                    tuple(replace(b, kind="input" if b.operand != "o" else "output")
                          for b in ln.bindings), tuple(sorted(params.items())), reason=reason)


@dataclass(frozen=True)
class DispatchPlan:
    """An ordered list of steps for one prefill (at L) or one decode step (at p)."""

    model: str
    args: ModelArgs
    mode: Mode
    steps: tuple[Step, ...]
    lm_head: Literal["full", "last-token"] = "full"
    history: tuple[str, ...] = field(default=())

    @property
    def dispatches(self) -> list[Dispatch]:
        return [s for s in self.steps if isinstance(s, Dispatch)]

    @property
    def host_steps(self) -> list[HostStep]:
        return [s for s in self.steps if isinstance(s, HostStep)]

    def launches(self) -> Iterator[Launch]:
        for d in self.dispatches:
            yield from d.launches

    @property
    def summary(self) -> str:
        n_launch = sum(len(d.launches) for d in self.dispatches)
        return (f"{self.model} {self.mode}: {len(self.dispatches)} dispatches, {n_launch} "
                f"launches, {len(self.host_steps)} host steps, LM head {self.lm_head}")


def config_key(kernel: str, shape: Shape) -> str:
    """How a (kernel, shape) names its configuration in a stored table: 'gemm_bf16 K=576
    M=128 N=576'."""
    return kernel + " " + " ".join(f"{d}={shape[d]}" for d in sorted(shape))


__all__ = ["HOST_OPS", "KINDS", "Binding", "Dispatch", "DispatchPlan", "HostStep", "Kind",
           "Launch", "Step", "config_key", "on_host"]
