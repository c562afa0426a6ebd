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
iteration). Step 1 of `calibrate()` fits them on every launch upstream measured on its own
(the kernel registry's rows and the tile sweeps of its notes, `kernels.performance.fitting`); steps
2-6 fit the in-deployment terms (the price of a launch inside a merged ELF, the dispatch
overhead, the derates of matmul and streaming work, the host rates) to the Llama-3.2-1B
deployment alone, priced at the configurations it ran. Those figures are data, with their
provenance: kernels/data/calibration.json. A test checks the defaults are `calibrate()`'s
output. Nothing else tunes the model: other models' end-to-end figures are predictions.

Every time this module reports is `modeled`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from npu_deploy.models.config import ModelArgs

from ..definition.family import InElf, KernelSpec, Shape, TimedLaunch, Work, timed
from ..definition.hardware import DDR_ROOF, GB, XDNA2, Hardware
from ..definition.registry import FAMILIES, HOST_KERNELS, SPECS, family
from ..definition.specs import BF16, Decode, Mode, Prefill
from ..measured.measurements import TO_BASE, best_rate, load, scaled

if TYPE_CHECKING:       # plan imports selection, which may rank by launch_seconds
    from ..plans.plan import Dispatch, DispatchPlan, HostStep, Launch

Source = Literal["modeled", "measured-npu", "measured-cpu"]
MS = 1e-3


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


# --- the figures the model is calibrated on (kernels/data/calibration.json) ------------------

@dataclass(frozen=True)
class Calibration:
    """NPU_FACTS.md's measured figures (Llama-3.2-1B, NPU2, June 2026), in base units."""

    gemm_bf16: tuple[tuple[int, int, int, float], ...]          # M, K, N, FLOP/s
    gemm_fp32: tuple[tuple[int, int, int, float], ...]
    gemm_best: float
    gemv: tuple[tuple[int, int, float], ...]                     # M, K, FLOP/s
    rates: tuple[tuple[str, float], ...]         # kernel, best bytes/s or FLOP/s measured
    # The deployment: per-layer dispatch times (s) by the roles they hold.
    prefill_dispatches: tuple[tuple[str, float], ...]
    decode_dispatches: tuple[tuple[str, float], ...]
    ttft_s: float
    decode_s: float
    python_prefill_s: float        # "~125 ms of Python scheduling"
    other_cpu_decode_s: float      # "~5 ms other CPU work"
    static_write_share: float      # "weights written once per layer (~4%)"
    cpu_attention_s: float         # per layer
    iron_prefill_s: float
    iron_decode_s: float
    seq: int
    # Inferred, not given: the decode figures are taken at the end of the 2048-token
    # prefill, and the host's copy rate is an assumption for a laptop CPU.
    decode_pos: int
    cpu_bw: float
    dispatch_overhead_range: tuple[float, float]   # "~50-200 us"
    # Launches upstream measured beyond its registry rows (step 1 fits them with the rows).
    sweeps: tuple[TimedLaunch, ...] = ()
    # The configurations the measured deployment ran: mode -> kernel -> configuration, and
    # (kernel, shape) -> configuration, which wins.
    deployed_by_kernel: tuple[tuple[str, str, tuple[tuple[str, Any], ...]], ...] = ()
    deployed_by_shape: tuple[tuple[str, tuple[tuple[str, int], ...],
                                   tuple[tuple[str, Any], ...]], ...] = ()

    def deployed_config(self, kernel: str, shape: Shape, mode: str) -> dict[str, Any]:
        """What the measured deployment ran `kernel` at `shape` with in `mode` ("prefill" or
        "decode"): its own row, else the kernel's, else nothing to change."""
        key = tuple(sorted(shape.items()))
        for k, s, config in self.deployed_by_shape:
            if (k, s) == (kernel, key):
                return dict(config)
        for m, k, config in self.deployed_by_kernel:
            if (m, k) == (mode, kernel):
                return dict(config)
        return {}

    @classmethod
    def from_data(cls, data: dict) -> Calibration:
        """The figures of calibration.json. `rates` holds each kernel's best measured
        throughput: its row of the measured kernel table (a range gives its middle), or, for
        a kernel the table lacks, the best figure of its page's index."""
        rates = {}
        for row in data["kernels"]["rows"]:
            values = row["value"] if isinstance(row["value"], list) else [row["value"]]
            rates[row["kernel"]] = sum(scaled(v, TO_BASE[row["unit"]]) for v in values) \
                / len(values)
        for f in FAMILIES.values():
            if f.source is not None and f.data is not None and f.data not in rates:
                rates[f.data] = best_rate(f.data)
        gemm = data["gemm_projections"]["rows"]
        giga = TO_BASE["GFLOP/s"]
        dep, assumed = data["deployment"], data["assumed"]

        def dispatches(name: str) -> tuple[tuple[str, float], ...]:
            return tuple((r["holds"], r["ms"] * MS) for r in dep[name]["rows"])

        low, high = dep["dispatch_overhead_us"]
        configs = data["deployment_configs"]
        return cls(
            gemm_bf16=tuple((r["M"], r["K"], r["N"], scaled(r["bf16_out"], giga)) for r in gemm),
            gemm_fp32=tuple((r["M"], r["K"], r["N"], scaled(r["fp32_out"], giga)) for r in gemm),
            # the best GEMM measured (the cap of the fitted GEMM rate)
            gemm_best=max(scaled(r[out], giga) for r in gemm for out in ("bf16_out", "fp32_out")),
            gemv=tuple((r["M"], r["K"], scaled(r["gflops"], giga))
                       for r in data["gemv_projections"]["rows"]),
            rates=tuple(sorted(rates.items())),
            prefill_dispatches=dispatches("prefill_dispatches"),
            decode_dispatches=dispatches("decode_dispatches"),
            ttft_s=dep["ttft_s"], decode_s=dep["decode_ms"] * MS,
            python_prefill_s=dep["python_prefill_ms"] * MS,
            other_cpu_decode_s=dep["other_cpu_decode_ms"] * MS,
            static_write_share=dep["static_write_share"],
            cpu_attention_s=dep["cpu_attention_ms"] * MS,
            iron_prefill_s=dep["iron_prefill_s"], iron_decode_s=dep["iron_decode_ms"] * MS,
            seq=dep["seq"], decode_pos=assumed["decode_pos"],
            cpu_bw=scaled(assumed["cpu_bw_GBps"], TO_BASE["GB/s"]),
            dispatch_overhead_range=(scaled(low, TO_BASE["us"]), scaled(high, TO_BASE["us"])),
            sweeps=tuple(_swept(r) for r in data["kernel_sweeps"]["rows"]),
            deployed_by_kernel=tuple((mode, k, _frozen(v))
                                     for mode, kernels in configs["by_kernel"].items()
                                     for k, v in kernels.items()),
            deployed_by_shape=tuple((r["kernel"], _frozen(r["shape"]), _frozen(r["config"]))
                                    for r in configs["by_shape"]))


def _frozen(d: dict[str, Any]) -> tuple[tuple[str, Any], ...]:
    return tuple(sorted(d.items()))


def _swept(r: dict[str, Any]) -> TimedLaunch:
    """A sweep row of calibration.json: its figure in seconds (a throughput over the
    kernel's FLOPs or over the bytes upstream counts)."""
    unit, value, shape = r["unit"], r["value"], r["shape"]
    if unit == "GFLOP/s":
        seconds = SPECS[r["kernel"]].flops(shape) / scaled(value, TO_BASE[unit])
    elif unit == "GB/s":
        seconds = r["bytes"] / scaled(value, TO_BASE[unit])
    else:
        seconds = scaled(value, TO_BASE[unit])
    return timed(r["kernel"], shape, r["config"], seconds, f"{r['source']}: {r['where']}")


CALIBRATION: Calibration = Calibration.from_data(load("calibration"))


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
    calibration: str = "Llama-3.2-1B figures of NPU_FACTS.md"
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
    from npu_deploy.models import CATALOG

    args = CATALOG["llama-3.2-1b"].args
    c = CALIBRATION
    return (model_flops(args, Prefill(c.seq)) / c.ttft_s,
            model_weight_bytes(args) / c.decode_s)


def model_flops(args: ModelArgs, mode: Mode) -> float:
    """The FLOPs of one prefill (last-token LM head) or decode step of a model."""
    from ..definition.specs import model_kernels

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
    bytes, bound) of a launch."""
    work = _work(ln, p)
    return work.seconds, ln.spec.flops(ln.shape_dict), ln.spec.bytes_moved(ln.shape_dict), \
        work.bound


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
    return {op.name: op.nbytes for op in ln.spec.operands(ln.shape_dict)}


def estimate(plan: DispatchPlan, hw: Hardware = XDNA2, params: PerfParams | None = None
             ) -> Profile:
    """The modeled profile of `plan` on `hw`."""
    from ..plans.plan import Dispatch

    p = params or PerfParams()
    py = p.host_step_s + p.host_step_per_row_s * _rows(plan.mode)
    steps: list[StepProfile] = []
    static: dict[str, int] = {}
    for step in plan.steps:
        if isinstance(step, Dispatch):
            steps.append(_dispatch(step, p, py, static))
        else:
            steps.append(_host_step(plan, step, p, py))
    flops = model_flops(plan.args, plan.mode)
    return Profile(plan.summary, plan.mode, tuple(steps),
                   sum(static.values()) / p.static_write_bw, flops,
                   model_weight_bytes(plan.args), params=p)


def _dispatch(d: Dispatch, p: PerfParams, py: float,
              static: dict[str, int]) -> StepProfile:
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
    host_bytes = sum(synced.values())
    transfer = host_bytes / p.host_sync_bw
    total = p.dispatch_overhead_s + py + transfer + sum(lp.seconds for lp in launches)
    return StepProfile(d.name, "npu", total, tuple(launches), p.dispatch_overhead_s, py,
                       transfer, host_bytes)


def device_s(d: Dispatch, params: PerfParams | None = None) -> float:
    """The modeled time of one dispatch on the device: its fixed overhead and its launches,
    without host transfers or Python scheduling (what a simulated NPU takes to run it)."""
    step = _dispatch(d, params or PerfParams(), 0.0, {})
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


# --- the reference plans and the calibration --------------------------------------------

def reference_prefill(model: str, args: ModelArgs, seq: int, hw: Hardware = XDNA2
                      ) -> DispatchPlan:
    """The measured deployment's prefill structure: layouts aligned, the last-token LM head,
    buffers reused, launches merged (three dispatches per layer, one for the LM head)."""
    from ..plans.plan import baseline_plan
    from ..plans.transforms import (
        align_layouts,
        last_token_lm_head,
        merge_dispatches,
        reuse_buffers,
    )

    plan = baseline_plan(model, args, Prefill(seq), hw)
    plan = reuse_buffers(last_token_lm_head(align_layouts(plan), hw))
    return merge_dispatches(plan, hw)


def reference_decode(model: str, args: ModelArgs, pos: int, hw: Hardware = XDNA2
                     ) -> DispatchPlan:
    """The measured deployment's decode structure: buffers reused, attention on the CPU,
    each layer's launches merged (two dispatches per layer)."""
    from ..definition.registry import family
    from ..plans.plan import baseline_plan
    from ..plans.transforms import decode_attention_on_cpu, merge_dispatches, reuse_buffers

    plan = reuse_buffers(baseline_plan(model, args, Decode(pos), hw))
    # the baseline already has attention on the CPU where its program does not fit the NPU
    if any(family(ln.kernel).host_alternative for ln in plan.launches()):
        plan = decode_attention_on_cpu(plan)
    return merge_dispatches(plan, hw)


