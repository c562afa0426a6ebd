"""A small, fast, deterministic pipeline for the conductor's tests (the real phases come
with the autopilot). Importable as `fake_pipeline:make` with tests/ on the path, so that a
subprocess (`npu-deploy deploy --pipeline fake_pipeline:make`) runs it too.

Environment knobs, read when the pipeline is made:
  FAKE_STEP_S   seconds each agent step takes (default 0)
  FAKE_FAIL     "phase:times,..." - the gate of `phase` fails its first `times` attempts
  FAKE_STEPS    agent steps per attempt (default 3)
  FAKE_LOAD_S   seconds `make` takes, as loading a real pipeline does (default 0)
"""

from __future__ import annotations

import os
import time
from typing import Any

from npu_deploy.events.payloads import DebugDirection, GateCheck, GateEvaluated
from npu_deploy.machine import Pipeline


class FakeAgent:
    name = "fake"

    def __init__(self, step_s: float, steps: int) -> None:
        self.step_s, self.steps = step_s, steps

    def work(self, run: Any) -> None:
        run.say(f"phase {run.phase} attempt {run.attempt}: {run.instruction or 'no instruction'}")
        for i in range(self.steps):
            run.step("compute", {"i": i}, lambda i=i: self._compute(run.phase, i),
                     backend=i == self.steps - 1)

    def _compute(self, phase: int, i: int) -> dict[str, Any]:
        time.sleep(self.step_s)
        return {"value": phase * 10 + i}


class FakeGate:
    def __init__(self, fails: int) -> None:
        self.fails = fails

    def evaluate(self, run: Any) -> GateEvaluated:
        ok = run.attempt > self.fails or run.instruction == "fix it"
        return GateEvaluated(gate=f"fake-{run.phase}", passed=ok, checks=[
            GateCheck(subject="block", metric="rel_l2", value=1e-5 if ok else 0.3,
                      threshold=1e-3, comparison="<=", passed=ok)])


class FakeMatcher:
    def propose(self, run: Any, gate: dict[str, Any]) -> list[DebugDirection]:
        return [DebugDirection(direction_id="tile", skill="silent-gemm-corruption",
                               title="check tile divisibility", rationale="one GEMM is off",
                               score=0.9),
                DebugDirection(direction_id="bo", skill="buffer-object-corruption",
                               title="check buffer reuse", rationale="stale buffers",
                               score=0.4)]


def make() -> Pipeline:
    time.sleep(float(os.environ.get("FAKE_LOAD_S", "0")))
    fails: dict[int, int] = {}
    for part in filter(None, os.environ.get("FAKE_FAIL", "").split(",")):
        phase, times = part.split(":")
        fails[int(phase)] = int(times)
    agent = FakeAgent(float(os.environ.get("FAKE_STEP_S", "0")),
                      int(os.environ.get("FAKE_STEPS", "3")))
    return Pipeline(agent, {k: FakeGate(fails.get(k, 0)) for k in range(8)}, FakeMatcher())
