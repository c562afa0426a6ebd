"""The public face of this area, for type checkers and for lazy_loader (`__init__.py`)."""

from .checker import check as check
from .checker import check_merge as check_merge
from .family import KernelFamily as KernelFamily
from .family import KernelSpec as KernelSpec
from .family import Operand as Operand
from .family import Shape as Shape
from .family import TimedLaunch as TimedLaunch
from .hardware import HARDWARE as HARDWARE
from .hardware import XDNA1 as XDNA1
from .hardware import XDNA2 as XDNA2
from .hardware import DmaPorts as DmaPorts
from .hardware import Hardware as Hardware
from .registry import FAMILIES as FAMILIES
from .registry import HOST_KERNELS as HOST_KERNELS
from .registry import SPECS as SPECS
from .rules import Finding as Finding
from .rules import blocking as blocking
from .selection import Selection as Selection
from .selection import select as select
from .selection import select_all as select_all
from .specs import Decode as Decode
from .specs import KernelUse as KernelUse
from .specs import Mode as Mode
from .specs import Prefill as Prefill
from .specs import model_kernels as model_kernels
