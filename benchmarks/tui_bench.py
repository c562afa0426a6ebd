#!/usr/bin/env python3
"""Benchmark the TUI (npu_tui) on a generated run of --events events (100k by default).

    .venv/bin/python -m benchmarks.tui_bench [--events 100000] [--seeks 200]
        [--live-seconds 10] [--rate 1000] [--cache-dir DIR] [--quick] [--json]
    .venv/bin/python -m benchmarks.tui_bench --terminal [--repeats 3] [--json]
    .venv/bin/python -m benchmarks.tui_bench --latency [--events 20000] [--repeats 10] [--json]

--terminal measures something else: the first paint and the quit of every entry point
(deploy, tui, replay, attach, resume) started as a real process in tmux; see
benchmarks/tui_terminal.py. --latency measures only the key-to-frame latency of moving
around (Tab, the tab switches, opening a run from the browser, opening the new-deployment
form), in well under a minute; see benchmarks/tui_latency.py. What follows is the
in-process benchmark.

The run is written with the real store API (`EventStore.create_run`, `append_batch` in
batches of 1000, a snapshot after every phase.exited as the conductor takes), in the
conductor's order, with its actors and idempotency keys: eight phases, each attempt an
agent's turns (model.called, agent.message, tool.requested/tool.completed of
validate_kernel, profile, apply_transform, ...; profile.recorded in phases 4 and 5), then
the gate (tool.requested/completed of "gate" by the harness, gate.evaluated), then either
checkpoint.requested and a person's approve (an inbox command) and phase.exited, or
debug.proposed and a person's pick and the next attempt; run.finished last. Phase 1 fails
its gate once, phase 4 twice. The generated run is verified (hash chain) and replayed
through the conductor's state machine (every move legal); it is cached in --cache-dir.

Measured, all in this process (the app runs headless in `App.run_test`, 160 x 45 cells),
on the CPU of this machine:

1. first paint: from just before `run_test` is entered with
   `DeployApp(db, run_id=RUN, live=False)` until the first `pilot.pause(0)` after which the
   RunScreen is current and its EventStream has drawn event lines. It includes Textual's
   start-up (driver, CSS), composing the run screen (RunTimeline's index query over the
   run, the state at the head) and the compositor rendering the first frame; it excludes
   Python's imports (shown apart) and writing the frame to a terminal (headless). The
   warm-up worker starts during it. One figure per app opened (one per tab below); the
   target is judged on the first, the one a person launching the TUI sees.
2. seeks: `RunScreen.seek(v)` for --seeks random versions (the same ones for every
   series), with the Gates tab active, then Performance, Agent and Plan (a fresh app per
   tab). seek() updates the event stream's cursor, the phase strip, scrubber, title,
   banner and the active tab's panel synchronously. Each seek is followed by
   `pilot.pause(0)`, which drains the screen's messages and composes the frame; "seek +
   render", the time to the end of that, is the figure judged: panels updated means drawn.
   Each tab is measured first right after the first paint ("cold": the warm-up worker is
   still folding the run into keyframes, on another thread) and again after that worker
   has finished ("warm").
3. live: a separate writer process (this script, --writer-child) attaches to a live run
   (the first half of the same synthetic run, cut mid-phase) with `EventStore.writer` and
   appends --rate events/s with `append_batch` every 10 ms tick for --live-seconds, while
   `DeployApp(db, run_id=RUN, live=True)` follows it in a fresh process (--live-child), as
   `npu-deploy attach` would, after the warm-up worker has finished. UI
   lateness: a chain of one-shot 20 ms timers on the app (`App.set_timer`), each timer
   recording how late it fired against when it was due (a repeating `set_interval` timer
   skips the ticks it missed, so it cannot say how late it was). Also: the writer's
   achieved rate, the UI's lag behind the store's head (sampled at each timer tick), and
   whether the UI's head reached the writer's last version after the writer stopped, and
   the garbage collector's pauses during the stream.
4. memory: this process's peak RSS (VmHWM) after the replay measurements (the run opened
   and seeked, once per tab), against its RSS before any app was opened (Python, imports).
   The run is generated in a child process, so its writing is not counted.

Percentiles are nearest-rank. A FAIL against a target is a measurement, not an error: the
exit code is 0 unless something failed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import random
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.host import ROOT, child, cpu_name, emit
from npu_deploy.events import PHASE_NAMES, NewEvent
from npu_deploy.events.keys import FACT, MESSAGE, RUN_FINISHED, STEP, AttemptKey
from npu_deploy.store import EventStore

FIRST_PAINT_TARGET_S = 0.5
SEEK_P95_TARGET_MS = 50.0
LATENESS_P99_TARGET_MS = 50.0
PEAK_RSS_TARGET_MB = 150.0
LATENCY_EVENTS = 20_000       # --latency: the run opened from the browser

SIZE = (160, 45)
TABS = ("tab-gates", "tab-perf", "tab-agent", "tab-plan")
TAB_NAMES = {"tab-gates": "Gates", "tab-perf": "Performance", "tab-agent": "Agent",
             "tab-plan": "Plan"}
RUN_ID = "bench"
LIVE_RUN_ID = "live"
AUTHOR = "bench@tui"
BATCH = 1000                  # events per append_batch when generating
TICK_S = 0.010                # the live writer's tick
PROBE_S = 0.020               # the UI lateness timer
GENERATOR_VERSION = 1         # bump when the synthetic run changes (the cache key)
FAILS = {1: 1, 4: 2}          # phase -> gate failures before it passes

STARTED = {"model": "smollm2-135m", "backend": "emulator", "agent": "autopilot",
           "code_version": "bench", "policy": "interactive",
           "config": {"budget": 3, "auto_approve": False, "pause_at": [], "seq_len": 128}}


# --- the synthetic run ------------------------------------------------------------------

_WORDS = ("the kernel tile buffer shape stride matmul layer norm attention softmax decode "
          "prefill cache token latency gate check passes fails retry compile lower dma "
          "vector scalar core column row memory bank accumulate bf16 error output input "
          "weight bias block profile trace result expected measured modeled plan").split()
_KERNELS = ("gemm_q", "gemm_kv", "gemm_o", "gemm_gate_up", "gemm_down", "rmsnorm", "rope",
            "softmax", "silu_mul", "gemv_q", "gemv_kv", "gemv_lm_head", "attention", "add")
_TRANSFORMS = ("fuse_qkv", "fuse_gate_up", "persistent_weights", "double_buffer",
               "overlap_dma", "fuse_rmsnorm", "split_k", "tile_64x64")
#: Tools of an agent's turn, per phase (drawn uniformly: repeats weight them).
PHASE_TOOLS: dict[int, tuple[str, ...]] = {
    0: ("build_oracle", "read_file", "read_file", "run_reference"),
    1: ("validate_kernel",) * 5 + ("read_file", "list_kernels"),
    2: ("run_block", "validate_kernel", "validate_kernel", "read_file"),
    3: ("run_model", "run_model", "validate_kernel", "read_file"),
    4: ("read_file",) * 20 + ("validate_kernel",) * 20 + ("run_model",) * 6
       + ("propose_transform", "profile", "apply_transform"),
    5: ("read_file",) * 20 + ("validate_kernel",) * 20 + ("run_model",) * 6
       + ("propose_transform", "profile", "apply_transform"),
    6: ("read_file", "write_file", "generate"),
    7: ("run_model", "read_file", "generate"),
}
BACKEND_TOOLS = frozenset({"validate_kernel", "run_block", "run_model", "apply_transform",
                           "generate", "run_reference"})
#: The tool a phase's first turn calls (what the real autopilot starts with).
FIRST_TOOL = {1: "select_tiles", 3: "choose_datapath", 4: "profile", 5: "profile",
              6: "write_report"}


@dataclass(frozen=True)
class Step:
    """One thing the conductor writes: an event, or a person's decision (an inbox command
    the conductor records as human.decision)."""

    event: NewEvent | None = None
    decision: tuple[str, dict[str, Any]] | None = None
    phase: int | None = None
    attempt: int | None = None
    snapshot: bool = False           # the conductor snapshots after a phase.exited
    turn: bool = False               # an agent turn starts here (a live run may be cut)


class Attempt:
    """One attempt of one phase, keyed as the conductor's PhaseRun keys its events."""

    def __init__(self, phase: int, attempt: int, n: int = 0) -> None:
        self.phase, self.attempt, self.n = phase, attempt, n
        self.keys = AttemptKey(phase, attempt)      # also its checkpoint's and proposal's id
        self.agent_s = self.backend_s = 0.0

    def key(self, what: str) -> AttemptKey:
        return self.keys.child(what)

    def new(self, type_: str, payload: dict[str, Any], actor: str = "harness",
            key: AttemptKey | None = None) -> NewEvent:
        return NewEvent(type_, payload, actor=actor, phase=self.phase, attempt=self.attempt,
                        idempotency_key=None if key is None else str(key))

    def say(self, text: str) -> NewEvent:
        self.n += 1
        return self.new("agent.message", {"role": "assistant", "text": text}, "agent",
                        self.keys.counted(MESSAGE, self.n))

    def fact(self, type_: str, payload: dict[str, Any]) -> NewEvent:
        self.n += 1
        return self.new(type_, payload, "agent", self.keys.counted(FACT, self.n))

    def step(self, tool: str, arguments: dict[str, Any], result: dict[str, Any], *,
             ok: bool, duration_s: float) -> list[NewEvent]:
        self.n += 1
        call = self.keys.counted(STEP, self.n)
        backend = tool in BACKEND_TOOLS
        if backend:
            self.backend_s += duration_s
        else:
            self.agent_s += duration_s
        return [self.new("tool.requested", {"call_id": str(call), "tool": tool, "arguments": {
                    **arguments, "idempotent": True, "backend": backend}}, "agent", call),
                self.new("tool.completed", {"call_id": str(call), "tool": tool, "ok": ok,
                                            "result": result, "duration_s": duration_s},
                         "agent", call.done())]


