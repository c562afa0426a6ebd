"""The control of `validate-hardware --quick`: one of upstream's own examples, built and run
on this machine the way upstream's test suite runs it, so that a failure of ours can be
told from a broken setup. If upstream's example fails too, the machine (driver, firmware,
XRT, mlir-air, Peano, the headers) is at fault; if it passes and ours fail, our programs are.

The example is mlir-air's `programming_examples/silu_and_mul`: NPU2 only, a Peano-compiled
external micro-kernel linked into an AIR program (the path every program of ours takes),
compiled by aircc and run through XRT by mlir-air's XRTRunner, which checks the result
against its NumPy reference (rtol 1.6e-2, atol 8e-2) and prints "PASS!". It is run as its
lit test runs it (`run_makefile_peano_npu2.lit`): `make -f <example>/Makefile run
N=2097152 PEANO_INSTALL_DIR=...` in a directory of its own, which compiles the micro-kernel
with Peano, then builds and runs the program. XRTRunner takes mlir-air's NPU lock
(python/air/backend/xrt_runner.py), the same lock our backend holds, so the control runs
before our backend opens the NPU, never while it holds it.

On a simulated NPU the machine gives its own control (tests/fake_npu.py): the same test
(inputs, reference, tolerances) run through the simulated device.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

EXAMPLE = "programming_examples/silu_and_mul"
#: the element count its lit test runs it at
ELEMENTS = 2_097_152
TIMEOUT_S = 1200
LOG_CHARS = 4000


@dataclass(frozen=True)
class ControlResult:
    """What the control did: which example, how it was run, whether it passed, how long it
    took and the end of its output."""

    example: str
    how: str
    passed: bool
    seconds: float
    log: str

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


Control = Callable[[], ControlResult]


def tail(text: str, chars: int = LOG_CHARS) -> str:
    return text if len(text) <= chars else "...\n" + text[-chars:]


def upstream_control(mlir_air: Path, peano: str) -> Control:
    """The control on this machine: upstream's example from the checkout `mlir_air`, built
    and run by its own Makefile with Peano at `peano`."""
    makefile = mlir_air / EXAMPLE / "Makefile"
    how = (f"make -f {makefile} run N={ELEMENTS} PEANO_INSTALL_DIR={peano}, as upstream's "
           "run_makefile_peano_npu2.lit runs it")

    def run() -> ControlResult:
        t0 = time.perf_counter()
        if not makefile.is_file():
            return ControlResult(EXAMPLE, how, False, 0.0, f"{makefile} does not exist: the "
                                 "checkout given with --mlir-air-source has no such example")
        with tempfile.TemporaryDirectory(prefix="npu-deploy-control-") as work:
            try:
                done = subprocess.run(
                    ["make", "-f", str(makefile), "run", f"N={ELEMENTS}",
                     f"PEANO_INSTALL_DIR={peano}", f"PYTHON={sys.executable}"],
                    cwd=work, capture_output=True, text=True, timeout=TIMEOUT_S)
            except (OSError, subprocess.SubprocessError) as e:
                return ControlResult(EXAMPLE, how, False, time.perf_counter() - t0,
                                     f"could not run make: {e}")
        output = done.stdout + ("\n" + done.stderr if done.stderr else "")
        passed = done.returncode == 0 and "PASS!" in done.stdout
        return ControlResult(EXAMPLE, how, passed, time.perf_counter() - t0, tail(output))
    return run


__all__ = ["ELEMENTS", "EXAMPLE", "Control", "ControlResult", "tail", "upstream_control"]
