"""MLIR-AIR programs: the parts every family's program is written with (`air_parts`), the
emitter of a plan's dispatches (`air`), and their verification without mlir-air: a recording
stand-in of mlir-air's builder (`recording_builder`, with `recording_values`,
`recording_trace`, `recording_dialects`) and the verifier that checks what it recorded
(`air_verify`, with its checks in `verify_*`).

Importing this package imports none of its modules: each public name, listed in
`__init__.pyi`, is imported the first time it is asked for (lazy_loader)."""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
