"""The fused de-quantizing GEMV proj_qmm as a registry family: the checker holds it to upstream's
constraints (block sizes, the 4 GiB buffer span, the fused decode's rows per round, its LM
head's vocab chunks and stack at K=4096), the emulator computes it through the family, the
cost model streams 5 bits a weight, and its program passes the verifier."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from npu_deploy.kernels import SPECS, XDNA2
from npu_deploy.kernels.air_programs.air import emit_dispatch
from npu_deploy.kernels.air_programs.air_parts import EmitError
from npu_deploy.kernels.air_programs.air_verify import verify
from npu_deploy.kernels.definition.checker import check
from npu_deploy.kernels.definition.registry import FAMILIES
from npu_deploy.kernels.definition.rules import blocking
from npu_deploy.kernels.definition.specs import Decode
from npu_deploy.kernels.emulation.numerics import to_bf16
from npu_deploy.kernels.emulation.quantized import proj_qmm
from npu_deploy.kernels.families import proj_qmm as family
from npu_deploy.kernels.performance.model import PerfParams
from npu_deploy.kernels.plans.plan import Binding, Dispatch, Launch

#: an extract of upstream's sources where a machine has one (as test_attention_datapath.py)
UPSTREAM = Path("/work/upstream")

SPEC = SPECS["proj_qmm"]


def errors(shape, config):
    return [f.kind for f in blocking(check(SPEC, shape, config, XDNA2))]


def test_a_decode_projection_fits_and_odd_blocks_do_not():
    assert errors({"M": 2048, "K": 2048}, {}) == []
    assert "divisible" in errors({"M": 2048 + 16, "K": 2048}, {})        # rows of 32
    assert "divisible" in errors({"M": 2048, "K": 2048 + 128}, {})       # columns of 256
    assert "divisible" in errors({"M": 2048 + 32, "K": 2048}, {"herd_m": 8})
    assert errors({"M": 2048 + 32, "K": 2048}, {"herd_m": 1}) == []


def test_a_stack_below_the_measured_frame_is_refused_as_silent_corruption():
    found = check(SPEC, {"M": 2048, "K": 2048}, {"stack": 1024}, XDNA2)
    assert [(f.kind, f.severity) for f in found] == [("stack", "corrupt")]


# --- upstream's 8B models: one weight buffer spans 4 GiB ---------------------------------------

def q4nx_bytes(m, k):
    return SPEC.operands({"M": m, "K": k})[0].nbytes


def llama31_8b_layer():
    d, kv, ffn = 4096, 1024, 14336
    return (2 * q4nx_bytes(d, d) + 2 * q4nx_bytes(kv, d) + 2 * q4nx_bytes(ffn, d)
            + q4nx_bytes(d, ffn))


def test_llama31_8b_weights_in_one_buffer_wrap_and_upstreams_groups_of_8_fit():
    """llms/llama31_8b_q4nx/README.md: 4.375 GiB in one buffer gave NaN logits; DECODE_WGROUP=8
    gives four 1.02 GiB groups and a 0.31 GiB LM head (its vocab padded to a multiple of K)."""
    layer, head = llama31_8b_layer(), q4nx_bytes(family.padded_vocab(128256, 4096), 4096)
    sizes, found = family.split_weights(layer, 32, head, 0)
    assert round(sizes[0] / 2**30, 3) == 4.375 and [f.kind for f in found] == ["weight_buffer"]
    sizes, found = family.split_weights(layer, 32, head, 8)
    assert [round(n / 2**30, 2) for n in sizes] == [1.02] * 4 + [0.31] and found == []


# --- the fused decode: rows per round, vocab chunks, stack ------------------------------------

FUSED = {"engine": "fused"}


def legal_vocab_i2(vocab, k, pair):
    return [v for v in range(1, 64)
            if errors({"M": vocab, "K": k}, {**FUSED, "pair_rows": pair, "vocab_i2": v,
                                             "stack": 6144}) == []]


@pytest.mark.parametrize("vocab,k,pair,legal", [
    (128256, 2048, 2, [2, 6, 14, 18]),     # Llama-3.2-1B: fused_decode.py's vocab note
    (128256, 4096, 2, [4, 8, 16]),         # Llama-3.1-8B: its README, VOCAB_CHUNK_I2=16
    (152064, 3584, 1, [7]),                # Qwen2.5-7B: "VOCAB_I2=7 is the only legal chunk"
])
def test_the_lm_heads_vocab_chunks_are_exactly_upstreams_legal_set(vocab, k, pair, legal):
    assert legal_vocab_i2(vocab, k, pair) == legal


@pytest.mark.parametrize("vocab,k,vocab_i2,pair", [
    (128256, 2048, 18, 2),      # llama-3.2-1b
    (262208, 2560, 5, 1),       # gemma3-4b
    (128256, 3072, 9, 2),       # llama-3.2-3b
    (200064, 3072, 18, 2),      # phi4-mini
    (151936, 4096, 8, 2),       # qwen3-8b
    (152064, 3584, 7, 1),       # qwen2.5-7b
    (128256, 4096, 16, 2),      # llama-3.1-8b
])
def test_every_lm_head_chunk_upstreams_fused_decode_runs_is_legal(vocab, k, vocab_i2, pair):
    """fused_decode.py's _MODELS: each model's VOCAB_CHUNK_I2 and PAIR_ROWS."""
    assert vocab_i2 in legal_vocab_i2(vocab, k, pair)


def test_qwen25_7bs_qkv_needs_the_non_paired_egress():
    """llms/qwen25_7b_q4nx/README.md: PAIR_ROWS=2 would need 4608 / 1024 = 4.5 rounds."""
    qkv = {"M": 3584 + 512 + 512, "K": 3584}
    assert errors(qkv, {**FUSED, "pair_rows": 2}) == ["divisible"]
    assert errors(qkv, {**FUSED, "pair_rows": 1}) == []


@pytest.mark.parametrize("k,stack,fits", [(4096, 10240, False), (4096, 8064, True),
                                          (4096, 6144, True), (2048, 10240, True)])
def test_the_fused_engines_stack_at_k_4096(k, stack, fits):
    """llama31_8b_q4nx (8064) and qwen3_8b_q4nx (6144): at K=4096 the rms core's seven K-wide
    buffers leave no room for the default 10240-byte stack; the 1B and 3B run the default."""
    found = errors({"M": 4096, "K": k}, {**FUSED, "stack": stack, "pair_rows": 2})
    assert (found == []) is fits, found


# --- numerics through the family --------------------------------------------------------------

def tensors(m, k, seed=0):
    gen = torch.Generator().manual_seed(seed)
    s = torch.rand(m, k // 32, generator=gen) * 0.01 + 0.001
    return {"w.q": torch.randint(0, 16, (m, k), generator=gen, dtype=torch.uint8),
            "w.scale": s, "w.min": -8 * s, "x": to_bf16(torch.randn(k, generator=gen))}


def test_the_family_emulates_the_kernel_and_stays_within_its_bound():
    shape, t = {"M": 64, "K": 512}, tensors(64, 512)
    numerics = FAMILIES["proj_qmm"].numerics
    y = numerics.emulate(shape, {"codec": "q4nx"}, t)["y"]
    assert torch.equal(y, proj_qmm(family.fields(t, shape), t["x"]))
    err = (y.double() - numerics.reference(shape, {}, t)["y"].double()).abs()
    assert bool((err <= family.bound(shape, {}, t).double()).all())


@pytest.mark.parametrize("codec", ["q4nx", "q4_0"])
def test_emulating_from_the_blocks_alone_reads_what_the_fields_say(codec):
    """A device holds the blocks `w` alone (tests/fake_npu.py runs the emulator on its
    buffers): decoded with the build's codec they give the same outputs as the fields."""
    shape = {"M": 64, "K": 512}
    gen = torch.Generator().manual_seed(3)
    t = family.seeded_weight(shape, {"codec": codec}, gen)
    x = torch.randn(512, generator=gen).to(torch.bfloat16)
    numerics = FAMILIES["proj_qmm"].numerics
    with_fields = numerics.emulate(shape, {"codec": codec}, {**t, "x": x})["y"]
    alone = numerics.emulate(shape, {"codec": codec}, {"w": t["w"], "x": x})["y"]
    assert torch.equal(with_fields, alone)
    with pytest.raises(ValueError, match="neither was given"):
        numerics.emulate(shape, {"codec": codec}, {"x": x})


