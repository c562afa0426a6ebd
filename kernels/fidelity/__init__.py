"""Fidelity studies: how close the emulated numerics come to upstream's measured errors
(`numerics_fidelity`), the performance model to upstream's measured times
(`perf_fidelity`), and the selection to upstream's measured choices (`selection_fidelity`).

Importing this package imports none of its modules: each public name, listed in
`__init__.pyi`, is imported the first time it is asked for (lazy_loader)."""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
