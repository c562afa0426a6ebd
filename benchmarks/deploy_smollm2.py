"""Benchmark: the whole SmolLM2-135M deployment with the offline autopilot, phase by phase.

    python -m benchmarks.deploy_smollm2 [--model smollm2-135m] [--seq-len 128] [--db PATH]

Runs `deploy MODEL --headless --auto-approve` through the library in a fresh store (a
temporary one unless --db is given), then prints, measured on this machine's CPU:

* wall seconds of each phase (from its phase.exited event) and of the whole run;
* the harness's own time: the conductor recording events (append, hash chain, fold,
  machine), consuming the inbox and reading the log for phase timings, as a share of the
  wall time (target < 2 %);
* the deployed runner's answer to "What is the capital of France?";
* Hugging Face's FP32 forward of 2048 tokens of the same model, timed in the same process
  3 times before the deployment (after one untimed) and 3 times after it, and the ratio of
  the deployment's wall time to their median: the figure that carries from one machine to
  another (a load that changes during the run still shows in the spread of the six).

The NPU times inside the run are modeled (the emulator backend); nothing here times an NPU.
Targets (issue 37): the deployment <= 180 s on the idle 2-core development machine, harness
< 2 %.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.host import cpu_name

WALL_TARGET_S = 180
HF_TOKENS = 2048
HARNESS_TARGET = 0.02


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--db", type=Path, default=None)
    opts = ap.parse_args()

    import torch

    from npu_deploy.agents.autopilot import pipeline
    from npu_deploy.events import PHASE_NAMES
    from npu_deploy.machine import Conductor, Policy
    from npu_deploy.oracle.prompts import CAPITAL_QUESTION
    from npu_deploy.pipeline.inference import Runner
    from npu_deploy.pipeline.workspace import Workspace
    from npu_deploy.store import EventStore

    torch.set_num_threads(2)
    harness = {"s": 0.0}

    def timed(fn):  # type: ignore[no-untyped-def]
        def wrapper(*args, **kwargs):  # type: ignore[no-untyped-def]
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                harness["s"] += time.perf_counter() - t0
        return wrapper

    # The conductor's bookkeeping: every event write, the inbox, the phase timings.
    Conductor._record = timed(Conductor._record)  # type: ignore[method-assign]
    Conductor._consume_inbox = timed(Conductor._consume_inbox)  # type: ignore[method-assign]
    Conductor._phase_times = timed(Conductor._phase_times)  # type: ignore[method-assign]

    hf_before = hf_forward_times(opts.model, untimed=1)
    tmp = tempfile.TemporaryDirectory()
    db = opts.db or Path(tmp.name) / "runs.db"
    print(f"host: {cpu_name()}, 2 torch threads; times measured on this CPU")
    print(f"deploying {opts.model} (seq_len {opts.seq_len}) into {db}")
    store = EventStore.open(db)
    t0 = time.perf_counter()
    c = Conductor.start(store, pipeline(), Policy(auto_approve=True), model=opts.model,
                        config={"seq_len": opts.seq_len, "steps": 32})
    halt = c.run()
    wall = time.perf_counter() - t0
    c.close()
    events = list(store.events(c.run_id))
    verdict = events[-1].payload.get("verdict") if events[-1].type == "run.finished" else None
    print(f"\nrun {c.run_id}: {halt.reason} {verdict}, {len(events)} events")
    print(f"{'phase':<28}{'wall s':>9}{'agent s':>9}{'backend s':>10}{'attempts':>9}  gate")
    for e in events:
        if e.type == "phase.exited":
            p = e.payload
            gate = next((g.payload["passed"] for g in reversed(events)
                         if g.type == "gate.evaluated" and g.phase == e.phase), None)
            print(f"{e.phase} {PHASE_NAMES[e.phase or 0]:<26}{p['wall_s']:>9.1f}"
                  f"{p['agent_s']:>9.1f}{p['backend_s']:>10.1f}{e.attempt:>9}  "
                  f"{'PASS' if gate else 'FAIL'}")
    share = harness["s"] / wall
    hf_times = hf_before + hf_forward_times(opts.model, untimed=0)
    hf_s = statistics.median(hf_times)
    print(f"\ntotal wall {wall:.1f} s ({wall / 60:.2f} min; target <= {WALL_TARGET_S} s "
          f"idle): {'PASS' if wall <= WALL_TARGET_S else 'FAIL'}")
    print(f"Hugging Face FP32 forward of {HF_TOKENS} tokens, same process: median "
          f"{hf_s:.2f} s (before the deployment "
          f"{', '.join(f'{t:.2f}' for t in hf_before)}; after "
          f"{', '.join(f'{t:.2f}' for t in hf_times[len(hf_before):])}); the deployment "
          f"took {wall / hf_s:.1f}x that")
    print(f"harness (event writes, inbox, phase timings) {harness['s']:.2f} s = "
          f"{100 * share:.2f}% of the wall time (target < {100 * HARNESS_TARGET:.0f}%): "
          f"{'PASS' if share < HARNESS_TARGET else 'FAIL'}")
    runner = Runner(Workspace(store, c.run_id))
    answer = runner.generate([{"role": "user", "content": CAPITAL_QUESTION}], 32)
    print(f"runner answer to {CAPITAL_QUESTION!r}: {answer!r} "
          f"({'contains' if 'Paris' in answer else 'does NOT contain'} 'Paris')")
    store.close()
    ok = verdict == "PASS" and wall <= WALL_TARGET_S and share < HARNESS_TARGET \
        and "Paris" in answer
    return 0 if ok else 1


def hf_forward_times(model: str, untimed: int) -> list[float]:
    """Three timed Hugging Face FP32 forwards of HF_TOKENS tokens of `model` on this CPU,
    after `untimed` ones (as benchmarks/emulator_speed.py times it)."""
    import torch

    from npu_deploy.models.loading import load_model

    loaded = load_model(model)
    tokens = torch.randint(0, loaded.args.vocab, (1, HF_TOKENS),
                           generator=torch.Generator().manual_seed(0))
    times = []
    with torch.inference_mode():
        for _ in range(untimed + 3):
            t0 = time.perf_counter()
            loaded.hf(tokens)
            times.append(time.perf_counter() - t0)
    return times[untimed:]


if __name__ == "__main__":
    sys.exit(main())
