"""The XRT runtime under the NPU backend (kernels.npu_runtime.npu_backend): compile the MLIR-AIR
programs with mlir-air's XRT backend and run them with pyxrt, measuring every dispatch.

Nothing here imports pyxrt or mlir-air at import time: `missing()` says what a machine
lacks, and `require()` turns that into one error that says how to install it. The
protocol, as mlir-air's own XRT backend and its fixes document it (python/air/backend/
xrt.py; commits on the instance name, numpy 2 and the NPU lock):

* one device, and one hardware context per compiled program, opened when first run; at
  most `Hardware.hw_contexts` open at once, the least recently used closed first (about
  10 is where XDNA's driver refuses the next one:
  programming_examples/llms/smolvla/docs/profile.md), and every context of one process
  in one output format (docs/hardware-facts.md#hardware-contexts-and-output-formats);
* a multi-launch program is an ELF whose kernel is ``main:<instance name>``, the
  instance name equal to the function's name (a wrong one runs without configuring the
  tiles and times out); a single launch may also be an xclbin with an instruction buffer
  (opcode 3, the instructions on group 1, data on groups 3...);
* buffer objects: a static weight is written once and kept (one per weight, so layers
  never share one); an intermediate is never synced to the host; an input is written
  through ``map()`` and ``sync(TO_DEVICE)``; an output is read after ``sync(FROM_DEVICE)``
  through ``map()``. Never ``bo.read``/``bo.write``: with numpy 2, pyxrt 2.21's write
  silently writes nothing;
* the run's state is checked after every wait: a timed-out run is an error, never a
  half-written buffer;
* NPU access is serialized across processes with a file lock (two processes opening
  hardware contexts at once can wedge the device until a power cycle). The lock is
  mlir-air's own (`<tmp>/npu.lock`), so our runs and mlir-air's test runner also queue.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..air_programs.air import Program
from ..air_programs.air_parts import ELEM_BYTES
from ..definition.hardware import XDNA2
from .toolchain import Requirement, requirements, toolchain_identity

LOCK_PATH = Path(tempfile.gettempdir()) / "npu.lock"
RUN_TIMEOUT_MS = 60_000         # mlir-air's LLM benchmarks wait 60 s for a run

class XrtError(RuntimeError):
    """The NPU path cannot go on: what failed and what to do."""


def missing(objects: str | None = "") -> list[Requirement]:
    """What this machine lacks for `--backend xrt` (kernels.npu_runtime.toolchain). `objects` is the
    micro-kernel directory to check ("" leaves it out)."""
    return [r for r in requirements(objects) if not r.ok]


def require(objects: str | None = "") -> None:
    lacking = missing(objects)
    if lacking:
        raise XrtError("this machine lacks " + "; ".join(
            f"{r.key} ({r.what}: {r.problem}; {r.fix})" for r in lacking)
            + ". `npu-deploy doctor` lists them. Without them, use --backend emulator (the "
            "default)")


# --- one process at a time on the NPU --------------------------------------------------------

@contextlib.contextmanager
def npu_lock(path: Path = LOCK_PATH, timeout_s: float = 1800.0,
             waiting: Callable[[], None] | None = None) -> Iterator[float]:
    """Hold the NPU across processes (flock, as mlir-air's FileLock takes it). Yields the
    seconds spent waiting; raises XrtError after `timeout_s`."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    start = time.monotonic()
    told = False
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not told and waiting is not None:
                    waiting()
                    told = True
                if time.monotonic() - start > timeout_s:
                    raise XrtError(f"another process has held the NPU lock {path} for "
                                   f"{timeout_s:.0f} s; wait for it or stop it") from None
                time.sleep(0.05)
        yield time.monotonic() - start
    finally:
        os.close(fd)           # closing the descriptor releases the lock


# --- compiling, cached by content -------------------------------------------------------------

@dataclass(frozen=True)
class Artifact:
    """A compiled program: the binary (ELF, or xclbin with its instructions), the kernel
    name to open, and where it came from."""

    program: str                 # the function / instance name
    output_format: str           # elf | xclbin
    binary: Path
    kernel: str                  # main:<instance> (ELF) or the xclbin's MLIR_AIE kernel
    insts: Path | None
    key: str                     # the content hash it is cached under
    cached: bool


def content_key(program: Program, objects_dir: Path,
                toolchain: dict[str, str] | None = None) -> str:
    """The hash a compiled program is cached under: its source, its compiler options, the
    bytes of every micro-kernel object it links, and the toolchain that compiles it
    (`toolchain`, by default `toolchain.toolchain_identity()`: mlir-air, aircc, Peano, XRT
    and our AIE kernel sources). Upstream keys its cache on the kernel's name and checks a
    toolchain identity beside it (programming_examples/llms/shared/infra/cache.py,
    `KernelCache._toolchain_id`) so a binary from another mlir-air or Peano is never served;
    here the identity is part of the key, so a new toolchain is a cache miss."""
    h = hashlib.sha256(program.source.encode())
    h.update(json.dumps(program.flags, sort_keys=True).encode())
    for obj in program.objects:
        path = objects_dir / obj
        if not path.exists():
            raise XrtError(f"{program.function} links {obj}, which is not in {objects_dir}; "
                           "compile it from mlir-air's AIE kernel sources with Peano for that "
                           "tile shape")
        h.update(obj.encode() + hashlib.sha256(path.read_bytes()).digest())
    identity = toolchain_identity() if toolchain is None else toolchain
    h.update(json.dumps(identity, sort_keys=True).encode())
    return h.hexdigest()


def compile_program(program: Program, cache: Path, objects_dir: Path,
                    backend_factory: Callable[..., Any] | None = None,
                    toolchain: dict[str, str] | None = None) -> Artifact:
    """Compile with mlir-air's XRTBackend in a directory of its own (it writes air.mlir, the
    binary and air_project/ into the working directory), unless the cache has it. Each
    entry keeps the toolchain identity it was built with (toolchain.json), so whoever
    finds an entry rebuilt can see what changed."""
    toolchain = toolchain_identity() if toolchain is None else toolchain
    key = content_key(program, objects_dir, toolchain)
    flags = program.flags
    elf = flags["output_format"] == "elf"
    where = cache / key
    binary = where / ("air.elf" if elf else "air.xclbin")
    insts = None if elf else where / "air.insts.bin"
    kernel = f"main:{program.function}" if elf else "MLIR_AIE"
    if binary.exists() and (insts is None or insts.exists()):
        return Artifact(program.function, flags["output_format"], binary, kernel, insts, key,
                        True)
    if backend_factory is None:
        require()
        backend_factory = importlib.import_module("air.backend.xrt").XRTBackend
    work = cache / f".{key}.building"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for obj in program.objects:
        shutil.copy2(objects_dir / obj, work / obj)
    (work / f"{program.function}.py").write_text(program.source)
    namespace: dict[str, Any] = {"__name__": "npu_deploy_program"}
    cwd = Path.cwd()
    try:
        os.chdir(work)
        exec(compile(program.source, f"{program.function}.py", "exec"), namespace)
        module = namespace["build_module"]()
        backend = backend_factory(
            target_device="npu2", output_format=flags["output_format"],
            instance_name=program.function, omit_pingpong=flags["omit_pingpong"],
            stack_size=flags["stack_size"], omit_while_true_loop=False,
            runtime_loop_tiling_sizes=list(flags.get("runtime_loop_tiling_sizes", [])))
        backend.compile(module)
        backend.unload()
    except Exception as e:
        raise XrtError(f"mlir-air could not compile {program.function}: {e}; the program "
                       f"is {work / (program.function + '.py')}") from e
    finally:
        os.chdir(cwd)
    if not (work / binary.name).exists():
        raise XrtError(f"mlir-air wrote no {binary.name} for {program.function} in {work}")
    (work / "toolchain.json").write_text(json.dumps(toolchain, indent=1, sort_keys=True)
                                         + "\n")
    work.rename(where)
    return Artifact(program.function, flags["output_format"], binary, kernel, insts, key, False)


# --- running ----------------------------------------------------------------------------------

def _as_bytes(t: torch.Tensor) -> np.ndarray:
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        t = t.view(torch.int16)
    return t.numpy().view(np.uint8).reshape(-1)


@dataclass
class DispatchTimes:
    """Measured on the NPU (time.perf_counter around the calls): the run from start to the
    end of its wait, and the host's writes and reads of buffer objects."""

    dispatch: str
    run_s: float
    write_s: float
    read_s: float
    written_bytes: int
    read_bytes: int
    static_s: float = 0.0           # of write_s: weights written for the first time
    static_bytes: int = 0
    source: str = "measured-npu"


@dataclass
class _Loaded:
    artifact: Artifact
    context: Any
    kernel: Any
    instr: Any = None
    n_instr: int = 0


#: The output format of the first program loaded through each pyxrt module (one per
#: process; a fake one stands for a process of its own).
_FORMATS: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()


@dataclass
class ContextCounts:
    """How the runner used its hardware contexts: the budget, how many are open and the
    most that were, how many programs it loaded (reloads after an eviction included) and
    how many contexts it closed to stay within the budget."""

    budget: int
    open: int
    peak: int
    loads: int
    evictions: int
    output_format: str | None


class XrtRunner:
    """One device, and per compiled program one hardware context and kernel, opened under
    the NPU lock when the program first runs. At most `hw_contexts` are open at once: the
    least recently run program's context is closed before a new one is opened past that
    (docs/hardware-facts.md#hardware-contexts-and-output-formats), and reopened when it
    runs again. Buffer objects are the device's (the ELF path's `xrt.ext.bo`), not a
    context's, so weights and intermediates stay. Every program of a process is in one
    output format. `run` executes one program on named tensors, timed by `clock` (the
    host's perf_counter; a simulated device may keep its own)."""

    def __init__(self, pyxrt: Any | None = None, timeout_ms: int = RUN_TIMEOUT_MS,
                 clock: Callable[[], float] = time.perf_counter,
                 hw_contexts: int = XDNA2.hw_contexts) -> None:
        if hw_contexts < 1:
            raise XrtError(f"hw_contexts={hw_contexts}: a runner needs at least one hardware "
                           "context; give a positive budget")
        if pyxrt is None:
            require()
            pyxrt = importlib.import_module("pyxrt")
        self.xrt, self.timeout_ms, self.clock = pyxrt, timeout_ms, clock
        self.hw_contexts = hw_contexts
        self.device = pyxrt.device(0)
        self._loaded: OrderedDict[str, _Loaded] = OrderedDict()   # least recently run first
        self._static: dict[str, Any] = {}      # weight tensor -> its BO, written once
        self._device: dict[str, Any] = {}      # plan tensor -> its BO and size
        self.static_write_s: dict[str, float] = {}   # weight -> the seconds of its one write
        self.loads = self.evictions = self.peak_open = 0

    @property
    def contexts(self) -> ContextCounts:
        return ContextCounts(self.hw_contexts, len(self._loaded), self.peak_open, self.loads,
                             self.evictions, _FORMATS.get(self.xrt))

    def load(self, artifact: Artifact) -> _Loaded:
        """The program's context and kernel, opened if it is not open (closing the least
        recently run program's first when the budget is reached)."""
        if artifact.key in self._loaded:
            self._loaded.move_to_end(artifact.key)
            return self._loaded[artifact.key]
        first = _FORMATS.get(self.xrt)
        if first is not None and artifact.output_format != first:
            raise XrtError(f"{artifact.program} is an {artifact.output_format} program, but this "
                           f"process runs {first} programs (ELF and xclbin contexts in one "
                           "process slow each other down 1.4-2.5x): compile it as "
                           f"{first}, or run it in a process of its own")
        while len(self._loaded) >= self.hw_contexts:
            self._evict()
        try:
            loaded = self._open(artifact)
        except RuntimeError as e:
            if isinstance(e, XrtError):
                raise
            raise XrtError(f"XRT could not open a hardware context for {artifact.program} "
                           f"with {len(self._loaded)} open ({e}); the driver refuses about 10 "
                           f"per process: lower the budget (hw_contexts={self.hw_contexts})") \
                from e
        _FORMATS.setdefault(self.xrt, artifact.output_format)
        self._loaded[artifact.key] = loaded
        self.loads += 1
        self.peak_open = max(self.peak_open, len(self._loaded))
        return loaded

    def _evict(self) -> None:
        """Close the least recently run program's context: drop every reference to its
        kernel, context and instruction buffer, so pyxrt frees them."""
        _, loaded = self._loaded.popitem(last=False)
        loaded.kernel = loaded.context = loaded.instr = None
        self.evictions += 1

    def _open(self, artifact: Artifact) -> _Loaded:
        x = self.xrt
        if artifact.output_format == "elf":
            elf = x.elf(str(artifact.binary))
            try:
                context = x.hw_context(self.device, elf)
            except TypeError as e:      # pyxrt builds that bind hw_context(device, uuid) only
                raise XrtError("this pyxrt cannot open an ELF (hw_context(device, elf)); "
                               "install XRT >= 2.19") from e
            return _Loaded(artifact, context, x.ext.kernel(context, artifact.kernel))
        xclbin = x.xclbin(str(artifact.binary))
        self.device.register_xclbin(xclbin)
        context = x.hw_context(self.device, xclbin.get_uuid())
        names = [k.get_name() for k in xclbin.get_kernels()]
        name = next((n for n in names if artifact.kernel in n), None)
        if name is None:
            raise XrtError(f"{artifact.binary} has no {artifact.kernel} kernel (it has "
                           f"{', '.join(names) or 'none'})")
        kernel = x.kernel(context, name)
        assert artifact.insts is not None
        words = np.fromfile(artifact.insts, dtype=np.uint32)
        instr = x.bo(self.device, words.nbytes, x.bo.cacheable, kernel.group_id(1))
        view = np.frombuffer(instr.map(), dtype=np.uint8)
        view[:words.nbytes] = words.view(np.uint8)
        instr.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
        return _Loaded(artifact, context, kernel, instr, int(words.size))

    def _bo(self, loaded: _Loaded, slot: int, nbytes: int) -> Any:
        x = self.xrt
        if loaded.artifact.output_format == "elf":
            return x.ext.bo(self.device, nbytes)
        return x.bo(self.device, nbytes, x.bo.host_only, loaded.kernel.group_id(3 + slot))

    def run(self, program: Program, artifact: Artifact, tensors: dict[str, torch.Tensor],
            kinds: dict[str, str], produced: set[str] | None = None) -> DispatchTimes:
        """Run `program` once. `tensors` and `kinds` are keyed by the function's argument
        names: kind static (a weight: written the first time only), input (written now),
        intermediate (device only) or output (read back into the tensor). Every buffer
        belongs to its plan tensor (`program.tensors`), so what one program leaves on the
        device is what the next one that binds the tensor reads; a tensor that changes size
        (another prefill length) gets a new buffer, unless the program only reads it
        (`produced`: the arguments it writes, when known), which is an error."""
        x = self.xrt
        loaded = self.load(artifact)
        if artifact.output_format != "elf" and len(program.arguments) > 5:
            raise XrtError(f"{program.function}: {len(program.arguments)} arguments; the xclbin "
                           "flow takes at most 5 - compile it as an ELF")
        write_s = read_s = static_s = 0.0
        written = read = static = 0
        bos = []
        owners = program.tensors or tuple(name for name, _, _ in program.arguments)
        for slot, ((name, shape, dtype), owner) in enumerate(zip(program.arguments, owners,
                                                                 strict=True)):
            nbytes = int(np.prod(shape)) * ELEM_BYTES[dtype]
            kind = kinds[name]
            store = self._static if kind == "static" else self._device
            # a buffer belongs to the tensor at its size (`size`: the data's bytes); a
            # program that walks past the data's end declares it padded (nbytes >= size)
            t = tensors.get(name)
            size = t.numel() * t.element_size() if t is not None else nbytes
            fresh = owner not in store or store[owner][1] != size
            if fresh and kind == "intermediate" and produced is not None \
                    and name not in produced:
                raise XrtError(f"{program.function} reads {owner} from the device, where no "
                               "earlier dispatch left it (at this size): bind it as an input")
            if fresh:
                store[owner] = (self._bo(loaded, slot, nbytes), size, nbytes)
                if nbytes > size and kind not in ("input", "static"):
                    # padding a device-written tensor's producer may not reach, read by a
                    # program that walks further: zeros, not whatever the memory held (a NaN
                    # there reaches real rows through 0 x NaN)
                    new = store[owner][0]
                    np.frombuffer(new.map(), dtype=np.uint8)[:nbytes] = 0
                    new.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
            elif store[owner][2] < nbytes:
                # this program pads the tensor further than the buffer holds: a larger
                # buffer, with what earlier programs left in it
                old, _, held = store[owner]
                old.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
                bigger = self._bo(loaded, slot, nbytes)
                view = np.frombuffer(bigger.map(), dtype=np.uint8)
                view[:held] = np.frombuffer(old.map(), dtype=np.uint8)[:held]
                view[held:nbytes] = 0
                bigger.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
                store[owner] = (bigger, size, nbytes)
            bo = store[owner][0]
            if kind == "input" or (kind == "static" and fresh):
                t0 = self.clock()
                data = _as_bytes(tensors[name])
                if data.nbytes > nbytes:
                    raise XrtError(f"{program.function}: argument {name} holds {data.nbytes} "
                                   f"bytes, the program expects {nbytes}")
                # a padded argument (the program's last blocks run past the data): zeros
                view = np.frombuffer(bo.map(), dtype=np.uint8)
                view[:data.nbytes] = data
                view[data.nbytes:store[owner][2]] = 0
                bo.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
                write_s += self.clock() - t0
                written += nbytes
                if kind == "static":
                    self.static_write_s[owner] = self.clock() - t0
                    static_s += self.static_write_s[owner]
                    static += nbytes
            bos.append(bo)
        t0 = self.clock()
        if artifact.output_format == "elf":
            run = x.run(loaded.kernel)
            for i, bo in enumerate(bos):
                run.set_arg(i, bo)
            run.start()
        else:
            run = loaded.kernel(3, loaded.instr, loaded.n_instr, *bos)
        state = run.wait(self.timeout_ms)
        run_s = self.clock() - t0
        if state != x.ert_cmd_state.ERT_CMD_STATE_COMPLETED:
            raise XrtError(f"{program.function} did not complete: run state {state} after "
                           f"{run_s:.3f} s (timeout {self.timeout_ms} ms); its outputs were not "
                           "read. A timeout after a merge often means a wrong instance name "
                           "or a kernel object built for other sizes")
        for (name, _, _), bo in zip(program.arguments, bos, strict=True):
            if kinds[name] != "output":
                continue
            t0 = self.clock()
            bo.sync(x.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
            out = tensors[name]
            nbytes = out.numel() * out.element_size()
            raw = np.frombuffer(bo.map(), dtype=np.uint8)[:nbytes].copy()
            flat = torch.from_numpy(raw)
            value = flat.view(torch.int16).view(torch.bfloat16) if out.dtype == torch.bfloat16 \
                else flat.view(out.dtype)
            out.copy_(value.reshape(out.shape))
            read_s += self.clock() - t0
            read += nbytes
        return DispatchTimes(program.dispatch, run_s, write_s, read_s, written, read,
                             static_s, static)

    def close(self) -> None:
        """Drop buffers, kernels and contexts before the device (XRT faults otherwise)."""
        self._static.clear()
        self._device.clear()
        self._loaded.clear()
        self.device = None


__all__ = ["LOCK_PATH", "Artifact", "ContextCounts", "DispatchTimes", "XrtError", "XrtRunner",
           "compile_program", "content_key", "missing", "npu_lock", "require"]
