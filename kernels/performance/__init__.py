"""The NPU2 performance model: a plan's time on XDNA 2, modeled (`model`), the figures it
is calibrated on (`calibration_set`, kernels/data/calibration.json), the fit of the families'
cost coefficients on upstream's measured launches (`fitting`), and the calibration that
derives every parameter, with the reports that hold the model against the figures
(`calibration`); upstream's 4-bit decode as one fused dispatch a token (`fused_decode`).

Importing this package imports none of its modules: each public name, listed in
`__init__.pyi`, is imported the first time it is asked for (lazy_loader)."""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
