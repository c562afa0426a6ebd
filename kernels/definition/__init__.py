"""What a kernel is and whether a configuration of it can exist: the hardware
(`hardware`), the rules every family's checker is built from (`rules`), what a kernel family
declares (`family`), the registry that lists the families of kernels/families/ once
(`registry`) and the kernels a model needs (`specs`), the checker (`checker`), the selection
of a configuration for each kernel use (`selection`), and the kernel tables of docs/kernels.md
(`kernels_md`).

Importing this package imports none of its modules: each public name, listed in
`__init__.pyi`, is imported the first time it is asked for (lazy_loader)."""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
