"""A pyxrt module that records every call (`FakeXrt`), and a simulated NPU built on it
(`SimulatedXrt`): a run executes the program's launches with the emulator's numerics on the
bytes in its buffer objects, so a plan run through the XRT backend's protocol computes what
the emulator computes, but only if every buffer holds what the protocol put there (a weight
written once, an intermediate left on the device, an input written, an output read back).

`runtime` is the `npu_runtime` of a run's config (`fake_npu:runtime` with tests/ on the
path): the simulated pyxrt and a compiler that writes placeholder binaries. Nothing here
imports pyxrt or mlir-air, and no figure it yields is an NPU's. The simulated device keeps
its own clock (`clock`, given to the XrtRunner): the host's perf_counter, except that a run
takes the dispatch's modeled device time (kernels.performance.model.device_s), not the emulator's
time to compute it. Host writes and reads are timed as they happen. So what the performance
model says a transform saves on the device shows in the "measured" times of a simulated
deployment, above the host's noise; they are still the model's figures, never an NPU's.
"""

from __future__ import annotations

import time
import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch

from npu_deploy.kernels.air_programs.air import Program
from npu_deploy.kernels.definition.registry import family
from npu_deploy.kernels.emulation.emulator import EmulatorBackend
from npu_deploy.kernels.emulation.tensors import unpad_heads
from npu_deploy.kernels.npu_runtime.toolchain import Requirement
from npu_deploy.kernels.npu_runtime.xrt_runtime import Artifact
from npu_deploy.kernels.performance.model import device_s
from npu_deploy.kernels.plans.plan import Dispatch
from npu_deploy.kernels.plans.plan_runner import _physical

COMPLETED, TIMEOUT = "ERT_CMD_STATE_COMPLETED", "ERT_CMD_STATE_TIMEOUT"

#: A process that holds this many hardware contexts cannot create another: upstream sees it
#: at about 10 distinct ELFs, with the driver's message below
#: (programming_examples/llms/smolvla/docs/profile.md, its traps 5 and 6). The chip's limit,
#: not our budget (Hardware.hw_contexts, 8).
CHIP_CONTEXTS = 10
CREATE_HWCTX_FAILED = "DRM_IOCTL_AMDXDNA_CREATE_HWCTX IOCTL failed (err=-22)"
#: What an ELF and an xclbin context alive together do to every run's device time: 2x, a
#: modeled figure within the 1.4-2.5x upstream measured (the same file, trap 5).
MIXED_FORMATS_SLOWDOWN = 2.0


class Context:
    """A hardware context: what it was opened from (an ELF, or an xclbin's uuid) and its
    format. The fake counts it live until the last reference to it goes."""

    def __init__(self, what: Any, output_format: str) -> None:
        self.what, self.output_format = what, output_format


