"""The kernel coefficients of the performance model, fitted on what upstream measured.

Each NPU family's `Cost` names the `PerfParams` coefficients its work reads, each with the
value its fit starts from, and lists the launches its upstream page measured on their own
(`Cost.fitted_on`); calibration.json adds the configurations the pages' notes swept. Families
that share a coefficient are fitted together (the two GEMMs; the streaming kernels, which
share a floor, a DDR ceiling and a block cost), each group by least squares of
ln(modeled / measured) over its launches: Levenberg-Marquardt on the logarithms of the
coefficients (every one is positive), from the declared starting values, to convergence.
The fit is deterministic, so `calibrate()` re-derives the same numbers every time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..definition.family import TimedLaunch
from ..definition.registry import FAMILIES, SPECS
from .calibration_set import CALIBRATION, Calibration
from .model import PerfParams, launch_seconds


@dataclass(frozen=True)
class FitGroup:
    """Families whose coefficients are fitted together, and those coefficients with the
    values their fit starts from."""

    kernels: tuple[str, ...]
    coefficients: tuple[tuple[str, float], ...]

    @property
    def name(self) -> str:
        return "+".join(self.kernels)


def fit_groups() -> list[FitGroup]:
    """The NPU families with measured launches, grouped by shared coefficients, in the
    registry's order; a family that only reads another's coefficients (the QK norm reads
    RMSNorm's) is not a member."""
    groups: list[tuple[list[str], dict[str, float]]] = []
    for f in FAMILIES.values():
        if f.cost is None or f.cost.fitted_on is None:
            continue
        mine = dict(f.cost.coefficients)
        joined = [g for g in groups if set(g[1]) & set(mine)]
        kernels, coefs = [f.name], dict(mine)
        for g in joined:
            groups.remove(g)
            kernels, coefs = g[0] + kernels, {**g[1], **coefs}
        groups.append((kernels, coefs))
    return [FitGroup(tuple(k), tuple(c.items())) for k, c in groups]


def measured_launches(c: Calibration | None = None, sweeps: bool = True
                      ) -> list[TimedLaunch]:
    """Every launch upstream measured on its own: each family's page (the registry's rows
    and tables), then, with `sweeps`, the configurations its notes swept (calibration.json).
    """
    out: list[TimedLaunch] = []
    for f in FAMILIES.values():
        if f.cost is not None and f.cost.fitted_on is not None:
            out += f.cost.fitted_on()
    if not sweeps:
        return out
    if c is None:
        c = CALIBRATION
    return out + list(c.sweeps)


def modeled_seconds(launches: Sequence[TimedLaunch], p: PerfParams) -> list[float]:
    """The modeled standalone time of each launch."""
    return [launch_seconds(SPECS[t.kernel], t.shape_dict, t.config_dict, p) for t in launches]


def fit_group(p: PerfParams, group: FitGroup, launches: Sequence[TimedLaunch]) -> PerfParams:
    """`p` with `group`'s coefficients fitted on those of `launches` that are its kernels'
    (the rest of `p` as it is)."""
    mine = [t for t in launches if t.kernel in group.kernels]
    names = [n for n, _ in group.coefficients]
    x0 = np.log([v for _, v in group.coefficients])
    if not mine:
        return p
    items = [(SPECS[t.kernel], t.shape_dict, t.config_dict, math.log(t.seconds)) for t in mine]

    def residuals(x: np.ndarray) -> np.ndarray:
        q = p.with_coefficients(dict(zip(names, np.exp(x).tolist(), strict=True)))
        return np.array([math.log(launch_seconds(spec, s, c, q)) - y for spec, s, c, y in items])

    x = least_squares(residuals, x0)
    return p.with_coefficients(dict(zip(names, np.exp(x).tolist(), strict=True)))


def fit_kernels(p: PerfParams, launches: Sequence[TimedLaunch]) -> PerfParams:
    """`p` with every group's coefficients fitted on `launches`."""
    for group in fit_groups():
        p = fit_group(p, group, launches)
    return p


def least_squares(residuals: Callable[[np.ndarray], np.ndarray], x0: np.ndarray,
                  max_iterations: int = 500) -> np.ndarray:
    """Levenberg-Marquardt: the x near x0 that minimizes |residuals(x)|^2 (a forward-
    difference Jacobian, the damping scaled by the normal matrix's diagonal), iterated until
    a step no longer lowers the cost by a relative 1e-13."""
    x = np.asarray(x0, dtype=float)
    r = residuals(x)
    cost, damping = float(r @ r), 1e-3
    for _ in range(max_iterations):
        jac = np.empty((len(r), len(x)))
        for j in range(len(x)):
            step = np.zeros_like(x)
            step[j] = 1e-7
            jac[:, j] = (residuals(x + step) - r) / 1e-7
        normal, grad = jac.T @ jac, jac.T @ r
        improved = False
        while damping < 1e10:
            delta = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12), -grad)
            r_new = residuals(x + delta)
            c_new = float(r_new @ r_new)
            if c_new < cost:
                gain = (cost - c_new) / max(cost, 1e-300)
                x, r, cost = x + delta, r_new, c_new
                damping = max(damping / 3, 1e-12)
                improved = True
                break
            damping *= 4
        if not improved or gain < 1e-13:
            break
    return x


__all__ = ["FitGroup", "fit_group", "fit_groups", "fit_kernels", "least_squares",
           "measured_launches", "modeled_seconds"]
