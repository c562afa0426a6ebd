"""Deterministic runs for the TUI's tests: built with the real conductor and the fake
pipeline of tests/fake_pipeline.py, under a fake clock and counted ids, so that a screen
drawn from one of them is the same on every machine and every run of the suite.

    with deterministic():            # the clock and the ids, while the runs are written
        checkpoint_run(store)
    with held(store, "live-p0"):     # "running": this process holds the run's writer lock
        ...

Every builder returns the run id and closes its conductor (the lock is free: the run shows
as waiting/needs_human/finished, or "crashed" for a run left mid-phase; hold its lock with
`held` to show it as running).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
import types
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fake_pipeline import FakeAgent, make

from npu_deploy.events.payloads import DebugDirection, GateCheck, GateEvaluated
from npu_deploy.machine import Conductor, Pipeline, Policy
from npu_deploy.store import EventStore

#: Where the fake clock starts, and how far it moves per reading.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
TICK = timedelta(milliseconds=250)
TS_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"
MODEL = "tiny"


class FakeClock:
    """`utc_now` and `uuid7` stand-ins: a clock that advances TICK per reading from EPOCH,
    and valid, strictly increasing version-7 UUIDs made from a counter."""

    def __init__(self, start: datetime = EPOCH, tick: timedelta = TICK) -> None:
        self.now, self.tick = start, tick
        self._ids = itertools.count(1)
        self._perf = 0.0

    def utc_now(self) -> str:
        ts = self.now.strftime(TS_FORMAT)
        self.now += self.tick
        return ts

    def perf_counter(self) -> float:
        """The conductor's step timer: a TICK per reading, of a counter of its own (a step's
        duration_s is then one TICK, whatever the machine's speed)."""
        self._perf += self.tick.total_seconds()
        return self._perf

    def uuid7(self) -> str:
        n = next(self._ids)
        ms = int(EPOCH.timestamp() * 1000) + n
        h = f"{ms:012x}7{n & 0xFFF:03x}{0x8000000000000000 | n:016x}"
        return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


#: Each module that bound the name at import time reads the clock or draws ids through it.
_PATCHED = (("npu_deploy.events.envelope", "utc_now"), ("npu_deploy.events.envelope", "uuid7"),
            ("npu_deploy.store.snapshots", "utc_now"), ("npu_deploy.store.blobs", "utc_now"),
            ("npu_deploy.store.inbox", "utc_now"), ("npu_deploy.store.inbox", "uuid7"),
            ("npu_deploy.store.writer", "utc_now"))


@contextlib.contextmanager
def deterministic(clock: FakeClock | None = None) -> Iterator[FakeClock]:
    """Events, inbox commands and snapshots written inside get the fake clock's times and
    counted ids (the writer's `seal` calls `events.envelope.utc_now`/`uuid7`), and steps
    its durations."""
    import importlib

    clock = clock or FakeClock()
    saved = []
    for module_name, name in _PATCHED:
        module = importlib.import_module(module_name)
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, getattr(clock, name))
    # the conductor times each step with time.perf_counter: the clock's too (unless a test
    # has given the conductor a timer of its own, tests/machine/test_stored_bytes.py)
    conductor = importlib.import_module("npu_deploy.machine.conductor")
    if conductor.time is time:
        saved.append((conductor, "time", conductor.time))
        conductor.time = types.SimpleNamespace(  # type: ignore[assignment]
            **{**{n: getattr(time, n) for n in dir(time) if not n.startswith("_")},
               "perf_counter": clock.perf_counter})
    try:
        yield clock
    finally:
        for module, name, value in reversed(saved):
            setattr(module, name, value)


@contextlib.contextmanager
def fake_env(fail: str = "", steps: int = 3) -> Iterator[None]:
    """FAKE_FAIL and FAKE_STEPS for the pipelines made inside (restored after)."""
    saved = {k: os.environ.get(k) for k in ("FAKE_FAIL", "FAKE_STEPS", "FAKE_STEP_S")}
    os.environ.update(FAKE_FAIL=fail, FAKE_STEPS=str(steps), FAKE_STEP_S="0")
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def pipeline(fail: str = "", steps: int = 3) -> Pipeline:
    with fake_env(fail, steps):
        return make()


