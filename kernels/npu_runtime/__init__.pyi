"""The public face of this area, for type checkers and for lazy_loader (`__init__.py`)."""

from .hardware_report import ReportError as ReportError
from .hardware_report import check_report as check_report
from .hardware_report import read_report as read_report
from .npu_backend import NpuBackend as NpuBackend
from .npu_backend import measure as measure
from .toolchain import Requirement as Requirement
from .toolchain import requirements as requirements
from .xrt_runtime import XrtError as XrtError
from .xrt_runtime import XrtRunner as XrtRunner
from .xrt_runtime import require as require
