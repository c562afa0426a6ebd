#!/usr/bin/env python3
"""Benchmark metrics.compare against memcpy and against the obvious numpy code.

One run, one machine, one pair: ref is standard normal float32 of shape
[elems // dim, dim] (the default is logits over a 151936-token vocabulary, ~100M
elements, 400 MB per tensor) and cand = ref + 1e-3 noise. In the same run it measures:

* memcpy bandwidth: np.copyto and torch's copy_ of one 400 MB tensor, counted as bytes
  read + bytes written (2 x 400 MB), best of the repeats; the faster of the two is the
  reference;
* compare: median of --repeats, as GB/s of input read (2 x 400 MB, the same 800 MB a copy
  moves), with its default single thread and, for information, with two threads and with
  the torch scan alone (fused=False, what every block took before the fused kernel);
* compare's first call in a fresh process, on a small float32 pair: once with an empty
  numba cache (the kernel is compiled) and once more with that cache filled (it is loaded);
* the naive baseline: the same metric set the obvious way, with full-size float64
  temporaries (`naive_metrics`, also the oracle of tests/metrics/test_comparison.py);
* the extra peak memory of compare, in a child process: its peak RSS (VmHWM, reset just
  before the call) minus its RSS before the call.

A MISS against a target is a measurement, not an error: the exit code is 0 unless
something failed.

    .venv/bin/python -m benchmarks.metrics_bench [--elems 100000000] [--dim 151936]
        [--repeats 5] [--json]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks.host import ROOT, child, cpu_name, emit
from npu_deploy.metrics.comparison import Comparison, compare

ATOL, RTOL = 1e-5, 1.6e-2
MB = 1e6
TARGET_OF_MEMCPY = 0.25
TARGET_SPEEDUP = 10.0
TARGET_EXTRA_MB = 64.0


def make_pair(elems: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """ref ~ N(0, 1) and cand = ref + 1e-3 N(0, 1), float32, made without temporaries."""
    dim = min(dim, elems)
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal((elems // dim, dim), dtype=np.float32)
    cand = rng.standard_normal((elems // dim, dim), dtype=np.float32)
    cand *= 1e-3
    cand += ref
    return ref, cand


def naive_metrics(ref: Any, cand: Any, atol: float, rtol: float) -> dict[str, float]:
    """compare()'s metrics the obvious way: whole-tensor float64 copies and temporaries."""
    a, b = np.asarray(ref, dtype=np.float64), np.asarray(cand, dtype=np.float64)
    d = b - a
    abs_d = np.abs(d)
    rows_a, rows_b = a.reshape(-1, a.shape[-1]), b.reshape(-1, b.shape[-1])
    cos_pos = (rows_a * rows_b).sum(-1) / (np.linalg.norm(rows_a, axis=-1)
                                           * np.linalg.norm(rows_b, axis=-1))
    tol = atol + rtol * np.abs(a)
    excess = (abs_d - tol).ravel()
    worst = int(np.argmax(excess))
    return {
        "max_abs": abs_d.max(), "mean_abs": abs_d.mean(),
        "rel_l2": np.linalg.norm(d) / np.linalg.norm(a),
        "mean_rel_l1": abs_d.mean() / np.abs(a).mean(),
        "pearson": np.corrcoef(a.ravel(), b.ravel())[0, 1],
        "cosine": np.dot(a.ravel(), b.ravel()) / (np.linalg.norm(a) * np.linalg.norm(b)),
        "cosine_pos_min": cos_pos.min(), "cosine_pos_p5": np.percentile(cos_pos, 5),
        "cosine_pos_median": np.median(cos_pos),
        "sqnr_db": 10 * np.log10((a * a).sum() / (d * d).sum()),
        "within_frac": (abs_d <= tol).mean(), "n_outside": int((abs_d > tol).sum()),
        "worst_index": worst, "worst_excess": excess[worst],
        "worst_ref": a.ravel()[worst], "worst_cand": b.ravel()[worst],
    }


