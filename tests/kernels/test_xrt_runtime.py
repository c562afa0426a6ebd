"""The XRT backend's protocol through a recording fake `pyxrt` (no NPU, XRT or mlir-air here):
the documented call order and flags, static weights written once, intermediates never
synced, outputs read through map after sync, the run state checked (a timed-out run is an
error and nothing is read), the cross-process NPU lock, the compile cache by content, and
the one-line refusal of `--backend xrt` on this machine."""

from __future__ import annotations

import importlib
import json
import multiprocessing
import re
import struct
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fake_npu import (
    CHIP_CONTEXTS,
    COMPLETED,
    CREATE_HWCTX_FAILED,
    MIXED_FORMATS_SLOWDOWN,
    FakeXrt,
    SimulatedXrt,
)

from npu_deploy.kernels import XDNA2
from npu_deploy.kernels.air_programs.air import Program, emit_dispatch
from npu_deploy.kernels.npu_runtime import toolchain
from npu_deploy.kernels.npu_runtime.toolchain import toolchain_identity
from npu_deploy.kernels.npu_runtime.xrt_runtime import (
    Artifact,
    XrtError,
    XrtRunner,
    compile_program,
    content_key,
    missing,
    npu_lock,
    require,
)
from npu_deploy.kernels.plans.plan import Binding, Dispatch, Launch


def add_dispatch(n: int = 2) -> Dispatch:
    """n chained adds: t0 + w.bias -> t1 (+ w.bias) -> ... (weights static, the chain's
    middle tensors intermediates)."""
    shape = {"rows": 4, "width": 64}
    launches = []
    for i in range(n):
        out_kind = "output" if i == n - 1 else "intermediate"
        in_kind = "input" if i == 0 else "intermediate"
        launches.append(Launch("add", f"add{i}", 0, tuple(sorted(shape.items())),
                               (("herd_m", 1), ("tile", 256)),
                               (Binding("a", f"t{i}", in_kind), Binding("b", "w.bias", "static"),
                                Binding("y", f"t{i + 1}", out_kind))))
    return Dispatch("adds", tuple(launches))


def silu_mul_dispatch() -> Dispatch:
    """Two chained SiLU x mul launches: a program that links a micro-kernel object
    (silu_and_mul.o; the adds are inline)."""
    shape = tuple(sorted({"rows": 4, "width": 64}.items()))
    return Dispatch("silu_muls", tuple(
        Launch("silu_mul", f"silu_mul{i}", 0, shape, (("herd_m", 1), ("tile", 256)),
               (Binding("gate", f"t{i}", "input" if i == 0 else "intermediate"),
                Binding("up", "w.up", "static"),
                Binding("y", f"t{i + 1}", "output" if i == 1 else "intermediate")))
        for i in range(2)))


def artifact(tmp_path: Path, fmt: str, function: str, key: str = "") -> Artifact:
    """A compiled program as mlir-air leaves it (`key`: its cache key, one per program)."""
    if key:
        tmp_path = tmp_path / key
        tmp_path.mkdir(parents=True, exist_ok=True)
    binary = tmp_path / ("air.elf" if fmt == "elf" else "air.xclbin")
    binary.write_bytes(b"binary")
    insts = None
    if fmt == "xclbin":
        insts = tmp_path / "air.insts.bin"
        np.arange(6, dtype=np.uint32).tofile(insts)
    kernel = f"main:{function}" if fmt == "elf" else "MLIR_AIE"
    return Artifact(function, fmt, binary, kernel, insts, key or "k" + fmt, False)


def kinds_and_tensors(program: Any) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    kinds, tensors = {}, {}
    for (name, shape, _), tensor in zip(program.arguments, program.tensors, strict=True):
        kind = ("static" if "bias" in tensor else "input" if tensor == "t0"
                else "output" if tensor == f"t{len(program.layouts)}" else "intermediate")
        kinds[name] = kind
        tensors[name] = (torch.arange(int(np.prod(shape))).to(torch.bfloat16)
                         if kind != "output" else torch.zeros(shape, dtype=torch.bfloat16))
    return kinds, tensors