class Blobs:
    """A few recipes, plans and a report, stored once (content-addressed) and referenced
    by the plan tools' results."""

    def __init__(self, store: EventStore, rng: random.Random) -> None:
        def put(value: Any) -> str:
            return store.put_blob(json.dumps(value, sort_keys=True).encode())

        self.recipes = [put(_recipe(rng, i)) for i in range(6)]
        self.plans = [put(_plan(rng, i)) for i in range(8)]
        self.report = put(_report(rng))


def _recipe(rng: random.Random, i: int) -> dict[str, Any]:
    return {"gemm_datapath": "bf16-mma",
            "configs": {f"{k}[{j}]": {"tile_m": 64, "tile_n": rng.choice((32, 64)),
                                       "tile_k": 32, "cores": 4}
                        for j, k in enumerate(_KERNELS)},
            "prefill_transforms": list(_TRANSFORMS[:i % 5]),
            "decode_transforms": list(_TRANSFORMS[3:3 + i % 4])}


def _plan(rng: random.Random, i: int) -> dict[str, Any]:
    steps: list[dict[str, Any]] = []
    for layer in range(6):
        steps.append({"dispatch": f"layer{layer}.attn",
                      "launches": [f"{k}@{layer}" for k in _KERNELS[:5]]})
        steps.append({"dispatch": f"layer{layer}.mlp",
                      "launches": [f"{k}@{layer}" for k in _KERNELS[3:6]]})
        if layer % 2:
            steps.append({"host": f"sync after layer {layer}"})
    return {"summary": f"{len(steps)} steps, variant {i}, {rng.randrange(40, 90)} launches",
            "steps": steps}


def _report(rng: random.Random) -> dict[str, Any]:
    return {"peak_flops": 5.0e13, "ddr_bw": 1.2e11, "time_source": "modeled",
            "kernels": [{"name": f"{k}@{i}", "flops": rng.uniform(1e8, 5e10),
                         "bytes": rng.uniform(1e6, 5e8), "seconds": rng.uniform(1e-5, 5e-3)}
                        for i in range(4) for k in _KERNELS]}


