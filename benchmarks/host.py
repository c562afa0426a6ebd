"""What the benchmarks say about the machine they ran on."""

from __future__ import annotations

import json
import platform
from collections.abc import Callable
from typing import Any


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
