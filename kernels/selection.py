"""Tile selection: for every (kernel, shape) a model needs, a configuration the checker
accepts, starting from the calibrated Llama-3.2-1B configurations of NPU_FACTS.md.

Candidates are ordered by how close they stay to the calibrated configuration;
the first one without blocking findings and with the least padded work wins,
ties going to more tiles. Padding is allowed and its wasted work recorded;
silent corruption and hardware errors never are.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .checker import Finding, blocking, check_with_usage
from .hardware import Hardware
from .specs import KernelSpec, KernelUse, Shape, unique_kernels

# Values to try per tunable, calibrated value first (NPU_FACTS: GEMM m64 / kl2 256 /
# kl1 32 / n128 on an 8x4 herd; GEMV herd_m 8; element-wise herds of 8).
_GEMM = {"tile_n": (128, 64, 32, 256), "herd_n": (8, 4, 7, 6, 5, 3, 2, 1),
         "herd_m": (4, 3, 2, 1), "tile_m": (64, 32, 128), "tile_k_l2": (256, 128, 512, 64),
         "tile_k_l1": (32, 64, 16)}
_GEMV = {"partitions": (1, 2, 4, 8, 16, 32, 64), "tile_m": (16, 8, 32),
         "tile_k": (512, 256, 1024, 128), "herd_m": (8, 4, 2, 1)}
_ROWS = {"herd_m": (8, 4, 2, 1), "tile_rows": (2, 1, 4, 8, 16, 32)}
_ELEMENTS = {"herd_m": (8, 4, 2, 1), "tile": (2048, 1024, 4096, 512, 256)}


@dataclass(frozen=True)
class Selection:
    use: KernelUse
    roles: tuple[str, ...]
    config: dict[str, Any]
    findings: list[Finding]
    usage: dict[str, int] = field(default_factory=dict)
    tried: int = 0

    @property
    def valid(self) -> bool:
        return not blocking(self.findings)

    @property
    def wasted_fraction(self) -> float:
        return _waste(self.findings)


def _waste(findings: list[Finding]) -> float:
    """1 - useful/padded work, over every padded dim."""
    useful = 1.0
    for f in findings:
        if f.kind == "padding" and f.limit:
            useful *= 1 - f.value / f.limit
    return 1 - useful


def attention_layout(head_dim: int) -> str:
    """The FlashAttention program for a head_dim: seq-first as measured at 64, head-first
    from 128 (NPU_FACTS: seq-first hangs there)."""
    return "head-first" if head_dim >= 128 else "seq-first"


def _candidates(spec: KernelSpec, shape: Shape, hw: Hardware) -> Iterator[dict[str, Any]]:
    if spec.name.startswith("gemm"):
        space = _GEMM
    elif spec.name == "gemv":
        space = _GEMV
    elif spec.name == "flash_attention":
        # Two heads per unroll as measured, else one (an odd head count).
        layout = attention_layout(shape["head_dim"])
        # The K chunk is also the head-dim tile: heads narrower than 64 take a chunk that
        # divides them, with q blocks as long (the causal mask needs them equal).
        for chunk in (64, 32, 16):
            if chunk != 64 and shape["head_dim"] % chunk:
                continue
            for per_unroll in (2, 1):
                yield {"layout": layout, "heads_per_unroll": per_unroll, "k_tile": chunk,
                       "q_tile": 4 * chunk, "q_tiles": 4, "dv_tile": chunk}
        return
    elif "tile_rows" in spec.tunables:
        space = _ROWS
    else:
        space = _ELEMENTS
    names = list(space)
    for values in itertools.product(*(space[n] for n in names)):
        config = dict(zip(names, values, strict=True))
        if config.get("herd_n", 1) > hw.cols or config.get("herd_m", 1) > hw.cols:
            continue
        yield config


def select(use: KernelUse, hw: Hardware, roles: tuple[str, ...] = ()) -> Selection:
    """The best configuration of `use` on `hw` (or the least bad, with its findings)."""
    spec = use.spec
    if spec.where == "cpu":
        return Selection(use, roles or (use.role,), {}, [], {"tiles": 0}, 0)
    best: tuple[tuple[Any, ...], Selection] | None = None
    tried = 0
    for rank, config in enumerate(_candidates(spec, use.shape, hw)):
        tried += 1
        findings, usage = check_with_usage(spec, use.shape, config, hw)
        key = (len(blocking(findings)), round(_waste(findings), 4), -usage["tiles"], rank)
        if best is None or key < best[0]:
            best = (key, Selection(use, roles or (use.role,), {**spec.tunables, **config},
                                   findings, usage))
        if not blocking(findings) and not _waste(findings) and rank == 0:
            break       # the calibrated configuration fits as it is
    assert best is not None
    chosen = best[1]
    return Selection(chosen.use, chosen.roles, chosen.config, chosen.findings, chosen.usage,
                     tried)


def select_all(uses: list[KernelUse], hw: Hardware) -> list[Selection]:
    """One selection per distinct (kernel, shape), with the roles that share it."""
    return [select(use, hw, tuple(roles)) for use, roles in unique_kernels(uses)]