class Synthetic:
    """The events of a deployment, in the conductor's order, from one seed."""

    def __init__(self, store: EventStore, seed: int) -> None:
        self.rng = random.Random(seed)
        self.blobs = Blobs(store, self.rng)

    # --- text and payloads ---------------------------------------------------------------

    def text(self, lo: int, hi: int) -> str:
        size, words = self.rng.randrange(lo, hi), []
        while sum(map(len, words)) + len(words) < size:
            words.append(self.rng.choice(_WORDS))
        return " ".join(words)[:size]

    def model_called(self, att: Attempt) -> NewEvent:
        r = self.rng
        duration = round(r.uniform(0.4, 9.0), 3)
        att.agent_s += duration
        inp, out = r.randrange(2_000, 60_000), r.randrange(40, 1_200)
        return att.new("model.called", {
            "model": "claude-sonnet-4-5", "input_tokens": inp, "output_tokens": out,
            "cost_usd": round(inp * 3e-6 + out * 15e-6, 6), "stop_reason": "tool_use",
            "duration_s": duration, "cache_read_tokens": r.randrange(0, inp),
            "cache_write_tokens": r.randrange(0, 2_000)}, "agent")

    def profile_payload(self, phase: int) -> dict[str, Any]:
        r = self.rng
        entries = [{"name": f"{r.choice(_KERNELS)}[L{i % 30}]", "seconds": r.uniform(1e-5, 4e-3),
                    "kind": r.choice(("dispatch", "dispatch", "kernel", "host"))}
                   for i in range(r.randrange(24, 48))]
        prefill = phase != 5
        return {"scope": "prefill" if prefill else "decode", "source": "modeled",
                "total_s": sum(e["seconds"] for e in entries), "entries": entries,
                "tokens": 128 if prefill else 1}

    def result(self, tool: str, phase: int) -> tuple[dict[str, Any], dict[str, Any]]:
        """(arguments, result) of one tool call."""
        r, b = self.rng, self.blobs
        kernel = f"{r.choice(_KERNELS)}[{r.choice((64, 128, 576))}x{r.choice((192, 576, 1536))}]"
        if tool == "validate_kernel":
            err = r.uniform(2e-3, 1.4e-2)
            return ({"kernel": kernel, "seed": r.randrange(4)},
                    {"kernel": kernel, "mean_rel_l1": err, "max_abs": err * 40,
                     "passed": err <= 1.2e-2})
        if tool == "apply_transform":
            name, before = r.choice(_TRANSFORMS), r.uniform(2e-3, 9e-3)
            kept = r.random() < 0.5
            res: dict[str, Any] = {
                "transform": name, "skill": "plan-fusion", "mode": "prefill L=128",
                "before_s": before, "after_s": before * r.uniform(0.7, 1.1), "source": "modeled",
                "plan_before": r.choice(b.plans), "plan_after": r.choice(b.plans), "kept": kept,
                "reason": "faster and the phase-3 check passes" if kept else "not faster (modeled)"}
            if kept:
                res["recipe"] = r.choice(b.recipes)
            return {"transform": name, "mode": "prefill L=128"}, res
        if tool == "profile":
            payload = self.profile_payload(phase)
            return ({"mode": "prefill L=128" if phase != 5 else "decode", "transforms": []},
                    {"total_s": payload["total_s"], "source": "modeled", "dispatches": 40,
                     "summary": "40 dispatches", "payload": payload})
        if tool in ("select_tiles", "choose_datapath"):
            return {"overrides": {}}, {"recipe": r.choice(b.recipes), "configs": len(_KERNELS),
                                       "findings": {}, "datapath": "bf16-mma"}
        if tool == "write_report":
            return {}, {"report_data": b.report, "pages": 6}
        return ({"path": f"kernels/{kernel.split('[')[0]}.cc"},
                {"lines": r.randrange(1, 500), "excerpt": self.text(40, 120)})

    # --- an agent's turn -------------------------------------------------------------------

    def turn(self, att: Attempt, tool: str | None = None) -> list[NewEvent]:
        """model.called, agent.message, one tool step (and its profile.recorded)."""
        r = self.rng
        tool = tool or r.choice(PHASE_TOOLS[att.phase])
        out = [self.model_called(att), att.say(self.text(60, 400))]
        arguments, result = self.result(tool, att.phase)
        out += att.step(tool, arguments, result, ok=r.random() > 0.03,
                        duration_s=round(r.uniform(0.01, 20.0), 3))
        if tool == "profile":
            out.append(att.fact("profile.recorded", result["payload"]))
        return out

    def turns(self, att: Attempt) -> Iterator[NewEvent]:
        """An attempt's turns, without end (the live writer's stream)."""
        while True:
            yield from self.turn(att)

    # --- the run ---------------------------------------------------------------------------

    def run(self, events: int) -> Iterator[Step]:
        attempts = 8 + sum(FAILS.values())
        per_turn = 4.1
        turns = max(2, round((events - 12 * attempts) / (attempts * per_turn)))
        for k in range(8):
            direction: str | None = None
            for a in range(1, FAILS.get(k, 0) + 2):
                passed = a > FAILS.get(k, 0)
                att = Attempt(k, a)
                yield from self.attempt(att, turns, direction, passed)
                direction = "tile"
        yield Step(NewEvent("run.finished", {"verdict": "PASS",
                                             "summary": "every phase passed its gate"},
                            idempotency_key=RUN_FINISHED))

    def attempt(self, att: Attempt, turns: int, direction: str | None,
                passed: bool) -> Iterator[Step]:
        k, a = att.phase, att.attempt
        yield Step(att.new("phase.entered", {"name": PHASE_NAMES[k], "instruction": None,
                                             "debug_direction": direction},
                           key=att.key("entered")))
        yield Step(att.say(f"phase {k} attempt {a}: {direction or 'no instruction'}"))
        for i in range(turns):
            for j, e in enumerate(self.turn(att, FIRST_TOOL.get(k) if i == 0 else None)):
                yield Step(e, turn=j == 0)
        yield from (Step(e) for e in self.gate(att, passed))
        if passed:
            cp = str(att.keys)
            yield Step(att.new("checkpoint.requested", {
                "checkpoint_id": cp, "summary": f"phase {k} ({PHASE_NAMES[k]}) passed its gate"},
                key=att.key("checkpoint")))
            yield Step(decision=("approve", {"checkpoint_id": cp}), phase=k, attempt=a)
            wall = att.agent_s + att.backend_s
            yield Step(att.new("phase.exited", {
                "outcome": "passed", "reason": "approved", "wall_s": wall,
                "agent_s": att.agent_s, "backend_s": att.backend_s}, key=att.key("exited")),
                snapshot=True)
        else:
            yield Step(att.new("debug.proposed", self.proposal(att), key=att.key("debug")))
            yield Step(decision=("pick", {"direction_id": "tile", "proposal_id": str(att.keys)}),
                       phase=k, attempt=a)

    def gate(self, att: Attempt, passed: bool) -> list[NewEvent]:
        k, key = att.phase, att.key("gate")
        checks = []
        for i, kernel in enumerate(_KERNELS[:10]):
            bad = not passed and i in (2, 7)
            value = 0.031 if bad else self.rng.uniform(2e-3, 1.1e-2)
            checks.append({"subject": f"{kernel}[L0]", "metric": "mean_rel_l1",
                           "value": value, "threshold": 1.2e-2, "comparison": "<=",
                           "passed": value <= 1.2e-2, "gating": True,
                           "message": "one tile column off" if bad else ""})
        checks.append({"subject": "logits", "metric": "cosine", "value": 0.9991,
                       "threshold": 0.999, "comparison": ">=", "passed": True, "gating": False})
        duration = round(self.rng.uniform(2.0, 30.0), 3)
        att.backend_s += duration
        return [att.new("tool.requested", {"call_id": str(key), "tool": "gate", "arguments": {
                    "gate": k, "idempotent": True, "backend": True}}, key=key),
                att.new("tool.completed", {"call_id": str(key), "tool": "gate", "ok": True,
                                           "result": {"passed": passed},
                                           "duration_s": duration}, key=key.done()),
                att.new("gate.evaluated", {"gate": f"phase{k}-gate", "passed": passed,
                                           "checks": checks}, key=key.child("result"))]

    def proposal(self, att: Attempt) -> dict[str, Any]:
        return {"proposal_id": str(att.keys),
                "symptom": "gemm_kv[L0]/mean_rel_l1 = 0.031 (needs <= 0.012)",
                "directions": [
                    {"direction_id": "tile", "skill": "silent-gemm-corruption",
                     "title": "check tile divisibility", "rationale": "one GEMM is off",
                     "score": 0.9},
                    {"direction_id": "bo", "skill": "buffer-object-corruption",
                     "title": "check buffer reuse", "rationale": "stale buffers", "score": 0.4}]}


