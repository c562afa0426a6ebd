"""`npu-deploy validate-hardware MODEL`: what a person with a Ryzen AI 300 machine runs to
find out what this project does on a real NPU, written as one self-contained report
(kernels.npu_runtime.hardware_report) that `npu-deploy import-measurements` adds to the kernel data
as rows measured here (kernels.measured.measured_here).

In order, on the NPU backend (kernels.npu_runtime.npu_backend), every failure recorded with its
program and stage and the rest going on:

1. every program of the model's prefill and decode plans, baseline and optimized, emitted
   and compiled (or taken from the compile cache);
2. Phase 1: every (kernel, shape) the model launches, at the configuration the selection
   gives it, run alone on the gate's inputs and checked against the FP32 reference by
   Phase 1's own checks (pipeline.gates.kernels), then timed `repeats` more times;
3. Phase 2: layer 0 of the model on the NPU against the FP32 oracle's golden tensors, by
   Phase 2's own checks (pipeline.gates.block), and its prefill timed.

The runtime is pyxrt and mlir-air. A test gives another (`runtime`, a module:function, as a
deployment's `npu_runtime`): the simulated NPU of tests/fake_npu.py, called with a `Bench`
and returning the backend's runner, compiler and lock and the toolchain that machine has.
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
from npu_deploy.kernels.air_programs.air import EmitError
from npu_deploy.kernels.definition.hardware import XDNA2, Hardware
from npu_deploy.kernels.definition.selection import select
from npu_deploy.kernels.definition.specs import SPECS, Decode, KernelUse, Prefill
from npu_deploy.kernels.emulation.validate import output_buffers, seeded_inputs, validate_kernel
from npu_deploy.kernels.npu_runtime.hardware_report import NPU_RUNTIME, SCHEMA, SCHEMA_VERSION, seal
from npu_deploy.kernels.npu_runtime.npu_backend import NpuBackend, alone, measure
from npu_deploy.kernels.npu_runtime.toolchain import Requirement, npu_name
from npu_deploy.kernels.plans.optimize import optimize
from npu_deploy.kernels.plans.plan import DispatchPlan, baseline_plan
from npu_deploy.models.loading import LoadedModel
from npu_deploy.oracle import reference_of
from npu_deploy.oracle.prompts import canonical_prompts
from npu_deploy.pipeline.gates.block import checks_of_block
from npu_deploy.pipeline.gates.kernels import KERNEL_SEED, checks_of_kernel
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
    it (merged dispatches are the programs most likely to fail)."""
    plans = []
    for scope, mode in (("prefill", Prefill(seq_len)), ("decode", Decode(seq_len))):
        base = baseline_plan(model, loaded.args, mode, hw)
        plans += [(scope, base), (f"{scope} optimized", optimize(base, hw).plan)]
    return plans


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
    failures: list[dict[str, str]] = field(default_factory=list)

    def failed(self, program: str, stage: str, error: BaseException | str) -> None:
        message = error if isinstance(error, str) else _message(error)
        self.failures.append({"program": program, "stage": stage, "message": message})
        self.progress(f"failed   {stage:<8} {program}: {message}")

    def compile_programs(self) -> list[dict[str, Any]]:
        """Every program of the model's plans, emitted and compiled once each. A program
        that fails is recorded and the others go on: a kit stops for nothing."""
        head_dim = self.loaded.args.head_dim
        rows: list[dict[str, Any]] = []
        seen: set[str] = set()
        for scope, plan in model_plans(self.model, self.loaded, self.seq_len, self.hw):
            self.backend.prepare(plan)      # the plan's programs as the backend runs them
            for dispatch in plan.dispatches:
                try:
                    program = self.backend.emitted(dispatch, head_dim)
                except EmitError as e:
                    self.failed(dispatch.name, "emit", e)
                    continue
                if program.digest in seen:
                    continue
                seen.add(program.digest)
                row = {"plan": scope, "dispatch": dispatch.name, "function": program.function,
                       "digest": program.digest, "launches": len(dispatch.launches),
                       "compiled": False, "cached": False, "compile_s": None}
                rows.append(row)
                t0 = time.perf_counter()
                try:
                    _, artifact = self.backend.program(dispatch, head_dim)
                except Exception as e:      # mlir-air's own errors, whatever they are
                    self.failed(program.function, "compile", e)
                    continue
                row.update(compiled=True, cached=artifact.cached,
                           compile_s=time.perf_counter() - t0)
        self.progress(f"compiled {sum(r['compiled'] for r in rows)} of {len(rows)} programs")
        return rows

    def validate_kernels(self) -> list[dict[str, Any]]:
        """Phase 1 on the NPU: each kernel alone, its numerics by Phase 1's checks, and its
        time: the median of `repeats` runs after the validation run."""
        rows = []
        uses = model_kernel_uses(self.model, self.loaded.args, self.seq_len, Recipe(), self.hw)
        for key, use in sorted(uses.items()):
            spec, shape = SPECS[use["kernel"]], use["shape"]
            config = select(KernelUse(use["roles"][0], spec, shape), self.hw).config
            dispatch = alone(spec, shape, config)
            try:
                program, _ = self.backend.program(dispatch, config.get("head_dim"))
            except EmitError as e:
                self.failed(dispatch.name, "emit", e)
                continue
            except Exception as e:
                self.failed(dispatch.name, "compile", e)
                continue
            inputs = seeded_inputs(spec, shape, KERNEL_SEED)
            try:
                report = validate_kernel(spec, shape, config, self.backend, inputs=inputs,
                                         hw=self.hw)
                runs = []
                for _ in range(self.repeats):
                    self.backend.run(spec, shape, config, inputs, output_buffers(spec, shape))
                    runs.append(self.backend.times[-1])
            except Exception as e:
                self.failed(program.function, "run", e)
                continue
            summary = validation_summary(report)
            failing = [check_text(c) for c in failing_checks(checks_of_kernel(key, summary))]
            if failing:
                self.failed(program.function, "numerics", "; ".join(failing))
            rows.append({"kernel": spec.name, "shape": dict(shape), "config": dict(config),
                         "roles": list(use["roles"]), "mode": use["mode"],
                         "seconds": _median([t.run_s for t in runs]),
                         "runs_s": [t.run_s for t in runs],
                         "host_write_s": _median([t.write_s for t in runs]),
                         "host_read_s": _median([t.read_s for t in runs]),
                         "numerics": summary["outputs"], "atol": summary["atol"],
                         "rtol": summary["rtol"], "failed_checks": failing,
                         "passed": not failing})
        passed = sum(r["passed"] for r in rows)
        self.progress(f"validated {passed} of {len(uses)} kernels")
        return rows

    def run_block(self) -> dict[str, Any] | None:
        """Phase 2 on the NPU: layer 0 on the prompt of seq_len tokens against the FP32
        oracle, and its prefill measured as a deployment measures one."""
        name = "L0 block"
        tokenizer = self.loaded.tokenizer
        ids = canonical_prompts(self.seq_len, chat=False)[-1].token_ids(tokenizer)
        goldens = reference_of(self.loaded).capture(ids)
        deployed = block_model(self.model, self.loaded, Recipe(), self.backend, self.hw)
        plan = deployed.plan(Prefill(int(ids.shape[0])))
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
                      hw: Hardware = XDNA2,
                      progress: Callable[[str], None] = lambda line: None) -> dict[str, Any]:
    """The whole kit on `backend`, as a sealed report (kernels.npu_runtime.hardware_report)."""
    session = HardwareValidation(model, loaded, backend, seq_len, repeats, hw, progress)
    programs = session.compile_programs()
    kernels = session.validate_kernels()
    block = session.run_block()
    return seal({
        "schema": SCHEMA, "schema_version": SCHEMA_VERSION,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "npu_deploy": code_version, "runtime": runtime,
        "model": {"spec": model, "origin": loaded.source.origin,
                  "args": loaded.args.as_dict()},
        "seq_len": seq_len, "repeats": repeats, "machine": machine(),
        "tools": tools(toolchain), "programs": programs, "kernels": kernels, "block": block,
        "failures": session.failures})


__all__ = ["Bench", "HardwareValidation", "machine", "model_plans", "tools",
           "validate_hardware"]