@contextlib.contextmanager
def held(store: EventStore, run_id: str) -> Iterator[None]:
    """The run's writer lock, held by this process: the TUI shows the run as running."""
    writer = store.writer(run_id)
    try:
        yield
    finally:
        writer.close()


# --- the runs ----------------------------------------------------------------------------

def _halted(store: EventStore, run_id: str, faults: str, policy: Policy, reason: str,
            *, approve_first: bool = False) -> str:
    """Run `run_id` (the fake pipeline with FAKE_FAIL `faults`) until the conductor halts
    for `reason`; with `approve_first`, a person approves the first checkpoint on the way."""
    return _halt(store, run_id, pipeline(faults), policy, reason, approve_first=approve_first)


def _halt(store: EventStore, run_id: str, pipe: Pipeline, policy: Policy, reason: str,
          *, approve_first: bool = False) -> str:
    """Run `run_id` on `pipe` until the conductor halts for `reason` (see `_halted`)."""
    c = Conductor.start(store, pipe, policy, model=MODEL, run_id=run_id)
    try:
        if approve_first:
            assert c.run(wait=False).reason == "awaiting_human"
            store.post_command(run_id, "approve", author="ada@tui")
        halt = c.run(wait=False)
        assert halt.reason == reason, halt
    finally:
        c.close()
    return run_id


def checkpoint_run(store: EventStore, run_id: str = "live-p0") -> str:
    """Phase 0 passed its gate and waits at its checkpoint for approve or redirect."""
    return _halted(store, run_id, "", Policy(), "awaiting_human")


def failed_gate_run(store: EventStore, run_id: str = "debug-p1") -> str:
    """Phase 0 approved by a person; phase 1's gate failed and two debug directions wait
    for a pick (FAKE_FAIL=1:1)."""
    return _halted(store, run_id, "1:1", Policy(), "awaiting_pick", approve_first=True)


def stopped_run(store: EventStore, run_id: str = "stopped-p2") -> str:
    """Auto-approved to phase 2, whose gate failed its whole budget (2): needs_human."""
    return _halted(store, run_id, "2:9", Policy(auto_approve=True, budget=2), "needs_human")


def stopped_autopilot_run(store: EventStore, run_id: str = "stopped-ap") -> str:
    """Phase 0's gate failed its whole budget (1) under an agent named autopilot, so the
    decision dialog checks a redirect as the autopilot reads it: needs_human."""
    return _halt(store, run_id, _named(pipeline("0:9"), "autopilot"),
                 Policy(auto_approve=True, budget=1), "needs_human")


def _named(p: Pipeline, agent: str) -> Pipeline:
    p.agent.name = agent       # type: ignore[attr-defined]
    return p


def finished_run(store: EventStore, run_id: str = "done-pass") -> str:
    """Auto-approved to the end; phase 3's gate failed once and the policy picked a
    direction, so the scrubber has a failure, a debug proposal and decisions to show."""
    return _halted(store, run_id, "3:1", Policy(auto_approve=True), "finished")


class _Interrupted(Exception):
    """Ends the fake agent's work inside a step, as a killed process would."""


class _InterruptedAgent(FakeAgent):
    """The fake agent, cut off inside step `stop_at` of phase `phase`."""

    def __init__(self, phase: int, stop_at: int, steps: int = 4) -> None:
        super().__init__(0.0, steps)
        self.phase, self.stop_at = phase, stop_at

    def _compute(self, phase: int, i: int) -> dict[str, Any]:
        if phase == self.phase and i == self.stop_at:
            raise _Interrupted
        return super()._compute(phase, i)


def working_run(store: EventStore, run_id: str = "work-p1") -> str:
    """Phase 0 approved; phase 1 mid-work: two steps done and a third requested, not yet
    completed. With its lock held (`held`), a live run in the middle of a phase."""
    pipe = pipeline()
    pipe.agent = _InterruptedAgent(phase=1, stop_at=2)
    c = Conductor.start(store, pipe, Policy(), model=MODEL, run_id=run_id)
    try:
        assert c.run(wait=False).reason == "awaiting_human"
        store.post_command(run_id, "approve", author="ada@tui")
        try:
            c.run(wait=False)
        except _Interrupted:
            pass
        else:
            raise AssertionError("the agent was not interrupted")
    finally:
        c.close()
    return run_id


