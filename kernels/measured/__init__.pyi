"""The public face of this area, for type checkers and for lazy_loader (`__init__.py`)."""

from .deployments import compare_dispatches as compare_dispatches
from .deployments import upstream_deployments as upstream_deployments
from .figures import KernelFigures as KernelFigures
from .figures import kernel_figures as kernel_figures
from .figures import measured_figure as measured_figure
from .measured_here import MeasuredDataError as MeasuredDataError
from .measured_here import import_report as import_report
from .measurements import Row as Row
from .measurements import load as load
from .measurements import table as table
from .quantized_deployments import QUANTIZED_MEASURED as QUANTIZED_MEASURED
