#!/usr/bin/env python3
"""Would the emitted MLIR-AIR programs compile, link and run? Issue 24's acceptance.

For each of the ten catalog models, every dispatch of the baseline plan and of the optimized
plan, prefill at several prompt lengths (by default 2048, 1000 and 300: a multiple of 1024,
a multiple of neither 128 nor 1024, and a short one) and two decode steps (at the longest
length, built for its own length; halfway through a context of the longest length, its
decode attention built for the context and told its length at run time), is emitted and
run through the program verifier (`kernels.air_programs.air_verify`): the program's builder runs
against a recording stand-in of mlir-air's Python package, and every DMA, channel, extern call,
L1/L2 footprint and output is checked. Printed per model: programs emitted, clean, and
the programs failing each check. Nothing is compiled and nothing runs on an NPU: mlir-air,
Peano and XRT are not installed here.

A failing program is a finding, not an error: the exit code is 0.

    .venv/bin/python -m benchmarks.air_programs [--models a,b] [--lengths 2048,300] [--json]
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from benchmarks.host import cpu_name, emit
from npu_deploy.cli.models import model_shape
from npu_deploy.kernels import XDNA2
from npu_deploy.kernels.air_programs.air import emit_plan
from npu_deploy.kernels.air_programs.air_verify import CHECKS, Violation, verify_programs
from npu_deploy.kernels.definition.specs import Decode, Prefill
from npu_deploy.kernels.plans.optimize import optimize
from npu_deploy.kernels.plans.plan import baseline_plan
from npu_deploy.models import CATALOG


def model_programs(model: str, lengths: list[int]) -> dict[str, Any]:
    """Every program of the model's plans, verified: counts, failing programs per check,
    and the first violation of each check."""
    _, args = model_shape(model)
    cache: dict[str, list[Violation]] = {}
    emitted = clean = 0
    failing = dict.fromkeys(CHECKS, 0)
    first: dict[str, str] = {}
    plans = []
    t0 = time.perf_counter()
    longest = max(lengths)
    for mode in [*(Prefill(n) for n in lengths), Decode(longest),
                 Decode(longest // 2, longest)]:
        base = baseline_plan(model, args, mode, XDNA2)
        plans += [(mode, "baseline", base), (mode, "optimized", optimize(base, XDNA2).plan)]
    for mode, kind, plan in plans:
        for program, found in verify_programs(emit_plan(plan, XDNA2), XDNA2, cache):
            emitted += 1
            clean += not found
            for check in sorted({v.check for v in found}):
                failing[check] += 1
                v = next(v for v in found if v.check == check)
                first.setdefault(check, f"{mode} {kind} {program.dispatch}: {v.line()}")
    return {"programs": emitted, "structures": len(cache), "clean": clean,
            "failing": failing, "first": first, "seconds": time.perf_counter() - t0}


def print_report(r: dict[str, Any]) -> None:
    print(f"MLIR-AIR programs against the verifier (host {r['host']}); lengths "
          f"{r['lengths']} and decode, baseline and optimized plans; nothing compiled")
    head = f"{'model':14} {'emitted':>8} {'distinct':>8} {'clean':>7}  " + \
        " ".join(f"{c:>8}" for c in CHECKS)
    print(head)
    for model, m in r["models"].items():
        print(f"{model:14} {m['programs']:8d} {m['structures']:8d} {m['clean']:7d}  "
              + " ".join(f"{m['failing'][c]:8d}" for c in CHECKS))
    t = r["total"]
    print(f"{'all':14} {t['programs']:8d} {'':8} {t['clean']:7d}  "
          + " ".join(f"{t['failing'][c]:8d}" for c in CHECKS))
    print("(each check column: programs failing it)")
    for model, m in r["models"].items():
        for check, line in m["first"].items():
            print(f"  {model} {check}: {line[:220]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(CATALOG), help="comma-separated models")
    parser.add_argument("--lengths", default="2048,1000,300", help="prefill lengths")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    models = {m: model_programs(m, lengths) for m in args.models.split(",")}
    total = {"programs": sum(m["programs"] for m in models.values()),
             "clean": sum(m["clean"] for m in models.values()),
             "failing": {c: sum(m["failing"][c] for m in models.values()) for c in CHECKS}}
    return emit({"host": cpu_name(), "lengths": lengths, "models": models, "total": total},
                args.json, print_report)


if __name__ == "__main__":
    sys.exit(main())
