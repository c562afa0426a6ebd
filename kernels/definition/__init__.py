"""What a kernel is and whether a configuration of it can exist: the hardware
(`hardware`), the rules every family's checker is built from (`rules`), what a kernel family
declares (`family`), the registry that lists the families of kernels/families/ once
(`registry`) and the kernels a model needs (`specs`), the checker (`checker`), the selection
of a configuration for each kernel use (`selection`), and the kernel tables of docs/kernels.md
(`kernels_md`).

Importing this package imports none of its modules: each public name below is imported the
first time it is asked for (kernels._public_face)."""

from typing import TYPE_CHECKING

from .._public_face import public_face

if TYPE_CHECKING:
    from .checker import check, check_merge
    from .family import KernelFamily, KernelSpec, Operand, Shape, TimedLaunch
    from .hardware import HARDWARE, XDNA1, XDNA2, DmaPorts, Hardware
    from .registry import FAMILIES, HOST_KERNELS, SPECS
    from .rules import Finding, blocking
    from .selection import Selection, select, select_all
    from .specs import Decode, KernelUse, Mode, Prefill, model_kernels

__all__ = ["Decode", "DmaPorts", "FAMILIES", "Finding", "HARDWARE", "HOST_KERNELS", "Hardware",
           "KernelFamily", "KernelSpec", "KernelUse", "Mode", "Operand", "Prefill", "SPECS",
           "Selection", "Shape", "TimedLaunch", "XDNA1", "XDNA2", "blocking", "check",
           "check_merge", "model_kernels", "select", "select_all"]

__getattr__, __dir__ = public_face(__name__, __file__)
