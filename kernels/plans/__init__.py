"""Dispatch plans: what a plan is made of (`steps`), the baseline plan a deployment starts
from (`plan`), the transforms that improve it (`transforms`) and the search that applies them
(`optimize`), and the runner that executes a plan on a backend (`plan_runner`).

Importing this package imports none of its modules: each public name below is imported the
first time it is asked for (kernels._public_face)."""

from typing import TYPE_CHECKING

from .._public_face import public_face

if TYPE_CHECKING:
    from .optimize import Optimized
    from .plan import baseline_plan
    from .plan_runner import PlanRunner
    from .steps import Binding, Dispatch, DispatchPlan, HostStep, Launch
    from .transforms import TRANSFORMS, IllegalTransform

__all__ = ["Binding", "Dispatch", "DispatchPlan", "HostStep", "IllegalTransform", "Launch",
           "Optimized", "PlanRunner", "TRANSFORMS", "baseline_plan"]

__getattr__, __dir__ = public_face(__name__, __file__)
