"""The NPU2 performance model: how long a dispatch plan takes on XDNA 2, modeled.

    launch, on its own = floor + work         (what upstream's harness measures; the floor
                                               and the work are the family's `Cost`)
    launch, in a dispatch = in-ELF launch price + derate x work
    dispatch = dispatch overhead + its launches + host transfers of what is neither static
               nor intermediate + Python scheduling
    host step = Python scheduling + its bytes at the CPU's copy rate (+ fixed attention cost)
    prefill (TTFT) = every step + writing the static weights once (the first call does it)
    decode (per token) = every step

Each kernel family declares its launch's work and floor as a small physical model whose
coefficients are `PerfParams` fields (GEMM: DDR bandwidth and DMA burst overhead, a tile's
matmul rate, a sync per K step, direct codegen's slowdown, fused-cast's cast launch; GEMV:
a column's bandwidth and a per-call cost; streaming kernels: a per-tile rate each, a DDR
ceiling, a per-block cost; FlashAttention: a per-tile rate and a cost per launch
iteration). kernels.performance.calibration derives them: step 1 of its `calibrate()` fits
them on every launch upstream measured on its own (the kernel registry's rows and the tile
sweeps of its notes, `kernels.performance.fitting`); steps 2-6 fit the in-deployment terms
(the price of a launch inside a merged ELF, the dispatch overhead, the derates of matmul and
streaming work, the host rates) to the Llama-3.2-1B deployment alone, priced at the
configurations it ran. Those figures are data, with their provenance:
kernels/data/calibration.json (kernels.performance.calibration_set). A test checks the
defaults are `calibrate()`'s output. Nothing else tunes the model: other models' end-to-end
figures are predictions.

Every time this module reports is `modeled`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal

from npu_deploy.models import CATALOG
from npu_deploy.models.config import ModelArgs

from ..definition.family import InElf, KernelSpec, Shape, Work
from ..definition.hardware import DDR_ROOF, XDNA2, Hardware
from ..definition.registry import HOST_KERNELS, family
from ..definition.specs import BF16, Decode, Mode, Prefill, model_kernels

# what a plan is made of, not the planner (kernels.plans.plan imports the selection, which
# ranks configurations by launch_seconds)
from ..plans.steps import Dispatch, DispatchPlan, HostStep, Launch
from .calibration_set import CALIBRATION

Source = Literal["modeled", "measured-npu", "measured-cpu"]


@dataclass(frozen=True)
class PerfParams:
    """Every parameter of the model, with the values `calibrate()` derives (see there)."""

    # --- a launch on its own, fitted on upstream's measured launches (calibrate, step 1) ---
    # GEMM (kernels/families/gemm.py): the launch floor; the DDR bandwidth its A and B
    # panels and C stream at, each DMA run paying a burst overhead (bytes at that
    # bandwidth); a tile's matmul rate and its sync per L2 K step; direct codegen's compute
    # slowdown; fused-cast's separate cast launch (floor, bytes/s).
    gemm_floor_s: float = 9.076357e-05
    ddr_bw: float = 4.880319e+10
    dma_burst_bytes: float = 195.1392
    tile_flops: float = 3.263131e+11
    k_step_s: float = 9.631073e-07
    direct_slowdown: float = 1.825491
    cast_floor_s: float = 3.490755e-04
    cast_bw: float = 8.245038e+10
    # GEMV (kernels/families/gemv.py): the floor, a column's weight bandwidth, a call's cost.
    gemv_floor_s: float = 8.078173e-05
    gemv_column_bw: float = 4.149608e+09
    gemv_call_s: float = 2.737317e-07
    # Streaming kernels (kernels/families/streaming.py): the floor, the DDR ceiling, a DMA
    # block's cost, and each kernel's rate per tile (bytes in and out per second).
    stream_floor_s: float = 8.620813e-05
    stream_ddr_bw: float = 7.228525e+10
    stream_block_s: float = 1.826969e-08
    stream_tile_bw: tuple[tuple[str, float], ...] = (
        ("add", 1.002458e+10), ("gelu", 1.798522e+09), ("rmsnorm", 2.819383e+09),
        ("rope", 9.035656e+09), ("silu_mul", 3.088077e+09))
    # FlashAttention (kernels/families/flash_attention.py): the launch's fixed cost, a cost
    # per launch iteration (q block x head group), a tile's rate.
    fa_floor_s: float = 0.0006158442
    fa_step_s: float = 3.531164e-05
    fa_tile_flops: float = 1.136454e+11
    # --- in the Llama-3.2-1B deployment (calibrate, steps 2-6) ----------------------------
    launch_overhead_s: float = 8.981311e-05    # a launch in a merged ELF, for its floor
    dispatch_overhead_s: float = 5e-05
    matmul_derate: float = 1.12396             # GEMM work: deployed / standalone
    attention_derate: float = 1.536375         # FlashAttention work likewise
    stream_derate: float = 0.7847111          # GEMV and streaming work likewise
    host_step_s: float = 7.488317e-05           # Python scheduling per step ...
    host_step_per_row_s: float = 8.744084e-07   # ... and per token it handles
    static_write_bw: float = 4.865919e+10       # writing static weights once
    host_sync_bw: float = 1.035593e+10           # inputs written, outputs read, each call
    cpu_bw: float = 2e+10                      # host ops' copies (assumed)
    cpu_attention_s: float = 1.442482e-05      # a decode attention step's fixed cost

    def tile_bw(self, key: str) -> float:
        """A streaming kernel's fitted rate per tile (a QK norm reads RMSNorm's)."""
        return dict(self.stream_tile_bw)[key]

    def coefficient(self, name: str) -> float:
        """A fitted coefficient by name: a field, or `stream_tile_bw.<key>`."""
        head, _, key = name.partition(".")
        return self.tile_bw(key) if key else float(getattr(self, head))

    def with_coefficients(self, values: dict[str, float]) -> PerfParams:
        """These parameters with the named coefficients replaced."""
        plain = {k: v for k, v in values.items() if "." not in k}
        rates = dict(self.stream_tile_bw)
        for k, v in values.items():
            if "." in k:
                rates[k.partition(".")[2]] = v
        return replace(self, **plain, stream_tile_bw=tuple(sorted(rates.items())))


# --- the model ----------------------------------------------------------------------------

class Rates:
    """Achieved rates of a kernel that did `flops` and moved `bytes` in `seconds`."""

    flops: float
    bytes: int
    seconds: float

    @property
    def achieved_flops(self) -> float:
        return self.flops / self.seconds if self.seconds else 0.0

    @property
    def achieved_bw(self) -> float:
        return self.bytes / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class LaunchProfile(Rates):
    label: str
    kernel: str
    seconds: float
    flops: float
    bytes: int
    bound: str                      # "compute" or "memory"

    def roofline_fraction(self, hw: Hardware) -> float:
        """Achieved FLOP/s over the roofline at this kernel's arithmetic intensity."""
        if not self.seconds:
            return 0.0
        roof = min(hw.peak_flops, DDR_ROOF * self.flops / max(self.bytes, 1))
        return self.achieved_flops / roof if roof else 0.0


