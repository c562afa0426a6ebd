"""The public face of this area, for type checkers and for lazy_loader (`__init__.py`)."""

from .calibration import calibrate as calibrate
from .calibration import calibration_report as calibration_report
from .calibration import reference_decode as reference_decode
from .calibration import reference_prefill as reference_prefill
from .calibration_set import CALIBRATION as CALIBRATION
from .calibration_set import Calibration as Calibration
from .fitting import fit_kernels as fit_kernels
from .fitting import measured_launches as measured_launches
from .fused_decode import fused_token as fused_token
from .model import DEFAULT_PARAMS as DEFAULT_PARAMS
from .model import PerfParams as PerfParams
from .model import Profile as Profile
from .model import estimate as estimate
from .model import launch_seconds as launch_seconds
