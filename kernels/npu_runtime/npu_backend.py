"""The XRT backend of a deployment: every dispatch of a plan run on the NPU as its MLIR-AIR
program, compiled once (cached by content), timed.

`NpuBackend` is what the plan runner and the kernel validation call, as they call the
emulator: `run_dispatch` runs one `Dispatch` (all its launches, one submission), `run` one
kernel alone (phase 1 builds a one-launch dispatch for it). For each dispatch it

* emits the program (`kernels.air_programs.air`) and writes it to the run's workspace (`programs`),
* compiles it with mlir-air's XRT backend, or takes it from the cache
(`kernels.npu_runtime.xrt_runtime`),
* runs it through pyxrt under the NPU lock, each function argument given the kind its
  plan bindings say: a weight is static (written the first time only), a tensor produced
  and consumed on the device is an intermediate (one device buffer, shared by every
  program that binds it, never synced), an input is written, an output read back,
* keeps the measured times (`times`: run wall, host writes and reads, source
  measured-npu).

`measure` turns repeated runs of a plan into a `Profile` whose source is measured-npu: per
step the median, and every run's total, so a comparison can see the run-to-run spread.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..air_programs.air import (
    Program,
    emit_dispatch,
    identifier,
    on_device,
    pad_sequences,
    tensor_key,
    write_programs,
)
from ..definition.hardware import XDNA2, Hardware
from ..definition.registry import FAMILIES, family
from ..definition.specs import KernelSpec, Prefill, Shape
from ..emulation.tensors import pad_heads, unpad_heads
from ..performance.model import Profile, StepProfile, estimate
from ..plans.plan import Binding, Dispatch, DispatchPlan, Kind, Launch, Layout
from ..plans.plan_runner import PlanRunner, StepTime, _physical
from .xrt_runtime import (
    LOCK_PATH,
    Artifact,
    DispatchTimes,
    XrtError,
    XrtRunner,
    compile_program,
    content_key,
    npu_lock,
)

Tensors = dict[str, torch.Tensor]
#: What the plan runner hands over per launch: its config, its inputs and outputs by operand.
Operands = tuple[dict[str, Any], Tensors, Tensors]

#: Operands stored head-first when a kernel runs alone (the spec's dims, as the emulator
#: reads them without a plan's layouts), as each family declares.
HEAD_FIRST = {name: f.head_first_alone for name, f in FAMILIES.items() if f.head_first_alone}


def argument_kinds(dispatch: Dispatch, program: Program) -> dict[str, str]:
    """The kind of each argument of `program`, from the bindings of every launch that names
    its tensor: static if a weight, output if any launch writes it for the host, an
    intermediate if it lives on the device only, else an input."""
    by_key: dict[str, list[tuple[Binding, str]]] = {}
    for launch in dispatch.launches:
        roles = {op.name: op.role for op in launch.spec.operands(launch.shape_dict)}
        for b in launch.bindings:
            by_key.setdefault(tensor_key(launch, b), []).append((b, roles[b.operand]))
    kinds = {}
    for (name, _, _), key in zip(program.arguments, program.tensors, strict=True):
        if key.startswith("scratch:"):
            kinds[name] = "scratch"         # device only, the program's own (never synced)
            continue
        if key.startswith("runtime:"):
            kinds[name] = "input"           # a run-time dimension's value, written per run
            continue
        bound = by_key[key]
        written = [b for b, role in bound if role == "output"]
        if any(b.kind == "static" for b, _ in bound):
            kinds[name] = "static"
        elif written:
            kinds[name] = "output" if any(b.kind == "output" for b in written) \
                else "intermediate"
        else:
            kinds[name] = "intermediate" if all(b.kind == "intermediate" for b, _ in bound) \
                else "input"
    return kinds


@dataclass
class NpuBackend:
    """Runs dispatches on an XDNA 2 NPU. `runner` and `compiler` default to pyxrt and
    mlir-air (both required then); tests pass their own."""

    cache: Path
    objects: Path
    programs: Path | None = None            # where each emitted program is written
    hw: Hardware = XDNA2
    runner: XrtRunner | None = None
    compiler: Callable[[Program], Artifact] | None = None
    lock: Path = LOCK_PATH                  # the NPU lock, shared with mlir-air's runs
    name: str = "xrt"
    times: list[DispatchTimes] = field(default_factory=list)
    written: dict[str, dict[str, Any]] = field(default_factory=dict)   # file -> its entry
    _programs: dict[tuple[Any, ...], tuple[Program, Artifact]] = field(default_factory=dict)
    _builds: dict[str, Artifact] = field(default_factory=dict)   # program digest -> its build
    _sizes: dict[str, int] = field(default_factory=dict)     # tensor -> padded elements
    _padded: dict[Dispatch, Dispatch] = field(default_factory=dict)   # its sequence padded
    _prepared: set[Dispatch] = field(default_factory=set)   # the padded ones, as they run
    _lock: Any = None

    def _runner(self) -> XrtRunner:
        if self.runner is None:
            self.runner = XrtRunner(hw_contexts=self.hw.hw_contexts)
        return self.runner

    def clock(self) -> float:
        """The time the measurements read: the XRT runner's clock (the host's perf_counter;
        a simulated device may keep its own), for the plan's host steps too."""
        return self._runner().clock()

    def _hold(self) -> None:
        """Take the NPU lock once, for as long as this backend holds the device."""
        if self._lock is None:
            self._lock = npu_lock(self.lock)
            self._lock.__enter__()

    def close(self) -> None:
        if self.runner is not None:
            self.runner.close()
        if self._lock is not None:
            self._lock.__exit__(None, None, None)
            self._lock = None

    def prepare(self, plan: DispatchPlan) -> None:
        """Take the plan as the device runs it (`air.on_device`: its sequence padded, its
        buffers sized once), before its first dispatch."""
        padded, self._sizes = on_device(plan, self.hw)
        self._padded = dict(zip(plan.dispatches, padded, strict=True))
        self._prepared = set(padded)

    def on_device(self, dispatch: Dispatch) -> Dispatch:
        """The dispatch as its program runs it: its sequence padded as `prepare` padded the
        plan's (or, not prepared, as it pads alone)."""
        return self._padded.get(dispatch) or pad_sequences([dispatch], self.hw)[0]

    def _device_form(self, dispatch: Dispatch) -> tuple[Dispatch, dict[str, int]]:
        """The dispatch as it runs (`on_device`) and its tensors' buffer sizes."""
        if dispatch not in self._padded and dispatch not in self._prepared:
            return self.on_device(dispatch), {}     # not the prepared plan's: sized alone
        dispatch = self.on_device(dispatch)
        keys = {tensor_key(ln, b) for ln in dispatch.launches for b in ln.bindings}
        return dispatch, {k: self._sizes[k] for k in keys if k in self._sizes}

    def emitted(self, dispatch: Dispatch, head_dim: int | None) -> Program:
        """The program the backend would compile for `dispatch` (raises EmitError)."""
        dispatch, sizes = self._device_form(dispatch)
        return emit_dispatch(dispatch, self.hw, head_dim, sizes)

    def program(self, dispatch: Dispatch, head_dim: int | None) -> tuple[Program, Artifact]:
        """The dispatch's program, written to `programs` and compiled: each distinct program
        once (the dispatches of every layer share it, and one build serves every value of a
        dimension it reads at run time: keyed by the dispatch as built)."""
        dispatch, sizes = self._device_form(dispatch)
        key = (dispatch.built(), head_dim, tuple(sorted(sizes.items())))
        if key not in self._programs:
            program = emit_dispatch(dispatch, self.hw, head_dim, sizes)
            if self.programs is not None:
                for entry in write_programs([program], self.programs, by_digest=True):
                    self.written[entry["file"]] = entry
            compile_fn = self.compiler or (lambda p: compile_program(p, self.cache,
                                                                     self.objects))
            # one build per distinct program: every layer's dispatch of the same shapes
            # runs it, on its own buffers (`Program.tensors`)
            if program.digest not in self._builds:
                self._builds[program.digest] = compile_fn(program)
            self._programs[key] = (program, self._builds[program.digest])
        return self._programs[key]

    def build_dir(self, program: Program) -> Path | None:
        """Where `compile_program` builds `program` (`.<content key>.building` in the cache,
        left there when mlir-air fails: its air.mlir is what aircc was given); None when
        its key cannot be made (an object it links is missing)."""
        try:
            return self.cache / f".{content_key(program, self.objects)}.building"
        except XrtError:
            return None

    def run_dispatch(self, dispatch: Dispatch, operands: list[Operands],
                     head_dim: int | None = None) -> DispatchTimes:
        """Run every launch of `dispatch` as one submission. `operands` holds, per launch,
        its config and its input and output tensors by operand name (as the plan runner
        binds them); outputs the host reads are filled. A launch whose program is built for
        more than its shape (a dimension read at run time, `Launch.built`) gets its inputs
        zero-padded to the program's operands and its values in their i32 arguments."""
        dispatch = self.on_device(dispatch)
        program, artifact = self.program(dispatch, head_dim)
        kinds = argument_kinds(dispatch, program)
        tensors: Tensors = dict(runtime_arguments(dispatch, program))
        # outputs of a padded sequence are read back whole, then their data copied out
        unpad: list[tuple[str, torch.Tensor, torch.Tensor, tuple[int, int]]] = []
        for launch, layout, wiring, (config, inputs, outputs) in zip(
                dispatch.launches, program.layouts, program.wiring, operands, strict=True):
            # a 4-bit weight comes with its unpacked fields (`w.q`, ...) for the emulator;
            # the device reads its blocks (`w`) alone
            given = {n: t for n, t in {**inputs, **outputs}.items() if "." not in n}
            if sorted(given) != sorted(op.name for op in layout.operands):
                raise XrtError(f"{layout.label}: the runner gave operands {sorted(given)}, "
                               f"the program wires {[op.name for op in layout.operands]}")
            to_device = family(launch.kernel).to_device
            for op, arg in zip(layout.operands, wiring, strict=True):
                t = built_operand(launch, op, given[op.name], head_dim)
                if to_device is not None and op.role != "output":
                    t = to_device({**launch.config_dict, **config}, op.name, t)
                pad = launch.binding(op.name).seq_pad
                if pad is not None and arg not in tensors:
                    if head_dim is None:
                        raise XrtError(f"{layout.label}: {op.name} is a padded head-first "
                                       "tensor; the backend needs the model's head_dim")
                    stored = pad_heads(t, pad, head_dim)
                    if op.role == "output":
                        unpad.append((arg, stored, t, pad))
                    t = stored
                tensors.setdefault(arg, t)
        produced = {arg for launch, wiring in zip(dispatch.launches, program.wiring, strict=True)
                    for op, arg in zip(launch.spec.operands(launch.shape_dict), wiring,
                                       strict=True) if op.role == "output"}
        self._hold()
        times = self._runner().run(program, artifact, tensors, kinds, produced)
        for arg, stored, out, pad in unpad:
            if kinds[arg] == "output":
                out.copy_(unpad_heads(stored, pad, head_dim or 0).reshape(out.shape))
        self.times.append(times)
        return times

    def one_time_s(self, plan: DispatchPlan) -> float:
        """The measured first writes of the weights `plan` keeps on the device."""
        runner = self._runner()
        owners = set()
        for dispatch in plan.dispatches:
            program, _ = self.program(dispatch, plan.args.head_dim)
            kinds = argument_kinds(dispatch, program)
            owners |= {owner for (name, _, _), owner in zip(program.arguments, program.tensors,
                                                            strict=True)
                       if kinds[name] == "static"}
        return sum(runner.static_write_s.get(owner, 0.0) for owner in owners)

    def run(self, spec: KernelSpec, shape: Shape, config: dict[str, Any], inputs: Tensors,
            outputs: Tensors) -> None:
        """One kernel alone: a one-launch dispatch whose operands are all host tensors."""
        # an attention kernel alone names its head_dim in its shape (a padded sequence's
        # head-first operands need it)
        self.run_dispatch(alone(spec, shape, config), [(config, inputs, outputs)],
                          config.get("head_dim") or shape.get("head_dim"))


