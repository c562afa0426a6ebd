"""The public face of this area, for type checkers and for lazy_loader (`__init__.py`)."""

from .optimize import Optimized as Optimized
from .plan import baseline_plan as baseline_plan
from .plan_runner import PlanRunner as PlanRunner
from .steps import Binding as Binding
from .steps import Dispatch as Dispatch
from .steps import DispatchPlan as DispatchPlan
from .steps import HostStep as HostStep
from .steps import Launch as Launch
from .transforms import TRANSFORMS as TRANSFORMS
from .transforms import IllegalTransform as IllegalTransform
