"""What the real-NPU path needs, found or missing (kernels.npu_runtime.toolchain, `npu-deploy
doctor`).

The probes run in a separate interpreter, as the project runs them: a package on the path
is built here as files (an unrelated PyPI-style `air`, or mlir-air's wheel layout with its
modules and a bundled `aircc`), never imported into the test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PROBE = ("import json; from npu_deploy.kernels.npu_runtime.toolchain import requirements; "
         "print(json.dumps({r.key: [r.found, r.problem] for r in requirements()}))")


def probe(tmp_path: Path, pythonpath: Path | None = None, **env: str) -> dict[str, list]:
    clean = {k: v for k, v in os.environ.items()
             if k not in ("PYTHONPATH", "PEANO_INSTALL_DIR")}
    clean["PATH"] = str(tmp_path / "empty-bin") + os.pathsep + os.path.dirname(sys.executable)
    if pythonpath is not None:
        clean["PYTHONPATH"] = str(pythonpath)
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                          env={**clean, **env}, timeout=120)
    assert done.returncode == 0, done.stderr
    result: dict[str, list] = json.loads(done.stdout)
    return result


def write(path: Path, text: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_an_unrelated_package_named_air_is_not_taken_for_mlir_air(tmp_path: Path):
    site = tmp_path / "site"
    write(site / "air" / "__init__.py", "VERSION = '0.1'  # some other project called air\n")
    found = probe(tmp_path, site)
    where, problem = found["air"]
    assert where is None and "is not mlir-air" in problem and str(site / "air") in problem
    assert found["aircc"][0] is None


@pytest.mark.slow         # installs a stand-in wheel: ~3 s
def test_mlir_airs_wheel_is_found_with_its_bundled_aircc(tmp_path: Path):
    root = tmp_path / "mlir_air"
    py = root / "python"
    write(py / "air" / "__init__.py")
    write(py / "air" / "ir.py")
    write(py / "air" / "dialects" / "__init__.py")
    write(py / "air" / "dialects" / "air.py")
    write(py / "air" / "backend" / "__init__.py")
    write(py / "air" / "backend" / "xrt.py", "class XRTBackend:\n    pass\n")
    aircc = write(root / "bin" / "aircc", "#!/bin/sh\n")
    aircc.chmod(0o755)
    found = probe(tmp_path, py)
    assert found["air"] == [str((py / "air").resolve()), ""]
    assert found["aircc"][0] == str(aircc)          # not on PATH: the wheel's own binary
    aircc.chmod(0o644)                              # not executable: not taken
    assert probe(tmp_path, py)["aircc"][0] is None


@pytest.mark.slow         # installs a stand-in wheel: ~3 s
def test_peano_is_found_where_mlir_air_looks(tmp_path: Path):
    peano = tmp_path / "llvm-aie"
    peano.mkdir()
    assert probe(tmp_path, PEANO_INSTALL_DIR=str(peano))["peano"] == [str(peano), ""]
    where, problem = probe(tmp_path, PEANO_INSTALL_DIR=str(tmp_path / "nowhere"))["peano"]
    assert where is None and "is not a directory" in problem


@pytest.mark.slow         # 5 s on 2 busy cores: out of the fast core
def test_versions_are_read_where_each_tool_writes_it(tmp_path: Path):
    """XRT's version.json (pyxrt is the XRT it is installed in), mlir-air's package
    metadata, a Peano build's `clang --version`: what validate-hardware's report records."""
    xrt = tmp_path / "xrt"
    write(xrt / "version.json", json.dumps({"BUILD_VERSION": "2.19.0",
                                            "BUILD_BRANCH": "2025.1"}))
    write(xrt / "python" / "pyxrt.py")
    py = tmp_path / "mlir_air" / "python"
    for module in ("__init__", "ir", "dialects/__init__", "dialects/air", "backend/__init__"):
        write(py / "air" / f"{module}.py")
    write(py / "air" / "backend" / "xrt.py", "class XRTBackend:\n    pass\n")
    write(py / "mlir_air-0.9.1.dist-info" / "METADATA",
          "Metadata-Version: 2.1\nName: mlir_air\nVersion: 0.9.1\n")
    clang = write(tmp_path / "peano" / "bin" / "clang",
                  "#!/bin/sh\necho 'clang version 19.0.0 (llvm-aie 1a2b3c)'\necho 'Target: x'\n")
    clang.chmod(0o755)
    probe_versions = PROBE.replace("[r.found, r.problem]", "r.version")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PEANO_INSTALL_DIR")}
    done = subprocess.run([sys.executable, "-c", probe_versions], capture_output=True,
                          text=True, timeout=120, env={
                              **env, "PYTHONPATH": os.pathsep.join([str(xrt / "python"),
                                                                    str(py)]),
                              "XILINX_XRT": str(xrt),
                              "PEANO_INSTALL_DIR": str(tmp_path / "peano")})
    assert done.returncode == 0, done.stderr
    versions = json.loads(done.stdout)
    assert versions["xrt"] == versions["pyxrt"] == "2.19.0"
    assert versions["air"] == "0.9.1"
    assert versions["peano"] == "clang version 19.0.0 (llvm-aie 1a2b3c)"
    assert versions["npu"] is None and versions["firmware"] is None     # no NPU here


def test_doctor_lists_every_requirement_and_fails_here(cli):
    result = cli("doctor")
    assert result.exit_code == 1
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 11 and lines[-1].startswith("0 of 10 present")
    assert all(line.startswith("missing  ") and "; " in line for line in lines[:-1])
    assert any("pyxrt" in line and "setup.sh" in line for line in lines)
    rows = json.loads(cli("doctor", "--json").stdout)
    assert {r["key"] for r in rows} == {"pyxrt", "air", "aircc", "peano", "aie_api", "driver",
                                        "npu", "firmware", "xrt", "objects"}
    assert all(r["found"] is None and r["fix"] for r in rows)


# --- the NPU's generation, its firmware, the headers: read where the driver puts them ---------

def machine(tmp_path: Path, vbnv: str | None, device: str | None, revision: str | None,
            fw_version: str | None = "1.0.0.166", firmware: str | None = None):
    """A machine's paths as the amdxdna driver lays them out, in `tmp_path`: the device
    node, the PCI device's sysfs attributes (vbnv, fw_version from amdxdna_sysfs.c; device,
    revision from the PCI core) and the firmware folder (amdnpu/<device>_<rev>/)."""
    from npu_deploy.kernels.npu_runtime.toolchain import SystemPaths

    node = write(tmp_path / "dev" / "accel0")
    sysfs = tmp_path / "sys" / "device"
    sysfs.mkdir(parents=True)
    for name, value in (("vbnv", vbnv), ("device", device), ("revision", revision),
                        ("fw_version", fw_version)):
        if value is not None:
            write(sysfs / name, value + "\n")
    fw_dir = tmp_path / "firmware" / "amdnpu"
    fw_dir.mkdir(parents=True)
    if firmware:
        write(fw_dir / firmware / "npu.sbin", "firmware")
    return SystemPaths(device_node=node, driver_module=tmp_path / "module",
                       firmware_dir=fw_dir, device_sysfs=sysfs, xrt_dir=tmp_path / "xrt")


def checked(paths) -> dict:
    from npu_deploy.kernels.npu_runtime.toolchain import requirements

    return {r.key: r for r in requirements("", paths=paths)}


@pytest.mark.parametrize("vbnv,device,revision", [
    ("RyzenAI-npu4", "0x17f0", "0x10"),          # Strix, an older driver's name
    ("NPU Krackan 1", "0x17f0", "0x20"),         # Krackan, a newer driver's name
    ("NPU Strix Halo", "0x17f0", "0x11"),
    ("NPU Strix", None, None),                   # no PCI id: the name says it
])
def test_an_xdna2_npu_passes_with_its_firmware_and_version(tmp_path, vbnv, device, revision):
    folder = None if device is None else f"{int(device, 16):04x}_{int(revision, 16):02x}"
    found = checked(machine(tmp_path, vbnv, device, revision, firmware=folder or "17f0_10"))
    npu, firmware = found["npu"], found["firmware"]
    assert npu.ok and vbnv in npu.found and npu.version == vbnv
    assert firmware.ok and firmware.found.endswith("npu.sbin")
    assert firmware.version == "1.0.0.166"                  # fw_version, as the driver shows


@pytest.mark.parametrize("vbnv,device", [("RyzenAI-npu1", "0x1502"), ("NPU Phoenix", None),
                                         (None, "0x1502")])
def test_an_xdna1_npu_is_a_problem_though_everything_is_there(tmp_path, vbnv, device):
    found = checked(machine(tmp_path, vbnv, device, "0x00", firmware="1502_00"))
    npu = found["npu"]
    assert not npu.ok and "XDNA 1" in npu.problem and "computes nothing" in npu.problem
    assert "Ryzen AI 300" in npu.fix
    assert found["firmware"].ok                     # its firmware is there: not the point


def test_an_npu_that_does_not_say_its_generation_is_a_problem(tmp_path):
    later = checked(machine(tmp_path / "a", "RyzenAI-npu8", "0x17f1", "0x10"))["npu"]
    assert not later.ok and "does not build for" in later.problem
    silent = checked(machine(tmp_path / "b", None, None, None, fw_version=None))["npu"]
    assert not silent.ok and "does not say which NPU it is" in silent.problem


def test_firmware_for_another_device_is_not_this_npus(tmp_path):
    found = checked(machine(tmp_path, "NPU Strix", "0x17f0", "0x10", firmware="1502_00"))
    firmware = found["firmware"]
    assert not firmware.ok and "17f0_10" in firmware.problem and "NPU Strix" in \
        firmware.problem


def test_the_aie_api_headers_are_found_where_upstream_looks(tmp_path: Path, monkeypatch):
    from npu_deploy.kernels.npu_runtime.toolchain import requirements

    install = tmp_path / "mlir_aie"
    write(install / "include" / "aie_api" / "aie.hpp")
    aie_opt = write(install / "bin" / "aie-opt", "#!/bin/sh\n")
    aie_opt.chmod(0o755)
    monkeypatch.delenv("MLIR_AIE_INSTALL_DIR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    row = next(r for r in requirements("") if r.key == "aie_api")
    assert not row.ok and "no aie-opt on PATH" in row.problem and "MLIR_AIE_INSTALL_DIR" in \
        row.fix
    monkeypatch.setenv("MLIR_AIE_INSTALL_DIR", str(install))
    assert next(r for r in requirements("") if r.key == "aie_api").found == \
        str(install / "include")
    monkeypatch.delenv("MLIR_AIE_INSTALL_DIR")
    monkeypatch.setenv("PATH", str(install / "bin"))             # beside aie-opt, first
    assert next(r for r in requirements("") if r.key == "aie_api").found == \
        str((install / "include").resolve())


def test_doctor_reports_an_xdna1_machine(cli, tmp_path: Path, monkeypatch):
    from npu_deploy.kernels.npu_runtime import toolchain

    paths = machine(tmp_path, "RyzenAI-npu1", "0x1502", "0x00", firmware="1502_00")
    for constant, value in (("DEVICE_NODE", paths.device_node),
                            ("DEVICE_SYSFS", paths.device_sysfs),
                            ("FIRMWARE_DIR", paths.firmware_dir)):
        monkeypatch.setattr(toolchain, constant, value)
    result = cli("doctor")
    assert result.exit_code == 1
    npu = next(line for line in result.stdout.splitlines() if "XDNA 2 NPU" in line)
    assert npu.startswith("missing") and "XDNA 1" in npu and "RyzenAI-npu1" in npu
    firmware = next(line for line in result.stdout.splitlines() if "firmware" in line)
    assert firmware.startswith("found") and "(version 1.0.0.166)" in firmware


@pytest.mark.parametrize("kernel,sizes", [("gemm_bf16", [2, 2]), ("gemv", [16, 16])])
def test_programs_ask_aircc_for_upstreams_runtime_loop_tiling(kernel, sizes):
    from test_air import launch_of

    from npu_deploy.kernels.air_programs.air import emit_dispatch
    from npu_deploy.kernels.definition.hardware import XDNA2
    from npu_deploy.kernels.plans.plan import Dispatch

    shape = {"M": 256, "K": 256, "N": 256} if kernel.startswith("gemm") else \
        {"M": 2048, "K": 2048}
    program = emit_dispatch(Dispatch("one", (launch_of(kernel, shape),)), XDNA2)
    assert program.flags["runtime_loop_tiling_sizes"] == sizes