def write_run(store: EventStore, run_id: str, steps: Iterator[Step],
              stop_at: int | None = None) -> int:
    """Write `steps` as run `run_id` in batches; stop at the first agent turn at or after
    `stop_at` events (a live run, cut mid-phase). Returns the run's head version."""
    writer = store.create_run(dict(STARTED), run_id=run_id)
    news: list[NewEvent] = []
    consumes: list[str | None] = []

    def flush() -> None:
        if news:
            writer.append_batch(news, consumes)
            news.clear()
            consumes.clear()

    try:
        for step in steps:
            if stop_at is not None and step.turn and writer.version + len(news) >= stop_at:
                break
            if step.decision is not None:
                kind, payload = step.decision
                command_id = store.post_command(run_id, kind, payload, author=AUTHOR)
                news.append(NewEvent("human.decision", {
                    **payload, "decision": kind, "command_id": command_id, "author": AUTHOR},
                    actor="human", phase=step.phase, attempt=step.attempt))
                consumes.append(command_id)
            elif step.event is not None:
                news.append(step.event)
                consumes.append(None)
            if step.snapshot:
                flush()
                writer.snapshot()
            elif len(news) >= BATCH:
                flush()
        flush()
        return writer.version
    finally:
        writer.close()


def legal_moves(store: EventStore, run_id: str) -> int:
    """Replay the run through the conductor's state machine; every move must be legal.
    Returns how many events moved the machine."""
    from npu_deploy.events import DeploymentState, apply
    from npu_deploy.machine.machine import DeploymentMachine, trigger_for

    machine, state, moves = DeploymentMachine(), DeploymentState(), 0
    for e in store.events(run_id):
        trigger = trigger_for(e.type, e.payload, e.phase, e.actor)
        if trigger is not None:
            machine.fire(trigger, state, e.payload, e.phase)   # raises when illegal
            moves += 1
        state = apply(state, e)
    return moves


def generate(path: Path, run_id: str, events: int, seed: int,
             stop_at: int | None) -> dict[str, Any]:
    """Write, verify and check a run (the --generate-child process does this)."""
    t0 = time.perf_counter()
    with EventStore.open(path) as store:
        head = write_run(store, run_id, Synthetic(store, seed).run(events), stop_at)
        written_s = time.perf_counter() - t0
        report = store.verify(run_id)
        if not report.ok:
            raise RuntimeError(f"generated run does not verify: {report.line()}")
        moves = legal_moves(store, run_id)
        snapshots = store.conn.execute("SELECT count(*) FROM snapshots WHERE run_id = ?",
                                       (run_id,)).fetchone()[0]
    return {"events": head, "write_s": written_s, "total_s": time.perf_counter() - t0,
            "machine_moves": moves, "snapshots": snapshots, "verified": True}


def run_child(*args: str) -> dict[str, Any]:
    """Run this benchmark as a child process; its last stdout line is JSON."""
    result = subprocess.run(child("benchmarks.tui_bench", *args), cwd=ROOT,
                            capture_output=True, text=True, timeout=1800)
    if result.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed:\n{result.stderr}")
    out: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return out