def test_an_elf_dispatch_follows_the_documented_protocol(tmp_path: Path):
    program = emit_dispatch(add_dispatch(2), XDNA2)
    assert program.flags["output_format"] == "elf"
    xrt = FakeXrt()
    runner = XrtRunner(xrt, timeout_ms=5000)
    kinds, tensors = kinds_and_tensors(program)
    art = artifact(tmp_path, "elf", program.function)
    times = runner.run(program, art, tensors, kinds)
    names = xrt.names()
    # device -> ELF -> context -> kernel named main:<instance = function> -> BOs -> run
    assert names[:4] == ["device", "elf", "hw_context", "ext.kernel"]
    assert xrt.calls[3] == ("ext.kernel", f"main:{program.function}")
    assert names.index("start") > max(i for i, n in enumerate(names) if n == "bo")
    assert names.index("wait") == names.index("start") + 1
    assert ("wait", 5000) in xrt.calls
    bos = {c[1]: c for c in xrt.calls if c[0] == "bo"}
    by_arg = dict(zip([a for a, _, _ in program.arguments], sorted(bos), strict=True))
    synced = [(c[1], c[2]) for c in xrt.calls if c[0] == "sync"]
    # inputs and the static weight written (map, then sync to the device), before the run
    for name, kind in kinds.items():
        bo = by_arg[name]
        if kind in ("input", "static"):
            assert (bo, "to_device") in synced and ("map", bo) in xrt.calls
        if kind == "intermediate":
            assert not [s for s in synced if s[0] == bo]          # never synced
        if kind == "output":
            assert synced[-1] == (bo, "from_device")              # read after the wait
    assert [s for s in synced if s[1] == "to_device"] and \
        names.index("wait") < names.index("sync", names.index("wait"))
    # the output holds what the device wrote
    out = next(n for n, k in kinds.items() if k == "output")
    first = next(n for n, k in kinds.items() if k == "input")
    assert torch.equal(tensors[out].reshape(-1), tensors[first].reshape(-1))
    assert times.source == "measured-npu" and times.run_s > 0 and times.written_bytes > 0
    # a second run: the static weight is not written again, the input is
    before = len([c for c in xrt.calls if c[0] == "sync" and c[1] == by_arg[
        next(n for n, k in kinds.items() if k == "static")]])
    runner.run(program, art, tensors, kinds)
    after = len([c for c in xrt.calls if c[0] == "sync" and c[1] == by_arg[
        next(n for n, k in kinds.items() if k == "static")]])
    assert before == after == 1
    assert names.count("device") == 1 and xrt.names().count("hw_context") == 1


def test_an_xclbin_dispatch_uses_opcode_3_the_instructions_and_group_ids(tmp_path: Path):
    # our programs are all ELFs; the runner still opens an xclbin (upstream's examples)
    program = emit_dispatch(add_dispatch(1), XDNA2)
    xrt = FakeXrt()
    kinds, tensors = kinds_and_tensors(program)
    XrtRunner(xrt).run(program, artifact(tmp_path, "xclbin", program.function), tensors, kinds)
    names = xrt.names()
    assert names[:5] == ["device", "xclbin", "register_xclbin", "hw_context", "kernel"]
    instr = next(c for c in xrt.calls if c[0] == "bo")
    assert instr[3] == "cacheable" and instr[4] == 1 and instr[2] == 6 * 4
    data = [c for c in xrt.calls if c[0] == "bo"][1:]
    assert [(c[3], c[4]) for c in data] == [("host_only", 3 + i) for i in range(len(data))]
    call = next(c for c in xrt.calls if c[0] == "call")
    assert call[:4] == ("call", 3, instr[1], 6) and call[4] == [c[1] for c in data]


def test_a_timed_out_run_is_an_error_and_nothing_is_read(tmp_path: Path):
    program = emit_dispatch(add_dispatch(2), XDNA2)
    xrt = FakeXrt(state="ERT_CMD_STATE_TIMEOUT")
    kinds, tensors = kinds_and_tensors(program)
    out = next(n for n, k in kinds.items() if k == "output")
    with pytest.raises(XrtError, match="did not complete: run state ERT_CMD_STATE_TIMEOUT"):
        XrtRunner(xrt).run(program, artifact(tmp_path, "elf", program.function), tensors, kinds)
    assert not [c for c in xrt.calls if c[0] == "sync" and c[2] == "from_device"]
    assert torch.count_nonzero(tensors[out].float()) == 0


def _hold_lock(path: str, ready: Any, release: Any) -> None:
    with npu_lock(Path(path)):
        ready.set()
        release.wait(10)


