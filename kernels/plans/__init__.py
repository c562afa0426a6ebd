"""Dispatch plans: what a plan is made of (`steps`), the baseline plan a deployment starts
from (`plan`), the transforms that improve it (`transforms`) and the search that applies them
(`optimize`), and the runner that executes a plan on a backend (`plan_runner`).

Importing this package imports none of its modules: each public name, listed in
`__init__.pyi`, is imported the first time it is asked for (lazy_loader)."""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
