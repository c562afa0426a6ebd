"""What a kernel family is: one unit that declares everything the machinery asks of a kernel.

A family module under `kernels/families/` reads top to bottom: its spec (what it reads,
writes and computes, what can be tuned), its checker rule (can a configuration exist on
the hardware), its search space (the configurations selection tries, calibrated first), its
numerics (the NPU's arithmetic emulated on the CPU, the FP32 reference, the tolerance), its
cost (the performance model's work of one launch), its MLIR-AIR program (the launch's
layout on the array and the segment body), and what a plan must know of it (layouts, ELF
sharing, a host counterpart). `kernels.definition.registry` lists the families once; the checker,
the selection, the emulator, the performance model, the emitter and the plan transforms ask it
and never branch on a kernel's name.

The measured figures a family is built on live in `kernels/data/<name>.json` with their
provenance (see `kernels.measured.measurements`); `docs/kernels.md` is generated from both.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import torch

from .hardware import Hardware
from .rules import Finding

if TYPE_CHECKING:
    from ..air_programs.air_parts import KernelSource, LaunchLayout, Writer
    from ..measured.measurements import Source
    from ..performance.model import PerfParams
    from ..plans.plan import Launch

BF16, FP32 = 2, 4          # bytes per element

Shape = dict[str, int]
Layout = Literal["seq-first", "head-first"]
Tensors = dict[str, torch.Tensor]


# --- the spec: what a kernel reads, writes, computes and lets us tune -----------------------

@dataclass(frozen=True)
class Operand:
    name: str
    dims: tuple[int, ...]
    elem_bytes: int
    role: str                   # input | weight | output | table

    @property
    def numel(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.elem_bytes


@dataclass(frozen=True)
class KernelSpec:
    name: str
    where: str                                   # "npu" or "cpu"
    summary: str
    dims: tuple[str, ...]                        # the shape's named dims
    operands: Callable[[Shape], list[Operand]]
    flops: Callable[[Shape], float]
    tunables: dict[str, Any] = field(default_factory=dict)   # name -> default

    def bytes_moved(self, shape: Shape) -> int:
        return sum(o.nbytes for o in self.operands(shape))

    def output(self, shape: Shape) -> Operand:
        """The operand the kernel writes (every kernel here writes one)."""
        return next(o for o in self.operands(shape) if o.role == "output")


# --- the checker rule and the search space ------------------------------------------------

#: (spec, shape, config with the spec's defaults filled in, hardware, usage to fill) ->
#: every rule of the hardware the configuration breaks. `usage` gets tiles, l1_bytes,
#: l2_bytes and, for streams through the shim, bd_base and bd_tails; a family that stages
#: through the memory tiles may add memtile_bds, memtile_in and memtile_out. A multi-launch
#: ELF is checked on these keys (kernels.definition.checker.ELF_RESOURCES).
CheckRule = Callable[[KernelSpec, Shape, dict[str, Any], Hardware, dict[str, int]],
                     list[Finding]]
#: (spec, shape, hardware) -> the configurations selection tries, the calibrated one first.
Candidates = Callable[[KernelSpec, Shape, Hardware], Iterator[dict[str, Any]]]


def product_space(space: Mapping[str, tuple[Any, ...]]) -> Candidates:
    """Every combination of the values `space` lists per tunable, in order (the calibrated
    value first in each), leaving out herds wider than the array has columns."""
    def candidates(spec: KernelSpec, shape: Shape, hw: Hardware) -> Iterator[dict[str, Any]]:
        names = list(space)
        for values in itertools.product(*(space[n] for n in names)):
            config = dict(zip(names, values, strict=True))
            if config.get("herd_n", 1) > hw.cols or config.get("herd_m", 1) > hw.cols:
                continue
            yield config
    return candidates


# --- numerics ---------------------------------------------------------------------------

#: (shape, config, inputs[, outputs]) -> results. A kernel may write a result straight into
#: the output buffer it is given and return that buffer; the backend copies the others.
EmulatedKernel = Callable[..., Tensors]
#: (shape, config, inputs) -> the FP32 results of the same bf16 inputs.
ReferenceKernel = Callable[[Shape, dict[str, Any], Tensors], Tensors]


@dataclass(frozen=True)
class Numerics:
    """The kernel's arithmetic on the emulator, its FP32 reference and the Phase-1 atol (for
    the unit-scale outputs of the seeded inputs). `weights` scales a seeded weight (randn)
    so that outputs stay at unit scale.

    `atol_by` gives configurations of another precision tier their own atol: a config key and
    the atol of each of its values (a GEMM's `method`: the direct method rounds its partial
    sums to bf16). A value it does not list, or a missing key, takes `atol`."""

    emulate: EmulatedKernel
    reference: ReferenceKernel
    atol: float
    weights: Callable[[torch.Tensor, Shape], torch.Tensor] | None = None
    #: a quantized kernel's seeded weight: its tensors (device bytes `w` and the unpacked
    #: fields the emulator reads) from the shape, the configuration and a generator
    seeded_weight: Callable[[Shape, Mapping[str, Any], torch.Generator],
                            dict[str, torch.Tensor]] | None = None
    atol_by: tuple[str, Mapping[str, float]] | None = None
    #: a quantized kernel's weight operand from a model's 4-bit blocks (a formats
    #: QuantizedMatrix): the same tensors `seeded_weight` gives, for a plan's launch
    packed_weight: Callable[[Shape, Mapping[str, Any], Any],
                            dict[str, torch.Tensor]] | None = None

    def atol_of(self, config: Mapping[str, Any]) -> float:
        """The Phase-1 atol of `config` (the spec's defaults filled in)."""
        if self.atol_by is None:
            return self.atol
        key, atols = self.atol_by
        return atols.get(str(config.get(key)), self.atol)


# --- cost --------------------------------------------------------------------------------

@dataclass(frozen=True)
class Work:
    """One launch's modeled work after its launch floor, as upstream's harness times a kernel
    on its own: the compute and the memory streams overlap (double-buffered), `serial_s`
    follows them (a bf16-out GEMM's separate cast launch)."""

    compute_s: float
    memory_s: float
    serial_s: float = 0.0

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s) + self.serial_s

    @property
    def bound(self) -> str:
        return "compute" if self.compute_s >= self.memory_s else "memory"


