"""The emulator's numerics held against the figures measured on the NPU: every row of the
kernel registry's GEMM pages (`kernels/data/gemm_bf16.json`, `gemm_fp32.json`: shape, method,
tile and the mean_rel_L1 mlir-air measured on NPU2), emulated on this machine's CPU at the
row's shape, method and tile.

The protocol is mlir-air's (kernels/emulation/numerics.py [S5]): A and B randn/sqrt(K) as bf16,
reference = the FP32 matmul of the same bf16 inputs, cast to bf16 for a bf16 output, mean_rel_L1 =
mean|out - ref| / mean|ref|. The emulation takes the family's fast path (`exact_tiles` off:
BLAS sums the exactly representable block-format products, once over all of K, or once per
L1 K tile for a method that rounds its partial sums), which moves a result by FP32 rounding
only, four orders below the figures compared here.

`benchmarks/gemm_method_numerics.py` prints every row; `benchmarks/hardware_fidelity.py`
prints the summary.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch

from npu_deploy.metrics.comparison import compare

from ..definition.registry import FAMILIES
from ..emulation.numerics import fp32_reference, gemm_operands, to_bf16
from ..families.gemm import row_config
from ..measured.measurements import Row, table

#: The families whose registry rows carry a measured mean_rel_L1, with their table.
GEMM_KERNELS = ("gemm_bf16", "gemm_fp32")
TABLE = "shapes"
#: A row agrees when the emulated figure is within this fraction of the measured one.
BAND = 0.25


def measured_rows(kernels: Iterable[str] = GEMM_KERNELS) -> list[tuple[str, Row]]:
    """Every row of the kernels' registry tables, in the files' order, as (kernel, row)."""
    return [(kernel, row) for kernel in kernels for row in table(kernel, TABLE)]


def emulated_mean_rel_l1(kernel: str, row: Row, seed: int = 0, *,
                         rows: int | None = None) -> float:
    """mean_rel_L1 of `kernel` emulated at the registry row's shape, method and tile, measured
    as mlir-air measures it on the NPU (module docstring); computed on the CPU.

    `rows`: emulate `rows` rows of C only, A drawn with that many rows (and B after it, from
    the same seed: a different draw of the same distribution than the full run's). Each row
    of C depends on its own row of A and on B alone, so the figure moves by sampling noise
    only (~1% at 64 rows of N >= 512), and the draw costs `rows` rows of A, not M."""
    family = FAMILIES[kernel]
    if family.numerics is None:
        raise KeyError(f"{kernel} has no emulated numerics")
    m = row["M"] if rows is None else min(rows, row["M"])
    a, b = gemm_operands(m, row["K"], row["N"], seed=seed)
    shape = {"M": a.shape[0], "K": row["K"], "N": row["N"]}
    config = {**row_config(family.spec, row), "exact_tiles": False}
    out = family.numerics.emulate(shape, config, {"a": a, "b": b})["c"]
    ref = fp32_reference(a, b)
    if out.dtype == torch.bfloat16:
        ref = to_bf16(ref)
    return compare(ref, out).mean_rel_l1


@dataclass(frozen=True)
class RowFidelity:
    """One registry row: the mean_rel_L1 measured on NPU2 and the one emulated on the CPU."""

    kernel: str
    row: Row
    emulated: float
    seconds: float          # emulation and reference, on the CPU
    rows: int               # rows of M emulated

    @property
    def measured(self) -> float:
        return float(self.row["mean_rel_L1"])

    @property
    def ratio(self) -> float:
        """emulated / measured."""
        return self.emulated / self.measured

    @property
    def within(self) -> bool:
        return abs(self.ratio - 1) <= BAND


def compare_rows(seed: int = 0, *, rows: int | None = None,
                 only: Iterable[tuple[str, Row]] | None = None) -> Iterator[RowFidelity]:
    """Each registry row (or `only` those) emulated and held against its measured figure. A
    row without a measured mean_rel_L1 is an error, never skipped."""
    for kernel, row in measured_rows() if only is None else only:
        if row.get("mean_rel_L1") is None:
            raise ValueError(f"{kernel} {row['M']}x{row['K']}x{row['N']} {row['method']}: the "
                             "registry row has no measured mean_rel_L1")
        start = time.perf_counter()
        emulated = emulated_mean_rel_l1(kernel, row, seed, rows=rows)
        yield RowFidelity(kernel, row, emulated, time.perf_counter() - start,
                          row["M"] if rows is None else min(rows, row["M"]))


@dataclass(frozen=True)
class MethodSummary:
    """The rows of one kernel's method: how many agree within BAND, and the extremes."""

    kernel: str
    method: str
    count: int
    within: int
    lowest: RowFidelity
    highest: RowFidelity

    def as_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "method": self.method, "count": self.count,
                "within": self.within, "lowest_ratio": self.lowest.ratio,
                "highest_ratio": self.highest.ratio}


def summarize(results: Iterable[RowFidelity]) -> list[MethodSummary]:
    """One summary per (kernel, method), in the order they first appear."""
    groups: dict[tuple[str, str], list[RowFidelity]] = {}
    for r in results:
        groups.setdefault((r.kernel, r.row["method"]), []).append(r)
    return [MethodSummary(kernel, method, len(rs), sum(r.within for r in rs),
                          min(rs, key=lambda r: r.ratio), max(rs, key=lambda r: r.ratio))
            for (kernel, method), rs in groups.items()]