def test_a_second_process_waits_on_the_npu_lock(tmp_path: Path):
    lock = tmp_path / "npu.lock"
    ctx = multiprocessing.get_context("spawn")
    ready, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_lock, args=(str(lock), ready, release))
    holder.start()
    try:
        assert ready.wait(20)
        told: list[float] = []
        with pytest.raises(XrtError, match="held the NPU lock"):
            with npu_lock(lock, timeout_s=0.3, waiting=lambda: told.append(time.monotonic())):
                pass
        assert told                           # it waited, and said so
        release.set()
        holder.join(10)
        with npu_lock(lock, timeout_s=5) as waited:
            assert waited < 5
    finally:
        release.set()
        holder.join(10)


def recording_backend(built: list[dict[str, Any]]) -> Any:
    """mlir-air's XRTBackend contract: built with the options (recorded in `built`),
    compile() writes the binary into the working directory."""
    class Backend:
        def __init__(self, **options: Any) -> None:
            built.append(options)

        def compile(self, module: Any) -> None:
            Path("air.elf").write_bytes(b"elf")

        def unload(self) -> None:
            pass

    return Backend


def compilable(tmp_path: Path) -> tuple[Program, Path]:
    """The SiLU x mul program with its object in a directory. The emitted source imports
    mlir-air, absent here: the same program with a source whose build_module needs nothing
    (its flags, objects and function are the real ones)."""
    program = emit_dispatch(silu_mul_dispatch(), XDNA2)
    objects = tmp_path / "objects"
    objects.mkdir()
    for obj in program.objects:
        (objects / obj).write_bytes(b"object code")
    return replace(program, source="def build_module():\n    return 'module'\n"), objects


def test_compiled_programs_are_cached_by_content(tmp_path: Path):
    stub, objects = compilable(tmp_path)
    built: list[dict[str, Any]] = []
    Backend = recording_backend(built)
    first = compile_program(stub, tmp_path / "cache", objects, Backend)
    second = compile_program(stub, tmp_path / "cache", objects, Backend)
    assert not first.cached and second.cached and first.binary == second.binary
    assert len(built) == 1 and built[0]["instance_name"] == stub.function
    assert built[0]["runtime_loop_tiling_sizes"] == stub.flags.get(
        "runtime_loop_tiling_sizes", [])
    assert built[0]["output_format"] == "elf" and first.kernel == f"main:{stub.function}"
    (objects / stub.objects[0]).write_bytes(b"other object code")   # a new object: rebuilt
    third = compile_program(stub, tmp_path / "cache", objects, Backend)
    assert not third.cached and third.key != first.key and len(built) == 2
    (objects / stub.objects[0]).unlink()
    with pytest.raises(XrtError, match="not in .*compile it from mlir-air's AIE kernel"):
        compile_program(stub, tmp_path / "cache", objects, Backend)


def test_this_machine_is_refused_at_once_with_what_to_install():
    lacking = {r.key for r in missing()}
    assert "pyxrt" in lacking and "air" in lacking
    with pytest.raises(XrtError) as e:
        require()
    assert "pyxrt (XRT's Python bindings" in str(e.value) and "--backend emulator" in str(e.value)
    import sys
    assert "pyxrt" not in sys.modules and "air" not in sys.modules


@pytest.mark.parametrize("flags,says", [
    (("--backend", "xrt"), "--backend xrt: this machine lacks pyxrt"),
    (("--repeats", "3"), "--repeats is for --backend xrt"),      # on the emulator
])
def test_deploy_on_the_npu_fails_here_in_one_line_and_stores_nothing(cli, db_path: Path,
                                                                      flags, says):
    result = cli("--db", db_path, "deploy", "tiny", "--headless", *flags)
    assert result.exit_code == 2
    line = result.output.strip().splitlines()
    assert len(line) == 1 and says in line[0]
    assert not db_path.exists()