def timings(fn: Callable[[], object], repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        out.append(time.perf_counter() - start)
    return out


def _proc_status_bytes(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def extra_peak_bytes(elems: int, dim: int) -> int:
    """In this (child) process: the peak RSS compare adds on a fresh pair."""
    ref, cand = make_pair(elems, dim)
    # Libraries' one-time set-up is not counted; the warm-up is tiny so that no buffer it
    # frees (and the allocator keeps) can hide compare's own buffers.
    compare(ref[:1, :8], cand[:1, :8])
    before = _proc_status_bytes("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # Linux: reset the peak (VmHWM) to the current RSS
    compare(ref, cand)
    return _proc_status_bytes("VmHWM") - before


def measure_extra_peak_mb(elems: int, dim: int) -> float | None:
    """extra_peak_bytes in a child process, in MB; None where /proc cannot measure it."""
    if not Path("/proc/self/clear_refs").exists():
        return None
    result = subprocess.run(
        child("benchmarks.metrics_bench", "--memory-child", "--elems", str(elems), "--dim",
              str(dim)),
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=True)
    return int(result.stdout.split()[-1]) / MB


def first_call_s() -> float:
    """In this (child) process: the first compare() call, on a 1000 x 1000 float32 pair."""
    ref, cand = make_pair(1000 * 1000, 1000)
    start = time.perf_counter()
    compare(ref, cand)
    return time.perf_counter() - start


def measure_first_calls_s() -> tuple[float, float]:
    """compare's first call in two fresh processes sharing a new numba cache directory:
    (compiling the kernel into the empty cache, loading it from there)."""
    with tempfile.TemporaryDirectory(prefix="numba-cache-") as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        compiled, loaded = (
            float(subprocess.run(child("benchmarks.metrics_bench", "--first-call-child"),
                                 env=env, cwd=ROOT, capture_output=True, text=True, timeout=600,
                                 check=True).stdout.split()[-1]) for _ in range(2))
    return compiled, loaded


@dataclass
class Measured:
    """Everything timed in this process on one pair (seconds)."""

    shape: list[int]
    elems: int
    nbytes: int  # per tensor
    copy_np_s: float
    copy_torch_s: float
    compare_s: list[float]
    compare_2_threads_s: list[float]
    torch_scan_s: list[float]
    naive_s: list[float]
    worst_disagreement: tuple[str, float]  # metric, relative difference compare vs naive


def measure_memcpy_s(buf: np.ndarray, repeats: int) -> tuple[float, float]:
    """Best times of np.copyto and of torch's (multi-threaded) copy_ of `buf`."""
    dst = np.empty_like(buf)
    copy_np = min(timings(lambda: np.copyto(dst, buf), repeats))
    src_t, dst_t = torch.from_numpy(buf), torch.from_numpy(dst)
    return copy_np, min(timings(lambda: dst_t.copy_(src_t), repeats))


def worst_disagreement(got: Comparison, want: dict[str, float]) -> tuple[str, float]:
    return max(((k, abs(getattr(got, k) - v) / max(abs(v), 1e-300)) for k, v in want.items()),
               key=lambda kv: kv[1])


def measure(args: argparse.Namespace, progress: Callable[[str], None]) -> Measured:
    ref, cand = make_pair(args.elems, args.dim)
    progress("memcpy ...")
    copy_np, copy_torch = measure_memcpy_s(ref, max(args.repeats, 5))
    progress("compare ...")
    compare(ref[:64], cand[:64])  # warm-up
    one = timings(lambda: compare(ref, cand, atol=ATOL, rtol=RTOL), args.repeats)
    two = timings(lambda: compare(ref, cand, atol=ATOL, rtol=RTOL, threads=2), args.repeats)
    progress("compare, torch scan ...")
    torch_scan = timings(lambda: compare(ref, cand, atol=ATOL, rtol=RTOL, fused=False),
                         naive_repeats(args))
    # Last: numpy's BLAS threads keep spinning for a while after each call.
    progress("naive numpy ...")
    naive = timings(lambda: naive_metrics(ref, cand, ATOL, RTOL), naive_repeats(args))
    agreement = worst_disagreement(compare(ref, cand, atol=ATOL, rtol=RTOL),
                                   naive_metrics(ref, cand, ATOL, RTOL))
    return Measured(list(ref.shape), ref.size, ref.nbytes, copy_np, copy_torch, one, two,
                    torch_scan, naive, agreement)


def naive_repeats(args: argparse.Namespace) -> int:
    return max(1, min(args.repeats, 3))  # naive: ~3 s each at 100M elements


def run_benchmark(args: argparse.Namespace) -> dict[str, Any]:
    progress: Callable[[str], None] = (lambda msg: None) if args.json else (
        lambda msg: print(msg, file=sys.stderr, flush=True))
    m = measure(args, progress)  # the pair is freed before the child makes its own
    progress("extra memory (child process) ...")
    extra_mb = measure_extra_peak_mb(args.elems, args.dim)
    progress("first calls (child processes) ...")
    compiled_s, loaded_s = measure_first_calls_s()
    moved = 2 * m.nbytes  # a copy reads and writes one tensor; compare reads two
    memcpy_gbs = moved / min(m.copy_np_s, m.copy_torch_s) / 1e9
    compare_s = statistics.median(m.compare_s)
    compare_gbs = moved / compare_s / 1e9
    speedup = statistics.median(m.naive_s) / compare_s
    targets = [
        {"target": f"compare throughput >= {TARGET_OF_MEMCPY:.0%} of memcpy bandwidth",
         "measured": compare_gbs / memcpy_gbs, "unit": "of memcpy",
         "passed": compare_gbs / memcpy_gbs >= TARGET_OF_MEMCPY},
        {"target": f"compare >= {TARGET_SPEEDUP:.0f}x naive numpy", "measured": speedup,
         "unit": "x", "passed": speedup >= TARGET_SPEEDUP},
        {"target": f"compare extra memory <= {TARGET_EXTRA_MB:.0f} MB", "measured": extra_mb,
         "unit": "MB", "passed": extra_mb is not None and extra_mb <= TARGET_EXTRA_MB},
    ]
    return {
        "source": "measured-cpu",
        "machine": {"cpu": cpu_name(), "cpus": os.cpu_count(), "python": platform.python_version(),
                    "numpy": np.__version__, "torch": torch.__version__,
                    "torch_threads": torch.get_num_threads()},
        "input": {"shape": m.shape, "elems": m.elems, "dtype": "float32",
                  "bytes_per_tensor": m.nbytes, "repeats": args.repeats,
                  "naive_repeats": naive_repeats(args)},
        "memcpy": {"np_copyto_s": m.copy_np_s, "torch_copy_s": m.copy_torch_s,
                   "gbs": memcpy_gbs},
        "compare": {"samples_s": m.compare_s, "median_s": compare_s, "gbs": compare_gbs,
                    "of_memcpy": compare_gbs / memcpy_gbs},
        "compare_2_threads": {"samples_s": m.compare_2_threads_s,
                              "median_s": statistics.median(m.compare_2_threads_s),
                              "gbs": moved / statistics.median(m.compare_2_threads_s) / 1e9},
        "compare_torch_scan": {"samples_s": m.torch_scan_s,
                               "median_s": statistics.median(m.torch_scan_s),
                               "gbs": moved / statistics.median(m.torch_scan_s) / 1e9},
        "first_call": {"empty_cache_s": compiled_s, "cached_s": loaded_s},
        "naive": {"samples_s": m.naive_s, "median_s": statistics.median(m.naive_s),
                  "worst_disagreement": {"metric": m.worst_disagreement[0],
                                         "relative": m.worst_disagreement[1]}},
        "speedup_vs_naive": speedup,
        "extra_peak_mb": extra_mb,
        "targets": targets,
    }



def print_report(report: dict[str, Any]) -> None:
    m, i = report["machine"], report["input"]
    mc, c, c2, ct, nv = (report[k] for k in ("memcpy", "compare", "compare_2_threads",
                                             "compare_torch_scan", "naive"))
    print("npu_deploy.metrics.comparison.compare benchmark (measured on the CPU of this machine)")
    print(f"  cpu:     {m['cpu']} ({m['cpus']} cpus), Python {m['python']}, numpy {m['numpy']}, "
          f"torch {m['torch']} ({m['torch_threads']} intra-op threads)")
    print(f"  input:   2 x {i['shape']} float32 = 2 x {i['bytes_per_tensor'] / MB:,.0f} MB "
          f"({i['elems']:,} elements each); cand = ref + 1e-3 noise")
    print(f"  timing:  memcpy best of {max(i['repeats'], 5)}; compare median of {i['repeats']}; "
          f"torch scan and naive median of {i['naive_repeats']}")
    print()
    print(f"  {'':44} {'time':>10} {'GB/s':>8} {'of memcpy':>10}")
    rows = [
        ("memcpy np.copyto (read + written)", mc["np_copyto_s"],
         2 * i["bytes_per_tensor"] / mc["np_copyto_s"] / 1e9),
        ("memcpy torch copy_ (read + written)", mc["torch_copy_s"],
         2 * i["bytes_per_tensor"] / mc["torch_copy_s"] / 1e9),
        ("compare, 1 thread (default; input read)", c["median_s"], c["gbs"]),
        ("compare, 2 threads (input read)", c2["median_s"], c2["gbs"]),
        ("compare, torch scan only (fused=False)", ct["median_s"], ct["gbs"]),
        ("naive numpy, float64 temporaries", nv["median_s"],
         2 * i["bytes_per_tensor"] / nv["median_s"] / 1e9),
    ]
    for label, seconds, gbs in rows:
        share = f"{gbs / mc['gbs']:.1%}" if not label.startswith("memcpy") else ""
        print(f"  {label:44} {seconds * 1e3:>8,.2f}ms {gbs:>8.2f} {share:>10}")
    print()
    worst = nv["worst_disagreement"]
    print(f"  compare vs naive numpy: {report['speedup_vs_naive']:.1f}x faster; their metrics "
          f"differ by {worst['relative']:.1e} at most ({worst['metric']})")
    extra = report["extra_peak_mb"]
    print("  compare extra peak memory (child process, VmHWM - VmRSS): "
          + (f"{extra:.1f} MB" if extra is not None else "not measured (needs Linux /proc)"))
    first = report["first_call"]
    print(f"  compare first call in a fresh process (1000 x 1000 float32): "
          f"{first['empty_cache_s']:.2f} s with an empty numba cache (compiles the kernel), "
          f"{first['cached_s']:.2f} s with it cached")
    print()
    for t in report["targets"]:
        value = t["measured"]
        shown = ("n/a" if value is None else f"{value:.1%}" if t["unit"] == "of memcpy"
                 else f"{value:.1f}{t['unit']}" if t["unit"] == "x" else f"{value:.1f} MB")
        print(f"{'PASS' if t['passed'] else 'MISS'}  {t['target']}: measured {shown}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--elems", type=int, default=100_000_000,
                        help="elements per tensor (rounded down to whole rows)")
    parser.add_argument("--dim", type=int, default=151936, help="last dim (features)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--memory-child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--first-call-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.elems < 1 or args.dim < 1 or args.repeats < 1:
        parser.error("--elems, --dim and --repeats must be >= 1")
    if args.memory_child:
        print(extra_peak_bytes(args.elems, args.dim))
        return 0
    if args.first_call_child:
        print(first_call_s())
        return 0
    return emit(run_benchmark(args), args.json, print_report)


if __name__ == "__main__":
    sys.exit(main())