def deployed(plan: DispatchPlan, c: Calibration | None = None) -> DispatchPlan:
    """`plan` with every launch at the configuration the measured deployment ran it with
    (calibration.json's deployment_configs): what the deployment's figures are priced at."""
    from ..plans.plan import Dispatch

    c = c or CALIBRATION
    mode = "prefill" if isinstance(plan.mode, Prefill) else "decode"
    steps = []
    for step in plan.steps:
        if isinstance(step, Dispatch):
            step = Dispatch(step.name, tuple(
                ln.with_config(**c.deployed_config(ln.kernel, ln.shape_dict, mode))
                for ln in step.launches))
        steps.append(step)
    return replace(plan, steps=tuple(steps))


def _first_with_role(plan: DispatchPlan, role: str) -> Dispatch:
    for d in plan.dispatches:
        if any(ln.role == role for ln in d.launches) and d.launches[0].layer in (0, None):
            return d
    raise KeyError(f"no dispatch holds {role!r}")


def calibrate(c: Calibration = CALIBRATION) -> PerfParams:
    """Derive every parameter from the figures in `c` and upstream's measured launches (see
    the module docstring)."""
    from npu_deploy.models import CATALOG

    from ..plans.plan import baseline_plan
    from .fitting import fit_kernels, measured_launches

    args = CATALOG["llama-3.2-1b"].args
    # 1. Each family's cost coefficients: least squares of ln(modeled / measured) over every
    #    launch upstream measured on its own (kernels.performance.fitting).
    p = fit_kernels(PerfParams(cpu_bw=c.cpu_bw), measured_launches(c))

    # The deployment's plans, priced at the configurations it ran.
    pre = deployed(reference_prefill("llama-3.2-1b", args, c.seq), c)
    dec = deployed(reference_decode("llama-3.2-1b", args, c.decode_pos), c)
    base_pre = deployed(baseline_plan("llama-3.2-1b", args, Prefill(c.seq)), c)
    base_dec = deployed(baseline_plan("llama-3.2-1b", args, Decode(c.decode_pos)), c)

    # 3. Python scheduling: a + b * rows per step, from the prefill and decode figures.
    n_pre, n_dec = len(pre.steps), len(dec.steps)
    host = np.linalg.solve(np.array([[n_pre, n_pre * c.seq], [n_dec, n_dec * 1.0]]),
                           np.array([c.python_prefill_s, c.other_cpu_decode_s]))
    p = replace(p, host_step_s=float(host[0]), host_step_per_row_s=float(host[1]))

    # 4. Static weights: their one-time write is ~4% of the TTFT.
    static = estimate(pre, params=replace(p, static_write_bw=1.0)).one_time_s   # = bytes
    p = replace(p, static_write_bw=static / (c.static_write_share * c.ttft_s))

    # 5. CPU decode attention: 0.3 ms per layer at the reference position, of which the
    #    Python step and the cache copy are modeled separately.
    kv = 2 * BF16 * args.n_kv_heads * (c.decode_pos + 1) * args.head_dim
    py = p.host_step_s + p.host_step_per_row_s
    p = replace(p, cpu_attention_s=max(0.0, c.cpu_attention_s - py - kv / p.cpu_bw))

    # 2 and 6 depend on each other (a measured dispatch time holds its host transfers, the
    # IRON baseline's time its launches): alternated from 10 GB/s to their fixed point (to
    # 1e-9, as far as the golden-section search resolves the bandwidth).
    p = replace(p, host_sync_bw=10 * GB)
    for _ in range(100):
        q = _host_syncs(_in_elf(p, pre, dec, c), base_pre, base_dec, c)
        if all(math.isclose(getattr(q, f.name), getattr(p, f.name), rel_tol=1e-9)
               for f in fields(p) if isinstance(getattr(p, f.name), float)):
            return q
        p = q
    return p


