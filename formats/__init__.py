"""Weight formats as data: the 4-bit device formats of upstream's quantized kernels (Q4NX in
its additive and legacy forms, Q4_0 in the Q4NX container, int4-AWQ) and GGUF's Q4_0, Q4_1
and Q8_0 as the `gguf` package reads them. Each is a `WeightFormat` (its block, fields,
formula and the upstream file every fact comes from) with a codec that packs, unpacks,
dequantizes and quantizes one weight matrix; `repack` maps GGUF blocks into the device
formats and measures what that rounds.

Importing this package imports none of its modules: each public name, listed in
`__init__.pyi`, is imported the first time it is asked for (lazy_loader)."""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
