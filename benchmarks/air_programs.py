#!/usr/bin/env python3
"""How many MLIR-AIR programs a deployment loads, and would each compile, link and run?
Issues 24 and 36's acceptance.

For each catalog model, every dispatch of the baseline plan and of the optimized plan,
prefill at several prompt lengths (by default 2048, 1000 and 300: a multiple of 1024, a
multiple of neither 128 nor 1024, and a short one) and two decode steps (at the longest
length, built for its own length; halfway through a context of the longest length, its
decode attention built for the context and told its length at run time), is emitted. A
prompt runs as the prefill of its length padded to a multiple of 128
(`kernels.definition.specs.prompt_prefill`); for a prompt that is not, the optimized plan
at its exact length is emitted too (plan "unpadded"), to show what the padding saves.

* **Programs per mode.** A program is its kernels, shapes, configuration and layouts, never
  its layer (`kernels.air_programs.air.plan_programs`): printed per model and mode, for
  the baseline and the deployed (optimized) plan, the dispatches, the distinct programs
  beside upstream's ELFs for that model and mode (its per-layer ELFs and the LM head's,
  `kernels/data/deployments.json`), the programs of more than one `air.launch` and their
  format, the largest buffer object a program binds, and whether the deployed plan is
  within budget: at most upstream's ELF count and at most the hardware contexts a process
  keeps open (`Hardware.hw_contexts`). A baseline over the context budget still runs: the
  runtime closes the least recently used program and loads it again when needed.
* **The verifier.** Each distinct program runs through the program verifier
  (`kernels.air_programs.air_verify`): its builder against a recording stand-in of mlir-air's
  Python package, every DMA, channel, extern call, L1/L2 footprint and output checked.

Nothing is compiled and nothing runs on an NPU: mlir-air, Peano and XRT are not installed
here. A failing program is a finding, not an error: the exit code is 0.

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
from npu_deploy.kernels.air_programs.air import OUTPUT_FORMAT, plan_programs
from npu_deploy.kernels.air_programs.air_verify import CHECKS, Violation, verify_programs
from npu_deploy.kernels.definition.specs import Decode, Mode, Prefill, prompt_prefill
from npu_deploy.kernels.measured.deployments import upstream_deployments
from npu_deploy.kernels.plans.optimize import optimize
from npu_deploy.kernels.plans.plan import baseline_plan
from npu_deploy.models import CATALOG


def upstream_elfs(model: str, mode: Mode) -> tuple[int | None, str]:
    """The ELFs upstream's deployment of `model` builds for `mode`: its per-layer ELFs and
    the LM head's GEMV, and the page that lists them (None for a model upstream does not
    deploy)."""
    dep = upstream_deployments().get(model)
    if dep is None:
        return None, ""
    phase = dep.phase("prefill" if isinstance(mode, Prefill) else "decode")
    return len(phase.elfs) + 1, phase.elfs[0].source


def mode_row(model: str, mode: Mode, kind: str, plan: Any, prompt: int | None = None
             ) -> dict[str, Any]:
    programs = plan_programs(plan, XDNA2)
    distinct = programs.distinct
    size, tensor = programs.largest_buffer()
    upstream, source = upstream_elfs(model, mode)
    return {"mode": str(mode), "prompt": prompt, "plan": kind,
            "dispatches": len(programs.programs),
            "distinct": len(distinct), "upstream_elfs": upstream, "upstream_from": source,
            "multi_launch": len(programs.multi_launch()), "format": OUTPUT_FORMAT,
            "largest_buffer_bytes": size, "largest_buffer": tensor,
            "within_contexts": programs.within(XDNA2),
            "within_upstream": upstream is None or len(distinct) <= upstream,
            "_programs": [ps[0] for ps in distinct.values()]}


def model_programs(model: str, lengths: list[int]) -> dict[str, Any]:
    """Every plan's program counts and every distinct program verified: counts, failing
    programs per check, the first violation of each check."""
    _, args = model_shape(model)
    cache: dict[str, list[Violation]] = {}
    verified = clean = 0
    failing = dict.fromkeys(CHECKS, 0)
    first: dict[str, str] = {}
    rows = []
    t0 = time.perf_counter()
    longest = max(lengths)
    modes: list[tuple[Mode, int | None]] = [(prompt_prefill(n), n) for n in lengths]
    for mode, prompt in [*modes, (Decode(longest), None), (Decode(longest // 2, longest), None)]:
        base = baseline_plan(model, args, mode, XDNA2)
        rows += [mode_row(model, mode, "baseline", base, prompt),
                 mode_row(model, mode, "optimized", optimize(base, XDNA2).plan, prompt)]
        if prompt is not None and isinstance(mode, Prefill) and mode.seq != prompt:
            exact = baseline_plan(model, args, Prefill(prompt), XDNA2)
            rows.append(mode_row(model, Prefill(prompt), "unpadded",
                                 optimize(exact, XDNA2).plan, prompt))
    seen: set[str] = set()
    for row in rows:
        fresh = [p for p in row.pop("_programs") if p.digest not in seen]
        seen |= {p.digest for p in fresh}
        for program, found in verify_programs(fresh, XDNA2, cache):
            verified += 1
            clean += not found
            for check in sorted({v.check for v in found}):
                failing[check] += 1
                v = next(v for v in found if v.check == check)
                first.setdefault(check, f"{row['mode']} {row['plan']} {program.dispatch}: "
                                        f"{v.line()}")
    return {"dispatches": sum(r["dispatches"] for r in rows), "programs": verified,
            "structures": len(cache), "clean": clean, "failing": failing, "first": first,
            "modes": rows, "seconds": time.perf_counter() - t0}


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def print_report(r: dict[str, Any]) -> None:
    print(f"MLIR-AIR programs per model and mode (host {r['host']}); lengths {r['lengths']} "
          f"and decode; every program an {OUTPUT_FORMAT.upper()}; a process keeps "
          f"{r['contexts']} loaded; nothing compiled")
    print(f"{'model':14} {'mode':22} {'plan':9} {'dispatches':>10} {'programs':>9} "
          f"{'upstream':>8} {'multi':>6}  {'largest buffer':>16}  budget")
    for model, m in r["models"].items():
        for row in m["modes"]:
            up = "-" if row["upstream_elfs"] is None else str(row["upstream_elfs"])
            if row["plan"] != "baseline":
                ok = "within" if row["within_contexts"] and row["within_upstream"] else "OVER"
            else:
                ok = "" if row["within_contexts"] else "reloads (LRU)"
            mode = row["mode"] + (f" ({row['prompt']})" if row["prompt"] else "")
            print(f"{model:14} {mode:22} {row['plan']:9} {row['dispatches']:10d} "
                  f"{row['distinct']:9d} {up:>8} {row['multi_launch']:6d}  "
                  f"{_mb(row['largest_buffer_bytes']):>16}  {ok}")
    print("(programs: distinct builds, each loaded once and run by every layer; upstream: its "
          "ELFs for that mode, the per-layer ones and the LM head's; multi: programs of more "
          "than one air.launch; budget of the deployed plan: at most upstream's ELFs and the "
          "contexts; (n): a prompt of n tokens, padded to L; unpadded: the optimized plan at "
          "the prompt's own length, which a deployment does not run)")
    print()
    head = f"{'model':14} {'verified':>8} {'clean':>7}  " + " ".join(f"{c:>8}" for c in CHECKS)
    print(head)
    for model, m in r["models"].items():
        print(f"{model:14} {m['programs']:8d} {m['clean']:7d}  "
              + " ".join(f"{m['failing'][c]:8d}" for c in CHECKS))
    t = r["total"]
    print(f"{'all':14} {t['programs']:8d} {t['clean']:7d}  "
          + " ".join(f"{t['failing'][c]:8d}" for c in CHECKS))
    print("(verified: each distinct program once; each check column: programs failing it)")
    for model, m in r["models"].items():
        for check, line in m["first"].items():
            print(f"  {model} {check}: {line[:220]}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(CATALOG), help="comma-separated models")
    parser.add_argument("--lengths", default="2048,1000,300", help="prompt lengths")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    lengths = [int(x) for x in args.lengths.split(",")]
    models = {m: model_programs(m, lengths) for m in args.models.split(",")}
    total = {"programs": sum(m["programs"] for m in models.values()),
             "clean": sum(m["clean"] for m in models.values()),
             "failing": {c: sum(m["failing"][c] for m in models.values()) for c in CHECKS}}
    return emit({"host": cpu_name(), "lengths": lengths, "contexts": XDNA2.hw_contexts,
                 "models": models, "total": total}, args.json, print_report)


if __name__ == "__main__":
    sys.exit(main())
