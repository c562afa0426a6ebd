"""The performance model held against what upstream measured on NPU2.

For every launch upstream measured on its own (`kernels.performance.fitting.measured_launches`: the
kernel registry's rows and the sweeps of its notes), the modeled against the measured
seconds, and per kernel family:

* the median and the 90th percentile of |ln(modeled / measured)|;
* the median, over the shapes with three or more measured configurations, of the Spearman
  rank correlation between modeled and measured time at that shape (does the model order a
  shape's configurations as the hardware did);

in-sample (the calibrated parameters) and k-fold held out by shape: the shapes are dealt
into k folds and each fold's launches are modeled with coefficients fitted on the other
folds alone. And every per-layer ELF upstream measured for a model other than Llama-3.2-1B
(`held_out_elfs`), which nothing is fitted to. Every figure is modeled and held against
measured-on-NPU figures whose page each names.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from npu_deploy.models import CATALOG

from ..definition.family import TimedLaunch
from ..measured.deployments import upstream_deployments
from ..performance.calibration import reference_decode, reference_prefill
from ..performance.fitting import fit_group, fit_groups, measured_launches, modeled_seconds
from ..performance.model import DEFAULT_PARAMS, PerfParams, device_s
from ..plans.steps import Dispatch

#: how many folds the k-fold figures deal the shapes into, and the seed that deals them
FOLDS = 5
SEED = 0
#: configurations a shape needs for its rank correlation to count
MIN_CONFIGS = 3


@dataclass(frozen=True)
class Comparison:
    """One measured launch and its modeled time."""

    launch: TimedLaunch
    modeled_s: float

    @property
    def measured_s(self) -> float:
        return self.launch.seconds

    @property
    def log_error(self) -> float:
        """ln(modeled / measured): positive when the model is slower than the hardware."""
        return math.log(self.modeled_s / self.launch.seconds)


@dataclass(frozen=True)
class Fidelity:
    """How close a set of modeled launches came to the measured ones."""

    name: str
    launches: int
    median_abs_log: float
    p90_abs_log: float
    rank_median: float | None       # median per-shape Spearman, None without such shapes
    rank_shapes: int                # shapes with MIN_CONFIGS or more configurations


def compare(launches: Sequence[TimedLaunch] | None = None,
            params: PerfParams | None = None) -> list[Comparison]:
    """Every launch (default: all measured) modeled with `params` (default: calibrated)."""
    launches = measured_launches() if launches is None else launches
    modeled = modeled_seconds(launches, params or DEFAULT_PARAMS)
    return [Comparison(t, m) for t, m in zip(launches, modeled, strict=True)]


def kfold(launches: Sequence[TimedLaunch] | None = None, k: int = FOLDS, seed: int = SEED,
          params: PerfParams | None = None) -> list[Comparison]:
    """Every launch modeled by coefficients fitted without its shape: per fit group, the
    shapes are dealt into k folds (a seeded permutation of the sorted shapes, shape i of
    it into fold i mod k), and each fold is modeled after fitting on the others."""
    launches = measured_launches() if launches is None else launches
    base = params or DEFAULT_PARAMS
    held: dict[int, float] = {}
    for group in fit_groups():
        idx = [i for i, t in enumerate(launches) if t.kernel in group.kernels]
        shapes = sorted({launches[i].shape for i in idx})
        perm = np.random.RandomState(seed).permutation(len(shapes))
        fold = {shapes[j]: n % k for n, j in enumerate(perm)}
        for f in range(k):
            train = [launches[i] for i in idx if fold[launches[i].shape] != f]
            test = [i for i in idx if fold[launches[i].shape] == f]
            if not test:
                continue
            fitted = fit_group(base, group, train)
            for i, m in zip(test, modeled_seconds([launches[i] for i in test], fitted),
                            strict=True):
                held[i] = m
    return [Comparison(t, held[i]) for i, t in enumerate(launches) if i in held]


def spearman(a: Sequence[float], b: Sequence[float]) -> float:
    """Spearman's rank correlation (ties share their mean rank); nan when either side has
    no spread."""
    ra, rb = _ranks(a), _ranks(b)
    if ra.std() == 0 or rb.std() == 0:
        return float("nan")
    return float(np.corrcoef(ra, rb)[0, 1])


def _ranks(x: Sequence[float]) -> np.ndarray:
    values = np.asarray(x, dtype=float)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[order[j + 1]] == values[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2
        i = j + 1
    return ranks


def rank_correlations(comparisons: Sequence[Comparison], across_kernels: bool = False
                      ) -> dict[str, float]:
    """Per rank group (a kernel at a shape; with `across_kernels`, a shape whatever the
    kernel, so that a bf16-out and an fp32-out GEMM of one shape rank together) with
    MIN_CONFIGS or more distinct configurations: the Spearman correlation of modeled
    against measured time. A configuration measured twice counts once, at its mean."""
    groups: dict[str, dict[tuple, list[Comparison]]] = defaultdict(lambda: defaultdict(list))
    for c in comparisons:
        t = c.launch
        key = str(t.shape) if across_kernels else t.group
        groups[key][(t.kernel, t.config) if across_kernels else t.config].append(c)
    out = {}
    for name, configs in groups.items():
        if len(configs) < MIN_CONFIGS:
            continue
        modeled = [statistics.fmean(c.modeled_s for c in cs) for cs in configs.values()]
        measured = [statistics.fmean(c.measured_s for c in cs) for cs in configs.values()]
        rho = spearman(modeled, measured)
        if not math.isnan(rho):
            out[name] = rho
    return out


def fidelity(comparisons: Sequence[Comparison], name: str, across_kernels: bool = False
             ) -> Fidelity:
    """The error and rank figures of `comparisons` (see `rank_correlations`)."""
    errors = np.abs([c.log_error for c in comparisons])
    ranks = rank_correlations(comparisons, across_kernels)
    return Fidelity(name, len(comparisons), float(np.median(errors)),
                    float(np.percentile(errors, 90)),
                    float(np.median(list(ranks.values()))) if ranks else None, len(ranks))


def report_names() -> list[tuple[str, tuple[str, ...]]]:
    """What the figures are reported for: each fit group (the two GEMMs together, the
    streaming kernels together), and each kernel of a group of several."""
    out = []
    for g in fit_groups():
        out.append((g.name, g.kernels))
        if len(g.kernels) > 1:
            out += [(k, (k,)) for k in g.kernels]
    return out


def report(k: int = FOLDS, seed: int = SEED, registry_only: bool = False
           ) -> list[tuple[Fidelity, Fidelity]]:
    """(in-sample, k-fold) figures for every name of `report_names()`: over every measured
    launch, or, with `registry_only`, over the registry pages' own rows (the k-fold fits
    still see the sweeps of the other folds' shapes)."""
    launches = measured_launches()
    inside, held = compare(launches), kfold(launches, k, seed)
    if registry_only:
        rows = set(measured_launches(sweeps=False))
        inside = [c for c in inside if c.launch in rows]
        held = [c for c in held if c.launch in rows]
    out = []
    for name, kernels in report_names():
        out.append((fidelity([c for c in inside if c.launch.kernel in kernels], name),
                    fidelity([c for c in held if c.launch.kernel in kernels], name)))
    return out


