"""Warm seeks of two checkouts of the TUI, in the same session, alternating: whether a change
made seeking slower, as a ratio measured here rather than against a figure of another day.

    git worktree add /tmp/base REV
    .venv/bin/python -m benchmarks.tui_seek_ab /tmp/base . [--tabs gates,perf,agent,plan]
        [--reps 3] [--seeks 100]

Each measurement is a fresh process with the checkout first on PYTHONPATH (the venv's
libraries are shared). It opens the run that `benchmarks.tui_bench` generates and caches
(run it once first) in replay at 160 x 45, shows the tab, waits until the keyframes are
warm, then times `seek(v)` and the frame drawn after it (`pilot.pause(0)`) at --seeks random
versions, the same ones for both checkouts. Printed: per tab and checkout the medians over
the --reps runs of p50 and p95, and the ratio B / A. Measured on the CPU; nothing asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

TABS = {"gates": "tab-gates", "perf": "tab-perf", "agent": "tab-agent", "plan": "tab-plan"}
RUN = Path(tempfile.gettempdir()) / "npu-deploy-tui-bench" / "tui-bench-v1-100000-s0.db"

#: One measurement, run in a child process whose PYTHONPATH starts with the checkout.
CHILD = r"""
import asyncio, json, random, shutil, sys, tempfile, time
from pathlib import Path
tab, seeks, source = sys.argv[1], int(sys.argv[2]), sys.argv[3]
db = Path(tempfile.mkdtemp()) / "runs.db"
shutil.copy(source, db)
from textual.widgets import TabbedContent
from npu_deploy.tui import DeployApp

async def main():
    app = DeployApp(db, run_id="bench", live=False)
    async with app.run_test(size=(160, 45)) as pilot:
        await pilot.pause(0.5)
        screen = app.screen
        screen.query_one(TabbedContent).active = tab
        await pilot.pause(0)
        end = time.monotonic() + 120
        while time.monotonic() < end and any(not w.is_finished for w in app.workers
                                              if "warm" in (w.name or "").lower()):
            await pilot.pause(0.2)
        await pilot.pause(2)
        rng = random.Random(1)
        took = []
        for v in [rng.randint(1, screen.timeline.head) for _ in range(seeks)]:
            t0 = time.perf_counter()
            screen.seek(v)
            await pilot.pause(0)
            took.append((time.perf_counter() - t0) * 1e3)
        took.sort()
        print(json.dumps({"p50": took[len(took) // 2], "p95": took[int(len(took) * 0.95)]}))

asyncio.run(main())
"""


def measure(tree: Path, tab: str, seeks: int) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree.resolve())}
    done = subprocess.run([sys.executable, "-c", CHILD, tab, str(seeks), str(RUN)], env=env,
                          cwd=tempfile.gettempdir(), capture_output=True, text=True,
                          timeout=600, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", type=Path, help="the checkout to compare against (the base)")
    ap.add_argument("b", type=Path, help="the checkout measured against it")
    ap.add_argument("--tabs", default=",".join(TABS))
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--seeks", type=int, default=100)
    args = ap.parse_args()
    if not RUN.exists():
        raise SystemExit(f"no cached run at {RUN}: run `python -m benchmarks.tui_bench` once first")
    print(f"warm seek + drawn frame, ms, median of {args.reps} runs of {args.seeks} seeks each "
          f"(measured on the CPU); A = {args.a}, B = {args.b}")
    print(f"  {'tab':6} {'A p50':>7} {'B p50':>7} {'B/A':>5}   "
          f"{'A p95':>7} {'B p95':>7} {'B/A':>5}")
    for name in args.tabs.split(","):
        runs: dict[str, list[dict[str, float]]] = {"a": [], "b": []}
        for _ in range(args.reps):                       # alternating: drift hits both
            for side in ("a", "b"):
                runs[side].append(measure(getattr(args, side), TABS[name], args.seeks))
        med = {side: {k: statistics.median(r[k] for r in rs) for k in ("p50", "p95")}
               for side, rs in runs.items()}
        a, b = med["a"], med["b"]
        print(f"  {name:6} {a['p50']:7.1f} {b['p50']:7.1f} {b['p50'] / a['p50']:5.2f}   "
              f"{a['p95']:7.1f} {b['p95']:7.1f} {b['p95'] / a['p95']:5.2f}")


if __name__ == "__main__":
    main()
