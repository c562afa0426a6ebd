"""kernels: what an NPU2 kernel is, what it costs on chip, whether a configuration can
exist on the hardware (`check`), and, in later modules, the numbers it produces. Each kernel
is a family declared once in `kernels/families/` and listed in `registry.FAMILIES`."""

from .definition.checker import Finding, blocking, check
from .definition.family import KernelFamily
from .definition.hardware import HARDWARE, XDNA1, XDNA2, DmaPorts, Hardware
from .definition.registry import FAMILIES
from .definition.specs import SPECS, Decode, KernelSpec, KernelUse, Operand, Prefill, model_kernels
from .emulation.numerics import BFP16EBS8, BFPFormat, gemm_bfp16, gemv_fp32acc, to_bf16, to_bfp16

__all__ = [
    "BFP16EBS8", "FAMILIES", "HARDWARE", "SPECS", "XDNA1", "XDNA2", "BFPFormat", "Decode",
    "DmaPorts", "Finding", "Hardware", "KernelFamily", "KernelSpec", "KernelUse", "Operand",
    "Prefill", "blocking", "check", "gemm_bfp16", "gemv_fp32acc", "model_kernels",
    "to_bf16", "to_bfp16",
]