@dataclass(frozen=True)
class ElfFigure:
    """One of upstream's per-layer ELFs of another model than the calibration's, measured on
    NPU2, against the model's device time for the same launches in one dispatch (our
    reference plan's layer 0, at the configurations selection takes)."""

    model: str
    mode: str
    elf: str
    launches: tuple[str, ...]
    measured_s: float
    modeled_s: float
    source: str


#: the model whose end-to-end figures the in-deployment terms are fitted to
CALIBRATION_MODEL = "llama-3.2-1b"


def held_out_elfs() -> list[ElfFigure]:
    """Every per-layer ELF figure upstream gives for a model other than Llama-3.2-1B
    (kernels/data/deployments.json), modeled: none of them was fitted."""
    out = []
    for model, dep in upstream_deployments().items():
        if model == CALIBRATION_MODEL or not dep.per_elf:
            continue
        args = CATALOG[model].args
        plans = {"prefill": reference_prefill(model, args, dep.seq),
                 "decode": reference_decode(model, args, dep.seq)}
        for row in dep.per_elf:
            if row["per"] != "layer" or row["elf"] not in {e.name for e in
                                                           dep.phase(row["phase"]).elfs}:
                continue
            roles = next(e.launches for e in dep.phase(row["phase"]).elfs
                         if e.name == row["elf"])
            layer0 = {ln.role: ln for ln in plans[row["phase"]].launches() if ln.layer == 0}
            if not all(r in layer0 for r in roles):
                continue
            elf = Dispatch(row["elf"], tuple(layer0[r] for r in roles))
            out.append(ElfFigure(model, row["phase"], row["elf"], roles, row["ms"] * 1e-3,
                                 device_s(elf), row["from"]))
    return out


__all__ = ["CALIBRATION_MODEL", "FOLDS", "MIN_CONFIGS", "SEED", "Comparison", "ElfFigure",
           "Fidelity", "compare", "fidelity", "held_out_elfs", "kfold", "rank_correlations",
           "report", "report_names", "spearman"]
