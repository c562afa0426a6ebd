#!/usr/bin/env python3
"""How close the emulated NPU numerics (kernels.emulation.numerics) come to the hardware's error
figures.

Everything here is computed on this machine's CPU by the emulator; no NPU is involved. The
hardware figures it is held against are docs/hardware-facts.md#gemm-numerics: GEMM mean_rel_L1
= mean|out - ref| / mean|ref| of 9.3e-3 to 9.9e-3 for every measured shape (the BFP16
datapath), GEMV 2.2e-6 at most. The measurement protocol is mlir-air's (see
kernels/emulation/numerics.py [S5, S6]): GEMM inputs randn/sqrt(K) as bf16, reference = the
FP32 matmul of the same bf16 inputs (cast to bf16 for a bf16 output); GEMV inputs randn*4,
reference = FP32 dot cast to bf16.

In one run it measures:

* the four Llama-3.2-1B projection GEMMs (seq 2048): emulated mean_rel_L1 with fp32 and with
  bf16 output, against the band [7e-3, 1.2e-2]; and, for contrast, the error of plain bf16
  rounding (exact FP32 accumulation, one cast to bf16), which must fall below the band;
* the Llama-3.2-1B decode GEMVs: mean_rel_L1 with bf16 and fp32 output, against <= 1e-6;
* emulation time of every GEMM above, and of the SmolLM2-135M prefill GEMMs (seq 2048),
  against < 1 s each.

A MISS against a target is a measurement, not an error: the exit code is 0 unless something
failed.

    .venv/bin/python -m benchmarks.gemm_fidelity [--rows 2048] [--tile-k 32] [--seed 0]
        [--repeats 1] [--json]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

import torch

from benchmarks.host import cpu_name, emit
from npu_deploy.kernels.emulation.numerics import (
    BFP16EBS8,
    DEFAULT_TILE_K,
    GEMM_MEAN_REL_L1_BAND,
    GEMV_MEAN_REL_L1_MAX,
    HARDWARE_GEMM_MEAN_REL_L1,
    fp32_reference,
    gemm_bfp16,
    gemm_operands,
    gemv_fp32acc,
    gemv_operands,
    to_bf16,
)
from npu_deploy.metrics.comparison import compare

SEQ = 2048
# (K, N, role): the calibration set (docs/hardware-facts.md#calibration-set), M = seq 2048.
LLAMA_32_1B_GEMMS = [(2048, 2048, "Q/O proj"), (2048, 512, "K/V proj"),
                     (2048, 8192, "gate/up proj"), (8192, 2048, "down proj")]
# (M, K, role): its decode GEMVs (docs/hardware-facts.md#calibration-set).
LLAMA_32_1B_GEMVS = [(2048, 2048, "Q proj"), (512, 2048, "K/V proj"),
                     (16384, 2048, "LM head partition")]
# (K, N, role): SmolLM2-135M, hidden 576, 9/3 heads of 64, ffn 1536.
SMOLLM2_135M_GEMMS = [(576, 576, "Q/O proj"), (576, 192, "K/V proj"),
                      (576, 1536, "gate/up proj"), (1536, 576, "down proj")]
SECONDS_TARGET = 1.0


def timed(fn: Callable[[], torch.Tensor], repeats: int) -> tuple[torch.Tensor, float]:
    """The result of fn and the median of `repeats` wall-clock timings, in seconds."""
    times, out = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    assert out is not None
    return out, statistics.median(times)


def mean_rel_l1(ref: torch.Tensor, cand: torch.Tensor) -> float:
    return compare(ref, cand).mean_rel_l1


def measure_gemm(m: int, k: int, n: int, role: str, args: argparse.Namespace) -> dict[str, Any]:
    a, b = gemm_operands(m, k, n, seed=args.seed)
    ref = fp32_reference(a, b)
    fp32_out, t_fp32 = timed(lambda: gemm_bfp16(a, b, tile_k=args.tile_k,
                                                out_dtype=torch.float32), args.repeats)
    bf16_out, t_bf16 = timed(lambda: gemm_bfp16(a, b, tile_k=args.tile_k), args.repeats)
    return {"shape": [m, k, n], "role": role,
            "mean_rel_l1_fp32_out": mean_rel_l1(ref, fp32_out),
            "mean_rel_l1_bf16_out": mean_rel_l1(to_bf16(ref), bf16_out),
            "mean_rel_l1_bf16_rounding_only": mean_rel_l1(ref, to_bf16(ref)),
            "seconds_fp32_out": t_fp32, "seconds_bf16_out": t_bf16}


def measure_gemv(m: int, k: int, role: str, args: argparse.Namespace) -> dict[str, Any]:
    w, x = gemv_operands(m, k, seed=args.seed)
    ref = fp32_reference(w, x)
    bf16_out, seconds = timed(lambda: gemv_fp32acc(w, x), args.repeats)
    return {"shape": [m, k], "role": role,
            "mean_rel_l1_bf16_out": mean_rel_l1(to_bf16(ref), bf16_out),
            "mean_rel_l1_fp32_out": mean_rel_l1(ref, gemv_fp32acc(w, x, out_dtype=torch.float32)),
            "seconds_bf16_out": seconds}


def time_gemm(m: int, k: int, n: int, role: str, args: argparse.Namespace) -> dict[str, Any]:
    a, b = gemm_operands(m, k, n, seed=args.seed)
    _, seconds = timed(lambda: gemm_bfp16(a, b, tile_k=args.tile_k), args.repeats)
    return {"shape": [m, k, n], "role": role, "seconds_bf16_out": seconds}


def target(name: str, measured: float, limit: float, passed: bool, unit: str) -> dict[str, Any]:
    return {"target": name, "measured": measured, "limit": limit, "unit": unit,
            "passed": passed}


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    lo, hi = GEMM_MEAN_REL_L1_BAND
    gemms = [measure_gemm(args.rows, k, n, role, args) for k, n, role in LLAMA_32_1B_GEMMS]
    gemvs = [measure_gemv(m, k, role, args) for m, k, role in LLAMA_32_1B_GEMVS]
    smollm = [time_gemm(args.rows, k, n, role, args) for k, n, role in SMOLLM2_135M_GEMMS]
    targets = []
    for g in gemms:
        shape = "x".join(map(str, g["shape"]))
        for key, label in (("mean_rel_l1_fp32_out", "fp32 out"),
                           ("mean_rel_l1_bf16_out", "bf16 out")):
            targets.append(target(f"GEMM {shape} {label}: mean_rel_L1 in [{lo:g}, {hi:g}]",
                                  g[key], hi, lo <= g[key] <= hi, "rel"))
        only = g["mean_rel_l1_bf16_rounding_only"]
        targets.append(target(f"GEMM {shape} bf16 rounding only: below the band (< {lo:g})",
                              only, lo, only < lo, "rel"))
    for v in gemvs:
        shape = "x".join(map(str, v["shape"]))
        worst = max(v["mean_rel_l1_bf16_out"], v["mean_rel_l1_fp32_out"])
        targets.append(target(f"GEMV {shape}: mean_rel_L1 <= {GEMV_MEAN_REL_L1_MAX:g}", worst,
                              GEMV_MEAN_REL_L1_MAX, worst <= GEMV_MEAN_REL_L1_MAX, "rel"))
    for s in smollm:
        shape = "x".join(map(str, s["shape"]))
        targets.append(target(f"SmolLM2-135M GEMM {shape} emulated in < {SECONDS_TARGET:g} s",
                              s["seconds_bf16_out"], SECONDS_TARGET,
                              s["seconds_bf16_out"] < SECONDS_TARGET, "s"))
    return {
        "source": "emulated-cpu",
        "machine": {"cpu": cpu_name(), "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
                    "torch": torch.__version__},
        "params": {"rows": args.rows, "tile_k": args.tile_k, "seed": args.seed,
                   "repeats": args.repeats, "statistic": "median of repeats",
                   "format": asdict(BFP16EBS8),
                   "gemm_inputs": "randn/sqrt(K) as bf16", "gemv_inputs": "randn*4 as bf16",
                   "reference": "fp32 matmul of the same bf16 inputs (cast to bf16 for bf16 out)"},
        "hardware_gemm_mean_rel_l1": list(HARDWARE_GEMM_MEAN_REL_L1),
        "gemm": gemms, "gemv": gemvs, "smollm2_135m_prefill": smollm, "targets": targets,
    }


# --- printing ---------------------------------------------------------------------------

def print_report(report: dict[str, Any]) -> None:
    m, p = report["machine"], report["params"]
    hw_lo, hw_hi = report["hardware_gemm_mean_rel_l1"]
    lo, hi = GEMM_MEAN_REL_L1_BAND
    print("npu-deploy emulated NPU numerics: fidelity and speed (computed on this machine's CPU "
          "by the emulator; no NPU involved)")
    print(f"  cpu:       {m['cpu']} ({m['cpus']} cpus, torch {m['torch']} with "
          f"{m['torch_threads']} threads)")
    f = p["format"]
    print(f"  datapath:  bf16 -> bfp16ebs8 (block {f['block']} along K, {f['mantissa_bits']}-bit "
          f"mantissas, {f['rounding']}, overflow {f['overflow']}), FP32 accumulation, "
          f"K tile {p['tile_k']}")
    print(f"  protocol:  GEMM inputs {p['gemm_inputs']}, GEMV inputs {p['gemv_inputs']}; "
          f"reference = {p['reference']}")
    print(f"  hardware:  GEMM mean_rel_L1 {hw_lo:.1e} to {hw_hi:.1e} "
          "(docs/hardware-facts.md#gemm-numerics); "
          f"target band [{lo:.0e}, {hi:.1e}]; timings: median of {p['repeats']}")
    print()
    print("  Llama-3.2-1B projection GEMMs (mean_rel_L1 vs the FP32 reference)")
    header = (f"    {'M x K x N':<16} {'role':<13} {'fp32 out':>9} {'bf16 out':>9} "
              f"{'bf16 only':>10} {'ratio':>6} {'s fp32':>7} {'s bf16':>7}")
    print(header)
    print("    " + "-" * (len(header) - 4))
    for g in report["gemm"]:
        ratio = g["mean_rel_l1_fp32_out"] / g["mean_rel_l1_bf16_rounding_only"]
        print(f"    {'x'.join(map(str, g['shape'])):<16} {g['role']:<13} "
              f"{g['mean_rel_l1_fp32_out']:>9.3e} {g['mean_rel_l1_bf16_out']:>9.3e} "
              f"{g['mean_rel_l1_bf16_rounding_only']:>10.3e} {ratio:>5.1f}x "
              f"{g['seconds_fp32_out']:>7.2f} {g['seconds_bf16_out']:>7.2f}")
    print("    (bf16 only = exact FP32 accumulation and one cast to bf16: what an emulator that "
          "only rounds to bf16 shows)")
    print()
    print("  Llama-3.2-1B decode GEMVs (FP32 vector accumulation, no BFP)")
    for v in report["gemv"]:
        print(f"    {'x'.join(map(str, v['shape'])):<16} {v['role']:<18} bf16 out "
              f"{v['mean_rel_l1_bf16_out']:.2e}   fp32 out {v['mean_rel_l1_fp32_out']:.2e}   "
              f"{v['seconds_bf16_out']:.3f} s")
    print()
    print("  SmolLM2-135M prefill GEMMs (bf16 out), emulation time")
    for s in report["smollm2_135m_prefill"]:
        print(f"    {'x'.join(map(str, s['shape'])):<16} {s['role']:<13} "
              f"{s['seconds_bf16_out']:.3f} s")
    print()
    print("  targets:")
    for t in report["targets"]:
        verdict = "PASS" if t["passed"] else "MISS"
        measured = f"{t['measured']:.3f} s" if t["unit"] == "s" else f"{t['measured']:.3e}"
        print(f"    {verdict}  {t['target']:<66} measured {measured}")


# --- command line -------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Emulated NPU GEMM/GEMV error (mean_rel_L1) at the Llama-3.2-1B shapes "
                    "against the hardware's figures, and emulation time; all on the CPU.")
    parser.add_argument("--rows", type=int, default=SEQ,
                        help=f"GEMM rows M (default {SEQ}, the full shapes; mean_rel_L1 depends "
                             "on K and N, not M, so fewer rows give the same figures faster)")
    parser.add_argument("--tile-k", type=int, default=DEFAULT_TILE_K,
                        help=f"K tile of the FP32 accumulation (default {DEFAULT_TILE_K}; a "
                             "multiple of 8)")
    parser.add_argument("--seed", type=int, default=0, help="input random seed (default 0)")
    parser.add_argument("--repeats", type=int, default=1,
                        help="timings per GEMM/GEMV; the median is reported (default 1)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    for name in ("rows", "tile_k", "repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer")
    if args.tile_k % BFP16EBS8.block:
        parser.error(f"--tile-k must be a multiple of {BFP16EBS8.block}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return emit(run_benchmark(args), args.json, print_report)


if __name__ == "__main__":
    sys.exit(main())