def cached_run(cache_dir: Path, events: int, seed: int) -> tuple[Path, dict[str, Any], bool]:
    """The generated replay run, from the cache when it holds one for these parameters."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    path = cache_dir / f"tui-bench-v{GENERATOR_VERSION}-{events}-s{seed}.db"
    marker = path.with_suffix(".json")
    if marker.exists() and path.exists():
        return path, json.loads(marker.read_text()), True
    for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm"), marker):
        stale.unlink(missing_ok=True)
    info = run_child("--generate-child", str(path), "--events", str(events), "--seed",
                     str(seed), "--run-id", RUN_ID)
    marker.write_text(json.dumps(info))
    return path, info, False


# --- measuring helpers ---------------------------------------------------------------------

def pct(samples: Sequence[float], q: float) -> float:
    """Nearest-rank percentile."""
    if not samples:
        return float("nan")
    s = sorted(samples)
    return s[min(len(s) - 1, max(0, math.ceil(q / 100 * len(s)) - 1))]


def stats(samples_ms: Sequence[float]) -> dict[str, float]:
    return {"n": len(samples_ms), "p50": pct(samples_ms, 50), "p95": pct(samples_ms, 95),
            "p99": pct(samples_ms, 99), "max": max(samples_ms, default=float("nan")),
            "mean": sum(samples_ms) / len(samples_ms) if samples_ms else float("nan")}


def rss_mb() -> tuple[float, float]:
    """(current RSS, peak RSS) of this process in MB: /proc's VmRSS and VmHWM, else the
    peak from getrusage for both."""
    try:
        fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text()
                      .splitlines() if ":" in line)
        return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)
    except (OSError, KeyError, ValueError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        return peak, peak


def import_seconds() -> float:
    """Seconds a fresh interpreter takes to import the TUI (and Textual with it)."""
    code = ("import time; t = time.perf_counter(); "
            "import npu_deploy.tui; print(time.perf_counter() - t)")
    out = subprocess.run([sys.executable, "-P", "-c", code], capture_output=True,
                         text=True, timeout=120, check=True)
    return float(out.stdout.strip())


@contextmanager
def stream_lines_drawn() -> Iterator[list[float]]:
    """perf_counter times at which EventStream.render_line drew a non-blank event line
    (only the first is kept). Wraps the method for the duration (instrumentation only)."""
    from npu_deploy.tui.widgets.event_stream import EventStream

    drawn: list[float] = []
    original = EventStream.render_line

    def render_line(self: Any, y: int) -> Any:
        strip = original(self, y)
        if not drawn and strip.text.strip():
            drawn.append(time.perf_counter())
        return strip

    EventStream.render_line = render_line  # type: ignore[method-assign]
    try:
        yield drawn
    finally:
        EventStream.render_line = original  # type: ignore[method-assign]


@dataclass
class Watch:
    """Messages seen by `run_test(message_hook=...)`: when the warm-up worker finished,
    how many EventsArrived batches (and events) the live poll delivered. The hook sees a
    message at every pump it reaches (EventsArrived bubbles to the app): each counts once,
    marked as counted on the message itself."""

    warm_done: float | None = None
    arrived_batches: int = 0
    arrived_events: int = 0

    def hook(self, message: Any) -> None:
        name = type(message).__name__
        if name == "StateChanged" and getattr(message.worker, "group", "") == "warm" \
                and message.worker.is_finished and self.warm_done is None:
            self.warm_done = time.perf_counter()
        elif name == "EventsArrived" and not getattr(message, "_bench_counted", False):
            message._bench_counted = True
            self.arrived_batches += 1
            self.arrived_events += len(message.events)


@contextmanager
def gc_pauses() -> Iterator[dict[int, list[float]]]:
    """Milliseconds of each garbage collection, per generation, while inside."""
    import gc

    pauses: dict[int, list[float]] = {0: [], 1: [], 2: []}
    started = [0.0]

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.perf_counter()
        else:
            pauses[info["generation"]].append((time.perf_counter() - started[0]) * 1e3)

    gc.callbacks.append(callback)
    try:
        yield pauses
    finally:
        gc.callbacks.remove(callback)


async def first_paint(pilot: Any, t0: float, drawn: list[float]) -> float:
    """Seconds from t0 to the end of the first pilot.pause(0) after which the run screen is
    current and its event stream has drawn lines."""
    from npu_deploy.tui.screens.run import RunScreen

    while True:
        await pilot.pause(0)
        if isinstance(pilot.app.screen, RunScreen) and drawn:
            return time.perf_counter() - t0
        if time.perf_counter() - t0 > 60:
            raise RuntimeError("the run screen drew no event line within 60 s")


async def wait_for(predicate: Callable[[], bool], timeout: float, step: float = 0.01) -> float:
    """Seconds until `predicate()` held (the event loop keeps running meanwhile)."""
    t0 = time.perf_counter()
    while not predicate():
        if time.perf_counter() - t0 > timeout:
            raise TimeoutError(f"still waiting after {timeout} s")
        await asyncio.sleep(step)
    return time.perf_counter() - t0


# --- 1, 2: replay: first paint and seeks ---------------------------------------------------

async def seek_series(pilot: Any, screen: Any, versions: Sequence[int],
                      watch: Watch) -> dict[str, Any]:
    seek_ms, total_ms, while_warming = [], [], 0
    for v in versions:
        while_warming += watch.warm_done is None
        t0 = time.perf_counter()
        screen.seek(v)
        t1 = time.perf_counter()
        await pilot.pause(0)
        t2 = time.perf_counter()
        seek_ms.append((t1 - t0) * 1e3)
        total_ms.append((t2 - t0) * 1e3)
    return {"seek_ms": stats(seek_ms), "seek_render_ms": stats(total_ms),
            "while_warming": while_warming, "samples_seek_ms": seek_ms}


async def idle_pause_ms(pilot: Any, n: int = 20) -> float:
    """Median of pilot.pause(0) with nothing to do: the benchmark's own overhead."""
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        await pilot.pause(0)
        samples.append((time.perf_counter() - t0) * 1e3)
    return pct(samples, 50)


async def replay_session(db: Path, tab: str, versions: Sequence[int]) -> dict[str, Any]:
    """Open the run in replay with one tab active: first paint, cold seeks, warm seeks."""
    from textual.widgets import TabbedContent

    from npu_deploy.tui import DeployApp

    app, watch = DeployApp(db, run_id=RUN_ID, live=False), Watch()
    with stream_lines_drawn() as drawn:
        t0 = time.perf_counter()
        async with app.run_test(size=SIZE, message_hook=watch.hook) as pilot:
            paint_s = await first_paint(pilot, t0, drawn)
            screen = app.screen
            screen.query_one(TabbedContent).active = tab
            await pilot.pause(0)
            idle = await idle_pause_ms(pilot)
            cold = await seek_series(pilot, screen, versions, watch)
            await wait_for(lambda: watch.warm_done is not None, timeout=600)
            warm = await seek_series(pilot, screen, versions, watch)
            keyframes = len(screen.timeline._key_versions)
            t_exit = time.perf_counter()
        exit_s = time.perf_counter() - t_exit
    assert watch.warm_done is not None
    return {"tab": tab, "first_paint_s": paint_s, "first_line_s": drawn[0] - t0,
            "warm_worker_s": watch.warm_done - t0, "keyframes": keyframes,
            "idle_pause_ms": idle, "cold": cold, "warm": warm, "exit_s": exit_s,
            "rss_after_mb": rss_mb()[0]}


def screen_reads_ms(db: Path) -> dict[str, float]:
    """What composing the run screen reads, timed apart: RunTimeline's index query over the
    run and the folded state at the head (the median of 3)."""
    from npu_deploy.tui.timeline import RunTimeline

    index, head = [], []
    with EventStore.open(db, readonly=True) as store:
        for _ in range(3):
            t0 = time.perf_counter()
            timeline = RunTimeline(store, RUN_ID)
            t1 = time.perf_counter()
            timeline.state_at(timeline.head)
            index.append((t1 - t0) * 1e3)
            head.append((time.perf_counter() - t1) * 1e3)
    return {"timeline_index_ms": pct(index, 50), "head_state_ms": pct(head, 50)}


# --- 3: live ------------------------------------------------------------------------------------

class LatenessProbe:
    """A chain of one-shot timers on the app: each records how late it fired against when
    it was due (Textual's clock, time.monotonic), then `sample()`, then sets the next.
    `start` retires any chain already running."""

    def __init__(self, app: Any, sample: Callable[[], None] | None = None) -> None:
        self.app, self.sample = app, sample
        self.late_ms: list[float] = []
        self._chain = 0

    def start(self) -> None:
        self.late_ms = []
        self._chain += 1
        self._arm(self._chain)

    def stop(self) -> None:
        self._chain += 1

    def _arm(self, chain: int) -> None:
        due = time.monotonic() + PROBE_S
        self.app.set_timer(PROBE_S, lambda: self._tick(chain, due))

    def _tick(self, chain: int, due: float) -> None:
        if chain != self._chain:
            return
        self.late_ms.append((time.monotonic() - due) * 1e3)
        if self.sample is not None:
            self.sample()
        self._arm(chain)


def last_counter(store: EventStore, run_id: str, phase: int, attempt: int) -> int:
    """The highest PhaseRun counter among the attempt's keys (p.a.m7, p.a.s8.done, ...)."""
    rows = store.conn.execute("SELECT idempotency_key FROM events WHERE run_id = ? AND "
                              "phase = ? AND attempt = ? AND idempotency_key IS NOT NULL",
                              (run_id, phase, attempt)).fetchall()
    keys = [AttemptKey.parse(text) for (text,) in rows]
    return max((k.counter for k in keys if k is not None and k.counter is not None
                and k.role == "" and k.attempt_key == AttemptKey(phase, attempt)), default=0)