def test_deploy_backend_xrt_lists_the_missing_kernel_objects_too(cli, db_path: Path):
    result = cli("--db", db_path, "deploy", "tiny", "--headless", "--backend", "xrt")
    assert "objects (the micro-kernel objects" in result.output and "--air-objects" in \
        result.output
    # a folder that exists but holds no objects is no better than none
    result = cli("--db", db_path, "deploy", "tiny", "--headless", "--backend", "xrt",
                 "--air-objects", str(db_path.parent))
    assert result.exit_code == 2 and "holds no objects" in result.output
    # one holding an object built for NPU2 (an aie2p relocatable ELF) is taken
    header = b"\x7fELF" + bytes([1, 1, 1]) + bytes(9) + struct.pack(
        "<HHIIIIIHHHHHH", 1, 264, 1, 0, 0, 0, 3, 52, 0, 0, 40, 0, 0)
    (db_path.parent / "objects").mkdir()
    (db_path.parent / "objects" / "mv_m8.o").write_bytes(header)
    result = cli("--db", db_path, "deploy", "tiny", "--headless", "--backend", "xrt",
                 "--air-objects", str(db_path.parent / "objects"))
    assert result.exit_code == 2 and "objects (" not in result.output


def test_resuming_an_npu_run_here_fails_in_one_line_and_changes_nothing(cli, db_path: Path,
                                                                       fake):
    from npu_deploy.machine import Conductor, Policy
    from npu_deploy.store import EventStore

    with EventStore.open(db_path) as store:
        c = Conductor.start(store, fake(), Policy(), model="tiny-llama", backend="xrt",
                            config={"backend": "xrt", "air_objects": str(db_path.parent),
                                    "pipeline": "fake_pipeline:make"})
        c.close()
        before = list(store.events(c.run_id))
    result = cli("--db", db_path, "resume", c.run_id)
    assert result.exit_code == 2
    line = result.output.strip().splitlines()
    assert len(line) == 1 and f"run {c.run_id} runs on the NPU: resuming it: this machine " \
        "lacks pyxrt" in line[0]
    with EventStore.open(db_path, readonly=True) as store:
        assert list(store.events(c.run_id)) == before


# --- hardware contexts: a budget, one output format -----------------------------------------

def run_programs(runner: XrtRunner, tmp_path: Path, keys: list[str], fmt: str = "elf") -> Any:
    """Run one compiled program per key (each its own context) on the same tensors; the
    program's arguments as the runner keeps them."""
    program = emit_dispatch(add_dispatch(2), XDNA2)
    kinds, tensors = kinds_and_tensors(program)
    for key in keys:
        runner.run(program, artifact(tmp_path, fmt, program.function, key), tensors, kinds)
    return program


def test_the_runner_closes_the_least_recently_run_context_at_its_budget(tmp_path: Path):
    xrt = FakeXrt()
    runner = XrtRunner(xrt)
    budget = XDNA2.hw_contexts
    assert runner.hw_contexts == budget == 8
    keys = [f"p{i}" for i in range(budget + 3)]
    run_programs(runner, tmp_path, keys[:budget])
    assert xrt.live["elf"] == budget and runner.evictions == 0
    run_programs(runner, tmp_path, ["p0"])            # p0 is now the most recently run
    assert runner.loads == budget
    run_programs(runner, tmp_path, keys[budget:])     # three more: p1, p2, p3 are closed
    counts = runner.contexts
    assert (counts.open, counts.peak, counts.loads, counts.evictions) == (
        budget, budget, budget + 3, 3)
    # XRT freed what the runner closed: no reference to those contexts is left
    assert xrt.live["elf"] == xrt.peak_live == budget
    assert xrt.calls.count(("hw_context closed", "elf")) == 3
    run_programs(runner, tmp_path, ["p0"])            # still open
    assert runner.loads == budget + 3
    program = run_programs(runner, tmp_path, ["p1"])  # reopened, closing p4
    assert (runner.loads, runner.evictions) == (budget + 4, 4)
    # buffer objects are the device's: one per tensor for every run, the weight written once
    bos = [c for c in xrt.calls if c[0] == "bo"]
    assert len(bos) == len(program.arguments)
    kinds, _ = kinds_and_tensors(program)
    weight = bos[list(kinds.values()).index("static")][1]
    assert [c for c in xrt.calls if c[0] == "sync" and c[1] == weight] == [
        ("sync", weight, "to_device")]
    runner.close()
    assert xrt.live["elf"] == 0


