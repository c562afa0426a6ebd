"""Tile selection: for every (kernel, shape) a model needs, a configuration the checker
accepts.

Where upstream measured the shape on NPU2 (the kernel registry's data, `KernelFamily.measured`),
its fastest high-precision configuration is taken, as upstream's own models take it, and the
selection says so (`source` "measured"). Elsewhere every candidate of the family's search
space is checked and the fastest by the performance model wins (`source` "modeled"):
blocking findings first ruled out, then the high-precision tier before the low one, then the
least padded work, then the modeled time. Padding is allowed and its wasted work recorded;
silent corruption and hardware errors never are: a shape without a valid configuration gets
the least bad one with its findings, which `valid` reports and the caller refuses.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

from ..performance.model import launch_seconds
from .checker import Finding, blocking, check_with_usage
from .hardware import XDNA2, Hardware
from .registry import SPECS, family
from .specs import KernelSpec, KernelUse, Shape, unique_kernels

SelectionSource = Literal["measured", "modeled"]

#: Configurations the performance model times within this fraction of the fastest are not
#: told apart (its 5-fold median |ln(modeled/measured)| for GEMMs is 0.077, and
#: exp(0.077) - 1 = 8%); among them selection takes the one closest to upstream's default.
MODEL_RESOLUTION = 0.08


@dataclass(frozen=True)
class Selection:
    use: KernelUse
    roles: tuple[str, ...]
    config: dict[str, Any]
    findings: list[Finding]
    usage: dict[str, int] = field(default_factory=dict)
    tried: int = 0
    #: "measured": upstream's fastest configuration measured at this shape on NPU2
    #: (`measured` holds that registry row); "modeled": chosen by the performance model
    source: SelectionSource = "modeled"
    measured: dict[str, Any] | None = None
    modeled_s: float = 0.0

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


def modeled_seconds(spec: KernelSpec, shape: Shape, config: dict[str, Any]) -> float:
    """A launch's modeled time on its own (kernels.performance.model)."""
    return launch_seconds(spec, shape, config)


def select(use: KernelUse, hw: Hardware, roles: tuple[str, ...] = (),
           use_measured: bool = True) -> Selection:
    """The best configuration of `use` on `hw` (or the least bad, with its findings).
    `use_measured` False ignores upstream's measured configurations (to judge the model)."""
    spec = use.spec
    if spec.where == "cpu":
        return Selection(use, roles or (use.role,), {}, [], {"tiles": 0}, 0)
    found = _select(spec.name, tuple(sorted(use.shape.items())), hw, use_measured, use.fixed)
    return Selection(use, roles or (use.role,), dict(found.config), list(found.findings),
                     dict(found.usage), found.tried, found.source, found.measured,
                     found.modeled_s)


@dataclass(frozen=True)
class _Found:
    config: dict[str, Any]
    findings: list[Finding]
    usage: dict[str, int]
    tried: int
    source: SelectionSource
    measured: dict[str, Any] | None
    modeled_s: float


@functools.lru_cache(maxsize=4096)
def _select(name: str, shape_items: tuple[tuple[str, int], ...], hw: Hardware,
            use_measured: bool, fixed: tuple[tuple[str, Any], ...] = ()) -> _Found:
    """Selection is a pure function of (kernel, shape, hardware, the configuration the model
    fixes): computed once."""
    spec, shape = SPECS[name], dict(shape_items)
    fam = family(name)
    if use_measured and hw == XDNA2 and fam.measured is not None and fam.measured_config:
        row = fam.measured(shape)
        if row is not None:
            config = {**spec.tunables, **{k: row[k] for k in spec.tunables if k in row},
                      **dict(fixed)}
            findings, usage = check_with_usage(spec, shape, config, hw)
            if not blocking(findings):
                return _Found(config, findings, usage, 1, "measured", row,
                              modeled_seconds(spec, shape, config))
    scored: list[tuple[tuple[Any, ...], int, _Found]] = []
    for rank, candidate in enumerate(_candidates(spec, shape, hw)):
        config = {**spec.tunables, **candidate, **dict(fixed)}
        findings, usage = check_with_usage(spec, shape, config, hw)
        bad = len(blocking(findings))
        seconds = modeled_seconds(spec, shape, config) if not bad else float("inf")
        key = (bad, _tier(name, config), round(_waste(findings), 4))
        scored.append((key, rank, _Found(config, findings, usage, 0, "modeled", None, seconds)))
    if not scored:
        raise KeyError(f"kernel {name!r} offers no configuration at {shape}")
    # Among the best class (fewest blocking findings, the higher tier, least padding), the
    # modeled-fastest and every configuration within the model's resolution of it; of
    # those, the one closest to what upstream runs by default, then more tiles.
    top = min(key for key, _, _ in scored)
    group = [(rank, found) for key, rank, found in scored if key == top]
    fastest = min(found.modeled_s for _, found in group)
    preferred = fam.preferred(shape) if fam.preferred is not None else spec.tunables
    near = [(rank, found) for rank, found in group
            if found.modeled_s <= fastest * (1 + MODEL_RESOLUTION)]
    _, chosen = min(near, key=lambda rf: (
        sum(rf[1].config.get(k) != v for k, v in preferred.items()),
        -rf[1].usage.get("tiles", 0), rf[1].modeled_s, rf[0]))
    return _Found(chosen.config, chosen.findings, chosen.usage, len(scored), "modeled", None,
                  chosen.modeled_s)


def ranked_configs(use: KernelUse, hw: Hardware) -> list[dict[str, Any]]:
    """Every configuration of `use` the checker accepts, best first: the selection's own,
    then the rest in selection's order (the higher precision tier, least padding, modeled
    time). What a retry of a failed kernel moves down, one configuration at a time."""
    spec = use.spec
    if spec.where == "cpu":
        return []
    return [dict(c) for c in _ranked(spec.name, tuple(sorted(use.shape.items())), hw)]


@functools.lru_cache(maxsize=256)
def _ranked(name: str, shape_items: tuple[tuple[str, int], ...], hw: Hardware
            ) -> tuple[dict[str, Any], ...]:
    spec, shape = SPECS[name], dict(shape_items)
    chosen = _select(name, shape_items, hw, True)
    valid = []
    for rank, candidate in enumerate(_candidates(spec, shape, hw)):
        config = {**spec.tunables, **candidate}
        findings = check_with_usage(spec, shape, config, hw)[0]
        if blocking(findings) or config == chosen.config:
            continue
        valid.append(((_tier(name, config), round(_waste(findings), 4),
                       modeled_seconds(spec, shape, config), rank), config))
    valid.sort(key=lambda kc: kc[0])
    first = () if blocking(chosen.findings) else (chosen.config,)
    return first + tuple(config for _, config in valid)


def _tier(name: str, config: dict[str, Any]) -> int:
    """0 for the high-precision tier (or a kernel without tiers), 1 for the low one."""
    tiers = family(name).low_precision
    return int(bool(tiers) and config.get("method") in tiers)


def select_all(uses: list[KernelUse], hw: Hardware) -> list[Selection]:
    """One selection per distinct (kernel, shape), with the roles that share it."""
    return [select(use, hw, tuple(roles)) for use, roles in unique_kernels(uses)]