@dataclass(frozen=True)
class StepProfile:
    name: str
    where: str                      # "npu" or "cpu"
    seconds: float
    launches: tuple[LaunchProfile, ...] = ()
    overhead_s: float = 0.0         # the dispatch's fixed overhead
    python_s: float = 0.0           # Python scheduling of the step on the host
    host_transfer_s: float = 0.0
    host_bytes: int = 0

    @property
    def device_s(self) -> float:
        """The step without its Python scheduling: what a dispatch timer around the
        submission sees (the measured dispatch figures)."""
        return self.seconds - self.python_s


@dataclass(frozen=True)
class Profile:
    """A plan's time, step by step: modeled here (`source` "modeled"), or measured on the
    NPU by kernels.npu_runtime.npu_backend, where `runs` holds each measured run's total and the
    steps are medians over them."""

    plan: str
    mode: Mode
    steps: tuple[StepProfile, ...]
    one_time_s: float               # static weights written once (in TTFT)
    flops: float
    weight_bytes: int
    source: Source = "modeled"
    calibration: str = "Llama-3.2-1B figures of docs/hardware-facts.md#reference-deployment"
    params: PerfParams = field(default_factory=PerfParams)
    runs: tuple[float, ...] = ()    # measured: each run's total_s; a model has none

    @property
    def fastest_s(self) -> float:
        return min(self.runs, default=self.total_s)

    @property
    def slowest_s(self) -> float:
        return max(self.runs, default=self.total_s)

    def faster_than(self, other: Profile) -> bool:
        """Faster beyond the run-to-run spread: every measured run of this plan beat every
        run of `other` (a model has one exact figure each, compared as is)."""
        return self.slowest_s < other.fastest_s

    @property
    def steps_s(self) -> float:
        return sum(s.seconds for s in self.steps)

    @property
    def total_s(self) -> float:
        """TTFT for a prefill (with the one-time weight writes), seconds per token for a
        decode step."""
        return self.steps_s + (self.one_time_s if isinstance(self.mode, Prefill) else 0.0)

    @property
    def tokens_per_s(self) -> float:
        return 1.0 / self.total_s if isinstance(self.mode, Decode) else 0.0

    @property
    def eta(self) -> float:
        """The paper's efficiency ratio: sustained FLOP/s (prefill) or bytes/s (decode),
        normalized to the measured Llama-3.2-1B reference deployment's."""
        ref = reference_rates()
        if isinstance(self.mode, Prefill):
            return (self.flops / self.total_s) / ref[0]
        return (self.weight_bytes / self.total_s) / ref[1]

    def by_name(self, name: str) -> StepProfile:
        for s in self.steps:
            if s.name == name:
                return s
        raise KeyError(name)


