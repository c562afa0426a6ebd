"""The int4-AWQ GEMV (matvec_int4_bf16_packed) as a registry family: the checker holds it to
upstream's asserts, the emulator computes it through the family at each k_chunk, the cost
streams its packed tiles, and its program (upstream's int4_awq shapes) passes the verifier."""

from __future__ import annotations

import pytest
import torch

from npu_deploy.kernels import SPECS, XDNA2
from npu_deploy.kernels.air_programs.air import emit_dispatch
from npu_deploy.kernels.air_programs.air_verify import verify, verify_source
from npu_deploy.kernels.definition.checker import check
from npu_deploy.kernels.definition.registry import FAMILIES
from npu_deploy.kernels.definition.rules import blocking
from npu_deploy.kernels.definition.selection import select
from npu_deploy.kernels.definition.specs import KernelUse
from npu_deploy.kernels.emulation.numerics import to_bf16
from npu_deploy.kernels.emulation.quantized import matvec_int4
from npu_deploy.kernels.families import gemv_int4 as family
from npu_deploy.kernels.performance.model import PerfParams
from npu_deploy.kernels.plans.plan import Binding, Dispatch, Launch

SPEC = SPECS["gemv_int4"]


def errors(shape, config):
    return [f.kind for f in blocking(check(SPEC, shape, config, XDNA2))]


def test_upstreams_lit_shapes_fit_at_its_defaults():
    """int4_awq/run_packed_npu2_2048x{2048,8192}_peano.lit: M_TILE 8, K_CHUNK 2048, 8 cores."""
    assert errors({"M": 2048, "K": 2048}, {}) == []
    assert errors({"M": 2048, "K": 8192}, {}) == []


@pytest.mark.parametrize("shape,config,why", [
    ({"M": 2048, "K": 3072}, {"k_chunk": 2048}, "K % K_CHUNK"),
    ({"M": 2048, "K": 2048}, {"k_chunk": 192}, "DIM_K % DIM_GS"),
    ({"M": 2040, "K": 2048}, {}, "M per core in whole tiles"),
    ({"M": 2048, "K": 2048}, {"m_tile": 1, "k_chunk": 128}, "32-byte aligned zero points"),
])
def test_what_upstream_asserts_is_refused(shape, config, why):
    assert "divisible" in errors(shape, config), why


def test_a_k_chunk_too_large_for_l1_is_refused():
    assert "l1" in errors({"M": 2048, "K": 8192}, {"k_chunk": 8192})


def test_selection_takes_upstreams_configuration():
    choice = select(KernelUse("gemv_int4", SPEC, {"M": 2048, "K": 8192}), XDNA2).config
    assert (choice["herd_m"], choice["m_tile"], choice["k_chunk"]) == (8, 8, 2048)


