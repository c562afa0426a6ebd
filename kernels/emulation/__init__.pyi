"""The public face of this area, for type checkers and for lazy_loader (`__init__.py`)."""

from .emulated_model import EmulatedModel as EmulatedModel
from .emulator import EMULATED as EMULATED
from .emulator import REFERENCE as REFERENCE
from .emulator import EmulatorBackend as EmulatorBackend
from .numerics import BFP16EBS8 as BFP16EBS8
from .numerics import BFPFormat as BFPFormat
from .numerics import gemm_bfp16 as gemm_bfp16
from .numerics import gemv_fp32acc as gemv_fp32acc
from .numerics import to_bf16 as to_bf16
from .numerics import to_bfp16 as to_bfp16
from .validate import validate_kernel as validate_kernel