def reference_rates() -> tuple[float, float]:
    """(FLOP/s, bytes/s) of the measured Llama-3.2-1B deployment: prefill FLOPs over the
    measured TTFT, decode weight bytes over the measured time per token."""
    args = CATALOG["llama-3.2-1b"].args
    c = CALIBRATION
    return (model_flops(args, Prefill(c.seq)) / c.ttft_s,
            model_weight_bytes(args) / c.decode_s)


def model_flops(args: ModelArgs, mode: Mode) -> float:
    """The FLOPs of one prefill (last-token LM head) or decode step of a model."""
    total = 0.0
    for use in model_kernels(args, mode):
        if use.role == "lm_head":
            total += 2.0 * args.hidden * args.vocab          # one row is what is needed
            continue
        n = args.n_layers if use.per_layer else 1
        total += n * use.spec.flops(use.shape)
    return total


def model_weight_bytes(args: ModelArgs) -> int:
    """bf16 bytes of the weights a decode step reads (every layer and the LM head)."""
    per_layer = (args.hidden * (args.q_dim + 2 * args.kv_dim) + args.q_dim * args.hidden
                 + 3 * args.hidden * args.ffn)
    return BF16 * (args.n_layers * per_layer + args.vocab * args.hidden)


DEFAULT_PARAMS = PerfParams()


def launch_seconds(spec: KernelSpec, shape: Shape, config: dict[str, Any],
                   params: PerfParams | None = None) -> float:
    """The modeled time of one launch of `spec` at `shape` with `config` (the spec's
    defaults fill what it leaves out) on its own: its family's launch floor and its work,
    what upstream's harness measures. Selection ranks configurations by it."""
    p = params or DEFAULT_PARAMS
    cost = family(spec.name).cost
    if cost is None:
        raise KeyError(f"kernel {spec.name!r} has no cost on the NPU")
    return cost.floor(p) + cost.work(spec, shape, {**spec.tunables, **config}, p).seconds


def _work(ln: Launch, p: PerfParams) -> Work:
    cost = family(ln.kernel).cost
    if cost is None:
        raise KeyError(f"kernel {ln.kernel!r} has no cost on the NPU")
    return cost.work(ln.spec, ln.shape_dict, {**ln.spec.tunables, **ln.config_dict}, p)


def launch_work(ln: Launch, p: PerfParams) -> tuple[float, float, int, str]:
    """(seconds of work after the launch floor, before the in-deployment derate, FLOPs,
    bytes, bound) of a launch. The work and bytes are the program's as built
    (`Launch.built`: a decode attention built for a longer context streams all of it), the
    FLOPs the step's own."""
    built = ln.built()
    work = _work(built, p)
    return work.seconds, ln.spec.flops(ln.shape_dict), \
        ln.spec.bytes_moved(built.shape_dict), work.bound