# --- cost: 5 bits a weight --------------------------------------------------------------------

def test_a_block_is_5120_bytes_and_the_cost_streams_them_per_core():
    assert family.BLOCK_BYTES == 5120      # 8192 weights at 4 bits + 2 x 256 bf16: 5 bits each
    p = PerfParams()
    shape = {"M": 2048, "K": 2048}
    work = family.work(SPEC, shape, {**SPEC.tunables, "herd_m": 8}, p)
    per_core = 2048 // 32 // 8 * (2048 // 256)
    assert work.memory_s == pytest.approx(per_core * (5120 + 512) / p.gemv_column_bw)
    head = {"M": 128256, "K": 2048}
    fused = {**SPEC.tunables, "engine": "fused", "vocab_i2": 18, "pair_rows": 2}
    assert family.work(SPEC, head, fused, p).serial_s == pytest.approx(7 * 20e-6)


# --- the program ------------------------------------------------------------------------------

def launch(shape, config):
    bindings = tuple(Binding(o.name, f"t.{o.name}", "output" if o.role == "output" else "input")
                     for o in SPEC.operands(shape))
    return Launch("proj_qmm", "proj", 0, tuple(sorted(shape.items())),
                  tuple(sorted(config.items())), bindings)


@pytest.mark.parametrize("shape,config", [
    ({"M": 2048, "K": 2048}, {"herd_m": 8}),
    ({"M": 1024, "K": 4096}, {"herd_m": 4, "stack": 6144}),
    ({"M": 2048, "K": 3584}, {"herd_m": 8, "codec": "q4_0"}),
])
def test_the_program_passes_the_verifier_with_upstreams_signatures(shape, config):
    program = emit_dispatch(Dispatch("d", (launch(shape, {**SPEC.tunables, **config}),)), XDNA2)
    assert [v.line() for v in verify(program)] == []
    for symbol in ("proj_qmm_zero", "proj_qmm_acc256", "proj_qmm_flush"):
        assert f"FuncOp('{symbol}'" in program.source