class FakeXrt:
    """A pyxrt module, standing for one process's, that records every call; a run 'computes'
    (`execute`) by copying the first argument's bytes into the last (so reads can be
    checked), or times out. Hardware contexts are counted while alive (`live`, by format):
    creating one while CHIP_CONTEXTS are alive fails as the driver does."""

    def __init__(self, state: str = COMPLETED) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.state = state
        self.live = {"elf": 0, "xclbin": 0}         # hardware contexts alive, by format
        self.peak_live = 0
        self.bos = 0                                # buffer objects made: the next one's id
        log = self.calls
        fake = self

        class Bo:
            host_only, cacheable = "host_only", "cacheable"

            def __init__(self, device: Any, nbytes: int, flags: Any = None, group: Any = None):
                self.data = bytearray(nbytes)
                self.id, fake.bos = fake.bos, fake.bos + 1
                log.append(("bo", self.id, nbytes, flags, group))

            def map(self) -> bytearray:
                log.append(("map", self.id))
                return self.data

            def sync(self, direction: str) -> None:
                log.append(("sync", self.id, direction))

            def read(self, *a: Any) -> None:
                raise AssertionError("bo.read misbehaves with numpy 2: use map()")

            def write(self, *a: Any) -> None:
                raise AssertionError("bo.write misbehaves with numpy 2: use map()")

        class Run:
            def __init__(self, kernel: Any, args: list[Any] | None = None) -> None:
                self.kernel, self.args = kernel, list(args or [])

            def set_arg(self, i: int, bo: Any) -> None:
                log.append(("set_arg", i, bo.id))
                self.args.append(bo)

            def start(self) -> None:
                log.append(("start",))

            def wait(self, timeout_ms: int) -> str:
                log.append(("wait", timeout_ms))
                bos = [a for a in self.args if isinstance(a, Bo)]
                if fake.state == COMPLETED:
                    fake.execute(self.kernel, bos)
                return fake.state

        class Kernel:
            def __init__(self, context: Any, name: str) -> None:
                log.append(("kernel", name))
                self.context = context

            def group_id(self, i: int) -> int:
                return i

            def __call__(self, opcode: int, instr: Any, n: int, *bos: Any) -> Run:
                log.append(("call", opcode, instr.id, n, [b.id for b in bos]))
                return Run(self, list(bos))

        class Device:
            def __init__(self, index: int) -> None:
                log.append(("device", index))

            def register_xclbin(self, xclbin: Any) -> None:
                log.append(("register_xclbin",))

        class Xclbin:
            def __init__(self, path: str) -> None:
                log.append(("xclbin", Path(path).name))
                self.path = path

            def get_uuid(self) -> str:
                return f"uuid:{self.path}"

            def get_kernels(self) -> list[Any]:
                return [SimpleNamespace(get_name=lambda: "MLIR_AIE")]

        def hw_context(device: Any, what: Any) -> Context:
            if sum(fake.live.values()) >= CHIP_CONTEXTS:
                log.append(("hw_context failed",))
                raise RuntimeError(CREATE_HWCTX_FAILED)
            log.append(("hw_context", what if isinstance(what, str) else "elf"))
            context = Context(what, "xclbin" if isinstance(what, str) else "elf")
            fake.live[context.output_format] += 1
            fake.peak_live = max(fake.peak_live, sum(fake.live.values()))
            weakref.finalize(context, fake.closed, context.output_format)
            return context

        def elf(path: str) -> Any:
            log.append(("elf", Path(path).name))
            return SimpleNamespace(path=path)

        def ext_kernel(context: Any, name: str) -> Any:
            log.append(("ext.kernel", name))
            return SimpleNamespace(name=name, context=context)

        self.device, self.xclbin, self.kernel, self.bo, self.hw_context = (
            Device, Xclbin, Kernel, Bo, hw_context)
        self.elf, self.run = elf, lambda kernel: Run(kernel)
        self.ext = SimpleNamespace(kernel=ext_kernel, bo=lambda device, n: Bo(device, n))
        self.xclBOSyncDirection = SimpleNamespace(XCL_BO_SYNC_BO_TO_DEVICE="to_device",
                                                  XCL_BO_SYNC_BO_FROM_DEVICE="from_device")
        self.ert_cmd_state = SimpleNamespace(ERT_CMD_STATE_COMPLETED=COMPLETED)

    def names(self) -> list[str]:
        return [c[0] for c in self.calls]

    def closed(self, output_format: str) -> None:
        """A context's last reference went: XRT frees it."""
        self.live[output_format] -= 1
        self.calls.append(("hw_context closed", output_format))

    @property
    def mixed(self) -> bool:
        """An ELF and an xclbin context are alive together."""
        return self.live["elf"] > 0 and self.live["xclbin"] > 0

    def execute(self, kernel: Any, bos: list[Any]) -> None:
        bos[-1].data[:] = bos[0].data[:len(bos[-1].data)]




def _as_bound(kernel: str, config: dict[str, Any], operand: str,
              buffer: torch.Tensor) -> torch.Tensor:
    """An input as the plan binds it, read from a buffer the backend wrote in the family's
    device layout (`to_device`): the program reads the layout, the emulator the binding."""
    to_device = family(kernel).to_device
    if to_device is None:
        return buffer
    where = to_device(config, operand, torch.arange(buffer.numel()).view(buffer.shape))
    if where.shape == buffer.shape and torch.equal(where.reshape(-1),
                                                   torch.arange(buffer.numel())):
        return buffer
    bound = torch.empty_like(buffer).reshape(-1)
    bound[where.reshape(-1)] = buffer.reshape(-1)
    return bound.view(buffer.shape)