def writer_child(db: Path, run_id: str, rate: float, seconds: float, seed: int) -> dict[str, Any]:
    """The live writer: attach to the run, say "ready", wait for "go", then append `rate`
    events/s in one append_batch per 10 ms tick for `seconds`."""
    store = EventStore.open(db)
    writer = store.writer(run_id)
    state = writer.state
    k = state.current_phase if state.current_phase is not None else 0
    att = Attempt(k, max(1, state.phases[k].attempts), last_counter(store, run_id, k,
                                                                     state.phases[k].attempts))
    stream = Synthetic(store, seed + 1).turns(att)
    print("ready", flush=True)
    sys.stdin.readline()
    written, commits = 0, []
    t0 = time.perf_counter()
    ticks = 0
    while (now := time.perf_counter()) - t0 < seconds:
        due = int(rate * (now - t0)) - written
        if due > 0:
            c0 = time.perf_counter()
            writer.append_batch([next(stream) for _ in range(due)])
            commits.append((time.perf_counter() - c0) * 1e3)
            written += due
        ticks += 1
        time.sleep(max(0.0, t0 + ticks * TICK_S - time.perf_counter()))
    elapsed = time.perf_counter() - t0
    last = writer.version
    writer.close()
    store.close()
    return {"events": written, "seconds": elapsed, "rate": written / elapsed,
            "last_version": last, "batches": len(commits), "commit_ms": stats(commits)}


