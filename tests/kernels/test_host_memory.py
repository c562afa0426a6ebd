"""The emulator's host allocator policy (kernels/emulation/host_memory.py), in a process of
its own each time: the policy is the process's and cannot be undone."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

# 64 MiB written and freed, then written again five times: the fewest page faults of those
# writes. Not only the second: torch asks for 64-byte aligned blocks, a little more than the
# freed block, so when a small object sits after it in the heap the next block is new heap;
# once freed blocks lie together they serve it (a prefill's steady state).
_SCRIPT = """
import resource, sys, torch
from npu_deploy.kernels.emulation import host_memory
from npu_deploy.kernels.emulation.emulator import EmulatorBackend
if sys.argv[1] == "default":
    host_memory.decline()
EmulatorBackend().prepare(None)
faults = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_minflt
torch.ones(16 << 20)                    # allocated, written, freed
counts = []
for _ in range(5):
    before = faults()
    torch.ones(16 << 20)
    counts.append(faults() - before)
print(host_memory.keep_freed_memory(), min(counts))
"""


def _rewrites(policy: str) -> tuple[bool, int]:
    out = subprocess.run([sys.executable, "-c", _SCRIPT, policy], capture_output=True,
                         text=True, check=True).stdout.split()
    return out[0] == "True", int(out[1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the policy is glibc's mallopt")
@pytest.mark.slow         # 12 s on 2 busy cores: out of the fast core
def test_an_emulated_run_reuses_freed_memory_without_faulting_it_in_again() -> None:
    kept, faults = _rewrites("keep")
    assert kept
    assert faults < 1000            # 64 MiB is 16,384 pages of 4 KiB
    declined, default_faults = _rewrites("default")
    assert not declined
    assert default_faults > 16_000  # glibc's default maps and unmaps a block this large
