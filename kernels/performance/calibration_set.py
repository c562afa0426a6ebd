"""The figures the performance model is calibrated on, as data: kernels/data/calibration.json
read into base units (`Calibration`, `CALIBRATION`). The model (kernels.performance.model)
reads the reference deployment's rates from it; the fit (kernels.performance.fitting) takes
its sweeps; kernels.performance.calibration derives every parameter from it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..definition.family import Shape, TimedLaunch, timed
from ..definition.registry import FAMILIES, SPECS
from ..measured.measurements import TO_BASE, best_rate, load, scaled

MS = 1e-3


@dataclass(frozen=True)
class Calibration:
    """The measured figures of docs/hardware-facts.md (Llama-3.2-1B, NPU2, June 2026), in base
    units."""

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
