"""The kernel families, listed once. Everything that needs to know a kernel asks here: the
checker, the selection, the emulator, the performance model, the MLIR-AIR emitter, the plan
transforms and the NPU backend. A family is declared in its module under
`kernels/families/`; adding one is one module, its data file and one entry below."""

from __future__ import annotations

from ..families import (
    add,
    decode_attention,
    embedding,
    flash_attention,
    gelu,
    gemm,
    gemv,
    gemv_fp32,
    gemv_int4,
    proj_qmm,
    rmsnorm,
    rope,
    silu_mul,
)
from .family import KernelFamily, KernelSpec

FAMILIES: dict[str, KernelFamily] = {f.name: f for module in (
    gemm,
    gemv,
    gemv_fp32,
    gemv_int4,
    proj_qmm,
    rmsnorm,
    rope,
    flash_attention,
    silu_mul,
    add,
    embedding,
    decode_attention,
    gelu,
) for f in module.FAMILIES}

SPECS: dict[str, KernelSpec] = {name: f.spec for name, f in FAMILIES.items()}

#: The host ops kernel families run as (a plan's HostStep op names them).
HOST_KERNELS: dict[str, KernelFamily] = {n: f for n, f in FAMILIES.items() if f.host}


def family(name: str) -> KernelFamily:
    """The family of kernel `name`."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise KeyError(f"no kernel family {name!r}; known: {', '.join(sorted(FAMILIES))}") \
            from None