def runtime_arguments(dispatch: Dispatch, program: Program) -> dict[str, torch.Tensor]:
    """The i32 argument of each dimension `program`'s launches read at run time, holding
    this dispatch's value (the step's cache length of a decode attention built for a
    longer context)."""
    args = {key: name for (name, _, _), key in zip(program.arguments, program.tensors,
                                                   strict=True)}
    return {args[f"runtime:{ln.label}:{dim}"]: torch.tensor([value], dtype=torch.int32)
            for ln in dispatch.launches for dim, value in ln.runtime_values().items()}


def built_operand(launch: Launch, op: Any, t: torch.Tensor, head_dim: int | None
                  ) -> torch.Tensor:
    """Operand `op` of the launch's program (its dims as built) from the tensor the plan
    runner gives at the launch's own shape: the same, or, where the program is built for
    more positions than the step holds, the step's data first along each dimension and
    zeros after (its device buffer sized for the maximum, as upstream's decode cache is
    for ATTN_MAXL; the program reads no position past the step's)."""
    if t.numel() == op.numel:
        return t
    if op.role == "output":
        raise XrtError(f"{launch.label}: output {op.name} holds {t.numel()} elements, the "
                       f"program writes {op.numel}; a dimension read at run time may size "
                       "inputs only")
    own = {o.name: o for o in launch.spec.operands(launch.shape_dict)}[op.name]
    binding = launch.binding(op.name)
    data = t.reshape(_physical(own, binding, head_dim or 0))
    out = torch.zeros(_physical(op, binding, head_dim or 0), dtype=t.dtype)
    out[tuple(slice(0, n) for n in data.shape)] = data
    return out