class _WideGate:
    """A gate the size of a real one: ten checks on ten layers, six of them failing."""

    def evaluate(self, run: Any) -> GateEvaluated:
        checks = [GateCheck(subject=f"layers.{i}.mlp.down_proj", metric="rel_l2",
                            value=0.3 if i < 6 else 1e-5, threshold=1e-3, comparison="<=",
                            passed=i >= 6) for i in range(10)]
        return GateEvaluated(gate=f"wide-{run.phase}", passed=False, checks=checks)


class _ManyDirections:
    """Four debug directions, each with a rationale of a couple of lines."""

    def propose(self, run: Any, gate: dict[str, Any]) -> list[DebugDirection]:
        return [DebugDirection(direction_id=f"d{i}", skill="silent-gemm-corruption",
                               title=f"direction {i + 1}", score=0.9 - i / 10,
                               rationale="the failing layers share one GEMM shape; check its "
                                         "tiles against the shape, then the buffers it reuses")
                for i in range(4)]


def wide_gate_run(store: EventStore, run_id: str = "wide-gate") -> str:
    """Phase 0's gate failed ten-check wide, with four debug directions waiting for a pick:
    a decision dialog the size real gates make."""
    pipe = pipeline()
    pipe.gates[0], pipe.matcher = _WideGate(), _ManyDirections()
    return _halt(store, run_id, pipe, Policy(), "awaiting_pick")


class _CheckerGate:
    """Phase 1's gate as pipeline/gates/kernels.py writes it for a kernel whose tile
    configuration the constraint checker refuses: the checker's finding is the check's
    message (kernels/definition/rules.py words it), and a second kernel passes."""

    def evaluate(self, run: Any) -> GateEvaluated:
        from npu_deploy.kernels.definition.hardware import XDNA2
        from npu_deploy.kernels.definition.rules import l1
        from npu_deploy.pipeline.gates.kernels import checks_of_kernel

        findings: list[Any] = []
        l1(findings, 70 * 1024, XDNA2, "A 64x256, B 256x64, C 64x64 bf16",
           "halve the K tile or drop ping-pong on C")
        bad = {"findings": [str(f) for f in findings], "outputs": {}, "atol": 0.0, "rtol": 0.0}
        good = {"findings": [], "atol": 1e-2, "rtol": 1.6e-2, "outputs": {"C": {
            "within_frac": 1.0, "n_outside": 0, "cosine": 1.0, "max_abs": 1e-3,
            "pearson": 1.0}}}
        checks = [*checks_of_kernel("gemm_bf16 K=576 M=128 N=1536 (gate_proj, up_proj)", bad),
                  *checks_of_kernel("gemv_fp32acc K=576 N=576 (q_proj)", good)]
        return GateEvaluated(gate=f"kernels-{run.phase}", passed=False,
                             checks=[GateCheck(**c) for c in checks])


def checker_run(store: EventStore, run_id: str = "checker-p1") -> str:
    """Phase 0 approved; phase 1's gate failed on the constraint checker's finding (the
    check's message) and two debug directions wait for a pick."""
    pipe = pipeline()
    pipe.gates[1] = _CheckerGate()
    c = Conductor.start(store, pipe, Policy(), model=MODEL, run_id=run_id)
    try:
        assert c.run(wait=False).reason == "awaiting_human"
        store.post_command(run_id, "approve", author="ada@tui")
        halt = c.run(wait=False)
        assert halt.reason == "awaiting_pick", halt
    finally:
        c.close()
    return run_id


class _OracleGate:
    """Phase 0's gate as pipeline/gates/oracle.py writes it (its metrics, its thresholds),
    on the three prompts of a model without a chat template; one prompt's decode drifts."""

    #: oracle.py's checks of a prompt: metric, comparison, threshold, gating
    METRICS = (("prefill_logits_rel_l2", "<=", 1e-4, True),
               ("decode_logits_rel_l2", "<=", 1e-4, True),
               ("greedy_tokens_identical", ">=", 32, True),
               ("prefill_logits_max_abs", "<=", 1e-3, False),
               ("prefill_logits_cosine", ">=", 0.999999, False),
               ("stored_oracle_tokens", ">=", 32, True))

    def evaluate(self, run: Any) -> GateEvaluated:
        from npu_deploy.events.phases import phase

        values = {"prefill_logits_rel_l2": 3.1e-7, "decode_logits_rel_l2": 4.2e-7,
                  "greedy_tokens_identical": 32, "prefill_logits_max_abs": 2.4e-5,
                  "prefill_logits_cosine": 1.0, "stored_oracle_tokens": 32}
        checks = []
        for prompt in ("story", "npu", "prefill-128"):
            for metric, comparison, threshold, gating in self.METRICS:
                value = 2.5e-3 if (prompt, metric) == ("npu", "decode_logits_rel_l2") \
                    else values[metric]
                passed = value <= threshold if comparison == "<=" else value >= threshold
                checks.append(GateCheck(subject=prompt, metric=metric, value=value,
                                        threshold=threshold, comparison=comparison,
                                        passed=passed, gating=gating))
        return GateEvaluated(gate=phase(0).gate, passed=False, checks=checks)


