"""Phase 1's operation: run one kernel at one shape and config on a backend, and judge it
element by element against the FP32 reference.

Output buffers are filled with NaN before the run, so a kernel that writes nothing
(or only part of its output) cannot pass: NaN is never within tolerance.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from npu_deploy.events.phases import phase
from npu_deploy.metrics.comparison import Comparison, compare
from npu_deploy.models.config import RopeScaling
from npu_deploy.oracle.reference import rope_cos_sin

from ..definition.checker import Finding, check
from ..definition.hardware import XDNA2, Hardware
from ..definition.registry import FAMILIES
from ..definition.specs import KernelSpec, Shape
from ..families.rope import lut as rope_lut
from .emulator import REFERENCE
from .numerics import to_bf16


def phase1_rtol() -> float:
    """Phase 1's gate (docs/design.md#phase-1-kernel-validation): rtol 1.6e-2 (bf16) on every
    element (the phase table's phase1.rtol, read at every call), plus a per-kernel atol."""
    return phase(1).threshold("rtol")


#: Per-kernel atol, for the unit-scale outputs the seeded inputs give: each family's numerics
#: declares its own and says why. A configuration of another precision tier (a GEMM's direct
#: method) is checked with its own: `atol_for`.
ATOL = {name: f.numerics.atol for name, f in FAMILIES.items() if f.numerics}


def atol_for(spec: KernelSpec, config: dict[str, Any]) -> float:
    """The Phase-1 atol of `spec` run with `config` (the spec's defaults filled in)."""
    numerics = FAMILIES[spec.name].numerics
    if numerics is None:
        raise KeyError(f"{spec.name} has no emulated numerics, so no Phase-1 atol")
    return numerics.atol_of({**spec.tunables, **config})


class Backend(Protocol):
    name: str

    def run(self, spec: KernelSpec, shape: Shape, config: dict[str, Any],
            inputs: dict[str, torch.Tensor], outputs: dict[str, torch.Tensor]) -> None: ...


@dataclass(frozen=True)
class KernelReport:
    kernel: str
    shape: Shape
    config: dict[str, Any]
    backend: str
    passed: bool
    atol: float
    rtol: float
    metrics: dict[str, Comparison]
    findings: list[Finding] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Per output: the figures a Phase-1 gate records."""
        return {name: {"within_fraction": c.within_frac, "outside": c.n_outside,
                       "max_abs": c.max_abs, "mean_rel_l1": c.mean_rel_l1, "rel_l2": c.rel_l2,
                       "pearson": c.pearson}
                for name, c in self.metrics.items()}


def seeded_inputs(spec: KernelSpec, shape: Shape, seed: int = 0,
                  config: dict[str, Any] | None = None) -> dict[str, torch.Tensor]:
    """bf16 inputs that give outputs of unit scale: activations randn, weights randn scaled
    as the kernel's numerics say (randn / sqrt(K) for a matmul, near 1 for a norm), a real
    RoPE table. A quantized kernel's weight is a valid quantized matrix its numerics seed
    (`seeded_weight`: random codes, scales and offsets as a checkpoint's), stored for
    `config` (the spec's defaults where not given)."""
    gen = torch.Generator().manual_seed(seed)
    numerics = FAMILIES[spec.name].numerics if spec.name in FAMILIES else None
    out: dict[str, torch.Tensor] = {}
    for op in spec.operands(shape):
        if op.role == "output":
            continue
        if op.role == "weight" and numerics is not None and numerics.seeded_weight is not None:
            out.update(numerics.seeded_weight(shape, {**spec.tunables, **(config or {})}, gen))
            continue
        if op.role == "table":     # the oracle's own RoPE table, theta 10000
            cos, sin = rope_cos_sin(op.dims[1], 10000.0, RopeScaling(), torch.arange(op.dims[0]))
            out[op.name] = to_bf16(rope_lut(cos, sin))
            continue
        t = torch.randn(op.dims, generator=gen)
        if op.role == "weight" and numerics is not None and numerics.weights is not None:
            t = numerics.weights(t, shape)         # unit-scale outputs
        out[op.name] = to_bf16(t)
    return out


def output_buffers(spec: KernelSpec, shape: Shape) -> dict[str, torch.Tensor]:
    """The kernel's outputs, each filled with NaN (so an element it does not write fails)."""
    return {op.name: torch.full(op.dims, float("nan"),
                                dtype=torch.float32 if op.elem_bytes == 4 else torch.bfloat16)
            for op in spec.operands(shape) if op.role == "output"}


def validate_kernel(spec: KernelSpec, shape: Shape, config: dict[str, Any], backend: Backend,
                    *, inputs: dict[str, torch.Tensor] | None = None, seed: int = 0,
                    hw: Hardware = XDNA2, atol: float | None = None) -> KernelReport:
    """Run `spec` on `backend` and check every element against the FP32 reference."""
    inputs = inputs if inputs is not None else seeded_inputs(spec, shape, seed, config)
    outputs = output_buffers(spec, shape)
    backend.run(spec, shape, config, inputs, outputs)
    want = REFERENCE[spec.name](shape, {**spec.tunables, **config}, inputs)
    atol = atol_for(spec, config) if atol is None else atol
    rtol = phase1_rtol()
    metrics = {name: compare(want[name].reshape(out.shape), out, atol=atol, rtol=rtol)
               for name, out in outputs.items()}
    passed = all(c.n_outside == 0 for c in metrics.values())
    return KernelReport(spec.name, dict(shape), dict(config), backend.name, passed, atol, rtol,
                        metrics, check(spec, shape, config, hw))