def alone(spec: KernelSpec, shape: Shape, config: dict[str, Any]) -> Dispatch:
    """The dispatch that runs one kernel alone (phase 1): one launch whose operands are all
    host tensors, in the layouts `config` gives (each family's default otherwise)."""
    layouts = config.get("layouts") or {}
    head_first = HEAD_FIRST.get(spec.name, ())
    bindings = []
    for op in spec.operands(shape):
        default: Layout = "head-first" if op.name in head_first else "seq-first"
        kind: Kind = "output" if op.role == "output" else "input"
        bindings.append(Binding(op.name, f"{spec.name}.{op.name}", kind,
                                layouts.get(op.name, default)))
    tunables = {k: v for k, v in config.items()
                if k not in ("layouts", "head_dim", "exact_tiles", "static_b")}
    launch = Launch(spec.name, spec.name, None, tuple(sorted(shape.items())),
                    tuple(sorted(tunables.items())), tuple(bindings))
    name = identifier(f"{spec.name} " + " ".join(f"{k}{v}" for k, v in sorted(shape.items())))
    return Dispatch(name, (launch,))


# --- a measured profile ------------------------------------------------------------------------

REPEATS = 5        # measured runs of a plan after its warm run (a run config's npu_repeats)


def measure(runner: PlanRunner, plan: DispatchPlan, tokens: torch.Tensor,
            cache: Tensors | None = None, repeats: int = REPEATS) -> Profile:
    """Run `plan` 1 + `repeats` times on the NPU backend of `runner`. The first run compiles
    and loads the programs and writes the weights; the others are measured step by step.
    The one-time cost is the measured first write of every weight the plan keeps on the
    device."""
    backend = runner.backend
    if not isinstance(backend, NpuBackend):
        raise TypeError(f"measure needs the NPU backend, not {type(backend).__name__}")
    if repeats < 1:
        raise ValueError(f"measure needs at least one measured run, not {repeats}")
    runner.run(plan, tokens, cache)
    runs: list[tuple[list[StepTime], list[DispatchTimes]]] = []
    for _ in range(repeats):
        trace: list[StepTime] = []
        mark = len(backend.times)
        runner.trace = trace
        try:
            runner.run(plan, tokens, cache)
        finally:
            runner.trace = None
        runs.append((trace, backend.times[mark:]))
    return measured_profile(plan, runs, backend.one_time_s(plan), backend.hw)