def oracle_gate_run(store: EventStore, run_id: str = "oracle-p0") -> str:
    """Phase 0's gate with the oracle's own check names failed on one prompt's decode
    logits; debug directions wait for a pick."""
    pipe = pipeline()
    pipe.gates[0] = _OracleGate()
    return _halt(store, run_id, pipe, Policy(), "awaiting_pick")


class _GemmGate:
    """Phase 1's gate with one GEMM's output wrong on its second call: the real debug
    skills silent-gemm-corruption and buffer-object-corruption both match it."""

    def evaluate(self, run: Any) -> GateEvaluated:
        kernel = "gemm_bf16 K=576 M=128 N=1536 (gate_proj, up_proj)"
        return GateEvaluated(gate=f"kernels-{run.phase}", passed=False, checks=[
            GateCheck(subject=kernel, metric="within_frac", value=0.31, threshold=1.0,
                      comparison=">=", passed=False, message="C: 69% of the elements "
                      "outside atol + rtol |ref|; the second call differs from the first"),
            GateCheck(subject="gemv_fp32acc K=576 N=576 (q_proj)", metric="within_frac",
                      value=1.0, threshold=1.0, comparison=">=", passed=True)])


def _next_tiles(run: Any, failing: list[dict[str, Any]]) -> Any:
    """What pipeline/retry_changes.py's phase-1 change says of this gate: the GEMM's next
    valid configuration (one change, whichever skill's direction is picked)."""
    from npu_deploy.events.payloads import RetryChange

    return RetryChange(
        text="gemm_bf16 K=576 M=128 N=1536 (gate_proj, up_proj): tile_k 256 -> 128 (the "
             "selection's second valid configuration of 12)",
        configs={"gemm_bf16 K=576 M=128 N=1536": {"tile_m": 64, "tile_k": 128, "tile_n": 64,
                                                  "herd_n": 8, "ping_pong": True}})


def directions_run(store: EventStore, run_id: str = "dirs-p1") -> str:
    """Phase 0 approved; phase 1's gate failed and the real skill matcher (the catalog's
    debug skills, their triggers in words) proposes two directions that make the same
    change."""
    from npu_deploy.skills.matcher import SkillMatcher

    pipe = pipeline()
    pipe.gates[1], pipe.matcher = _GemmGate(), SkillMatcher(changes=_next_tiles)
    return _halt(store, run_id, pipe, Policy(), "awaiting_pick", approve_first=True)


def build_store(path: str | os.PathLike[str], *builders: Any) -> list[str]:
    """A store file with the given runs (builder functions), written deterministically
    one after the other on one fake clock."""
    with EventStore.open(path) as store, deterministic():
        return [build(store) for build in builders]


def private_copy(built: Path, tmp_path: Path, monkeypatch: Any, *, chdir: bool = False
                 ) -> Path:
    """A copy of a module's store (`built`) for one test, which may leave inbox commands in
    it, and no user keymap. `chdir`: the test runs in its folder and gets the relative path
    (the run browser prints it: the same on every run)."""
    (tmp_path / "runs.db").write_bytes(built.read_bytes())
    monkeypatch.setenv("NPU_DEPLOY_KEYMAP", str(tmp_path / "no-keymap.toml"))
    if not chdir:
        return tmp_path / "runs.db"
    monkeypatch.chdir(tmp_path)
    return Path("runs.db")


ALL_RUNS = (finished_run, stopped_run, failed_gate_run, checkpoint_run, working_run)


