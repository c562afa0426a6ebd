"""Tile selection: for every (kernel, shape) a model needs, a configuration the checker
accepts, starting from the calibrated Llama-3.2-1B configurations of NPU_FACTS.md.

Each family declares its search space (`candidates`), ordered by how close a configuration
stays to the calibrated one; the first one without blocking findings and with the least
padded work wins, ties going to more tiles. Padding is allowed and its wasted work
recorded; silent corruption and hardware errors never are.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from .checker import Finding, blocking, check_with_usage
from .hardware import Hardware
from .registry import family
from .specs import KernelSpec, KernelUse, Shape, unique_kernels


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


def _candidates(spec: KernelSpec, shape: Shape, hw: Hardware) -> Iterator[dict[str, Any]]:
    candidates = family(spec.name).candidates
    if candidates is None:
        raise KeyError(f"kernel {spec.name!r} declares no search space")
    return candidates(spec, shape, hw)


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