class SimulatedXrt(FakeXrt):
    """FakeXrt whose runs compute: the launches of the program behind the kernel, each with
    the emulator's numerics, reading and writing the buffer objects' bytes in the layouts
    the plan binds (as the program's DMA patterns would). A run's modeled device time is
    MIXED_FORMATS_SLOWDOWN times longer while ELF and xclbin contexts are alive together. A
    dimension a program reads at run time (decode attention's cache length, built for a
    longer context) takes its value from the program's i32 argument, and the launch reads
    that many positions of its buffers."""

    def __init__(self, head_dim: int | None = None, *, virtual: bool = False) -> None:
        super().__init__()
        self.head_dim = head_dim
        self.virtual = virtual                      # a clock of device time alone
        self.device_s = 0.0                         # the runs' device time, so far
        self.skew = 0.0                             # device time minus host time, so far
        self.slowdown: Any = None                   # program -> its run's factor on time
        self.mixed_runs = 0                         # runs slowed by mixed formats
        self.programs: dict[str, Program] = {}      # binary path -> program
        self.emulator = EmulatorBackend()

    def add(self, program: Program, binary: Path) -> None:
        self.programs[str(binary)] = program

    def execute(self, kernel: Any, bos: list[Any]) -> None:
        began = time.perf_counter()
        # the kernel's context was opened from the ELF, or the xclbin's uuid
        context = kernel.context
        elf = context.output_format == "elf"
        path = context.what.path if elf else context.what.removeprefix("uuid:")
        program = self.programs[path]
        if elf:
            assert kernel.name == f"main:{program.function}"     # the instance name
        slot = {name: i for i, (name, _, _) in enumerate(program.arguments)}
        by_key = {key: name for (name, _, _), key in zip(program.arguments, program.tensors,
                                                         strict=True)}
        for launch, layout, wiring in zip(program.launches, program.layouts, program.wiring,
                                          strict=True):
            # a dimension read at run time: this run's value, from its i32 argument
            spec, built = launch.spec, launch.shape_dict
            shape = {**built, **{dim: int(np.frombuffer(
                bos[slot[by_key[f"runtime:{launch.label}:{dim}"]]].data, dtype=np.int32)[0])
                for dim in layout.runtime}}
            own = {op.name: op for op in spec.operands(shape)}
            config = {**launch.config_dict, "layouts": {b.operand: b.layout
                                                        for b in launch.bindings},
                      "exact_tiles": False}
            if self.head_dim is not None:
                config["head_dim"] = self.head_dim
            inputs: dict[str, torch.Tensor] = {}
            outputs: dict[str, torch.Tensor] = {}
            padded: list[tuple[torch.Tensor, torch.Tensor]] = []   # (its data, the result)
            for op, arg in zip(spec.operands(built), wiring, strict=True):
                b = launch.binding(op.name)
                tensor = self._stored(op, b, bos[slot[arg]].data)
                if own[op.name].dims != op.dims:
                    # the program is built for more than this run: it reads the run's
                    # positions, the first along each dimension of the buffer
                    assert op.role != "output", f"{launch.label}: {op.name} sized at run time"
                    tensor = tensor[tuple(slice(0, n) for n in _physical(
                        own[op.name], b, self.head_dim or 0))]
                    op = own[op.name]
                if b.seq_pad is not None:
                    # a head-first tensor of a padded sequence: the emulator gets its data
                    data = tensor
                    tensor = data.contiguous().view(_physical(op, b, self.head_dim or 0))
                    if op.role == "output":
                        tensor = torch.empty_like(tensor)
                        padded.append((data, tensor))
                if op.role != "output":
                    tensor = _as_bound(spec.name, config, op.name, tensor)
                (outputs if op.role == "output" else inputs)[op.name] = tensor
            self.emulator.run(spec, shape, config, inputs, outputs)
            for data, result in padded:
                data.copy_(result.view(data.shape))
        modeled = device_s(Dispatch(program.dispatch, program.launches))
        if self.slowdown is not None:
            modeled *= self.slowdown(program)
        if self.mixed:
            modeled *= MIXED_FORMATS_SLOWDOWN
            self.mixed_runs += 1
        self.device_s += modeled
        self.skew += modeled - (time.perf_counter() - began)

    def _stored(self, op: Any, b: Any, data: bytearray) -> torch.Tensor:
        """Operand `op` in the buffer's bytes, as the program's DMA patterns address it:
        in its binding's layout, and a head-first tensor of a padded sequence (`seq_pad`:
        L_pad rows per head on the device) as its [heads, L, head_dim] data, a view."""
        dims = _physical(op, b, self.head_dim or 0)
        dtype = torch.float32 if op.elem_bytes == 4 else torch.bfloat16
        n = int(np.prod(dims))
        if b.seq_pad is not None:
            n = n // b.seq_pad[0] * b.seq_pad[1]
        flat = torch.frombuffer(data, dtype=torch.uint8)[:n * op.elem_bytes].view(dtype)
        if b.seq_pad is not None:
            return unpad_heads(flat, b.seq_pad, self.head_dim or 0)
        return flat.view(dims)

    def clock(self) -> float:
        """The simulated device's time: a run lasts its modeled device time. A virtual
        clock counts that alone (host writes and reads take no time), so every measurement
        of a plan gives the same figure."""
        if self.virtual:
            return self.device_s
        return time.perf_counter() + self.skew