def _in_elf(p: PerfParams, pre: DispatchPlan, dec: DispatchPlan, c: Calibration
            ) -> PerfParams:
    """2. Inside a merged ELF: the price of a launch (in place of its standalone floor), the
    dispatch overhead and the derates of the work of matmul, attention and streaming
    launches. What a dispatch measured beyond the sum of its launches' standalone times is
    what merging costs; the model of it is linear in these unknowns: weighted least squares
    (relative errors) on the deployment's dispatch times less their host transfers, the
    dispatch overhead kept in its measured range."""
    classes: tuple[InElf, ...] = ("matmul", "attention", "stream")
    rows, rhs = [], []
    for plan, figures in ((pre, c.prefill_dispatches), (dec, c.decode_dispatches)):
        for role, t in figures:
            d = _first_with_role(plan, role)
            work = dict.fromkeys(classes, 0.0)
            for ln in d.launches:
                work[in_elf(ln)] += launch_work(ln, p)[0]
            rows.append([len(d.launches), 1.0, *work.values()])
            rhs.append(t - _dispatch(d, p, 0.0, {}).host_transfer_s)
    a, b = np.array(rows), np.array(rhs)
    w = 1.0 / b
    sol = np.linalg.lstsq(a * w[:, None], b * w, rcond=None)[0]
    lo, hi = c.dispatch_overhead_range
    if not lo <= sol[1] <= hi:
        fixed = min(max(sol[1], lo), hi)
        keep = [0, 2, 3, 4]
        sub = np.linalg.lstsq((a[:, keep] * w[:, None]), (b - a[:, 1] * fixed) * w,
                              rcond=None)[0]
        sol = np.array([sub[0], fixed, *sub[1:]])
    return replace(p, launch_overhead_s=float(sol[0]), dispatch_overhead_s=float(sol[1]),
                   matmul_derate=float(sol[2]), attention_derate=float(sol[3]),
                   stream_derate=float(sol[4]))


