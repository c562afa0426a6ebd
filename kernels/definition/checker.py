"""Can this kernel configuration exist on the hardware? Typed findings, each naming the
limit, the numbers and the fix.

The resource model of each kernel family (how a configuration maps onto L1, L2, DMA channels
and buffer descriptors) is the family's rule in `kernels/families/`, built on the shared rules
of `kernels.definition.rules` and the figures of docs/hardware-facts.md: GEMM tiles get A and B
panels through the memory tiles and accumulate in L1 as their method says; GEMV and
element-wise kernels stream straight from DDR through the shim. The GEMM rule is held
against upstream's kernel registry: it accepts all 109 configurations measured on NPU2 and
rejects the 27 failures upstream reports (tests/kernels/test_gemm_registry.py); the other
families against their pages' measured configurations. FlashAttention's L1 use is not
modelled from mlir-air's allocation.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..measured import upstream_kernels
from .family import KernelSpec, Shape
from .hardware import Hardware
from .registry import FAMILIES
from .rules import Finding, Severity, blocking

__all__ = ["ELF_RESOURCES", "ElfResource", "Finding",
           "Severity", "blocking", "check", "check_merge", "check_with_usage",
           "shared_configs"]


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
#
# How an ELF holds the array. MLIR-AIR lowers the air.segment of every launch to an aie.device of
# its own, and the ELF's main sequence configures and runs those devices one after the other
# (mlir-air e972f29: mlir/lib/Conversion/AIRToAIEPass.cpp outlines one aie.device per segment;
# AIRRtToNpuPass.cpp `createMainDeviceWrapper` emits aiex.configure + aiex.run per device). So the
# tiles, L1, L2, the memory tiles' descriptors and channels and the shim streams belong to the
# launch that runs: a launch that fits alone fits in the ELF, whatever came before it. What the
# launches of one ELF do share is modelled by `ELF_RESOURCES` (what each launch uses while it runs
# and what it keeps until the ELF ends) and a family's `first_launch_only` (launches that compute
# wrong after another launch); FlashAttention's channels keep it out of every multi-launch ELF (a
# family's `own_elf`). Upstream documents no limit on the number of launches in an ELF
# (programming_examples/llms/README.md: the O+FFN splits are "a per-launch L1/BD limit, not a
# launch-count limit"; Qwen2.5-0.5B runs a 9-launch ELF).


@dataclass(frozen=True)
class ElfResource:
    """A resource the launches of one ELF take from the same pool: each launch uses the usage
    key `running` while it runs (given back when the next launch configures the array) and
    keeps `held` until the ELF ends, so the ELF needs max(running) + sum(held)."""

    what: str
    running: str
    held: str | None
    limit: Callable[[Hardware], int]
    kind: str
    symptom: str
    fix: str
    source: str


ELF_RESOURCES: tuple[ElfResource, ...] = (
    ElfResource(
        "buffer descriptors per shim tile", "bd_base", "bd_tails", lambda hw: hw.shim_bds,
        "bds", "Allocator exhausted available buffer descriptor IDs",
        "pad the dims to aligned sizes or split the ELF",
        "docs/hardware-facts.md#known-failure-symptoms ('BD pool exhausted by unaligned dims: "
        "pad to 1024-aligned or split the ELF'); mlir-air .claude/skills/debug-multi-launch-"
        "merge, hypothesis 1 (un-merge the last launch). The aligned streams' descriptors are "
        "reused launch to launch; an unaligned tail's are counted for the whole ELF"),
    ElfResource(
        "buffer descriptors per memory tile", "memtile_bds", None, lambda hw: hw.memory_bds,
        "bds", "aie.dma_bd unassigned IDs", "use fewer or larger L2 buffers in the launch",
        "docs/hardware-facts.md#array-and-memories (48 per memory tile); each launch configures "
        "the memory tiles anew"),
    ElfResource(
        "input DMA channels per memory tile", "memtile_in", None,
        lambda hw: hw.memory_dma.inputs, "channels", "out of channels",
        "use a smaller herd", "docs/hardware-facts.md#array-and-memories (6 + 6 per memory tile)"),
    ElfResource(
        "output DMA channels per memory tile", "memtile_out", None,
        lambda hw: hw.memory_dma.outputs, "channels", "out of channels",
        "use a smaller herd", "docs/hardware-facts.md#array-and-memories (6 + 6 per memory tile)"),
    ElfResource(
        "L2 bytes per memory tile", "l2_bytes", None, lambda hw: hw.l2_bytes, "l2",
        "L2 capacity exceeded", "use smaller L2 tiles in the launch",
        "docs/hardware-facts.md#array-and-memories (512 KiB per memory tile); buffers of "
        "launches that run one after the other do not coexist (one aie.device per launch)"),
)


def check_merge(launches: list[tuple[KernelSpec, Shape, dict[str, Any]]], hw: Hardware
                ) -> list[Finding]:
    """Why these launches cannot run as one dispatch (one ELF, in this order); [] when they
    can. See the notes above `ElfResource` for the model.

    * A dispatch holds NPU launches only, and each must fit on its own.
    * A kernel built as its own program (a family's `own_elf`) runs alone.
    * `ELF_RESOURCES`: the largest use of a launch while it runs plus what every launch keeps
      for the whole ELF must fit each pool (the shim's descriptors with unaligned tails).
    * two objects the launches link may not export one C symbol (a family's `objects`): an
      upstream source whose symbols cannot be renamed (mv.cc) compiled at two defines is
      two objects with the same names.
    * one module declares an extern symbol once (a family's `declares`): two launches that
      call it with buffers of other types (a GEMV's W rows of another K) cannot share it.
    * a launch its family says computes right only first in an ELF (`first_launch_only`)
      must come first."""
    f: list[Finding] = []
    usages: list[dict[str, int]] = []
    for spec, shape, config in launches:
        if spec.where != "npu":
            f.append(Finding("merge", "error", f"{spec.name} runs on the host; a dispatch "
                             "holds NPU launches only", 0, 0))
            continue
        found, usage = check_with_usage(spec, shape, config, hw)
        usages.append(usage)
        for bad in blocking(found):
            f.append(Finding(bad.kind, bad.severity, f"{spec.name}: {bad.message}", bad.value,
                             bad.limit))
    if len(launches) < 2:
        return f
    alone = sorted({spec.name for spec, _, _ in launches
                    if spec.name in FAMILIES and FAMILIES[spec.name].own_elf})
    for name in alone:
        f.append(Finding("merge", "error", f"{name} is built as its own program and runs "
                         "alone in its dispatch (upstream: FlashAttention's channels block "
                         "multi-launch merging); merge the launches before and after it "
                         "separately", len(launches), 1))
    reported = {x.kind for x in f}
    for r in ELF_RESOURCES:
        running = max((u.get(r.running, 0) for u in usages), default=0)
        held = sum(u.get(r.held, 0) for u in usages) if r.held else 0
        if running + held <= r.limit(hw) or (not held and r.kind in reported):
            continue
        need = f"{running} + {held} (held for the ELF) = {running + held}" if r.held \
            else f"{running}"
        f.append(Finding(r.kind, "error", f"{len(launches)} launches in one ELF need {need} "
                         f"{r.what}, {r.limit(hw)} exist ('{r.symptom}'); {r.fix}",
                         running + held, r.limit(hw)))
    f += _symbol_clashes(launches) or _declaration_clashes(launches)
    for k, (spec, shape, _) in enumerate(launches[1:], start=1):
        fam = FAMILIES.get(spec.name)
        why = fam.first_launch_only(shape) if fam and fam.first_launch_only else None
        if why:
            f.append(Finding("known_failure", "error", f"launch {k}: {spec.name} {why}", k, 0))
    return f


def shared_configs(launches: list[tuple[KernelSpec, Shape, dict[str, Any]]], hw: Hardware
                   ) -> list[dict[str, Any]] | None:
    """Configurations under which `launches` make one legal ELF, or None: each one's own
    where `check_merge` finds nothing, else each family's `share` applied to its launches of
    the ELF (one object and one declaration per symbol), kept only if every launch still fits
    alone and the ELF is legal."""
    configs = [dict(c) for _, _, c in launches]
    if not check_merge(launches, hw):
        return configs
    for name in dict.fromkeys(spec.name for spec, _, _ in launches):
        fam = FAMILIES.get(name)
        if fam is None or fam.share is None:
            continue
        at = [k for k, (spec, _, _) in enumerate(launches) if spec.name == name]
        shared = fam.share([(launches[k][1], {**launches[k][0].tunables, **configs[k]})
                            for k in at])
        if shared is None:
            return None
        for k, c in zip(at, shared, strict=True):
            configs[k] = c
    trial = [(spec, shape, c) for (spec, shape, _), c in zip(launches, configs, strict=True)]
    if any(blocking(check(spec, shape, c, hw)) for spec, shape, c in trial) \
            or check_merge(trial, hw):
        return None
    return configs


def _symbol_clashes(launches: list[tuple[KernelSpec, Shape, dict[str, Any]]]) -> list[Finding]:
    """Two objects of one ELF that export the same C symbol: the linker takes one definition,
    and the other launch would run a kernel compiled at another size. Upstream gives such a
    launch an ELF of its own (llama32_3b's tile_m-2 down GEMV links down_mv.o alone)."""
    by_symbol: dict[str, dict[str, tuple[str, Any]]] = {}
    for spec, shape, config in launches:
        fam = FAMILIES.get(spec.name)
        if fam is None or fam.objects is None:
            continue
        for obj in fam.objects(shape, {**spec.tunables, **config}):
            for symbol in exported(obj.source, dict(obj.defines)):
                by_symbol.setdefault(symbol, {})[obj.obj] = (spec.name, obj)
    f: list[Finding] = []
    for symbol, objs in sorted(by_symbol.items()):
        if len(objs) < 2:
            continue
        names = ", ".join(f"{o} ({kernel}, {_defines(src.defines)})"
                          for o, (kernel, src) in sorted(objs.items()))
        f.append(Finding("merge", "error", f"{len(objs)} objects in one ELF export "
                         f"{symbol}: {names}; upstream cannot rename it, so the launches "
                         "need one configuration of these defines or ELFs of their own",
                         len(objs), 1))
        break                              # one clash says it; the other symbols follow
    return f


def _declaration_clashes(launches: list[tuple[KernelSpec, Shape, dict[str, Any]]]
                         ) -> list[Finding]:
    """A symbol two launches declare with other argument types: func.call's verifier
    rejects a call that does not match the module's one declaration."""
    seen: dict[str, tuple[str, str]] = {}
    for k, (spec, shape, config) in enumerate(launches):
        fam = FAMILIES.get(spec.name)
        if fam is None or fam.declares is None:
            continue
        for symbol, types in fam.declares(shape, {**spec.tunables, **config}).items():
            first = seen.setdefault(symbol, (f"launch {k} ({spec.name})", types))
            if first[1] != types:
                return [Finding("merge", "error", f"launch {k} ({spec.name}) calls {symbol} "
                                f"with ({types}), {first[0]} with ({first[1]}): one module "
                                "declares a symbol once; keep the launches in separate ELFs",
                                k, 0)]
    return []


def exported(source: str, defines: dict[str, Any]) -> list[str]:
    """The C symbols an object compiled from upstream `source` at `defines` exports (a
    suffix define pasted on)."""
    return [k.symbol + str(defines.get(k.suffix_define, "") if k.suffix_define else "")
            for k in upstream_kernels.kernels().values() if k.file == source]


def _defines(defines: tuple[tuple[str, Any], ...]) -> str:
    return " ".join(f"-D{n}" if v is None else f"-D{n}={v}" for n, v in defines) or "no defines"