#: Which in-deployment derate a launch inside a merged ELF takes (`PerfParams`): GEMMs run
#: slower in a deployment's ELF than on upstream's harness, FlashAttention too (and the
#: deployment runs it seq-first where the registry measured it head-first), streaming
#: kernels (GEMV, element-wise, norms) about as fast or faster.
InElf = Literal["matmul", "attention", "stream"]


@dataclass(frozen=True)
class TimedLaunch:
    """One measured standalone launch: a kernel at a shape and configuration, the seconds
    upstream measured on NPU2, where the figure is from and the group of configurations it
    is ranked in (a shape, or one sweep)."""

    kernel: str
    shape: tuple[tuple[str, int], ...]
    config: tuple[tuple[str, Any], ...]
    seconds: float
    source: str
    group: str

    @property
    def shape_dict(self) -> Shape:
        return dict(self.shape)

    @property
    def config_dict(self) -> dict[str, Any]:
        return dict(self.config)


def timed(kernel: str, shape: Shape, config: dict[str, Any], seconds: float, source: str,
          group: str | None = None) -> TimedLaunch:
    """A measured launch; its rank group defaults to its kernel and shape."""
    frozen = tuple(sorted(shape.items()))
    return TimedLaunch(kernel, frozen, tuple(sorted(config.items())), seconds, source,
                       group or f"{kernel} " + " ".join(f"{k}={v}" for k, v in frozen))


