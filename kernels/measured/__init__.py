"""Measured data, upstream's and ours, kept apart: upstream's kernel registry as ingested
into kernels/data/ (`measurements` reads it, `ingest` writes it), the C signatures of its
micro-kernels (`upstream_kernels`), its LLM deployments (`upstream_llm_pages` reads the pages,
`deployments` compares our plans with them), the rows measured here by `validate-hardware`
(`measured_here`), and a kernel's time with where it came from (`figures`).

Importing this package imports none of its modules: each public name below is imported the
first time it is asked for (kernels._public_face)."""

from typing import TYPE_CHECKING

from .._public_face import public_face

if TYPE_CHECKING:
    from .deployments import compare_dispatches, upstream_deployments
    from .figures import KernelFigures, kernel_figures, measured_figure
    from .measured_here import MeasuredDataError, import_report
    from .measurements import Row, load, table

__all__ = ["KernelFigures", "MeasuredDataError", "Row", "compare_dispatches", "import_report",
           "kernel_figures", "load", "measured_figure", "table", "upstream_deployments"]

__getattr__, __dir__ = public_face(__name__, __file__)
