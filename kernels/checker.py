"""Can this kernel configuration exist on the hardware? Typed findings, each naming the
limit, the numbers and the fix.

The resource model of each kernel family (how a configuration maps onto L1, L2, DMA
channels and buffer descriptors) is the family's rule in `kernels/families/`, built on
the shared rules of `kernels.rules` and the figures of NPU_FACTS.md: GEMM tiles get A and B
panels through the memory tile of their column and accumulate in FP32 in L1; GEMV and
element-wise kernels stream straight from DDR through the shim. It is set so that the
measured configurations of NPU_FACTS.md pass and the static failures of its symptom table
are flagged; it has not yet been compared with mlir-air's own allocation (FlashAttention's
L1 use, in particular, is not modelled).
"""

from __future__ import annotations

from typing import Any

from .family import KernelSpec, Shape
from .hardware import Hardware
from .registry import FAMILIES
from .rules import Finding, Severity, blocking

__all__ = ["Finding", "Severity", "blocking", "check", "check_merge", "check_with_usage"]


def check(spec: KernelSpec, shape: Shape, config: dict[str, Any], hw: Hardware) -> list[Finding]:
    """Every rule of the hardware this (kernel, shape, config) breaks; [] when it fits."""
    return check_with_usage(spec, shape, config, hw)[0]


def check_with_usage(spec: KernelSpec, shape: Shape, config: dict[str, Any], hw: Hardware
                     ) -> tuple[list[Finding], dict[str, int]]:
    """The findings, and what the configuration uses: tiles, L1 and L2 bytes."""
    usage: dict[str, int] = {"tiles": 0, "l1_bytes": 0, "l2_bytes": 0}
    if spec.where == "cpu":
        return [], usage
    family = FAMILIES.get(spec.name)
    if family is None or family.check is None:
        raise KeyError(f"no resource model for kernel {spec.name!r}")
    return family.check(spec, shape, {**spec.tunables, **config}, hw, usage), usage


# --- merging launches into one dispatch (a multi-launch ELF) ------------------------------

def check_merge(launches: list[tuple[KernelSpec, Shape, dict[str, Any]]], hw: Hardware
                ) -> list[Finding]:
    """Why these launches cannot run as one dispatch; [] when they can.

    * Each launch must fit on its own: a launch whose herd, channels or memory do not fit
      makes the ELF fail too.
    * The launches run one after another and reuse the shim descriptors of aligned streams,
      but every unaligned tail keeps descriptors of its own for the whole ELF (NPU_FACTS:
      "BD pool exhausted by unaligned dims: pad to 1024-aligned or split the ELF"), so the
      ELF needs max(base) + sum(tails) descriptors per shim tile.
    * A kernel built as its own program (a family's `own_elf`) runs alone."""
    f: list[Finding] = []
    base = tails = 0
    for spec, shape, config in launches:
        if spec.where != "npu":
            f.append(Finding("merge", "error", f"{spec.name} runs on the host; a dispatch "
                             "holds NPU launches only", 0, 0))
            continue
        found, usage = check_with_usage(spec, shape, config, hw)
        for bad in blocking(found):
            f.append(Finding(bad.kind, bad.severity, f"{spec.name}: {bad.message}", bad.value,
                             bad.limit))
        base = max(base, usage.get("bd_base", 0))
        tails += usage.get("bd_tails", 0)
    if len(launches) > 1:
        alone = sorted({spec.name for spec, _, _ in launches
                        if spec.name in FAMILIES and FAMILIES[spec.name].own_elf})
        for name in alone:
            f.append(Finding("merge", "error", f"{name} is built as its own program and runs "
                             "alone in its dispatch (as in the measured deployment); merge "
                             "the launches before and after it separately", len(launches), 1))
        if base + tails > hw.shim_bds:
            f.append(Finding("bds", "error", f"{len(launches)} launches in one ELF need "
                             f"{base} + {tails} (unaligned tails) = {base + tails} buffer "
                             f"descriptors per shim tile, {hw.shim_bds} exist ('Allocator "
                             "exhausted available buffer descriptor IDs'); pad the dims to "
                             "aligned sizes or split the ELF", base + tails, hw.shim_bds))
    return f
