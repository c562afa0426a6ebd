#!/usr/bin/env python3
"""What repacking the bundled GGUF into the device weight formats rounds, and how fast the
formats' codecs are. Issue 40, point 1.

* **Repack error.** Every Q4_1 tensor of the bundled SmolLM2-135M GGUF repacked into Q4NX
  (`formats.repack`), dequantized by the device formula and compared with gguf's own
  dequantization of the original blocks: the largest absolute difference and the RMS
  difference, per tensor kind and over all of them, beside the weights' RMS. The nibbles move
  exactly; only d and m round from float16 to bfloat16. The same for Q4_0: each tensor's
  weights quantized to GGUF Q4_0 by gguf, then repacked into the Q4_0 container (the bundle
  has no Q4_0 tensor of its own). Also the bytes the padding to whole Q4NX blocks adds.
* **Speed.** quantize, pack, unpack and dequantize of a 4096 x 4096 matrix in each format,
  the median of `--repeats`, each over gguf's own dequantization of the same matrix in Q4_1
  timed just before it (the ratio is the figure to compare across machines and loads).

Everything is measured on the CPU of the machine it runs on; nothing runs on an NPU.

    .venv/bin/python -m benchmarks.weight_formats [--repeats 3] [--json]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time
from collections.abc import Callable
from typing import Any

import gguf
import torch
from gguf import GGMLQuantizationType as T

from benchmarks.host import cpu_name, emit
from npu_deploy.formats import CODECS, GGUF_Q4_0, GGUF_Q4_1, RepackError
from npu_deploy.formats.repack import repack_error, repack_gguf
from npu_deploy.models.sources import bundled_gguf


def _kind(name: str) -> str:
    """A GGUF tensor's kind: its name without the layer number."""
    return re.sub(r"^blk\.\d+\.", "", name)


def _pool(errors: dict[str, RepackError], key: str, e: RepackError) -> None:
    errors[key] = errors[key].combine(e) if key in errors else e


def repack_errors() -> dict[str, Any]:
    """The repack errors over the bundled GGUF's Q4_1 tensors, into Q4NX and (through gguf's
    Q4_0) into the Q4_0 container."""
    into_q4nx: dict[str, RepackError] = {}
    into_q4_0: dict[str, RepackError] = {}
    logical = padded = 0
    for t in gguf.GGUFReader(bundled_gguf()).tensors:
        if t.tensor_type != T.Q4_1:
            continue
        shape = (int(t.shape[1]), int(t.shape[0]))
        data = t.data.tobytes()
        e = repack_error(data, shape, T.Q4_1)
        for key in (_kind(t.name), "all"):
            _pool(into_q4nx, key, e)
        repacked = repack_gguf(data, shape, T.Q4_1)
        logical += len(data)
        padded += len(repacked.data)
        q4_0 = GGUF_Q4_0.quantize(GGUF_Q4_1.dequantize(data, shape))
        e0 = repack_error(q4_0, shape, T.Q4_0)
        for key in (_kind(t.name), "all"):
            _pool(into_q4_0, key, e0)

    def table(errors: dict[str, RepackError]) -> dict[str, dict[str, float]]:
        return {k: {"max_abs": e.max_abs, "rms": e.rms, "weight_rms": e.weight_rms,
                    "relative_rms": e.relative_rms, "weights": e.count}
                for k, e in errors.items()}

    return {"q4_1_into_q4nx": table(into_q4nx), "q4_0_into_q4_0_container": table(into_q4_0),
            "gguf_q4_1_bytes": logical, "q4nx_bytes": padded}


def _paired(fn: Callable[[], object], reference: Callable[[], object],
            repeats: int) -> tuple[float, float]:
    """fn's median seconds, and the median of fn's time over the reference's, each pair
    timed back to back (on a shared host the load moves between repeats)."""
    times, ratios = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        reference()
        t1 = time.perf_counter()
        fn()
        t2 = time.perf_counter()
        times.append(t2 - t1)
        ratios.append((t2 - t1) / (t1 - t0))
    return statistics.median(times), statistics.median(ratios)


