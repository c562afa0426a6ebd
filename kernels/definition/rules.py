"""The hardware's rules that every kernel family's checker shares: typed findings, and the
limits of the herd, L1, the DMA engines (repeat counts, strides, transfer alignment, shim
streams, buffer descriptors) and the padding a tile size forces.

Each rule appends a `Finding` that names the limit, the numbers and the fix. The figures
are `Hardware` fields (docs/hardware-facts.md for XDNA 2); a family's own rule in
`kernels/families/` decides which of these apply and with what counts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from .hardware import Hardware

Severity = Literal["error", "corrupt", "warning"]
#: error: will not compile or run. corrupt: runs, silently wrong. warning: works, costs.


@dataclass(frozen=True)
class Finding:
    kind: str              # l1 | l2 | channels | shim_streams | bds | repeat | stride | divisible |
    #                        padding | alignment | herd | layout | known_failure
    severity: Severity
    message: str
    value: float = 0.0
    limit: float = 0.0

    def __str__(self) -> str:
        return f"[{self.severity}] {self.message}"


def blocking(findings: list[Finding]) -> list[Finding]:
    """The findings that make a configuration unusable (errors and silent corruption)."""
    return [f for f in findings if f.severity != "warning"]


def herd(findings: list[Finding], rows: int, cols: int, hw: Hardware) -> None:
    if rows > hw.rows or cols > hw.cols:
        findings.append(Finding(
            "herd", "error", f"herd {cols}x{rows} (cols x rows) does not fit the "
            f"{hw.cols}x{hw.rows} array of {hw.name}; use at most {hw.cols} columns and "
            f"{hw.rows} rows", rows * cols, hw.tiles))


#: The core's stack, in its data memory beside the buffers: mlir-air's default stack_size
#: (aircc --stack-size); a family whose program asks for more passes its own.
STACK_BYTES = 1024


def l1(findings: list[Finding], need: int, hw: Hardware, what: str, fix: str,
       stack: int = STACK_BYTES) -> None:
    if need + stack > hw.l1_bytes:
        findings.append(Finding(
            "l1", "error", f"L1 footprint {need / 1024:.1f} KiB ({what}, ping-pong buffers "
            f"counted twice) and the {stack}-byte stack exceed the {hw.l1_bytes // 1024} KiB "
            f"of a compute tile; {fix}", need + stack, hw.l1_bytes))


def repeat(findings: list[Finding], name: str, count: int, hw: Hardware, fix: str) -> None:
    if count > hw.max_repeat:
        findings.append(Finding(
            "repeat", "error", f"{name} needs a DMA repeat count of {count}, over the limit "
            f"of {hw.max_repeat} (`Repeat count exceeds [0:{hw.max_repeat}]`); {fix}",
            count, hw.max_repeat))


def stride(findings: list[Finding], name: str, stride: int, hw: Hardware) -> None:
    if not 1 <= stride <= hw.max_stride:
        findings.append(Finding(
            "stride", "error", f"{name} needs a DMA stride of {stride} elements, outside "
            f"[1, {hw.max_stride}]; split the transfer or transpose the layout",
            stride, hw.max_stride))


def shim(findings: list[Finding], tiles: int, ins: int, outs: int, hw: Hardware) -> None:
    """Every tile streams `ins` DDR inputs and `outs` outputs through the shim tiles: the
    array has `shim_inputs` / `shim_outputs` such streams (docs/hardware-facts.md#dma-limits:
    3 streams per tile cap a herd at 8 tiles, 2 streams per tile allow 8x2)."""
    need_in, need_out = tiles * ins, tiles * outs
    if need_in > hw.shim_inputs or need_out > hw.shim_outputs:
        most = min(hw.shim_inputs // max(ins, 1), hw.shim_outputs // max(outs, 1))
        findings.append(Finding(
            "shim_streams", "error", f"{tiles} tiles x ({ins} DDR inputs + {outs} output) need "
            f"{need_in} in / {need_out} out shim streams, the array has {hw.shim_inputs} / "
            f"{hw.shim_outputs} (compile error 'out of channels'); use at most {most} tiles",
            max(need_in, need_out), min(hw.shim_inputs, hw.shim_outputs)))


def align(findings: list[Finding], name: str, elems: int, elem_bytes: int, hw: Hardware) -> None:
    if (elems * elem_bytes) % hw.transfer_align:
        findings.append(Finding(
            "alignment", "error", f"{name} transfers {elems * elem_bytes} bytes, not a "
            f"multiple of {hw.transfer_align}; use an even number of bf16 elements",
            elems * elem_bytes, hw.transfer_align))


def divisible(findings: list[Finding], name: str, value: int, step: int, why: str) -> None:
    """`value` must be a whole multiple of `step` (a kernel's vector width, a tile): `why`
    says what breaks otherwise."""
    if value % step:
        findings.append(Finding("divisible", "error", f"{name}={value} is not a multiple of "
                                f"{step}: {why}", value, step))


def pad(findings: list[Finding], dim: str, size: int, step: int) -> int:
    """Record the padding a dim needs to a multiple of `step`; returns the padded size."""
    padded = math.ceil(size / step) * step
    if padded != size:
        findings.append(Finding(
            "padding", "warning", f"{dim}={size} is not a multiple of {step}: padded to "
            f"{padded}, {100 * (padded - size) / padded:.1f}% of that work is wasted",
            padded - size, padded))
    return padded


def bds(findings: list[Finding], streams: int, tails: int, hw: Hardware,
        usage: dict[str, int] | None = None, once: int = 0) -> None:
    """Each stream ping-pongs over two shim descriptors and a buffer loaded once (a norm's
    weight) takes one; an unaligned tail needs its own pair per stream ('BD pool exhausted by
    unaligned dims': docs/hardware-facts.md#known-failure-symptoms). `usage` gets bd_base and
    bd_tails, the descriptors a multi-launch ELF reuses and keeps
    (kernels.definition.checker.ELF_RESOURCES)."""
    base, extra = streams * 2 + once, tails * 2 * streams
    need = base + extra
    if usage is not None:
        usage.update(bd_base=base, bd_tails=extra)
    if need > hw.shim_bds:
        findings.append(Finding(
            "bds", "error", f"{need} buffer descriptors needed per shim tile, "
            f"{hw.shim_bds} exist ('Allocator exhausted available buffer descriptor IDs'); "
            "pad the dims to aligned sizes or split the launch", need, hw.shim_bds))


def heads_share_kv(findings: list[Finding], heads: int, kv_heads: int) -> None:
    """Grouped-query attention: the query heads split evenly over the KV heads."""
    if heads % kv_heads:
        findings.append(Finding("divisible", "error", f"{heads} query heads do not share "
                                f"{kv_heads} KV heads evenly", heads, kv_heads))
