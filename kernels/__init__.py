"""kernels: what an NPU2 kernel is, what it costs on chip, whether a configuration can
exist on the hardware (`check`), and the numbers it produces. Each kernel is a family
declared once in `kernels/families/` and listed in `definition.registry.FAMILIES`.

The areas, each a package:

- `definition/`: the hardware, the family protocol, the registry, the checker, the selection;
- `families/`: one module per kernel family (with its numerics and program where large);
- `emulation/`: the NPU's numerics on the CPU and the emulator backend;
- `measured/`: upstream's measured data as ingested, its LLM deployments, and ours;
- `plans/`: dispatch plans, the baseline, the transforms, the plan runner;
- `performance/`: the performance model, its fit and its calibration;
- `air_programs/`: the MLIR-AIR emitter and its verifier (a recording stand-in of mlir-air);
- `formats/`: the quantized weight formats as data, their codecs and the GGUF repack;
- `npu_runtime/`: the toolchain, XRT, the NPU backend, the hardware report;
- `fidelity/`: how close the numerics, the model and the selection come to upstream's figures.

This package's names below are the ones most callers need."""

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