def _host_syncs(p: PerfParams, base_pre: DispatchPlan, base_dec: DispatchPlan,
                c: Calibration) -> PerfParams:
    """6. Host syncs of the IRON baseline: one bandwidth, least squares in log space over
    its prefill and decode times (a golden-section search on log(bandwidth); a plan's
    time is its time without transfers plus its synced bytes over the bandwidth)."""
    parts = []
    for plan, measured in ((base_pre, c.iron_prefill_s), (base_dec, c.iron_decode_s)):
        prof = estimate(plan, params=p)
        moved = sum(s.host_bytes for s in prof.steps)
        parts.append((prof.total_s - sum(s.host_transfer_s for s in prof.steps), moved,
                      measured))

    def loss(log_bw: float) -> float:
        bw = math.exp(log_bw)
        return sum(math.log((rest + moved / bw) / measured) ** 2
                   for rest, moved, measured in parts)

    lo_bw, hi_bw = math.log(0.5 * GB), math.log(100 * GB)
    g = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        m1, m2 = hi_bw - g * (hi_bw - lo_bw), lo_bw + g * (hi_bw - lo_bw)
        if loss(m1) < loss(m2):
            hi_bw = m2
        else:
            lo_bw = m1
    return replace(p, host_sync_bw=float(math.exp((lo_bw + hi_bw) / 2)))