def in_elf(ln: Launch) -> InElf:
    """Which in-deployment derate a launch's work takes (its family says)."""
    cost = family(ln.kernel).cost
    return "matmul" if cost is None else cost.in_elf


def derate(ln: Launch, p: PerfParams) -> float:
    """The in-deployment derate of a launch's work."""
    return float(getattr(p, f"{in_elf(ln)}_derate"))


def _rows(mode: Mode) -> int:
    return mode.seq if isinstance(mode, Prefill) else 1


def _operand_bytes(ln: Launch) -> dict[str, int]:
    """Each operand's device buffer: as the program is built (a cache sized for the
    context, written whole with its zeros)."""
    return {op.name: op.nbytes for op in ln.spec.operands(ln.built().shape_dict)}


def estimate(plan: DispatchPlan, hw: Hardware = XDNA2, params: PerfParams | None = None
             ) -> Profile:
    """The modeled profile of `plan` on `hw`."""
    p = params or PerfParams()
    py = p.host_step_s + p.host_step_per_row_s * _rows(plan.mode)
    steps: list[StepProfile] = []
    static: dict[str, int] = {}
    for step in plan.steps:
        if isinstance(step, Dispatch):
            steps.append(dispatch_profile(step, p, py, static))
        else:
            steps.append(_host_step(plan, step, p, py))
    flops = model_flops(plan.args, plan.mode)
    return Profile(plan.summary, plan.mode, tuple(steps),
                   sum(static.values()) / p.static_write_bw, flops,
                   model_weight_bytes(plan.args), params=p)


def dispatch_profile(d: Dispatch, p: PerfParams, py: float,
                     static: dict[str, int]) -> StepProfile:
    """The modeled profile of one dispatch, `py` its Python scheduling; the static operands'
    sizes are added to `static` (written once, in the prefill's one-time cost)."""
    launches = []
    synced: dict[str, int] = {}
    for ln in d.launches:
        work, flops, nbytes, bound = launch_work(ln, p)
        launches.append(LaunchProfile(ln.label, ln.kernel,
                                      p.launch_overhead_s + derate(ln, p) * work, flops,
                                      nbytes, bound))
        sizes = _operand_bytes(ln)
        for b in ln.bindings:
            size = sizes[b.operand]
            key = f"{b.tensor}[{b.rows}]"
            if b.kind == "static":
                static[key] = size
            elif b.kind in ("input", "output"):
                synced[key] = size
        for dim in ln.runtime_values():            # a run-time dimension's i32, each run
            synced[f"runtime:{ln.label}:{dim}"] = 4
    host_bytes = sum(synced.values())
    transfer = host_bytes / p.host_sync_bw
    total = p.dispatch_overhead_s + py + transfer + sum(lp.seconds for lp in launches)
    return StepProfile(d.name, "npu", total, tuple(launches), p.dispatch_overhead_s, py,
                       transfer, host_bytes)


def device_s(d: Dispatch, params: PerfParams | None = None) -> float:
    """The modeled time of one dispatch on the device: its fixed overhead and its launches,
    without host transfers or Python scheduling (what a simulated NPU takes to run it)."""
    step = dispatch_profile(d, params or PerfParams(), 0.0, {})
    return step.seconds - step.host_transfer_s


def _host_step(plan: DispatchPlan, h: HostStep, p: PerfParams, py: float) -> StepProfile:
    s = h.shape_dict
    a = plan.args
    kernel = HOST_KERNELS.get(h.op)
    if kernel is not None and kernel.host is not None:      # a kernel family on the host
        t = kernel.host.seconds(s, p)
    elif h.op == "transpose":
        t = 2 * BF16 * s["rows"] * s["heads"] * s["head_dim"] / p.cpu_bw
    elif h.op == "kv_store":
        t = 2 * 2 * BF16 * s["kv_heads"] * s["Lk"] * s["head_dim"] / p.cpu_bw
    elif h.op == "kv_append":
        t = 2 * 2 * BF16 * s["kv_heads"] * s["head_dim"] / p.cpu_bw
    else:                                   # final norm of one row
        t = 2 * BF16 * a.hidden / p.cpu_bw
    return StepProfile(h.label, "cpu", py + t, (), 0.0, py, 0.0, 0)
