"""kernels: what an NPU2 kernel is, what it costs on chip, whether a configuration can
exist on the hardware (`check`), and, in later modules, the numbers it produces."""

from .checker import Finding, blocking, check
from .hardware import HARDWARE, XDNA1, XDNA2, DmaPorts, Hardware
from .specs import SPECS, Decode, KernelSpec, KernelUse, Operand, Prefill, model_kernels

__all__ = [
    "HARDWARE", "SPECS", "XDNA1", "XDNA2", "Decode", "DmaPorts", "Finding", "Hardware",
    "KernelSpec", "KernelUse", "Operand", "Prefill", "blocking", "check", "model_kernels",
]