def test_a_wrong_block_size_is_caught_by_the_verifier():
    program = emit_dispatch(Dispatch("d", (launch({"M": 256, "K": 256},
                                                  {**SPEC.tunables, "herd_m": 8}),)), XDNA2)
    broken = program.source.replace("[2560]", "[2048]")
    from npu_deploy.kernels.air_programs.air_verify import verify_source
    found = verify_source(broken, flags=program.flags, outputs=(2,))
    assert any(v.check == "extern" and "2560" in v.message for v in found)


def test_the_fused_engine_is_not_emitted():
    with pytest.raises(EmitError, match="fused"):
        emit_dispatch(Dispatch("d", (launch({"M": 2048, "K": 2048},
                                            {**SPEC.tunables, "engine": "fused"}),)), XDNA2)


def unit_scale(m, k, seed=0):
    """Q4NX fields whose outputs are of unit scale: codes uniform, scale 1 / sqrt(21.25 K)
    (the codes' second moment about their mean), mins -7.5 scales."""
    gen = torch.Generator().manual_seed(seed)
    s = torch.full((m, k // 32), (21.25 * k) ** -0.5) * (1 + 0.1 * torch.rand(m, k // 32,
                                                                             generator=gen))
    return {"w.q": torch.randint(0, 16, (m, k), generator=gen, dtype=torch.uint8),
            "w.scale": s, "w.min": -7.5 * s, "x": to_bf16(torch.randn(k, generator=gen))}


def test_phase_1_passes_the_emulated_kernel_at_its_atol_and_not_at_a_bf16_gemvs():
    from npu_deploy.kernels.emulation.emulator import EmulatorBackend
    from npu_deploy.kernels.emulation.validate import validate_kernel

    shape = {"M": 256, "K": 4096}
    report = validate_kernel(SPEC, shape, {}, EmulatorBackend(), inputs=unit_scale(256, 4096))
    assert report.passed and report.atol == 4e-2
    strict = validate_kernel(SPEC, shape, {}, EmulatorBackend(), inputs=unit_scale(256, 4096),
                             atol=1e-3)
    assert not strict.passed


