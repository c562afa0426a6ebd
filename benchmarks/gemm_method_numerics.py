#!/usr/bin/env python3
"""The emulated GEMM error per method against every row of the kernel registry's GEMM pages.

Every emulated figure is computed on this machine's CPU by the emulator; no NPU is involved.
Each is held against the mean_rel_L1 that mlir-air measured on NPU2 for the same shape, method
and tile (kernels/data/gemm_bf16.json and gemm_fp32.json, ingested from Xilinx/mlir-air's
kernel registry; the report names the path and commit). The protocol is upstream's: A and B
randn/sqrt(K) as bf16, reference = the FP32 matmul of the same bf16 inputs (cast to bf16 for
a bf16 output), mean_rel_L1 = mean|out - ref| / mean|ref| (kernels/fidelity/numerics_fidelity.py).

Methods: gemm_bf16 `drain` and `fused-cast` accumulate in FP32 over all of K and cast once
(fused-cast's separate cast launch rounds toward -inf), `direct` rounds its bf16 C tile once
per L1 K tile; gemm_fp32 `external` and `direct` accumulate in FP32 and do not cast
(kernels/families/gemm.py, METHODS).

The emulation takes the fast path: BLAS sums the exactly representable block-format
products, once over all of K (once per L1 K tile for direct). For each direct bf16-out row it
also prints, for contrast, the error if C were rounded once per L2 tile instead, as the
registry page's prose says (`--no-contrast` skips it).

Every row is run; none is skipped. `--rows R` emulates the first R rows of M of each shape
(each row of C depends on its own row of A and on B: the full run's values for those rows,
so the figures move by sampling noise only) to make a run shorter.

    .venv/bin/python -m benchmarks.gemm_method_numerics [--rows R] [--seed 0] [--no-contrast]
        [--json]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

import torch

from benchmarks.host import cpu_name, emit
from npu_deploy.kernels.fidelity.numerics_fidelity import (
    BAND,
    GEMM_KERNELS,
    RowFidelity,
    compare_rows,
    emulated_mean_rel_l1,
    measured_rows,
    summarize,
)
from npu_deploy.kernels.measured.measurements import provenance

WORST = 8


def per_l2_contrast(r: RowFidelity, seed: int, rows: int | None) -> float | None:
    """A direct bf16-out row's error with C rounded once per L2 tile (the page's prose): the
    fast path rounds once per `tile_k_l1`, so that tile set to tile_k_l2 is that model."""
    if r.kernel != "gemm_bf16" or r.row["method"] != "direct":
        return None
    return emulated_mean_rel_l1(r.kernel, {**r.row, "tile_k_l1": r.row["tile_k_l2"]}, seed,
                                rows=rows)


def row_record(r: RowFidelity, contrast: float | None) -> dict[str, Any]:
    row = r.row
    return {"kernel": r.kernel, "shape": [row["M"], row["K"], row["N"]],
            "method": row["method"],
            "tile": [row["tile_m"], row["tile_k_l2"], row["tile_k_l1"], row["tile_n"]],
            "herd": [row["herd_m"], row["herd_n"]],
            "l1_k_tiles": row["K"] // row["tile_k_l1"], "l2_k_tiles": row["K"] // row["tile_k_l2"],
            "measured_npu": r.measured, "emulated_cpu": r.emulated, "ratio": r.ratio,
            "within": r.within, "per_l2_emulated_cpu": contrast,
            "per_l2_ratio": None if contrast is None else contrast / r.measured,
            "rows_emulated": r.rows, "seconds": r.seconds}


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    start = time.perf_counter()
    results, records = [], []
    total = len(measured_rows())
    for i, r in enumerate(compare_rows(args.seed, rows=args.rows), 1):
        contrast = None if args.no_contrast else per_l2_contrast(r, args.seed, args.rows)
        results.append(r)
        records.append(row_record(r, contrast))
        if not args.json:
            print(f"  [{i}/{total}] {r.kernel} {'x'.join(map(str, records[-1]['shape']))} "
                  f"{r.row['method']}: {r.seconds:.1f} s", file=sys.stderr, flush=True)
    summaries = summarize(results)
    worst = sorted(records, key=lambda rec: -abs(math.log(rec["ratio"])))[:WORST]
    return {
        "source": "emulated on the CPU; measured figures from NPU2",
        "measured_on_npu": {k: provenance(k) for k in GEMM_KERNELS},
        "machine": {"cpu": cpu_name(), "cpus": os.cpu_count(),
                    "torch_threads": torch.get_num_threads(),
                    "python": platform.python_version(), "torch": torch.__version__},
        "params": {"seed": args.seed, "rows": args.rows or "all", "band": BAND,
                   "inputs": "A and B randn/sqrt(K) as bf16",
                   "reference": "fp32 matmul of the same bf16 inputs (cast to bf16 for bf16 out)",
                   "path": "fast (BLAS over the block-format products; per L1 K tile for "
                           "direct)"},
        "rows": records,
        "summary": [s.as_dict() for s in summaries],
        "worst": worst,
        "within": sum(r.within for r in results), "count": len(results),
        "seconds": time.perf_counter() - start,
    }


# --- printing ---------------------------------------------------------------------------

def _shape(rec: dict[str, Any]) -> str:
    return "x".join(map(str, rec["shape"]))


def print_report(report: dict[str, Any]) -> None:
    m, p = report["machine"], report["params"]
    print("npu-deploy GEMM numerics per method: emulated on this machine's CPU, held against "
          "mean_rel_L1 measured on NPU2")
    print(f"  cpu:       {m['cpu']} ({m['cpus']} cpus, torch {m['torch']} with "
          f"{m['torch_threads']} threads)")
    for kernel, where in report["measured_on_npu"].items():
        print(f"  measured:  {kernel}: {where}")
    print(f"  protocol:  inputs {p['inputs']} (seed {p['seed']}); reference = {p['reference']}; "
          "mean_rel_L1 = mean|out-ref| / mean|ref|")
    print(f"  emulation: {p['path']}; rows of M emulated: {p['rows']}")
    print(f"  band:      emulated within +-{p['band']:.0%} of measured")
    print()
    header = (f"  {'kernel':<10}{'M x K x N':<17}{'method':<11}{'m/kl2/kl1/n':<16}{'herd':<6}"
              f"{'L1 tiles':>8}{'L2 tiles':>9}{'NPU':>10}{'CPU emu':>10}{'ratio':>7}"
              f"{'':>5}{'per-L2':>10}{'ratio':>7}{'s':>7}")
    print(header)
    print("  " + "-" * (len(header) - 2))
    for rec in report["rows"]:
        contrast = rec["per_l2_emulated_cpu"]
        extra = (f"{contrast:>10.3e}{rec['per_l2_ratio']:>7.3f}" if contrast is not None
                 else f"{'':>17}")
        print(f"  {rec['kernel']:<10}{_shape(rec):<17}{rec['method']:<11}"
              f"{'/'.join(map(str, rec['tile'])):<16}{'x'.join(map(str, rec['herd'])):<6}"
              f"{rec['l1_k_tiles']:>8}{rec['l2_k_tiles']:>9}{rec['measured_npu']:>10.3e}"
              f"{rec['emulated_cpu']:>10.3e}{rec['ratio']:>7.3f}"
              f"{'  ok' if rec['within'] else ' OUT':>5}{extra}{rec['seconds']:>7.1f}")
    print("  NPU = measured on NPU2 (registry); CPU emu = emulated on this CPU; per-L2 = direct "
          "bf16-out rows with C rounded once per L2 tile instead of once per L1 tile "
          "(the page's prose), emulated on this CPU, for contrast")
    print()
    print(f"  summary (emulated on the CPU against measured on NPU2, within +-{p['band']:.0%}):")
    for s in report["summary"]:
        print(f"    {s['kernel']:<10}{s['method']:<11}{s['within']:>3}/{s['count']:<3} within   "
              f"ratios {s['lowest_ratio']:.3f} to {s['highest_ratio']:.3f}")
    print(f"    {'all':<21}{report['within']:>3}/{report['count']:<3} within")
    print()
    print("  worst ratios (emulated / measured, farthest from 1):")
    for rec in report["worst"]:
        print(f"    {rec['ratio']:.3f}  {rec['kernel']} {_shape(rec)} {rec['method']} "
              f"(NPU {rec['measured_npu']:.3e}, CPU emu {rec['emulated_cpu']:.3e})")
    print()
    print(f"  run time: {report['seconds']:.0f} s on the CPU (emulation, reference and "
          "comparison of every row)")


# --- command line -------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Emulated GEMM mean_rel_L1 per method, on the CPU, against every "
                    "measured row of the kernel registry (NPU2).")
    parser.add_argument("--rows", type=int, default=None,
                        help="emulate only the first ROWS rows of M of each shape (default: "
                             "all; the figures move by sampling noise only)")
    parser.add_argument("--seed", type=int, default=0, help="input random seed (default 0)")
    parser.add_argument("--no-contrast", action="store_true",
                        help="skip the per-L2-tile contrast of the direct rows")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args(argv)
    if args.rows is not None and args.rows < 1:
        parser.error("--rows must be a positive integer")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return emit(run_benchmark(args), args.json, print_report)


if __name__ == "__main__":
    sys.exit(main())
