"""`npu-deploy validate-hardware MODEL`: what a person with a Ryzen AI 300 machine runs to
find out what this project does on a real NPU, written as one self-contained report
(kernels.npu_runtime.hardware_report) that `npu-deploy import-measurements` adds to the kernel data
as rows measured here (kernels.measured.measured_here).

First the control, if the machine has one (kernels.npu_runtime.control: one of upstream's
own examples, run as upstream's tests run it), so that a failure can be told apart: the
setup's (the control failed too) or our program's (only ours failed). Then, in order, on the
NPU backend (kernels.npu_runtime.npu_backend), every failure recorded with its program and
stage and the rest going on:

1. every program of the model's prefill and decode plans, baseline and optimized, emitted,
   grouped by program (a program is its kernels, shapes and layouts, never its layer: every
   layer's dispatch runs one build) and each distinct program compiled (or taken from the
   compile cache);
2. Phase 1: every (kernel, shape) the model launches, at the configuration the selection
   gives it, run alone on the gate's inputs and checked against the FP32 reference by
   Phase 1's own checks (pipeline.gates.kernels), then timed `repeats` more times;
3. Phase 2: layer 0 of the model on the NPU against the FP32 oracle's golden tensors, by
   Phase 2's own checks (pipeline.gates.block), and its prefill timed.

`quick` does less, to say in minutes whether the machine works: Phase 1 on one (kernel,
shape) of each NPU kernel family the model launches (each compiled and run), and the merged
program of the optimized prefill with the most launches compiled (an ELF, the format
upstream's pipelines use); no block. A failed compile keeps aircc's log and the program's
IR in the report (pipeline.hardware_kit).

The runtime is pyxrt and mlir-air. A test gives another (`runtime`, a module:function, as a
deployment's `npu_runtime`): the simulated NPU of tests/fake_npu.py, called with a `Bench`
and returning the backend's runner, compiler and lock, the toolchain that machine has, and
its control.
"""

from __future__ import annotations

import platform
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from npu_deploy.events.describe import check_text, failing_checks
from npu_deploy.kernels.air_programs.air import EmitError, Program
from npu_deploy.kernels.definition.hardware import XDNA2, Hardware
from npu_deploy.kernels.definition.selection import select
from npu_deploy.kernels.definition.specs import SPECS, KernelUse
from npu_deploy.kernels.emulation.validate import output_buffers, seeded_inputs, validate_kernel
from npu_deploy.kernels.npu_runtime.control import Control
from npu_deploy.kernels.npu_runtime.hardware_report import NPU_RUNTIME, SCHEMA, SCHEMA_VERSION, seal
from npu_deploy.kernels.npu_runtime.needed_objects import plans_of
from npu_deploy.kernels.npu_runtime.npu_backend import NpuBackend, alone, measure
from npu_deploy.kernels.npu_runtime.toolchain import Requirement, npu_name
from npu_deploy.kernels.plans.plan import Dispatch, DispatchPlan
from npu_deploy.models.loading import LoadedModel
from npu_deploy.oracle import reference_of
from npu_deploy.oracle.prompts import canonical_prompts
from npu_deploy.pipeline.gates.block import checks_of_block
from npu_deploy.pipeline.gates.kernels import KERNEL_SEED, checks_of_kernel
from npu_deploy.pipeline.hardware_kit import (
    NoSteps,
    Steps,
    diagnose,
    error_chain,
    failed_ir,
    quick_choice,
)
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import (
    block_comparison,
    block_model,
    json_number,
    model_kernel_uses,
    validation_summary,
)


@dataclass(frozen=True)
class Bench:
    """What a runtime hook is called with, as a deployment's `npu_runtime` is called with
    its workspace: the model, and a directory of the session's own."""

    loaded: LoadedModel
    directory: Path


