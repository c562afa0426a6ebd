"""The NPU's numerics on the CPU: bf16 and the BFP16 block format, the GEMM and GEMV
datapaths and the softmax as the hardware computes them (`numerics`, with its compiled loops
in `_bfp_kernel`), the operands' device layouts (`tensors`), the emulator backend that runs
each family's emulation (`emulator`), a model run plan by plan on it (`emulated_model`), and
the validation of a kernel against the reference (`validate`).

Importing this package imports none of its modules: each public name, listed in
`__init__.pyi`, is imported the first time it is asked for (lazy_loader)."""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