def measured_profile(plan: DispatchPlan, runs: list[tuple[list[StepTime], list[DispatchTimes]]],
                     one_time_s: float, hw: Hardware = XDNA2) -> Profile:
    """The Profile of measured runs (each a step trace and its dispatches' times): per
    dispatch the median of its run wall (start to the end of the wait) with the host's
    buffer writes and reads, per host step the median of its CPU wall; `runs` keeps each
    run's total. Weights written on the first run are the one-time cost. FLOPs and bytes
    are the plan's counts."""
    model = estimate(plan, hw)
    once = one_time_s if isinstance(plan.mode, Prefill) else 0.0
    per_run = [_steps(trace, times) for trace, times in runs]
    steps = []
    for i, first in enumerate(per_run[0]):
        same = [r[i] for r in per_run]
        seconds = float(np.median([s.seconds for s in same]))
        if first.where == "npu":
            steps.append(replace(first, seconds=seconds, host_transfer_s=float(
                np.median([s.host_transfer_s for s in same]))))
        else:
            steps.append(replace(first, seconds=seconds))
    return Profile(plan.summary, plan.mode, tuple(steps), once, model.flops,
                   model.weight_bytes, source="measured-npu",
                   calibration=f"measured on the NPU through XRT, median of {len(runs)} runs",
                   runs=tuple(sum(s.seconds for s in r) + once for r in per_run))


def _steps(trace: list[StepTime], times: list[DispatchTimes]) -> list[StepProfile]:
    """One measured run's steps: a dispatch's run wall with its host transfers."""
    by_dispatch = iter(times)
    steps = []
    for st in trace:
        if st.where == "npu":
            t = next(by_dispatch)
            steps.append(StepProfile(st.name, "npu", t.run_s + t.write_s + t.read_s,
                                     host_transfer_s=t.write_s + t.read_s,
                                     host_bytes=t.written_bytes + t.read_bytes))
        else:
            steps.append(StepProfile(st.name, "cpu", st.seconds))
    return steps


__all__ = ["REPEATS", "NpuBackend", "alone", "argument_kinds", "built_operand", "measure",
           "measured_profile", "runtime_arguments"]