def tensors(m, k, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return {"w.q": torch.randint(0, 16, (m, k), generator=gen, dtype=torch.uint8),
            "w.scale": torch.rand(m, k // 128, generator=gen) * 0.01 + 0.001,
            "w.zero": torch.randint(0, 16, (m, k // 128), generator=gen, dtype=torch.uint8),
            "x": to_bf16(torch.randn(k, generator=gen))}


@pytest.mark.parametrize("k_chunk", [256, 1024])
def test_the_family_emulates_the_kernel_at_its_k_chunk_within_its_bound(k_chunk):
    shape, t = {"M": 32, "K": 1024}, tensors(32, 1024)
    numerics = FAMILIES["gemv_int4"].numerics
    config = {**SPEC.tunables, "k_chunk": k_chunk}
    y = numerics.emulate(shape, config, t)["y"]
    assert torch.equal(y, matvec_int4(family.fields(t, shape), t["x"], k_chunk=k_chunk))
    err = (y.double() - numerics.reference(shape, config, t)["y"].double()).abs()
    assert bool((err <= family.bound(shape, config, t).double()).all())
    assert numerics.atol_of(config) == {256: 5e-2, 1024: 3e-2}[k_chunk]


@pytest.mark.parametrize("k_chunk", [256, 1024])
def test_emulating_from_the_tiles_alone_reads_what_the_fields_say(k_chunk):
    """The packed tiles `w` alone, decoded at the configuration's tile, give the outputs
    the fields give (a device holds the tiles only)."""
    shape, config = {"M": 16, "K": 2048}, {**SPEC.tunables, "k_chunk": k_chunk}
    gen = torch.Generator().manual_seed(5)
    t = family.seeded_weight(shape, config, gen)
    x = torch.randn(2048, generator=gen).to(torch.bfloat16)
    numerics = FAMILIES["gemv_int4"].numerics
    with_fields = numerics.emulate(shape, config, {**t, "x": x})["y"]
    assert torch.equal(with_fields, numerics.emulate(shape, config, {"w": t["w"], "x": x})["y"])
    with pytest.raises(ValueError, match="neither was given"):
        numerics.emulate(shape, config, {"x": x})


def test_the_packed_weight_is_4_19_bits_a_weight_and_the_cost_streams_it():
    shape = {"M": 2048, "K": 8192}
    assert SPEC.operands(shape)[0].nbytes * 8 / (2048 * 8192) == pytest.approx(4 + 24 / 128)
    p = PerfParams()
    work = family.work(SPEC, shape, dict(SPEC.tunables), p)
    calls = 2048 // 64 * 4
    assert work.memory_s == pytest.approx(calls * ((8 * 1024 + 16 * 8 * 3 + 4096)
                                                   / p.gemv_column_bw + p.gemv_call_s))


def launch(shape, config):
    bindings = tuple(Binding(o.name, f"t.{o.name}", "output" if o.role == "output" else "input")
                     for o in SPEC.operands(shape))
    return Launch("gemv_int4", "int4", 0, tuple(sorted(shape.items())),
                  tuple(sorted({**SPEC.tunables, **config}.items())), bindings)


@pytest.mark.parametrize("shape,config", [
    ({"M": 2048, "K": 2048}, {}),                         # one chunk: _store only
    ({"M": 2048, "K": 8192}, {}),                         # four chunks
    ({"M": 512, "K": 2048}, {"herd_m": 4, "k_chunk": 512, "pingpong": 0}),
])
def test_the_program_passes_the_verifier_with_upstreams_signatures(shape, config):
    program = emit_dispatch(Dispatch("d", (launch(shape, config),)), XDNA2)
    assert [v.line() for v in verify(program)] == []
    assert "i8 = T.i8()" in program.source


def test_a_packed_tile_shorter_than_the_kernel_reads_is_caught():
    program = emit_dispatch(Dispatch("d", (launch({"M": 2048, "K": 2048}, {}),)), XDNA2)
    broken = program.source.replace("[8576], i8", "[8192], i8")
    found = verify_source(broken, flags=program.flags, outputs=(2,))
    assert any(v.check == "extern" and "8576" in v.message for v in found)


def unit_scale(m, k, seed=0):
    gen = torch.Generator().manual_seed(seed)
    s = torch.full((m, k // 128), (21.25 * k) ** -0.5) * (1 + 0.1 * torch.rand(m, k // 128,
                                                                               generator=gen))
    return {"w.q": torch.randint(0, 16, (m, k), generator=gen, dtype=torch.uint8),
            "w.scale": s, "w.zero": torch.randint(6, 10, (m, k // 128), generator=gen,
                                                   dtype=torch.uint8),
            "x": to_bf16(torch.randn(k, generator=gen))}


@pytest.mark.parametrize("k_chunk", [2048, 128])
def test_phase_1_passes_the_emulated_kernel_at_its_k_chunks_atol(k_chunk):
    from npu_deploy.kernels.emulation.emulator import EmulatorBackend
    from npu_deploy.kernels.emulation.validate import validate_kernel

    shape = {"M": 256, "K": 8192}
    report = validate_kernel(SPEC, shape, {"k_chunk": k_chunk}, EmulatorBackend(),
                             inputs=unit_scale(256, 8192))
    assert report.passed and report.atol == {2048: 2e-2, 128: 8e-2}[k_chunk]
    if k_chunk == 128:      # 64 roundings of the output to bf16 drift past k_chunk 2048's atol
        assert not validate_kernel(SPEC, shape, {"k_chunk": k_chunk}, EmulatorBackend(),
                                   inputs=unit_scale(256, 8192), atol=2e-2).passed
