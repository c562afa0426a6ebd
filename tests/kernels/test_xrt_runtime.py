"""The XRT backend's protocol through a recording fake `pyxrt` (no NPU, XRT or mlir-air here):
the documented call order and flags, static weights written once, intermediates never
synced, outputs read through map after sync, the run state checked (a timed-out run is an
error and nothing is read), the cross-process NPU lock, the compile cache by content, and
the one-line refusal of `--backend xrt` on this machine."""

from __future__ import annotations

import multiprocessing
import struct
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from fake_npu import FakeXrt

from npu_deploy.kernels import XDNA2
from npu_deploy.kernels.air_programs.air import emit_dispatch
from npu_deploy.kernels.npu_runtime.xrt_runtime import (
    Artifact,
    XrtError,
    XrtRunner,
    compile_program,
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


def artifact(tmp_path: Path, fmt: str, function: str) -> Artifact:
    binary = tmp_path / ("air.elf" if fmt == "elf" else "air.xclbin")
    binary.write_bytes(b"binary")
    insts = None
    if fmt == "xclbin":
        insts = tmp_path / "air.insts.bin"
        np.arange(6, dtype=np.uint32).tofile(insts)
    kernel = f"main:{function}" if fmt == "elf" else "MLIR_AIE"
    return Artifact(function, fmt, binary, kernel, insts, "k" + fmt, False)


def kinds_and_tensors(program: Any) -> tuple[dict[str, str], dict[str, torch.Tensor]]:
    kinds, tensors = {}, {}
    for name, shape, _ in program.arguments:
        kind = ("static" if "bias" in name else "input" if name.startswith("t0")
                else "output" if name.startswith(f"t{len(program.layouts)}") else "intermediate")
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
    program = emit_dispatch(add_dispatch(1), XDNA2)
    assert program.flags["output_format"] == "xclbin"
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


def test_compiled_programs_are_cached_by_content(tmp_path: Path):
    program = emit_dispatch(silu_mul_dispatch(), XDNA2)
    objects = tmp_path / "objects"
    objects.mkdir()
    for obj in program.objects:
        (objects / obj).write_bytes(b"object code")
    built: list[dict[str, Any]] = []

    class Backend:                      # mlir-air's XRTBackend contract: compile() writes here
        def __init__(self, **options: Any) -> None:
            built.append(options)

        def compile(self, module: Any) -> None:
            Path("air.elf").write_bytes(b"elf")

        def unload(self) -> None:
            pass

    # the emitted source imports mlir-air, absent here: the same program with a source
    # whose build_module needs nothing (its flags, objects and function are the real ones)
    stub = replace(program, source="def build_module():\n    return 'module'\n")
    first = compile_program(stub, tmp_path / "cache", objects, Backend)
    second = compile_program(stub, tmp_path / "cache", objects, Backend)
    assert not first.cached and second.cached and first.binary == second.binary
    assert len(built) == 1 and built[0]["instance_name"] == program.function
    assert built[0]["runtime_loop_tiling_sizes"] == program.flags.get(
        "runtime_loop_tiling_sizes", [])
    assert built[0]["output_format"] == "elf" and first.kernel == f"main:{program.function}"
    (objects / program.objects[0]).write_bytes(b"other object code")   # a new object: rebuilt
    third = compile_program(stub, tmp_path / "cache", objects, Backend)
    assert not third.cached and third.key != first.key and len(built) == 2
    (objects / program.objects[0]).unlink()
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
