"""The NPU2 performance model: a plan's time on XDNA 2, modeled (`model`), the figures it
is calibrated on (`calibration_set`, kernels/data/calibration.json), the fit of the families'
cost coefficients on upstream's measured launches (`fitting`), and the calibration that
derives every parameter, with the reports that hold the model against the figures
(`calibration`).

Importing this package imports none of its modules: each public name below is imported the
first time it is asked for (kernels._public_face)."""

from typing import TYPE_CHECKING

from .._public_face import public_face

if TYPE_CHECKING:
    from .calibration import calibrate, calibration_report, reference_decode, reference_prefill
    from .calibration_set import CALIBRATION, Calibration
    from .fitting import fit_kernels, measured_launches
    from .model import DEFAULT_PARAMS, PerfParams, Profile, estimate, launch_seconds

__all__ = ["CALIBRATION", "Calibration", "DEFAULT_PARAMS", "PerfParams", "Profile", "calibrate",
           "calibration_report", "estimate", "fit_kernels", "launch_seconds", "measured_launches",
           "reference_decode", "reference_prefill"]

__getattr__, __dir__ = public_face(__name__, __file__)