def test_a_budget_above_the_chips_limit_fails_as_the_chip_does(tmp_path: Path):
    """The simulated chip refuses an 11th live context, with the driver's message: a runner
    whose budget was raised past it (or that kept its closed contexts alive) fails."""
    xrt = FakeXrt()
    held = [xrt.hw_context(None, f"uuid:{i}") for i in range(CHIP_CONTEXTS)]
    with pytest.raises(RuntimeError, match=re.escape(CREATE_HWCTX_FAILED)):
        xrt.hw_context(None, "uuid:one more")
    held.pop()
    xrt.hw_context(None, "uuid:one more")                  # one was freed
    del held
    xrt = FakeXrt()
    runner = XrtRunner(xrt, hw_contexts=CHIP_CONTEXTS + 2)
    with pytest.raises(XrtError) as e:
        run_programs(runner, tmp_path, [f"p{i}" for i in range(CHIP_CONTEXTS + 1)])
    line = str(e.value)
    assert len(line.splitlines()) == 1 and CREATE_HWCTX_FAILED in line
    assert f"with {CHIP_CONTEXTS} open" in line and "lower the budget" in line
    # the runner's own budget runs the same programs
    xrt = FakeXrt()
    runner = XrtRunner(xrt)
    run_programs(runner, tmp_path, [f"p{i}" for i in range(CHIP_CONTEXTS + 1)])
    assert xrt.peak_live == runner.contexts.peak == XDNA2.hw_contexts < CHIP_CONTEXTS
    assert runner.evictions == CHIP_CONTEXTS + 1 - XDNA2.hw_contexts
    with pytest.raises(XrtError, match="hw_contexts=0: .*give a positive budget"):
        XrtRunner(FakeXrt(), hw_contexts=0)


def test_a_process_runs_one_output_format(tmp_path: Path):
    xrt = FakeXrt()
    runner = XrtRunner(xrt)
    program = run_programs(runner, tmp_path, ["e"], "elf")
    with pytest.raises(XrtError) as e:
        run_programs(runner, tmp_path, ["x"], "xclbin")
    line = str(e.value)
    assert len(line.splitlines()) == 1
    assert f"{program.function} is an xclbin program, but this process runs elf programs" \
        in line and "compile it as elf, or run it in a process of its own" in line
    assert "xclbin" not in xrt.names() and xrt.live == {"elf": 1, "xclbin": 0}
    assert runner.contexts.output_format == "elf"
    runner.close()
    # the process (its pyxrt) keeps the format: another runner there refuses it too
    with pytest.raises(XrtError, match="this process runs elf programs"):
        run_programs(XrtRunner(xrt), tmp_path, ["x"], "xclbin")
    # another process may run xclbins, and then only those
    other = XrtRunner(FakeXrt())
    run_programs(other, tmp_path, ["x"], "xclbin")
    with pytest.raises(XrtError, match="is an elf program, but this process runs xclbin"):
        run_programs(other, tmp_path, ["e"], "elf")


def test_the_simulated_npu_slows_every_run_while_elf_and_xclbin_contexts_live(tmp_path: Path):
    """Driving the fake pyxrt directly (the runner would refuse to mix). The times are the
    simulator's modeled seconds, not measurements."""
    program = emit_dispatch(add_dispatch(2), XDNA2)
    sim = SimulatedXrt(virtual=True)
    path = tmp_path / "air.elf"
    path.write_bytes(b"elf")
    sim.add(program, path)
    device = sim.device(0)
    context = sim.hw_context(device, sim.elf(str(path)))
    kernel = sim.ext.kernel(context, f"main:{program.function}")
    bos = [sim.ext.bo(device, int(np.prod(shape)) * 2) for _, shape, _ in program.arguments]

    def run() -> float:
        before = sim.device_s
        started = sim.run(kernel)
        for i, bo in enumerate(bos):
            started.set_arg(i, bo)
        started.start()
        assert started.wait(1000) == COMPLETED
        return sim.device_s - before

    alone = run()
    xclbin = sim.hw_context(device, "uuid:another.xclbin")   # an xclbin context alive too
    assert sim.mixed
    mixed = run()
    del xclbin
    assert not sim.mixed
    again = run()
    assert alone > 0 and mixed == pytest.approx(MIXED_FORMATS_SLOWDOWN * alone)
    assert again == pytest.approx(alone) and sim.mixed_runs == 1
    assert 1.4 <= MIXED_FORMATS_SLOWDOWN <= 2.5         # within what upstream measured


# --- the compile cache and the toolchain's identity -----------------------------------------