def machine() -> dict[str, Any]:
    """This machine, as a report names it."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"hostname": socket.gethostname(), "cpu": cpu, "kernel": platform.release(),
            "os": platform.platform(), "python": platform.python_version(),
            "npu": npu_name()}


def tools(toolchain: list[Requirement]) -> dict[str, dict[str, Any]]:
    """Each requirement of the real-NPU path as the toolchain found it, with its version."""
    return {r.key: {"what": r.what, "found": r.found, "version": r.version} for r in toolchain}


def model_plans(model: str, loaded: LoadedModel, seq_len: int, hw: Hardware = XDNA2
                ) -> list[tuple[str, DispatchPlan]]:
    """The plans whose programs a deployment of the model may run: prefill at seq_len and
    decode at that position, each as phase 1 starts it and as the modeled optimizer leaves
    it (kernels.npu_runtime.needed_objects.plans_of)."""
    return plans_of(model, loaded.args, seq_len, hw)


def _message(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}".replace("\n", " ")


def _median(values: list[float]) -> float:
    return float(np.median(values))


@dataclass
class HardwareValidation:
    """One validate-hardware session on `backend`: its steps, and what failed so far."""

    model: str
    loaded: LoadedModel
    backend: NpuBackend
    seq_len: int
    repeats: int
    hw: Hardware = XDNA2
    progress: Callable[[str], None] = lambda line: None
    steps: Steps = field(default_factory=NoSteps)
    failures: list[dict[str, str]] = field(default_factory=list)

    def failed(self, program: str, stage: str, error: BaseException | str) -> None:
        message = error if isinstance(error, str) else _message(error)
        self.failures.append({"program": program, "stage": stage, "message": message})
        self.progress(f"failed   {stage:<8} {program}: {message}")

    def run_control(self, control: Control | None) -> dict[str, Any] | None:
        """Upstream's example, before our backend holds the NPU (its runner takes the same
        lock)."""
        if control is None:
            self.progress("control  none: no upstream example to run (--mlir-air-source)")
            return None
        result = control()
        self.progress(f"control  {'passed' if result.passed else 'FAILED'}: upstream's "
                      f"{result.example} ({result.seconds:.1f} s)")
        if not result.passed:
            self.failed(result.example, "control", f"upstream's own example failed on this "
                        f"machine: {result.log.strip().splitlines()[-1:] or ['no output']}")
        return result.as_json()

    def compile_one(self, scope: str, dispatch: Dispatch, program: Program,
                    head_dim: int | None, shared: int = 1) -> dict[str, Any]:
        """Compile `program` (the backend's for `dispatch`) and its report row; a failure
        keeps aircc's log and the program's IR."""
        row: dict[str, Any] = {
            "plan": scope, "dispatch": dispatch.name, "function": program.function,
            "digest": program.digest, "structure": program.function,
            "programs": shared, "launches": len(dispatch.launches), "compiled": False,
            "cached": False, "compile_s": None, "log": None, "ir": None}
        t0 = time.perf_counter()
        try:
            _, artifact = self.backend.program(dispatch, head_dim)
        except Exception as e:      # mlir-air's own errors, whatever they are
            self.failed(program.function, "compile", e)
            row.update(log=error_chain(e), ir=failed_ir(program, self.backend.build_dir(
                program)))
        else:
            row.update(compiled=True, cached=artifact.cached,
                       compile_s=time.perf_counter() - t0)
        self.steps.advance(time.perf_counter() - t0)
        return row

    def plan_programs(self) -> list[tuple[str, DispatchPlan, Dispatch, Program, int]]:
        """Each distinct program of the model's plans: (scope, plan, dispatch, program, how
        many dispatches run it), in the plans' order."""
        head_dim = self.loaded.args.head_dim
        first: dict[str, list[Any]] = {}
        for scope, plan in model_plans(self.model, self.loaded, self.seq_len, self.hw):
            self.backend.prepare(plan)      # the plan's programs as the backend runs them
            for dispatch in plan.dispatches:
                try:
                    program = self.backend.emitted(dispatch, head_dim)
                except EmitError as e:
                    self.failed(dispatch.name, "emit", e)
                    continue
                # a program is its structure, never its layer: one build per digest
                entry = first.setdefault(program.digest, [scope, plan, dispatch, program, 0])
                entry[4] += 1
        return [tuple(entry) for entry in first.values()]     # type: ignore[misc]

    def compile_programs(self) -> list[dict[str, Any]]:
        """Every program of the model's plans emitted, and each distinct one compiled.
        A program that fails is recorded and the others go on: a kit stops for nothing."""
        chosen = self.plan_programs()
        self.steps.begin("compiling each distinct program", len(chosen))
        rows, prepared = [], None
        for scope, plan, dispatch, program, shared in chosen:
            if plan is not prepared:
                self.backend.prepare(plan)
                prepared = plan
            rows.append(self.compile_one(scope, dispatch, program, self.loaded.args.head_dim,
                                         shared))
        self.steps.end()
        self.progress(f"compiled {sum(r['compiled'] for r in rows)} of {len(rows)} "
                      f"distinct programs (run by {sum(r['programs'] for r in rows)} "
                      "dispatches)")
        return rows

    def merged_program(self) -> dict[str, Any] | None:
        """The merged program of the optimized prefill with the most launches, compiled."""
        for scope, plan in model_plans(self.model, self.loaded, self.seq_len, self.hw):
            if scope != "prefill optimized":
                continue
            self.backend.prepare(plan)
            merged = max(plan.dispatches, key=lambda d: len(d.launches), default=None)
            if merged is None or len(merged.launches) < 2:
                return None
            try:
                program = self.backend.emitted(merged, self.loaded.args.head_dim)
            except EmitError as e:
                self.failed(merged.name, "emit", e)
                return None
            return self.compile_one(scope, merged, program, self.loaded.args.head_dim)
        return None

    def validate_kernels(self, only: set[str] | None = None,
                         programs: list[dict[str, Any]] | None = None
                         ) -> list[dict[str, Any]]:
        """Phase 1 on the NPU: each kernel alone (those of `only`, by config key, when
        given), its numerics by Phase 1's checks, and its time: the median of `repeats`
        runs after the validation run. With `programs`, each compile's row goes there."""
        rows = []
        uses = model_kernel_uses(self.model, self.loaded.args, self.seq_len, Recipe(), self.hw)
        chosen = sorted(k for k in uses if only is None or k in only)
        if programs is None:
            self.steps.begin("Phase 1: each kernel alone", len(chosen))
        for key in chosen:
            row = self._kernel(uses[key], key, programs)
            if row is not None:
                rows.append(row)
        if programs is None:
            self.steps.end()
        passed = sum(r["passed"] for r in rows)
        self.progress(f"validated {passed} of {len(chosen)} kernels")
        return rows

    def _kernel(self, use: dict[str, Any], key: str,
                programs: list[dict[str, Any]] | None) -> dict[str, Any] | None:
        spec, shape = SPECS[use["kernel"]], use["shape"]
        config = select(KernelUse(use["roles"][0], spec, shape), self.hw).config
        dispatch = alone(spec, shape, config)
        head_dim = config.get("head_dim") or shape.get("head_dim")
        try:
            program = self.backend.emitted(dispatch, head_dim)
        except EmitError as e:
            self.failed(dispatch.name, "emit", e)
            return None
        if programs is not None:
            row = self.compile_one("kernel alone", dispatch, program, head_dim)
            programs.append(row)
            if not row["compiled"]:
                return None
        else:
            t0 = time.perf_counter()
            try:
                self.backend.program(dispatch, head_dim)
            except Exception as e:
                self.failed(dispatch.name, "compile", e)
                return None
            finally:
                self.steps.advance(time.perf_counter() - t0)
        inputs = seeded_inputs(spec, shape, KERNEL_SEED, config)
        try:
            report = validate_kernel(spec, shape, config, self.backend, inputs=inputs,
                                     hw=self.hw)
            runs = []
            for _ in range(self.repeats):
                self.backend.run(spec, shape, config, inputs, output_buffers(spec, shape))
                runs.append(self.backend.times[-1])
        except Exception as e:
            self.failed(program.function, "run", e)
            return None
        summary = validation_summary(report)
        failing = [check_text(c) for c in failing_checks(checks_of_kernel(key, summary))]
        if failing:
            self.failed(program.function, "numerics", "; ".join(failing))
        return {"kernel": spec.name, "shape": dict(shape), "config": dict(config),
                "roles": list(use["roles"]), "mode": use["mode"],
                "seconds": _median([t.run_s for t in runs]),
                "runs_s": [t.run_s for t in runs],
                "host_write_s": _median([t.write_s for t in runs]),
                "host_read_s": _median([t.read_s for t in runs]),
                "numerics": summary["outputs"], "atol": summary["atol"],
                "rtol": summary["rtol"], "failed_checks": failing, "passed": not failing}

    def quick(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """One (kernel, shape) of each NPU kernel family compiled and run through Phase 1,
        and the largest merged program compiled: (programs, kernels)."""
        uses = model_kernel_uses(self.model, self.loaded.args, self.seq_len, Recipe(), self.hw)
        chosen = quick_choice(uses)
        self.steps.begin("quick: one program per kernel family and one merged",
                         len(chosen) + 1)
        programs: list[dict[str, Any]] = []
        kernels = self.validate_kernels(set(chosen.values()), programs)
        merged = self.merged_program()
        if merged is not None:
            programs.append(merged)
        self.steps.end()
        self.progress(f"compiled {sum(r['compiled'] for r in programs)} of {len(programs)} "
                      f"programs ({len(chosen)} kernel families, one merged)")
        return programs, kernels

    def run_block(self) -> dict[str, Any] | None:
        """Phase 2 on the NPU: layer 0 on the prompt of seq_len tokens against the FP32
        oracle, and its prefill measured as a deployment measures one."""
        name = "L0 block"
        tokenizer = self.loaded.tokenizer
        ids = canonical_prompts(self.seq_len, chat=False)[-1].token_ids(tokenizer)
        goldens = reference_of(self.loaded).capture(ids)
        deployed = block_model(self.model, self.loaded, Recipe(), self.backend, self.hw)
        plan = deployed.prefill_plan(int(ids.shape[0]))
        try:
            tensors = deployed.runner.run(plan, ids).tensors
            profile = measure(deployed.runner, plan, ids, repeats=self.repeats)
        except Exception as e:
            self.failed(name, "block", e)
            return None
        metrics = {name: {k: json_number(v) for k, v in m.items()}
                   for name, m in block_comparison(tensors, goldens).items()}
        checks = checks_of_block(metrics, self.loaded.args.head_dim)
        failing = [check_text(c) for c in failing_checks(checks)]
        if failing:
            self.failed(name, "numerics", "; ".join(failing))
        self.progress(f"block    {'passed' if not failing else 'FAILED'} "
                      f"({profile.total_s * 1e3:.3f} ms)")
        return {"tokens": int(ids.shape[0]), "dispatches": len(plan.dispatches),
                "seconds": profile.total_s, "runs_s": list(profile.runs),
                "one_time_s": profile.one_time_s, "metrics": metrics, "checks": checks,
                "passed": not failing}


def validate_hardware(model: str, loaded: LoadedModel, backend: NpuBackend, *,
                      toolchain: list[Requirement], seq_len: int, repeats: int,
                      runtime: str = NPU_RUNTIME, code_version: str = "0+unknown",
                      hw: Hardware = XDNA2, quick: bool = False, control: Control | None = None,
                      steps: Steps | None = None,
                      progress: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """The whole kit on `backend` (or its `quick` part), after the `control`, as a sealed
    report (kernels.npu_runtime.hardware_report)."""
    session = HardwareValidation(model, loaded, backend, seq_len, repeats, hw, progress,
                                 steps or NoSteps())
    checked = session.run_control(control)
    if quick:
        programs, kernels = session.quick()
        block = None
    else:
        programs = session.compile_programs()
        kernels = session.validate_kernels()
        block = session.run_block()
    diagnosis = diagnose(checked, session.failures)
    progress(f"verdict  {diagnosis['text']}")
    return seal({
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "npu_deploy": code_version, "runtime": runtime,
        "mode": "quick" if quick else "full",
        "model": {"spec": model, "origin": loaded.source.origin,
                  "args": loaded.args.as_dict()},
        "seq_len": seq_len, "repeats": repeats, "machine": machine(),
        "tools": tools(toolchain), "control": checked, "diagnosis": diagnosis,
        "programs": programs, "kernels": kernels, "block": block,
        "failures": session.failures})


__all__ = ["Bench", "HardwareValidation", "machine", "model_plans", "tools",
           "validate_hardware"]
