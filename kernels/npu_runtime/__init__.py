"""Running on a real NPU: what the machine needs (`toolchain`), compiling the programs and
running them through XRT (`xrt_runtime`), the backend that runs a plan's dispatches on the NPU
and measures them (`npu_backend`), and the report `validate-hardware` writes with the checks
`import-measurements` runs on it (`hardware_report`).

Importing this package imports none of its modules: each public name, listed in
`__init__.pyi`, is imported the first time it is asked for (lazy_loader)."""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