@dataclass(frozen=True)
class Cost:
    """One launch's cost for the performance model.

    `work(spec, shape, config, params)` is the launch's work after its launch floor;
    `floor(params)` the per-launch floor of the family's standalone measurements, so that a
    launch on its own takes floor + work (`kernels.performance.model.launch_seconds`). Inside a
    merged ELF it takes the in-ELF launch price plus its work times the `in_elf` derate.
    `coefficients` names the `PerfParams` fields the family's work reads, each with the
    starting value of their fit, and `fitted_on()` gives the launches upstream measured that
    they are fitted on (`kernels.performance.model.calibrate`). `rate_key` names the per-tile
    streaming rate a streaming kernel reads (a QK norm reads RMSNorm's)."""

    work: Callable[[KernelSpec, Shape, dict[str, Any], PerfParams], Work]
    floor: Callable[[PerfParams], float]
    coefficients: tuple[tuple[str, float], ...] = ()
    fitted_on: Callable[[], list[TimedLaunch]] | None = None
    in_elf: InElf = "matmul"
    rate_key: str | None = None


@dataclass(frozen=True)
class HostOp:
    """A kernel that runs on the CPU as a plan's host step: what it does to the step's
    tensors (`get(operand)`, `put(operand, value)`), given the step's shape and parameters
    (a sliding window, say), and what it costs."""

    run: Callable[[Shape, dict[str, Any], Callable[[str], torch.Tensor],
                   Callable[[str, torch.Tensor], None]], None]
    seconds: Callable[[Shape, PerfParams], float]


# --- the MLIR-AIR program ------------------------------------------------------------------

#: (writer, name prefix "s0", launch, its layout, operand -> function argument, the
#: launch's argument names, the model's head_dim) -> writes the segment's body.
SegmentWriter = Callable[["Writer", str, "Launch", "LaunchLayout", dict[str, str], list[str],
                          int | None], None]


@dataclass(frozen=True)
class AirProgram:
    """How one launch is written for mlir-air: its layout on the array (grid, herd, L1 and
    L2 buffers, loops, channels, micro-kernels) and the segment that moves and computes."""

    layout: Callable[[Launch, dict[str, Any], Hardware], LaunchLayout]
    segment: SegmentWriter
    #: a second air.launch written after the launch's own (fused-cast's cast), or None
    after: SegmentWriter | None = None
    #: the launch body's own ops, before and after the segment: the DDR side of channels
    #: (upstream's attention programs put to and get from DDR there, never in a segment)
    launch_in: SegmentWriter | None = None
    launch_out: SegmentWriter | None = None


@dataclass(frozen=True)
class ProgramLayout:
    """A kernel compiled for one operand layout (FlashAttention): `align_layouts` gives the
    tensors around it the layout its program takes at a shape, and writes `seq_first_outputs`
    seq-first for the GEMM that reads them."""

    at: Callable[[Shape], Layout]
    seq_first_outputs: tuple[str, ...] = ()


# --- the family --------------------------------------------------------------------------