def params_text(p: PerfParams) -> str:
    """The parameters, one per line (for `python -m npu_deploy.kernels.performance.model`)."""
    return "\n".join(f"{f.name} = {getattr(p, f.name)!r}" for f in fields(p))


def calibration_report(p: PerfParams | None = None) -> list[tuple[str, float, float]]:
    """(figure, measured on NPU2, modeled) for every Llama-3.2-1B figure of NPU_FACTS.md, the
    plans priced at the configurations the deployment ran."""
    from npu_deploy.models import CATALOG

    from ..plans.plan import baseline_plan

    c, args = CALIBRATION, CATALOG["llama-3.2-1b"].args
    pre = deployed(reference_prefill("llama-3.2-1b", args, c.seq))
    dec = deployed(reference_decode("llama-3.2-1b", args, c.decode_pos))
    ppro, dpro = estimate(pre, params=p), estimate(dec, params=p)
    rows = [("TTFT (3-dispatch prefill plan)", c.ttft_s, ppro.total_s),
            ("decode per token (2-dispatch plan)", c.decode_s, dpro.total_s)]
    for plan, prof, figures, what in ((pre, ppro, c.prefill_dispatches, "prefill"),
                                      (dec, dpro, c.decode_dispatches, "decode")):
        for role, measured in figures:
            step = prof.by_name(_first_with_role(plan, role).name)
            rows.append((f"{what} dispatch holding {role}", measured, step.device_s))
    for mode, measured, what in ((Prefill(c.seq), c.iron_prefill_s, "prefill"),
                                 (Decode(c.decode_pos), c.iron_decode_s, "decode")):
        base = deployed(baseline_plan("llama-3.2-1b", args, mode))
        rows.append((f"IRON baseline {what}", measured, estimate(base, params=p).total_s))
    return rows


def calibration_set_report(p: PerfParams | None = None) -> list[tuple[str, float, float]]:
    """(figure, measured on NPU2, modeled on its own) for NPU_FACTS.md's calibration set:
    the Llama-3.2-1B projections as GEMMs (bf16 out at the fastest method, fp32 out) and
    as GEMVs, each modeled at the configuration of the registry row it is."""
    from .fitting import measured_launches

    c = CALIBRATION
    rows = measured_launches(c, sweeps=False)
    figures = [(k, {"M": m, "K": kk, "N": n}, SPECS[k].flops({"M": m, "K": kk, "N": n}) / r)
               for k, points in (("gemm_bf16", c.gemm_bf16), ("gemm_fp32", c.gemm_fp32))
               for m, kk, n, r in points]
    figures += [("gemv", {"M": m, "K": kk}, 2.0 * m * kk / r) for m, kk, r in c.gemv]
    out = []
    for kernel, shape, measured in figures:
        row = min((t for t in rows if (t.kernel, t.shape) == (kernel, _frozen(shape))),
                  key=lambda t: abs(t.seconds - measured))
        config = row.config_dict
        what = f" ({config['method']})" if "method" in config else ""
        out.append((f"{kernel} {'x'.join(map(str, shape.values()))}{what}", measured,
                    launch_seconds(SPECS[kernel], shape, config, p)))
    return out


if __name__ == "__main__":
    fitted = calibrate()
    print(params_text(fitted))
    for title, rows in (("Llama-3.2-1B: measured on NPU2 (NPU_FACTS.md) against modeled",
                         calibration_report(fitted)),
                        ("its calibration set, each launch on its own",
                         calibration_set_report(fitted))):
        print(f"\n{title}")
        for figure, measured, modeled in rows:
            print(f"  {figure:42s} {measured * 1e3:9.2f} ms  {modeled * 1e3:9.2f} ms  "
                  f"{modeled / measured - 1:+6.1%}")