def compiler_for(sim: SimulatedXrt, cache: Path, output_format: str | None = None) -> Any:
    """A compiler that writes placeholder binaries (mlir-air is not here) and tells the
    simulated device which program each one is. Each program is built as its flags ask
    (an ELF, as every program is) unless `output_format` says otherwise (a test that
    mixes formats on purpose)."""
    def compile_program(program: Program) -> Artifact:
        where = cache / f"{program.function}-{program.digest[:12]}"
        where.mkdir(parents=True, exist_ok=True)
        fmt = output_format or program.flags["output_format"]
        elf = fmt == "elf"
        binary = where / ("air.elf" if elf else "air.xclbin")
        binary.write_bytes(program.digest.encode())
        insts = None
        if not elf:
            insts = where / "air.insts.bin"
            np.arange(4, dtype=np.uint32).tofile(insts)
        sim.add(program, binary)
        return Artifact(program.function, fmt, binary,
                        f"main:{program.function}" if elf else "MLIR_AIE", insts,
                        program.digest, False)
    return compile_program


def runtime(ws: Any, sim: SimulatedXrt | None = None) -> dict[str, Any]:
    """The `npu_runtime` of a run on the simulated NPU: its runner, compiler and lock."""
    from npu_deploy.kernels.npu_runtime.xrt_runtime import XrtRunner

    sim = sim or SimulatedXrt(ws.loaded.args.head_dim)
    return {"runner": XrtRunner(sim, clock=sim.clock),
            "compiler": compiler_for(sim, ws.directory / "sim"),
            "lock": ws.directory / "npu.lock"}


def steady_runtime(ws: Any) -> dict[str, Any]:
    """`runtime` on a virtual clock: a run takes its modeled device time and host steps
    take none, so every measurement of a plan gives the same figure and what a transform
    saves shows whatever this machine's load (a deployment test that must not depend on
    timing noise)."""
    return runtime(ws, SimulatedXrt(ws.loaded.args.head_dim, virtual=True))


