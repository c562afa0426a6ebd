"""What the benchmarks say about the machine they ran on, and how one starts another of
itself: every benchmark is a module of this package, run from the repository's root as
`python -m benchmarks.NAME`; none changes sys.path (tests/project/test_benchmarks.py)."""

from __future__ import annotations

import json
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The repository's root: where `python -m benchmarks.NAME` runs (a child's working directory).
ROOT = Path(__file__).resolve().parent.parent


def child(module: str, *args: str) -> list[str]:
    """The command that runs benchmark `module` ("benchmarks.NAME") in a child process of
    this interpreter; run it with cwd=ROOT, where `-m` finds the package."""
    return [sys.executable, "-m", module, *args]


def cpu_name() -> str:
    """The CPU model from /proc/cpuinfo, else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def emit(report: dict[str, Any], as_json: bool, print_report: Callable[[Any], None]) -> int:
    """Print a benchmark's report as JSON or as text; the exit code of its main()."""
    if as_json:
        print(json.dumps(report, indent=2))
    else:
        print_report(report)
    return 0