def speeds(repeats: int) -> dict[str, Any]:
    """Seconds per operation on a 4096 x 4096 matrix, per format, each beside gguf's Q4_1
    dequantization of the same matrix timed just before it (the same-run reference)."""
    shape = (4096, 4096)
    w = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * 0.02
    reference_bytes = GGUF_Q4_1.quantize(w)

    def reference() -> object:
        return GGUF_Q4_1.dequantize(reference_bytes, shape)

    out: dict[str, Any] = {}
    for name, codec in CODECS.items():
        if name == "q4nx-legacy":
            continue                                   # no quantizer upstream; same codec
        data = codec.quantize(w)
        parts = codec.unpack(data, shape)
        ops: dict[str, Callable[[], object]] = {
            "quantize": lambda c=codec: c.quantize(w),
            "pack": lambda c=codec, p=parts: c.pack(p),
            "unpack": lambda c=codec, d=data: c.unpack(d, shape),
            "dequantize": lambda c=codec, d=data: c.dequantize(d, shape)}
        row: dict[str, float] = {}
        for op, fn in ops.items():
            row[f"{op}_s"], row[f"{op}_vs_reference"] = _paired(fn, reference, repeats)
        out[name] = row
    reference_s, _ = _paired(reference, reference, repeats)
    return {"shape": list(shape), "reference": "gguf.quants.dequantize of the matrix in Q4_1",
            "reference_s": reference_s, "formats": out}


def print_report(r: dict[str, Any]) -> None:
    """The report as text."""
    print(f"weight formats (measured on the CPU: {r['machine']['cpu']}, torch "
          f"{r['machine']['torch_threads']} threads, load average {r['machine']['load']})")
    for title, key in (("GGUF Q4_1 -> Q4NX (bundled SmolLM2-135M)", "q4_1_into_q4nx"),
                       ("GGUF Q4_0 (by gguf from the same weights) -> Q4_0 container",
                        "q4_0_into_q4_0_container")):
        print(f"  {title}: fp16 d/m -> bf16")
        print(f"    {'tensor':<18} {'max |err|':>10} {'RMS err':>10} {'weight RMS':>10} "
              f"{'RMS/RMS':>9}")
        for kind, e in r["repack"][key].items():
            print(f"    {kind:<18} {e['max_abs']:>10.3g} {e['rms']:>10.3g} "
                  f"{e['weight_rms']:>10.3g} {e['relative_rms']:>9.2%}")
    rp = r["repack"]
    print(f"  bytes: GGUF Q4_1 {rp['gguf_q4_1_bytes']:,}, Q4NX {rp['q4nx_bytes']:,} "
          f"({rp['q4nx_bytes'] / rp['gguf_q4_1_bytes']:.3f}x: both 5 bits a weight; the "
          f"padding of K 576 -> 768)")
    s = r["speed"]
    print(f"  4096 x 4096, median of {r['repeats']}; each time / the time of {s['reference']} "
          f"({s['reference_s']:.3f} s) just before it")
    print(f"    {'format':<16} {'quantize':>16} {'pack':>16} {'unpack':>16} {'dequantize':>16}")
    for name, f in s["formats"].items():
        cells = [f"{f[op + '_s']:.3f}s ({f[op + '_vs_reference']:.2f}x)"
                 for op in ("quantize", "pack", "unpack", "dequantize")]
        print(f"    {name:<16} " + " ".join(f"{c:>16}" for c in cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    report = {
        "machine": {"cpu": cpu_name(), "torch_threads": torch.get_num_threads(),
                    "load": round(os.getloadavg()[0], 2)},
        "source": "measured-cpu", "repeats": args.repeats,
        "repack": repack_errors(), "speed": speeds(args.repeats),
    }
    return emit(report, args.json, print_report)


if __name__ == "__main__":
    raise SystemExit(main())
