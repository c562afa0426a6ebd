"""The emulator backend: each NPU2 kernel run on the CPU with the NPU's numerics, and the
FP32 reference each one is validated against, both declared by the kernel's family.

Numerics (see kernels/emulation/numerics.py for the sources): every tensor between kernels is
bf16; GEMMs and the two matmuls of attention go through the bfp16ebs8 datapath with
FP32 accumulation over K tiles; GEMV accumulates in FP32 lanes. Norms, RoPE,
softmax and SiLU read bf16, compute in FP32 and write bf16 once, which is how the
mlir-air kernels of these ops are written (an FP32 accumulator or vector, one
cast on the way out). Every time this backend reports is modeled, never measured.
"""

from __future__ import annotations

from ..definition.family import EmulatedKernel, KernelSpec, ReferenceKernel, Shape, Tensors
from ..definition.registry import FAMILIES
from .bf16_blas import SharedA, sharing_a
from .host_memory import keep_freed_memory

#: Each kernel's emulation and its FP32 reference, by kernel name.
EMULATED: dict[str, EmulatedKernel] = {
    name: f.numerics.emulate for name, f in FAMILIES.items() if f.numerics}
REFERENCE: dict[str, ReferenceKernel] = {
    name: f.numerics.reference for name, f in FAMILIES.items() if f.numerics}


class EmulatorBackend:
    """Runs kernels on the CPU with the NPU's numerics. Its times are modeled elsewhere
    (the performance model); it reports none itself."""

    name = "emulator"
    source = "modeled"
    #: a kernel reads each operand through the layout its plan bound it in and computes the
    #: same numbers in either (tests/kernels/test_plans.py holds the bits equal), so an
    #: arithmetic signature (kernels.plans.signature) may leave layouts out
    layout_invariant = True

    def prepare(self, plan: object) -> None:
        """Before a plan runs: the host allocator keeps the memory a run frees, so the
        next run's activations fault no pages in (`host_memory`)."""
        keep_freed_memory()

    def run(self, spec: KernelSpec, shape: Shape, config: dict, inputs: Tensors,
            outputs: Tensors) -> None:
        """Write the kernel's results into `outputs` (preallocated, as on the device). A
        GEMM's A operand converted to the block format is kept for the next GEMMs that read
        the same tensor (`bf16_blas.SharedA`), until a kernel writes it."""
        kernel = EMULATED.get(spec.name)
        if kernel is None:
            raise KeyError(f"the emulator has no kernel {spec.name!r}")
        with sharing_a(self.shared_a):
            results = kernel(shape, {**spec.tunables, **config}, inputs, outputs)
        for name, value in results.items():
            if value.data_ptr() != outputs[name].data_ptr():
                outputs[name].copy_(value.reshape(outputs[name].shape))
        self.wrote(outputs)

    @property
    def shared_a(self) -> SharedA:
        """The GEMM A operands this backend's kernels converted and may share."""
        return self.__dict__.setdefault("_shared_a", SharedA())

    def wrote(self, outputs: Tensors) -> None:
        """A kernel wrote `outputs`: nothing converted from them is shared any more. A
        subclass that writes outputs itself calls this."""
        for written in outputs.values():
            self.shared_a.forget(written)
