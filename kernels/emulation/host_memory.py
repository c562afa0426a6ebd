"""The host allocator's policy for emulated runs: keep freed memory for reuse.

A run of a plan allocates every activation afresh (a run's tensors outlive it: a replay and
the gates read them), about 1 GB for a 2048-token prefill of SmolLM2-135M, the logits
alone 0.4 GB. glibc maps an allocation that large with mmap and unmaps it when it is freed,
so the next run faults every page in again: 100,000 to 270,000 page faults a prefill, 1.1
to 1.9 CPU-seconds in the kernel of a 5.5 s prefill (measured on the CPU, 2 threads). With
mmap reserved for blocks of a GiB or more and up to a GiB of free heap kept rather than
trimmed, the second and later runs fault nothing (0 faults, 0.01 s of system time).

The policy is the process's: whatever else runs in it (the Hugging Face model the
emulator is compared with) reuses memory the same way. On a C library other than glibc
nothing changes.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

#: mallopt's parameters (malloc.h)
_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
#: blocks this large or larger are still mapped, and this much free heap is kept
KEEP_BYTES = 1 << 30

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Ask glibc to serve allocations under KEEP_BYTES from its heap and to keep up to
    KEEP_BYTES of freed heap. Once per process; True when the policy is in force."""
    global _applied
    if _applied is None:
        _applied = False
        name = ctypes.util.find_library("c")
        if platform.libc_ver()[0] == "glibc" and name:
            mallopt = getattr(ctypes.CDLL(name), "mallopt", None)
            if mallopt is not None:
                _applied = bool(mallopt(_M_MMAP_THRESHOLD, KEEP_BYTES)) and \
                    bool(mallopt(_M_TRIM_THRESHOLD, KEEP_BYTES))
    return _applied


def decline() -> None:
    """Leave the allocator as the C library set it, for the rest of this process (a
    benchmark's comparison); no effect once the policy is in force."""
    global _applied
    if _applied is None:
        _applied = False