def heating_runtime(ws: Any) -> dict[str, Any]:
    """`runtime`, on a device that runs programs of several launches (merged dispatches)
    four times slower than modeled while phase 4's first gate measures: the sustained load
    of the gate heats it, and the merged ELFs' DMA traffic suffers (the kind of thing a real
    NPU's clocks can show, made repeatable). So every transform was kept on measurements of
    a cool device, and the gate finds the deployed plan slower than the plan without them:
    a measured optimization gate that fails. Its clock is virtual, so what the gate and
    each transform's trial measure does not depend on this machine's load."""
    sim = SimulatedXrt(ws.loaded.args.head_dim, virtual=True)

    def slowdown(program: Program) -> float:
        if len(program.launches) < 2:
            return 1.0
        tools = list(ws.store.events(ws.run_id, phase=4,
                                     types=("tool.requested", "tool.completed")))
        hot = (tools and tools[-1].type == "tool.requested"
               and tools[-1].payload["call_id"].startswith("p4.a1.gate"))
        return 4.0 if hot else 1.0

    sim.slowdown = slowdown
    return runtime(ws, sim)


def simulated_control(sim: SimulatedXrt, directory: Path) -> Any:
    """The control on the simulated NPU: upstream's silu_and_mul test
    (programming_examples/silu_and_mul/silu_and_mul.py: 2,097,152 elements of N(0, 1) from
    NumPy's generator seeded 0, its reference SiLU(gate) x up in FP32 cast to bf16, np.isclose
    at rtol 1.6e-2 and atol 8e-2) run through the simulated device, on a runner and a lock
    of its own, as mlir-air's XRTRunner runs it beside ours."""
    import time

    from npu_deploy.kernels.definition.hardware import XDNA2
    from npu_deploy.kernels.definition.selection import select
    from npu_deploy.kernels.definition.specs import SPECS, KernelUse
    from npu_deploy.kernels.npu_runtime.control import ELEMENTS, EXAMPLE, ControlResult
    from npu_deploy.kernels.npu_runtime.npu_backend import NpuBackend
    from npu_deploy.kernels.npu_runtime.xrt_runtime import XrtRunner

    def run() -> ControlResult:
        t0 = time.perf_counter()
        rng = np.random.default_rng(0)
        shape = {"rows": ELEMENTS // 2048, "width": 2048}
        gate, up = (torch.from_numpy(rng.standard_normal(ELEMENTS, dtype=np.float32))
                    .to(torch.bfloat16).view(shape["rows"], shape["width"]) for _ in "gu")
        g = gate.float()
        want = ((g / (1 + torch.exp(-g))) * up.float()).to(torch.bfloat16)
        spec = SPECS["silu_mul"]
        config = select(KernelUse("ffn", spec, shape), XDNA2).config
        backend = NpuBackend(cache=directory, objects=directory,
                             runner=XrtRunner(sim, clock=sim.clock),
                             compiler=compiler_for(sim, directory), lock=directory / "lock")
        out = torch.empty(shape["rows"], shape["width"], dtype=torch.bfloat16)
        try:
            backend.run(spec, shape, config, {"gate": gate, "up": up}, {"y": out})
        finally:
            backend.close()
        close = np.isclose(out.double().numpy(), want.double().numpy(), rtol=1.6e-2,
                           atol=8e-2)
        log = (f"{int((~close).sum())} of {ELEMENTS} elements outside rtol 1.6e-2, atol 8e-2"
               + ("\nPASS!" if close.all() else "\nfailed."))
        return ControlResult(EXAMPLE, f"simulated by {__name__}: upstream's test (inputs, "
                             "reference, tolerances) on the simulated NPU", bool(close.all()),
                             time.perf_counter() - t0, log)
    return run


def machine(bench: Any) -> dict[str, Any]:
    """A Ryzen AI 300 machine as `npu-deploy validate-hardware --npu-runtime
    fake_npu:machine` sees it: the simulated NPU's runtime, a toolchain that has every
    requirement of the real-NPU path, each marked as simulated (so is the report's runtime,
    and import-measurements refuses it), and the control run on the same simulated NPU."""
    from npu_deploy.kernels.npu_runtime.toolchain import requirements

    toolchain = [Requirement(r.key, r.what, f"simulated by {__name__}", version="simulated")
                 for r in requirements(None)]
    given = runtime(bench)
    sim = given["runner"].xrt
    return {**given, "toolchain": toolchain,
            "control": simulated_control(sim, bench.directory / "control")}
