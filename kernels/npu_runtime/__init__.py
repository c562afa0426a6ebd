"""Running on a real NPU: what the machine needs (`toolchain`), compiling the programs and
running them through XRT (`xrt_runtime`), the backend that runs a plan's dispatches on the NPU
and measures them (`npu_backend`), and the report `validate-hardware` writes with the checks
`import-measurements` runs on it (`hardware_report`).

Importing this package imports none of its modules: each public name below is imported the
first time it is asked for (kernels._public_face)."""

from typing import TYPE_CHECKING

from .._public_face import public_face

if TYPE_CHECKING:
    from .hardware_report import ReportError, check_report, read_report
    from .npu_backend import NpuBackend, measure
    from .toolchain import Requirement, requirements
    from .xrt_runtime import XrtError, XrtRunner, require

__all__ = ["NpuBackend", "ReportError", "Requirement", "XrtError", "XrtRunner", "check_report",
           "measure", "read_report", "require", "requirements"]

__getattr__, __dir__ = public_face(__name__, __file__)
