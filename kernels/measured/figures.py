"""A kernel's time at a shape, each figure saying where it came from: measured on NPU2 where
upstream's kernel registry measured that shape (with the configuration it ran and the data
file's source), measured on NPU by `validate-hardware` where a report of ours was imported
(kernels.measured.measured_here: the host and date it ran on), and modeled by
kernels.performance.model always.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..definition.registry import family
from ..definition.selection import Selection, modeled_seconds
from ..definition.specs import KernelSpec, Shape
from .measured_here import label, rows_at
from .measurements import measured_seconds, provenance

#: The fields of a registry row that say how it ran (shown with a measured figure).
_HOW = ("method", "tile_m", "tile_k_l2", "tile_k_l1", "tile_n", "herd_m", "herd_n", "herd_x",
        "herd_y", "tile", "m_input")


#: The registry's names for our tunables (a streaming kernel's herd_x is our herd_m).
_OURS = {"herd_x": "herd_m", "herd_y": "herd_rows", "tile_n": "tile"}


@dataclass(frozen=True)
class KernelFigures:
    modeled_s: float | None             # modeled, at the selected configuration
    measured_s: float | None = None     # measured on NPU2, at `measured_config`
    measured_config: dict[str, Any] | None = None
    source: str | None = None           # the data file's provenance
    same_config: bool = False           # measured at the configuration selected
    here: MeasuredFigure | None = None  # ours: measured on NPU by validate-hardware
    here_same_config: bool = False

    @property
    def measured_over_modeled(self) -> float | None:
        if self.measured_s is None or not self.modeled_s:
            return None
        return self.measured_s / self.modeled_s


@dataclass(frozen=True)
class MeasuredFigure:
    """One launch's time measured on an NPU, standalone, at `config`: by upstream (`source`
    the data file's provenance), or by validate-hardware (`source` its label)."""

    seconds: float
    config: dict[str, Any]
    source: str


def measured_figure(spec: KernelSpec, shape: Shape) -> MeasuredFigure | None:
    """Upstream's measured time of kernel `spec` at `shape`, if its registry has one."""
    fam = family(spec.name)
    row = fam.measured(shape) if fam.measured is not None and spec.where == "npu" else None
    if row is None or fam.data is None:
        return None
    seconds = measured_seconds(fam.data, row, spec.flops(shape))
    if seconds is None:
        return None
    return MeasuredFigure(seconds, {k: row[k] for k in _HOW if k in row}, provenance(fam.data))


def measured_here(spec: KernelSpec, shape: Shape, config: dict[str, Any]
                  ) -> tuple[MeasuredFigure | None, bool]:
    """The newest time of ours of kernel `spec` at `shape`, at `config` where one was
    measured at it, and whether it was."""
    rows = rows_at(spec.name, shape)
    same = [(row, source) for row, source in rows if row["config"] == config]
    if not rows:
        return None, False
    row, source = (same or rows)[0]
    return MeasuredFigure(row["seconds"], row["config"], label(source)), bool(same)


def kernel_figures(sel: Selection) -> KernelFigures:
    spec = sel.use.spec
    if spec.where == "cpu":
        return KernelFigures(None)
    modeled = modeled_seconds(spec, sel.use.shape, sel.config)
    here, here_same = measured_here(spec, sel.use.shape, sel.config)
    measured = measured_figure(spec, sel.use.shape)
    if measured is None:
        return KernelFigures(modeled, here=here, here_same_config=here_same)
    how = measured.config
    same = bool(how) and all((sel.config[k] if k in sel.config else
                              sel.config.get(_OURS.get(k, k))) == v for k, v in how.items())
    return KernelFigures(modeled, measured.seconds, how, measured.source, same, here,
                         here_same)