def made_up_toolchain(root: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """An mlir-air install (its package, which must not be imported to identify it, its
    compiled passes, aircc beside it, its version 1.0), a Peano build and an XRT, all under
    `root`."""
    site = root / "mlir_air" / "python"
    libs = site / "air" / "_mlir_libs"
    libs.mkdir(parents=True)
    (site / "air" / "__init__.py").write_text("raise ImportError('identifying mlir-air "
                                              "imported it')\n")
    (libs / "_air.cpython-311-x86_64-linux-gnu.so").write_bytes(b"passes")
    aircc = root / "mlir_air" / "bin" / "aircc"
    aircc.parent.mkdir()
    aircc.write_text("#!/bin/sh\n")
    aircc.chmod(0o755)
    dist = site / "mlir_air-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mlir_air\nVersion: 1.0\n")
    clang = root / "peano" / "bin" / "clang"
    clang.parent.mkdir(parents=True)
    clang.write_bytes(b"clang 1")
    (root / "xrt").mkdir()
    (root / "xrt" / "version.json").write_text('{"BUILD_VERSION": "2.19.0"}')
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PEANO_INSTALL_DIR", str(root / "peano"))
    monkeypatch.setenv("XILINX_XRT", str(root / "xrt"))
    monkeypatch.setattr(toolchain, "_IDENTITY", None)    # this process's, restored after
    return {"site": site, "dist": dist, "clang": clang, "aircc": aircc}


def test_a_new_mlir_air_or_peano_is_a_cache_miss(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch):
    made = made_up_toolchain(tmp_path / "tools", monkeypatch)
    identity = toolchain_identity()
    assert identity["mlir_air"] == "1.0" and identity["xrt"] == "2.19.0"
    assert identity["air_libs"].startswith("_air.cpython-311-x86_64-linux-gnu.so:6:")
    assert identity["aircc"].startswith(f"{made['aircc']} aircc:")
    assert identity["peano"].startswith("clang:7:") and len(identity["aie_sources"]) == 64
    assert "air" not in sys.modules                       # found, never imported
    stub, objects = compilable(tmp_path)
    built: list[dict[str, Any]] = []
    Backend, cache = recording_backend(built), tmp_path / "cache"
    first = compile_program(stub, cache, objects, Backend)
    assert compile_program(stub, cache, objects, Backend).cached and len(built) == 1
    # beside the entry, what built it
    assert json.loads((first.binary.parent / "toolchain.json").read_text()) == identity
    # mlir-air 1.1: a new key, compiled again (the process's identity read again)
    made["dist"].rename(made["site"] / "mlir_air-1.1.dist-info")
    (made["site"] / "mlir_air-1.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: mlir_air\nVersion: 1.1\n")
    importlib.invalidate_caches()
    assert compile_program(stub, cache, objects, Backend).cached      # cached per process
    newer = toolchain_identity(refresh=True)
    assert newer["mlir_air"] == "1.1"
    second = compile_program(stub, cache, objects, Backend)
    assert not second.cached and second.key != first.key and len(built) == 2
    # a rebuilt Peano: its clang's stamp changes
    made["clang"].write_bytes(b"clang 1.1")
    toolchain_identity(refresh=True)
    third = compile_program(stub, cache, objects, Backend)
    assert not third.cached and third.key not in (first.key, second.key) and len(built) == 3
    assert compile_program(stub, cache, objects, Backend).cached and len(built) == 3
    # an explicit identity: the same one hits, another misses
    assert content_key(stub, objects, identity) == first.key
    assert content_key(stub, objects, {**identity, "peano": "clang:8:0"}) != first.key


def test_the_toolchain_identity_of_a_machine_without_one(monkeypatch: pytest.MonkeyPatch):
    """This machine has no mlir-air, Peano or XRT: every part says so, nothing raises."""
    monkeypatch.delenv("PEANO_INSTALL_DIR", raising=False)
    monkeypatch.setenv("XILINX_XRT", "/nonexistent/xrt")
    monkeypatch.setattr(toolchain, "_IDENTITY", None)
    identity = toolchain_identity()
    assert {k: v for k, v in identity.items() if k != "aie_sources"} == {
        "mlir_air": "missing", "air_libs": "missing", "aircc": "missing", "peano": "unset",
        "xrt": "missing"}
    assert identity["aie_sources"] != "missing"         # our own kernel sources are here
    assert toolchain_identity() == identity and toolchain_identity() is not toolchain._IDENTITY