async def live_session(db: Path, rate: float, seconds: float, seed: int) -> dict[str, Any]:
    """Follow a live run while a writer process appends to it."""
    from npu_deploy.tui import DeployApp

    writer = await asyncio.create_subprocess_exec(
        *child("benchmarks.tui_bench", "--writer-child", str(db), "--run-id", LIVE_RUN_ID, "--rate",
               str(rate), "--live-seconds", str(seconds), "--seed", str(seed)),
        cwd=ROOT, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
    assert writer.stdin is not None and writer.stdout is not None
    if (await writer.stdout.readline()).strip() != b"ready":
        raise RuntimeError("the writer child did not attach to the live run")
    reader = sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    app, watch = DeployApp(db, run_id=LIVE_RUN_ID, live=True), Watch()
    lag: list[int] = []
    with stream_lines_drawn() as drawn:
        t0 = time.perf_counter()
        async with app.run_test(size=SIZE, message_hook=watch.hook) as pilot:
            paint_s = await first_paint(pilot, t0, drawn)
            screen = app.screen
            await wait_for(lambda: watch.warm_done is not None, timeout=600)

            def sample() -> None:
                head = reader.execute("SELECT head_version FROM runs WHERE run_id = ?",
                                      (LIVE_RUN_ID,)).fetchone()[0]
                lag.append(head - screen.timeline.head)

            probe = LatenessProbe(app, sample)
            probe.start()
            await asyncio.sleep(1.0)                  # the idle app, for comparison
            idle = list(probe.late_ms)
            lag.clear()
            probe.start()
            batches0, events0 = watch.arrived_batches, watch.arrived_events
            cpu0 = time.process_time()
            with gc_pauses() as pauses:
                writer.stdin.write(b"go\n")
                await writer.stdin.drain()
                w0 = time.perf_counter()
                result = json.loads(await writer.stdout.readline())
                stream_s = time.perf_counter() - w0
                probe.stop()
            cpu_share = (time.process_time() - cpu0) / stream_s
            batches = watch.arrived_batches - batches0
            delivered = watch.arrived_events - events0
            stopped_lag = result["last_version"] - screen.timeline.head
            try:
                catch_up: float | None = await wait_for(
                    lambda: screen.timeline.head >= result["last_version"], timeout=5)
            except TimeoutError:
                catch_up = None
            final_head = screen.timeline.head
    await writer.wait()
    reader.close()
    late = probe.late_ms
    return {"first_paint_s": paint_s, "writer": result, "lateness_ms": stats(late),
            "idle_lateness_ms": stats(idle), "lag_events": stats([float(x) for x in lag]),
            "ui_cpu_share": cpu_share, "ui_batches": batches, "ui_batch_events":
            delivered / batches if batches else 0.0,
            "lag_at_writer_stop": stopped_lag, "catch_up_s": catch_up,
            "ui_head": final_head, "caught_up": final_head >= result["last_version"],
            "gc_ms": {f"gen{g}": stats(v) for g, v in pauses.items()},
            "peak_rss_mb": rss_mb()[1]}


# --- the benchmark -----------------------------------------------------------------------------

@dataclass
class Params:
    events: int
    seeks: int
    live_seconds: float
    rate: float
    live_prefix: int
    seed: int
    cache_dir: Path
    quick: bool
    progress: Callable[[str], None] = field(default=lambda msg: None)


async def measure(p: Params, db: Path, versions: list[int]) -> dict[str, Any]:
    sessions = []
    for tab in TABS:
        p.progress(f"replay with the {TAB_NAMES[tab]} tab: first paint, {len(versions)} cold "
                   f"and {len(versions)} warm seeks ...")
        sessions.append(await replay_session(db, tab, versions))
    rss_after, peak_after = rss_mb()
    with tempfile.TemporaryDirectory(prefix="tui-bench-live-") as tmp:
        live_db = Path(tmp) / "live.db"
        p.progress(f"live: writing a {p.live_prefix}-event prefix (child process) ...")
        prefix = run_child("--generate-child", str(live_db), "--events", str(p.events),
                           "--seed", str(p.seed), "--run-id", LIVE_RUN_ID, "--stop-at",
                           str(p.live_prefix))
        p.progress(f"live: a writer process appends {p.rate:.0f} events/s for "
                   f"{p.live_seconds:g} s while the app follows (in a fresh process) ...")
        live = run_child("--live-child", str(live_db), "--rate", str(p.rate),
                         "--live-seconds", str(p.live_seconds), "--seed", str(p.seed))
        live["prefix_events"] = prefix["events"]
    return {"sessions": sessions, "rss_after_replay_mb": rss_after,
            "peak_after_replay_mb": peak_after, "live": live}


def run_benchmark(p: Params) -> dict[str, Any]:
    import textual

    p.progress("importing npu_tui in a fresh interpreter ...")
    imports = import_seconds()
    import npu_deploy.tui  # noqa: F401  (the baseline below includes it)

    base_rss, base_peak = rss_mb()
    p.progress(f"the {p.events}-event run (generated in a child process, or cached) ...")
    db, info, cached = cached_run(p.cache_dir, p.events, p.seed)
    head = info["events"]
    rng = random.Random(p.seed)
    versions = [rng.randrange(1, head + 1) for _ in range(p.seeks)]
    m = asyncio.run(measure(p, db, versions))
    reads = screen_reads_ms(db)
    report = {
        "source": "measured-cpu",
        "machine": {"cpu": cpu_name(), "cpus": os.cpu_count(),
                    "python": platform.python_version(), "textual": textual.__version__,
                    "sqlite": sqlite3.sqlite_version},
        "params": {"events_requested": p.events, "seeks": p.seeks, "size": list(SIZE),
                   "live_seconds": p.live_seconds, "rate": p.rate,
                   "live_prefix": p.live_prefix, "seed": p.seed, "quick": p.quick,
                   "percentiles": "nearest-rank"},
        "run": {"path": str(db), "cached": cached, **info},
        "import_s": imports,
        "screen_reads": reads,
        "replay": m["sessions"],
        "live": m["live"],
        "memory": {"baseline_rss_mb": base_rss, "baseline_peak_mb": base_peak,
                   "after_replay_rss_mb": m["rss_after_replay_mb"],
                   "peak_after_replay_mb": m["peak_after_replay_mb"],
                   "live_process_peak_mb": m["live"]["peak_rss_mb"]},
    }
    report["targets"] = targets(report)
    for s in report["replay"]:                     # keep the JSON short
        for series in ("cold", "warm"):
            s[series].pop("samples_seek_ms")
    return report


def targets(r: dict[str, Any]) -> list[dict[str, Any]]:
    def target(name: str, measured: float | None, limit: float, unit: str,
               passed: bool) -> dict[str, Any]:
        return {"target": name, "measured": measured, "limit": limit, "unit": unit,
                "passed": passed}

    first = r["replay"][0]["first_paint_s"]
    out = [target(f"first paint <= {FIRST_PAINT_TARGET_S} s", first, FIRST_PAINT_TARGET_S,
                  "s", first <= FIRST_PAINT_TARGET_S)]
    for s in r["replay"]:
        for series in ("cold", "warm"):
            p95 = s[series]["seek_render_ms"]["p95"]
            out.append(target(f"seek + drawn frame p95 <= {SEEK_P95_TARGET_MS:g} ms, "
                              f"{TAB_NAMES[s['tab']]} tab, {series}", p95, SEEK_P95_TARGET_MS,
                              "ms", p95 <= SEEK_P95_TARGET_MS))
    live = r["live"]
    p99 = live["lateness_ms"]["p99"]
    out.append(target(f"UI timer lateness p99 <= {LATENESS_P99_TARGET_MS:g} ms at "
                      f"{r['params']['rate']:.0f} events/s", p99, LATENESS_P99_TARGET_MS,
                      "ms", p99 <= LATENESS_P99_TARGET_MS))
    achieved = live["writer"]["rate"]
    out.append(target(f"the writer sustained >= 95% of {r['params']['rate']:.0f} events/s "
                      "(the load itself)", achieved, 0.95 * r["params"]["rate"], "events/s",
                      achieved >= 0.95 * r["params"]["rate"]))
    out.append(target("the UI's head reached the writer's last version (within 5 s)",
                      live["catch_up_s"], 5.0, "s", bool(live["caught_up"])))
    peak = r["memory"]["peak_after_replay_mb"]
    out.append(target(f"peak RSS <= {PEAK_RSS_TARGET_MB:g} MB", peak, PEAK_RSS_TARGET_MB,
                      "MB", peak <= PEAK_RSS_TARGET_MB))
    return out


# --- printing ---------------------------------------------------------------------------------

def _series_row(label: str, s: dict[str, Any]) -> str:
    a, b = s["seek_ms"], s["seek_render_ms"]
    return (f"    {label:<24} {a['p50']:>7.1f} {a['p95']:>7.1f} {a['max']:>7.1f}   "
            f"{b['p50']:>7.1f} {b['p95']:>7.1f} {b['max']:>7.1f}   {s['while_warming']:>5}")


def print_report(r: dict[str, Any]) -> None:
    m, p, run = r["machine"], r["params"], r["run"]
    print("npu-deploy TUI benchmark (measured on the CPU of this machine)")
    print(f"  cpu:     {m['cpu']} ({m['cpus']} cpus), Python {m['python']}, Textual "
          f"{m['textual']}, SQLite {m['sqlite']}")
    origin = "cached from an earlier run" if run["cached"] else "generated now"
    print(f"  run:     {run['events']:,} events ({origin}: written in {run['write_s']:.1f} s, "
          f"verified and replayed through the state machine in {run['total_s']:.1f} s in "
          f"all; {run['machine_moves']} machine moves, all legal; {run['snapshots']} "
          "snapshots)")
    print(f"  app:     headless run_test, {p['size'][0]} x {p['size'][1]} cells; importing "
          f"npu_tui takes {r['import_s']:.2f} s in a fresh interpreter (not in the figures)")
    print()
    first = r["replay"][0]
    reads = r["screen_reads"]
    print("  1. first paint (run_test entered -> run screen drawn with event lines)")
    print(f"    first app of the process: {first['first_paint_s'] * 1e3:.0f} ms (first event "
          f"line drawn at {first['first_line_s'] * 1e3:.0f} ms)")
    print("    each app opened: " + ", ".join(f"{s['first_paint_s'] * 1e3:.0f} ms"
                                             for s in r["replay"]))
    print(f"    of which the run screen's reads, timed apart: RunTimeline index "
          f"{reads['timeline_index_ms']:.0f} ms, state at the head "
          f"{reads['head_state_ms']:.0f} ms")
    print("    the warm-up worker finished " + ", ".join(
        f"{s['warm_worker_s']:.1f} s" for s in r["replay"]) + " after run_test was entered "
          f"({first['keyframes']} keyframes); quitting took "
          + ", ".join(f"{s['exit_s'] * 1e3:.0f} ms" for s in r["replay"]))
    print()
    print(f"  2. seeks to {p['seeks']} random versions (ms; seek() alone, then seek() + "
          "pilot.pause(0), which composes the frame)")
    print(f"    {'':<24} {'seek p50':>7} {'p95':>7} {'max':>7}   {'+render':>7} {'p95':>7} "
          f"{'max':>7}   {'warming':>5}")
    for s in r["replay"]:
        for series in ("cold", "warm"):
            print(_series_row(f"{TAB_NAMES[s['tab']]}, {series}", s[series]))
    idle = ", ".join(f"{s['idle_pause_ms']:.1f}" for s in r["replay"])
    print(f"    (warming = seeks made while the warm-up worker still ran; pilot.pause(0) with "
          f"nothing to draw takes {idle} ms)")
    print()
    live = r["live"]
    w = live["writer"]
    late, idle_late, lag = live["lateness_ms"], live["idle_lateness_ms"], live["lag_events"]
    print(f"  3. live: a writer process appends to a run of {live['prefix_events']:,} events "
          f"while the app follows it (first paint {live['first_paint_s'] * 1e3:.0f} ms)")
    print(f"    writer: {w['events']:,} events in {w['seconds']:.2f} s = {w['rate']:.0f} "
          f"events/s, {w['batches']} append_batch commits (p50 {w['commit_ms']['p50']:.1f} ms, "
          f"p99 {w['commit_ms']['p99']:.1f} ms)")
    print(f"    UI timer lateness (20 ms one-shot timers, {late['n']} fired): p50 "
          f"{late['p50']:.1f} ms, p99 {late['p99']:.1f} ms, max {late['max']:.1f} ms "
          f"(idle app: p50 {idle_late['p50']:.1f}, p99 {idle_late['p99']:.1f} ms; below 0: "
          "early, Textual shortens each sleep by 0.5 ms)")
    print(f"    UI behind the store's head: p50 {lag['p50']:.0f}, p99 {lag['p99']:.0f}, max "
          f"{lag['max']:.0f} events; {live['ui_batches']} EventsArrived messages (mean "
          f"{live['ui_batch_events']:.0f} events); the UI "
          f"process used {live['ui_cpu_share']:.0%} of a core")
    gen2 = live["gc_ms"]["gen2"]
    print(f"    full (gen 2) garbage collections during the stream: {gen2['n']}, p50 "
          f"{gen2['p50']:.0f} ms, max {gen2['max']:.0f} ms (each stops the UI loop)")
    catch = ("caught up " + (f"{live['catch_up_s'] * 1e3:.0f} ms after" if live['catch_up_s']
                             is not None else "NOT within 5 s of"))
    print(f"    at the writer's stop the UI was {live['lag_at_writer_stop']} events behind; "
          f"{catch} the stop (UI head v{live['ui_head']}, writer's last v{w['last_version']})")
    print()
    mem = r["memory"]
    print("  4. memory (this process)")
    print(f"    before any app (Python + imports): RSS {mem['baseline_rss_mb']:.0f} MB")
    growth = mem["peak_after_replay_mb"] - mem["baseline_rss_mb"]
    print(f"    after the replay measurements: RSS {mem['after_replay_rss_mb']:.0f} MB, peak "
          f"{mem['peak_after_replay_mb']:.0f} MB (+{growth:.0f} MB over the baseline); "
          "after each app: " + ", ".join(f"{s['rss_after_mb']:.0f}" for s in r["replay"])
          + " MB")
    print(f"    the live app's own process (part 3): peak {mem['live_process_peak_mb']:.0f} MB")
    print()
    print("  targets (measured on the CPU of this machine):")
    for t in r["targets"]:
        value = t["measured"]
        shown = "n/a" if value is None else (f"{value:.3f} s" if t["unit"] == "s" else
                                             f"{value:.1f} {t['unit']}")
        print(f"    {'PASS' if t['passed'] else 'FAIL'}  {t['target']}: measured {shown}")


# --- command line ------------------------------------------------------------------------------

def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=None, help="events in the run (100000)")
    ap.add_argument("--seeks", type=int, default=None, help="seeks per series (200)")
    ap.add_argument("--live-seconds", type=float, default=None, help="live stream (10 s)")
    ap.add_argument("--rate", type=float, default=1000.0, help="live events/s (1000)")
    ap.add_argument("--live-prefix", type=int, default=None,
                    help="events of the live run before the stream (half of --events)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", type=Path,
                    default=Path(tempfile.gettempdir()) / "npu-deploy-tui-bench",
                    help="where the generated run is kept between runs")
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 3000 events, 10 seeks, 1.5 s live")
    ap.add_argument("--json", action="store_true", help="print the report as JSON")
    ap.add_argument("--terminal", action="store_true",
                    help="instead: first paint and quit of every entry point as a real "
                         "process in tmux (benchmarks/tui_terminal.py)")
    ap.add_argument("--latency", action="store_true",
                    help="instead: key-to-frame latency of Tab, the tab switches, opening a "
                         "run and the new-deployment form (benchmarks/tui_latency.py)")
    ap.add_argument("--repeats", type=int, default=None,
                    help="--terminal: runs per entry point (3); --latency: warm repeats of "
                         "each key (10)")
    ap.add_argument("--model", default="tiny-llama", help="--terminal: the model deployed")
    ap.add_argument("--quit-after", type=float, default=1.0,
                    help="--terminal: seconds between the first paint and the quit key")
    ap.add_argument("--generate-child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--writer-child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--live-child", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--run-id", default=RUN_ID, help=argparse.SUPPRESS)
    ap.add_argument("--stop-at", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    quick = {"events": 3000, "seeks": 10, "live_seconds": 1.5}
    full = {"events": 100_000, "seeks": 200, "live_seconds": 10.0}
    latency = {"events": LATENCY_EVENTS}
    if args.repeats is None:
        args.repeats = 10 if args.latency else 3
    for name, value in {**(quick if args.quick else full),
                        **(latency if args.latency and not args.quick else {})}.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.live_prefix is None:
        args.live_prefix = args.events // 2
    if args.repeats < 1:
        ap.error("--repeats >= 1")
    if args.events < 200 or args.seeks < 1 or args.live_seconds <= 0 or args.rate <= 0:
        ap.error("--events >= 200, --seeks >= 1, --live-seconds > 0 and --rate > 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.generate_child is not None:
        print(json.dumps(generate(args.generate_child, args.run_id, args.events, args.seed,
                                  args.stop_at)))
        return 0
    if args.writer_child is not None:
        print(json.dumps(writer_child(args.writer_child, args.run_id, args.rate,
                                      args.live_seconds, args.seed)), flush=True)
        return 0
    if args.live_child is not None:
        print(json.dumps(asyncio.run(live_session(args.live_child, args.rate,
                                                  args.live_seconds, args.seed))))
        return 0
    progress: Callable[[str], None] = (lambda msg: None) if args.json else (
        lambda msg: print(msg, file=sys.stderr, flush=True))
    if args.terminal:
        from benchmarks.tui_terminal import print_terminal, run_terminal

        return emit(run_terminal(args.repeats, args.model, args.quit_after, progress),
                    args.json, print_terminal)
    if args.latency:
        from benchmarks.tui_latency import print_latency, run_latency

        return emit(run_latency(args.events, args.seed, args.cache_dir, args.repeats,
                                progress), args.json, print_latency)
    params = Params(args.events, args.seeks, args.live_seconds, args.rate, args.live_prefix,
                    args.seed, args.cache_dir, args.quick, progress)
    return emit(run_benchmark(params), args.json, print_report)


if __name__ == "__main__":
    sys.exit(main())
