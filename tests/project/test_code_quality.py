"""The project's style habits, enforced: ruff-clean everywhere, mypy on the core packages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from paths import ROOT

BIN = Path(sys.executable).parent


def run(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / tool), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)


def test_ruff_finds_nothing():
    result = run("ruff", "check", "--no-cache", ".")   # a cache can hide what CI finds
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow
def test_mypy_passes_on_the_core_packages():
    result = run("mypy")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.slow         # several seconds: out of the fast core (make test-fast)
def test_no_package_imports_the_npu_runtime_at_import_time():
    """pyxrt and mlir-air exist only on an NPU machine: importing npu-deploy must not need them."""
    code = ("import sys, pkgutil, importlib, npu_deploy\n"
            "for m in pkgutil.walk_packages(npu_deploy.__path__, 'npu_deploy.'):\n"
            "    if m.name != 'npu_deploy.__main__': importlib.import_module(m.name)\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyxrt', 'air', 'aie')))")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
