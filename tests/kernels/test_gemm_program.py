"""A GEMM's MLIR-AIR program passes the program verifier (kernels.air_programs.air_verify) for every
method when M is a multiple of tile_m x herd_m: bounds, DMA element counts, calls against their
declarations and linked objects, L1 with the accumulator's per-core slabs, L2, and every
element of C written."""

from __future__ import annotations

from typing import Any

import pytest

from npu_deploy.kernels import SPECS, XDNA2
from npu_deploy.kernels.air_programs.air import emit_dispatch
from npu_deploy.kernels.air_programs.air_verify import verify
from npu_deploy.kernels.air_programs.recording_builder import build
from npu_deploy.kernels.plans.plan import Binding, Dispatch, Launch


def gemm(kernel: str, shape: dict[str, int], config: dict[str, Any]) -> Launch:
    spec = SPECS[kernel]
    bindings = tuple(Binding(o.name, f"t.{o.name}", "input" if o.role != "output" else "output")
                     for o in spec.operands(shape))
    return Launch(kernel, kernel, 0, tuple(sorted(shape.items())),
                  tuple(sorted({**spec.tunables, **config}.items())), bindings)


CASES = [
    # upstream's 2048^3 at its recommended tiles (registry: fused-cast and external)
    ("gemm_bf16", {"M": 2048, "K": 2048, "N": 2048}, {"method": "fused-cast"}),
    ("gemm_fp32", {"M": 2048, "K": 2048, "N": 2048}, {"method": "external"}),
    # SmolLM2-135M's gate/up at seq 256, drain at tile_m 32 as `preferred` picks it
    ("gemm_bf16", {"M": 256, "K": 576, "N": 1536},
     {"method": "drain", "tile_m": 32, "tile_k_l2": 64}),
    ("gemm_fp32", {"M": 512, "K": 1024, "N": 1024},
     {"method": "direct", "tile_m": 64, "herd_m": 4, "tile_n": 64}),
]


@pytest.mark.parametrize("kernel,shape,config", CASES,
                         ids=[f"{k}-{c['method']}-{s['M']}x{s['K']}x{s['N']}"
                              for k, s, c in CASES])
def test_a_gemm_program_passes_the_verifier(kernel: str, shape: dict[str, int],
                                            config: dict[str, Any]) -> None:
    program = emit_dispatch(Dispatch("one", (gemm(kernel, shape, config),)), XDNA2)
    assert [v.line() for v in verify(program)] == []


def test_two_tile_shapes_in_one_program_link_two_objects_without_a_clash() -> None:
    """Drain at tile_m 32 and fused-cast at 64 in one ELF (upstream's mm.o and mm_m64.o):
    each object's symbols carry its sizes, and each is compiled from mm_aie2p.cc with its
    own DIM_M / DIM_K / DIM_N and SYM_SUFFIX."""
    shape = {"M": 2048, "K": 2048, "N": 2048}
    launches = (gemm("gemm_bf16", shape, {"method": "drain", "tile_m": 32}),
                gemm("gemm_bf16", shape, {"method": "fused-cast"}))
    program = emit_dispatch(Dispatch("two", launches), XDNA2)
    assert program.objects == ("mm_32x32x128_n4.o", "mm_64x32x128_n4.o")
    _, namespace = build(program.source)          # FUNCTION, OBJECTS, KERNELS
    kernels = namespace["KERNELS"]
    assert set(kernels) == set(program.objects)
    assert kernels["mm_64x32x128_n4.o"]["defines"]["DIM_M"] == "64"
    assert kernels["mm_32x32x128_n4.o"]["defines"]["SYM_SUFFIX"] == "_32x32x128_n4"
    assert "op_has_no_registered_library_name_32x32x128_n4" in program.source
    assert [v.line() for v in verify(program)] == []


def test_direct_bf16_links_a_variant_upstream_does_not_export() -> None:
    """Upstream writes the direct bf16 method by direct codegen (no extern). Ours links
    mm_aie2p.cc built for a bf16 C, whose symbols upstream's build never exports: the
    program is sound in every other check, and the upstream check says so."""
    program = emit_dispatch(Dispatch("one", (gemm(
        "gemm_bf16", {"M": 256, "K": 576, "N": 1536},
        {"method": "direct", "tile_m": 32, "tile_k_l2": 64}),)), XDNA2)
    found = verify(program)
    assert found and all(v.check == "extern" for v in found), [v.line() for v in found]
    assert any("linalg_fill_bf16" in v.message and "is not a symbol" in v.message
               for v in found)
    assert any("as c_out, a f32*" in v.message for v in found)   # bf16 C, f32 in upstream