# --- the rounding build option ---------------------------------------------------------------


def test_the_conv_even_build_rounds_to_nearest_even_and_stays_within_the_bound():
    """The same weights and x: upstream's build (floor) and ours (conv_even) differ, floor's
    outputs lie below or on nearest-even's on average, and both within the kernel's bound."""
    shape, t = {"M": 256, "K": 2048}, tensors(256, 2048, seed=4)
    numerics = FAMILIES["proj_qmm"].numerics
    floor = numerics.emulate(shape, {"codec": "q4nx", "rounding": "floor"}, t)["y"]
    even = numerics.emulate(shape, {"codec": "q4nx", "rounding": "conv_even"}, t)["y"]
    assert torch.equal(even, proj_qmm(family.fields(t, shape), t["x"], rounding="nearest_even"))
    assert not torch.equal(floor, even)
    assert float((floor.float() - even.float()).mean()) < 0
    ref = numerics.reference(shape, {}, t)["y"].double()
    for y in (floor, even):
        assert bool(((y.double() - ref).abs() <= family.bound(shape, {}, t).double()).all())
    assert (even.double() - ref).abs().mean() < (floor.double() - ref).abs().mean()
    assert errors(shape, {**SPEC.tunables, "rounding": "up"})      # not a build


def test_the_conv_even_build_is_its_own_object_with_one_edit_and_verifies():
    config = {**SPEC.tunables, "herd_m": 8, "rounding": "conv_even"}
    program = emit_dispatch(Dispatch("d", (launch({"M": 2048, "K": 2048}, config),)), XDNA2)
    assert [v.line() for v in verify(program)] == []
    assert program.objects == ("proj_qmm_ne.o",)
    ours = family.proj_object("q4nx", "conv_even")
    assert ours.source == family.proj_object("q4nx").source
    assert ours.edits == (family.CONV_EVEN_EDIT,)
    assert "aie::set_rounding(aie::rounding_mode::conv_even);" in ours.edits[0][1]
    assert family.proj_object("q4_0", "conv_even").obj == "proj_qmm_q4_0_ne.o"


@pytest.mark.skipif(not (UPSTREAM / family.SOURCE).is_file(),
                    reason="no upstream mlir-air extract here")
def test_the_conv_even_edit_applies_once_to_upstreams_proj_qmm(tmp_path):
    from npu_deploy.kernels.npu_runtime.peano_build import edited_source

    ours = family.proj_object("q4nx", "conv_even")
    text = (UPSTREAM / ours.source).read_text()
    assert text.count(family.CONV_EVEN_EDIT[0]) == 1
    edited = edited_source(ours, UPSTREAM / ours.source, tmp_path).read_text()
    assert "aie::set_rounding(aie::rounding_mode::conv_even);" in edited


def test_a_4bit_plan_builds_proj_qmm_at_the_recipes_rounding():
    """The recipe's qmm_rounding reaches every proj_qmm launch of the decode (the default,
    upstream's floor, reads as a recipe always did), and the family offers conv_even as the
    numerics change a phase-3 retry may try."""
    from npu_deploy.models import CATALOG
    from npu_deploy.pipeline.recipe import Recipe

    args = CATALOG["llama32_1b_q4nx"].args
    default, even = Recipe(), Recipe().with_settings({"qmm_rounding": "conv_even"})
    assert b"qmm_rounding" not in default.to_json()
    assert Recipe.from_json(even.to_json()) == even
    for recipe, want in ((default, "floor"), (even, "conv_even")):
        plan = recipe.plan("llama32_1b_q4nx", args, Decode(64), XDNA2)
        got = {ln.config_dict["rounding"] for ln in plan.launches() if ln.kernel == "proj_qmm"}
        assert got == {want}
    assert [pairs for pairs, _ in FAMILIES["proj_qmm"].numerics_changes] == \
        [(("qmm_rounding", "conv_even"),)]