class _PlanningAgent(FakeAgent):
    """The fake agent, but in phases 4 and 5 it does what the autopilot does there, with the
    real planner and performance model (kernels/plans/plan.py, kernels/performance/model.py) on
    SmolLM2-135M: profile the plan, try each transform (kept when it is faster), profile again.
    Every time is MODELED; every plan is stored as a blob, as pipeline/toolbox.py stores them."""

    MODEL = "smollm2-135m"

    def __init__(self) -> None:
        super().__init__(0.0, 2)
        from npu_deploy.pipeline.recipe import Recipe

        self.recipe = Recipe()

    def work(self, run: Any) -> None:
        if run.phase == 1:
            store = run.conductor.store
            ref = store.put_blob(self.recipe.to_json())
            run.step("select_tiles", {"overrides": {}},
                     lambda: {"recipe": ref, "configs": 0, "findings": {}})
        if run.phase not in (4, 5):
            super().work(run)
            return
        from npu_deploy.kernels.definition.specs import Decode, Prefill

        self._optimize(run, Prefill(128) if run.phase == 4 else Decode(128))

    def _optimize(self, run: Any, mode: Any) -> None:
        from npu_deploy.events.payloads import ProfileRecorded
        from npu_deploy.kernels.definition.hardware import XDNA2
        from npu_deploy.kernels.definition.specs import Prefill
        from npu_deploy.kernels.performance.model import estimate
        from npu_deploy.kernels.plans.transforms import TRANSFORMS, IllegalTransform
        from npu_deploy.models import CATALOG
        from npu_deploy.pipeline.toolbox import mode_text, plan_json, profile_payload

        store, args = run.conductor.store, CATALOG[self.MODEL].args
        scope = "prefill" if isinstance(mode, Prefill) else "decode"
        tokens = mode.seq if isinstance(mode, Prefill) else 1

        def blob(value: Any) -> str:
            return store.put_blob(json.dumps(value, sort_keys=True).encode())

        def profile() -> None:
            plan = self.recipe.plan(self.MODEL, args, mode, XDNA2)
            payload = profile_payload(estimate(plan, XDNA2), scope, tokens)
            run.step("profile", {"mode": mode_text(mode)}, lambda: {
                "total_s": payload["total_s"], "source": "modeled", "mode": mode_text(mode),
                "dispatches": len(plan.dispatches), "summary": plan.summary,
                "payload": payload})
            run.record(ProfileRecorded.from_dict(payload))

        run.say(f"phase {run.phase} attempt {run.attempt}: optimizing the {scope} plan")
        profile()
        for name in TRANSFORMS:
            if name in self.recipe.transforms(mode):
                continue
            before = self.recipe.plan(self.MODEL, args, mode, XDNA2)
            t_before = estimate(before, XDNA2).total_s
            result: dict[str, Any] = {"transform": name, "mode": mode_text(mode),
                                      "before_s": t_before, "source": "modeled",
                                      "plan_before": blob(plan_json(before))}
            try:
                after = TRANSFORMS[name].apply(before)
            except IllegalTransform as e:
                result.update(kept=False, after_s=None, reason=str(e))
            else:
                t_after = estimate(after, XDNA2).total_s
                kept = t_after < t_before
                result.update(after_s=t_after, plan_after=blob(plan_json(after)), kept=kept,
                              reason="faster (modeled)" if kept else "not faster (modeled)")
                if kept:
                    self.recipe = self.recipe.with_transform(mode, name)
                    result["recipe"] = store.put_blob(self.recipe.to_json())
            run.step("apply_transform", {"transform": name, "mode": mode_text(mode)},
                     lambda result=result: result)
        profile()


def planned_run(store: EventStore, run_id: str = "plan-done") -> str:
    """Auto-approved to the end, with plans: phases 4 and 5 transform SmolLM2-135M's
    prefill and decode plans (`_PlanningAgent`), and phase 4's gate fails twice before it
    passes, so its check has three attempts to show."""
    pipe = pipeline("4:2")
    pipe.agent = _PlanningAgent()
    c = Conductor.start(store, pipe, Policy(auto_approve=True), model="smollm2-135m",
                        run_id=run_id)
    try:
        halt = c.run(wait=False)
        assert halt.reason == "finished", halt
    finally:
        c.close()
    return run_id
