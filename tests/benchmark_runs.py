"""The benchmarks (the package benchmarks/, not installed) from the tests: run as
`python -m benchmarks.NAME` in a child process, as `make bench` runs them, or imported into
the test's process, both without the repository's root on this process's sys.path (where
the package folders would load under their bare names, tests/conftest.py)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys
from types import ModuleType
from typing import Any

from paths import ROOT


def run_benchmark(name: str, *args: str, **run: Any) -> subprocess.CompletedProcess[str]:
    """`python -m benchmarks.NAME ARGS` from the repository's root: -m finds the package in
    the working directory (PYTHONSAFEPATH, which the tests set for what they start, would
    keep it off the child's path; the child is the benchmark, which adds nothing to it)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    return subprocess.run([sys.executable, "-m", f"benchmarks.{name}", *args], cwd=ROOT,
                          env=env, capture_output=True, text=True, **run)


def benchmark(name: str) -> ModuleType:
    """The module benchmarks.NAME, imported here: the package from its folder (its
    submodules found through its __path__), the path left as it is."""
    if "benchmarks" not in sys.modules:
        folder = ROOT / "benchmarks"
        spec = importlib.util.spec_from_file_location(
            "benchmarks", folder / "__init__.py", submodule_search_locations=[str(folder)])
        assert spec is not None and spec.loader is not None
        package = importlib.util.module_from_spec(spec)
        sys.modules["benchmarks"] = package
        spec.loader.exec_module(package)
    return importlib.import_module(f"benchmarks.{name}")
