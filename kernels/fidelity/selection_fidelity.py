"""How far the checker and selection agree with what ran on NPU2: they are held
against every configuration of upstream's kernel registry. `benchmarks/hardware_fidelity.py`
prints these figures beside the performance model's, the emulator's and the plans'.

The registry rows are measurements on NPU2 (kernels/data/gemm_bf16.json, gemm_fp32.json,
with their provenance); everything computed here is the model's answer to them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from npu_deploy.models import CATALOG

from ..definition.checker import blocking, check
from ..definition.hardware import XDNA2
from ..definition.registry import SPECS
from ..definition.selection import select, select_all
from ..definition.specs import Decode, KernelUse, Mode, Prefill, model_kernels
from ..families.gemm import CONFIG_KEYS, row_config
from ..measured.measurements import load, table

GEMMS = ("gemm_bf16", "gemm_fp32")
#: The sequence lengths every model is checked at (short, odd and long prompts, a decode).
MODES: tuple[Mode, ...] = (Prefill(2048), Prefill(128), Prefill(100), Prefill(16),
                           Decode(2047))


def measured_rows() -> list[tuple[str, dict[str, Any]]]:
    """Every GEMM configuration upstream timed on NPU2 (rows with GFLOP/s)."""
    return [(name, row) for name in GEMMS for row in table(name, "shapes")
            if row["gflops"] is not None]


def _shape(row: dict[str, Any]) -> dict[str, int]:
    return {"M": row["M"], "K": row["K"], "N": row["N"]}


def _config(name: str, row: dict[str, Any]) -> dict[str, Any]:
    return row_config(SPECS[name], row)


@dataclass(frozen=True)
class Acceptance:
    accepted: int
    total: int
    rejected: list[str]             # "shape method: the first reason"


def registry_acceptance() -> Acceptance:
    """How many measured configurations the checker accepts."""
    rejected = []
    rows = measured_rows()
    for name, row in rows:
        bad = blocking(check(SPECS[name], _shape(row), _config(name, row), XDNA2))
        if bad:
            rejected.append(f"{name} {row['M']}x{row['K']}x{row['N']} {row['method']}: {bad[0]}")
    return Acceptance(len(rows) - len(rejected), len(rows), rejected)


def failures_rejected() -> Acceptance:
    """How many of the configurations upstream saw fail the checker rejects (`accepted`
    counts the rejected ones here; `rejected` lists those it let through)."""
    missed = []
    failures = load("gemm_failures")["failures"]
    for row in failures:
        name = row["family"]
        if not blocking(check(SPECS[name], _shape(row), _config(name, row), XDNA2)):
            missed.append(f"{name} {row['M']}x{row['K']}x{row['N']} {row['method']}")
    return Acceptance(len(failures) - len(missed), len(failures), missed)


def shapes_without_configuration(models: Iterable[str]) -> list[str]:
    """Every (model, mode, kernel, shape) and registry shape that selection finds no valid
    configuration for (it should be none)."""
    missing = []
    for model in models:
        for mode in MODES:
            for sel in select_all(model_kernels(CATALOG[model].args, mode), XDNA2):
                if not sel.valid:
                    missing.append(f"{model} {mode} {sel.use.spec.name} {sel.use.shape_text()}")
    seen = set()
    for name, row in measured_rows():
        key = (name, row["M"], row["K"], row["N"])
        if key in seen:
            continue
        seen.add(key)
        sel = select(KernelUse("x", SPECS[name], _shape(row)), XDNA2, use_measured=False)
        if not sel.valid:
            missing.append(f"registry {name} {row['M']}x{row['K']}x{row['N']}")
    return missing


@dataclass(frozen=True)
class Agreement:
    shapes: int                     # shapes with a high-precision measurement
    method: int                     # selection's method is upstream's fastest's
    method_tile: int                # ... and its tile
    method_tile_herd: int           # ... and its herd
    within_10pct: int               # selected a measured config within 10% of the fastest


def selection_agreement(use_measured: bool) -> Agreement:
    """Selection against upstream's fastest high-precision configuration per shape, with
    the shape's measurement used (what a deployment gets) or ignored (the model alone)."""
    by_shape: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for name, row in measured_rows():
        by_shape.setdefault((name, row["M"], row["K"], row["N"]), []).append(row)
    counts = [0, 0, 0, 0, 0]
    for (name, *_), rows in by_shape.items():
        high = [r for r in rows if r["tier"] == "high"]
        if not high:
            continue
        best = max(high, key=lambda r: r["gflops"])
        chosen = select(KernelUse("x", SPECS[name], _shape(best)), XDNA2,
                        use_measured=use_measured).config
        same = [chosen.get(k) == best[k] for k in CONFIG_KEYS]
        counts[0] += 1
        counts[1] += same[0]
        counts[2] += all(same[:5])
        counts[3] += all(same)
        match = [r for r in rows if all(chosen.get(k) == r[k] for k in CONFIG_KEYS)]
        counts[4] += bool(match) and match[0]["gflops"] >= 0.9 * best["gflops"]
    return Agreement(*counts)
