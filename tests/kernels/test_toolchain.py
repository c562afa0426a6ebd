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
    assert len(lines) == 10 and lines[-1].startswith("0 of 9 present")
    assert all(line.startswith("missing  ") and "; " in line for line in lines[:-1])
    assert any("pyxrt" in line and "setup.sh" in line for line in lines)
    rows = json.loads(cli("doctor", "--json").stdout)
    assert {r["key"] for r in rows} == {"pyxrt", "air", "aircc", "peano", "driver", "npu",
                                        "firmware", "xrt", "objects"}
    assert all(r["found"] is None and r["fix"] for r in rows)


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