@dataclass(frozen=True)
class KernelFamily:
    """One kernel, declared once. Only `spec` is required: a host kernel has no checker
    rule, search space, cost on the NPU or program."""

    spec: KernelSpec
    #: the checker's rules, one line each (docs/kernels.md)
    rules: tuple[str, ...] = ()
    check: CheckRule | None = None
    candidates: Candidates | None = None
    numerics: Numerics | None = None
    cost: Cost | None = None
    program: AirProgram | None = None
    #: on the host: what the step does and costs
    host: HostOp | None = None
    #: the data file (kernels/data/<data>.json) of its measured figures, and the upstream
    #: page they are ingested from (only the family that owns the file names a source)
    data: str | None = None
    source: Source | None = None
    # What plans, the runner and the NPU backend need to know of it:
    #: operands stored head-first when it runs alone (no plan gives their layouts)
    head_first_alone: tuple[str, ...] = ()
    #: built as its own program: it never shares an ELF with other launches
    own_elf: bool = False
    #: compiled for one operand layout (see ProgramLayout)
    program_layout: ProgramLayout | None = None
    #: works in the layout its output is bound in: its input follows (a bias add)
    layout_follows_output: bool = False
    #: the host op that can replace its launch (`decode_attention_on_cpu`)
    host_alternative: str | None = None
    #: the operand that reads a model weight transposed, as [K, N] (a GEMM's B): the runner
    #: hands it W^T, the program binds it as its own buffer, and the emulator may convert a
    #: static one once
    transposed_weight: str | None = None
    #: its emulation has an exact (FP64 K-tile sums) and a fast (BLAS) path: the runner
    #: chooses with config["exact_tiles"]
    exact_tiles: bool = False
    #: what upstream measured on NPU2 at a shape (the registry row: for a GEMM its fastest
    #: high-precision configuration), or None where the shape was not measured
    measured: Callable[[Shape], dict[str, Any] | None] | None = None
    #: the measured rows name this family's tunables: selection takes the measured
    #: configuration at a measured shape
    measured_config: bool = False
    #: the operands as the NPU's program reads them, where that differs from the tensors the
    #: plan runner binds (a GEMM's B in column blocks): (config, operand name, tensor) ->
    #: the tensor to write
    to_device: Callable[[dict[str, Any], str, torch.Tensor], torch.Tensor] | None = None
    #: why a launch at this shape computes correctly only as the first launch of its ELF
    #: (None where it can run anywhere); check_merge refuses it later in an ELF
    first_launch_only: Callable[[Shape], str | None] | None = None
    #: the objects a launch at (shape, config) links, as compiled (upstream source and
    #: defines): check_merge keeps two objects that export one C symbol out of one ELF
    objects: Callable[[Shape, dict[str, Any]], tuple[KernelSource, ...]] | None = None
    #: the argument types a launch at (shape, config) declares each extern symbol with: one
    #: module declares a symbol once, so check_merge keeps two declarations apart
    declares: Callable[[Shape, dict[str, Any]], dict[str, str]] | None = None
    #: configurations under which the family's launches of one ELF (shape, config each, in
    #: order) share its objects and declarations, or None when none can (check_merge's
    #: symbol rules); kernels.definition.checker.shared_configs applies it
    share: Callable[[list[tuple[Shape, dict[str, Any]]]], list[dict[str, Any]] | None] \
        | None = None
    #: what upstream runs by default at a shape (selection's tie-break among configurations
    #: the model times alike); None: the spec's tunables
    preferred: Callable[[Shape], dict[str, Any]] | None = None
    #: the values of `method` that belong to the low-precision tier (selection takes them
    #: only when no high-precision configuration fits)
    low_precision: tuple[str, ...] = ()
    #: the family computing the same from the same operands into an FP32 output (its
    #: output's bf16 cast taken out): what `transforms.lm_head_fp32_logits` swaps the LM head
    #: to; None where there is none
    fp32_out: str | None = None
    #: the recipe settings the hardware supports that change this family's rounding, each
    #: with what it does in words: what a numerics retry may try (pipeline.divergence)
    numerics_changes: tuple[tuple[tuple[tuple[str, str], ...], str], ...] = ()
    #: its `datapath` configuration key (a family whose tunables have one) is set by the
    #: plan's attention_datapath, not by its gemm_datapath
    attention_datapath: bool = False
    #: dimensions of its shape its program takes at run time rather than at build time,
    #: each with the configuration key of the maximum the program is built for: (dim, key).
    #: A launch holds this step's value (a decode's cache length); its program is built
    #: for the maximum (`Launch.built`, one program for every value up to it) and reads the
    #: value from a one-word i32 argument the backend writes per run (`LaunchLayout.runtime`)
    runtime_dims: tuple[tuple[str, str], ...] = ()

    @property
    def name(self) -> str:
        return self.spec.name


__all__ = ["BF16", "FP32", "AirProgram", "Candidates", "CheckRule", "Cost", "EmulatedKernel",
           "HostOp", "InElf", "KernelFamily", "KernelSpec", "Layout", "Numerics", "Operand",
           "ProgramLayout", "ReferenceKernel", "SegmentWriter", "Shape", "Tensors",
           "TimedLaunch", "Work", "product_space", "timed"]
