"""The NPU's numerics on the CPU: bf16 and the BFP16 block format, the GEMM and GEMV
datapaths and the softmax as the hardware computes them (`numerics`, with its compiled loops
in `_bfp_kernel`), the operands' device layouts (`tensors`), the emulator backend that runs
each family's emulation (`emulator`), a model run plan by plan on it (`emulated_model`), and
the validation of a kernel against the reference (`validate`).

Importing this package imports none of its modules: each public name below is imported the
first time it is asked for (kernels._public_face)."""

from typing import TYPE_CHECKING

from .._public_face import public_face

if TYPE_CHECKING:
    from .emulated_model import EmulatedModel
    from .emulator import EMULATED, REFERENCE, EmulatorBackend
    from .numerics import BFP16EBS8, BFPFormat, gemm_bfp16, gemv_fp32acc, to_bf16, to_bfp16
    from .validate import validate_kernel

__all__ = ["BFP16EBS8", "BFPFormat", "EMULATED", "EmulatedModel", "EmulatorBackend", "REFERENCE",
           "gemm_bfp16", "gemv_fp32acc", "to_bf16", "to_bfp16", "validate_kernel"]

__getattr__, __dir__ = public_face(__name__, __file__)
