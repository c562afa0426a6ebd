"""FlashAttention on the native bf16 matmul datapath (`datapath: "bf16"`, our own build of
attn_npu2.cc: docs/hardware-facts.md#flashattention-on-the-native-bf16-datapath): its
emulation, checker, cost, program and object, the recipe that selects it, and the greedy
first token it restores on SmolLM2-135M's capital prompt."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import pytest
import torch

from npu_deploy.kernels import SPECS, XDNA2
from npu_deploy.kernels.air_programs.air import emit_dispatch, layout_of
from npu_deploy.kernels.air_programs.air_parts import KernelSource
from npu_deploy.kernels.air_programs.air_verify import check_programs
from npu_deploy.kernels.definition.checker import check
from npu_deploy.kernels.definition.registry import FAMILIES
from npu_deploy.kernels.definition.selection import select
from npu_deploy.kernels.definition.specs import Decode, KernelUse, prompt_prefill
from npu_deploy.kernels.emulation.numerics import to_bf16
from npu_deploy.kernels.emulation.softmax import softmax_bf16
from npu_deploy.kernels.families.gemm import BF16_DATAPATH_RATE
from npu_deploy.kernels.npu_runtime.peano_build import BuildError, edited_source
from npu_deploy.kernels.performance.model import DEFAULT_PARAMS
from npu_deploy.kernels.plans.plan import Binding, Dispatch, Launch, baseline_plan
from npu_deploy.models import CATALOG
from npu_deploy.pipeline.recipe import Recipe

FA = FAMILIES["flash_attention"]
SHAPE = {"heads": 4, "kv_heads": 2, "Lq": 128, "Lk": 128, "head_dim": 64}
UPSTREAM = Path("/work/upstream")


def config(datapath: str | None = None, **more) -> dict:
    c = {**SPECS["flash_attention"].tunables,
         **select(KernelUse("flash_attention", SPECS["flash_attention"], SHAPE), XDNA2).config,
         "layout": "head-first", **more}
    return c if datapath is None else {**c, "datapath": datapath}


def inputs(seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    h, hkv, lq, d = SHAPE["heads"], SHAPE["kv_heads"], SHAPE["Lq"], SHAPE["head_dim"]
    return {"q": torch.randn(h, lq, d, generator=g).to(torch.bfloat16),
            "k": torch.randn(hkv, lq, d, generator=g).to(torch.bfloat16),
            "v": torch.randn(hkv, lq, d, generator=g).to(torch.bfloat16)}


def fp32_matmuls(x: dict[str, torch.Tensor]) -> torch.Tensor:
    """Causal attention written out: QK^T and PV as FP32 matmuls of the bf16 operands (their
    products exact in FP32, K tiles of 32 summed in FP64 and added in FP32, as the emulation
    sums a tile), softmax_bf16's P, one cast to bf16."""
    h, d, lq = SHAPE["heads"], SHAPE["head_dim"], SHAPE["Lq"]
    group = h // SHAPE["kv_heads"]
    q = x["q"].double()
    k = x["k"].double().repeat_interleave(group, 0)
    v = x["v"].double().repeat_interleave(group, 0)
    scores = torch.zeros(h, lq, lq)
    for d0 in range(0, d, 32):
        scores += (q[..., d0:d0 + 32] @ k[..., d0:d0 + 32].transpose(1, 2)).float()
    p = softmax_bf16(scores.view(-1, lq), torch.arange(1, lq + 1).repeat(h), 1 / math.sqrt(d))
    p = p.double().view(h, lq, lq)
    out = torch.zeros(h, lq, d)
    for k0 in range(0, lq, 32):
        out += (p[..., k0:k0 + 32] @ v[:, k0:k0 + 32]).float()
    return to_bf16(out)


def test_the_bf16_datapath_is_fp32_matmuls_of_the_bf16_operands_and_bfp16_is_not():
    x = inputs()
    native = FA.numerics.emulate(SHAPE, config("bf16"), x)["o"]
    blocked = FA.numerics.emulate(SHAPE, config(), x)["o"]
    assert torch.equal(native, fp32_matmuls(x))
    assert not torch.equal(blocked, native)
    # without the block format, closer to the FP32 reference than the BFP16 build
    ref = FA.numerics.reference(SHAPE, config(), x)["o"]
    err = {name: float((o.float() - ref).abs().mean() / ref.abs().mean())
           for name, o in (("bf16", native), ("bfp16", blocked))}
    assert err["bf16"] < err["bfp16"] / 2, err


def test_the_checker_takes_both_datapaths_and_refuses_others():
    def errors(c: dict) -> list[str]:
        return [f.kind for f in check(SPECS["flash_attention"], SHAPE, c, XDNA2)
                if f.severity != "warning"]
    assert errors(config()) == errors(config("bf16")) == []
    assert errors(config("fp8")) == ["datapath"]
    # selection is unchanged: upstream's build unless a recipe asks
    assert config()["datapath"] == "bfp16"


def test_the_bf16_datapath_costs_its_matmuls_at_the_datapath_rate():
    shape = {"heads": 9, "kv_heads": 3, "Lq": 128, "Lk": 128, "head_dim": 64}
    c = {**config(), "layout": "seq-first"}
    p = DEFAULT_PARAMS
    fast = FA.cost.work(SPECS["flash_attention"], shape, c, p)
    slow = FA.cost.work(SPECS["flash_attention"], shape, {**c, "datapath": "bf16"}, p)
    # the per-iteration part alone: the work with the tile rate made infinite
    fixed = FA.cost.work(SPECS["flash_attention"], shape, c,
                         dataclasses.replace(p, fa_tile_flops=math.inf)).compute_s
    assert fixed > 0 and slow.compute_s > fast.compute_s
    assert slow.compute_s - fixed == pytest.approx((fast.compute_s - fixed) / BF16_DATAPATH_RATE)


def launch(datapath: str) -> Launch:
    spec = SPECS["flash_attention"]
    c = {**config(datapath), "layout": "seq-first"}
    bindings = tuple(Binding(o.name, f"t.{o.name}", "input" if o.role != "output" else "output")
                     for o in spec.operands(SHAPE))
    return Launch("flash_attention", "attention", 0, tuple(sorted(SHAPE.items())),
                  tuple(sorted(c.items())), bindings)


def test_the_bf16_program_links_its_own_object_built_without_the_emulation():
    programs = {dp: emit_dispatch(Dispatch(f"attention {dp}", (launch(dp),)))
                for dp in ("bfp16", "bf16")}
    upstream, ours = (layout_of(launch(dp)).kernels[0] for dp in ("bfp16", "bf16"))
    assert upstream.obj == "attn_npu2_32x32x32x32x64.o" and not upstream.edits
    assert ours.obj == "attn_npu2_bf16_32x32x32x32x64.o"
    assert programs["bf16"].objects == (ours.obj,)
    assert ours.source == upstream.source
    assert dict(upstream.defines) == {**dict(ours.defines),
                                      "AIE_API_EMULATE_BFLOAT16_MMUL_WITH_BFP16": None}
    assert ours.edits == (("constexpr int r = 8;", "constexpr int r = 4;"),)
    assert "'edits': [['constexpr int r = 8;', 'constexpr int r = 4;']]" in programs["bf16"].source
    assert "'edits'" not in programs["bfp16"].source
    verdict = check_programs(programs.values(), XDNA2)
    assert verdict.clean == 2, verdict.as_json()


@pytest.mark.skipif(not UPSTREAM.is_dir(), reason="no upstream mlir-air extract here")
def test_the_edit_applies_once_to_upstreams_source(tmp_path: Path):
    ours = layout_of(launch("bf16")).kernels[0]
    source = UPSTREAM / ours.source
    copy = edited_source(ours, source, tmp_path)
    text, edited = source.read_text(), copy.read_text()
    assert copy.name == "attn_npu2_bf16_32x32x32x32x64.cc"
    assert edited == text.replace("constexpr int r = 8;", "constexpr int r = 4;") != text
    assert "constexpr int r = 4;" in edited and text.count("constexpr int r = 8;") == 1


def test_an_edit_that_does_not_occur_once_is_refused(tmp_path: Path):
    source = tmp_path / "k.cc"
    for body, found in (("int x;\n", 0), ("constexpr int r = 8;\nconstexpr int r = 8;\n", 2)):
        source.write_text(body)
        k = KernelSource("k_bf16.o", "k.cc", (), edits=(("constexpr int r = 8;", "x"),))
        with pytest.raises(BuildError, match=f"exactly once .* found {found}"):
            edited_source(k, source, tmp_path / "out")


def test_the_recipe_applies_it_to_every_prefill_attention_and_round_trips():
    args = CATALOG["smollm2-135m"].args
    recipe = Recipe(attention_datapath="bf16")
    assert Recipe.from_json(recipe.to_json()) == recipe
    assert b"attention_datapath" not in Recipe().to_json()       # stored recipes unchanged
    assert Recipe.from_json(Recipe().to_json()).attention_datapath == "bfp16"
    with pytest.raises(ValueError, match="attention_datapath must be one of"):
        Recipe(attention_datapath="fp8")  # type: ignore[arg-type]
    plan = recipe.plan("smollm2-135m", args, prompt_prefill(128))
    attention = [ln for ln in plan.launches() if ln.kernel == "flash_attention"]
    assert len(attention) == args.n_layers
    assert all(ln.config_dict["datapath"] == "bf16" for ln in attention)
    # GEMMs keep the recipe's GEMM datapath; the default plan is upstream's build
    assert all(ln.config_dict["datapath"] == "bfp16" for ln in plan.launches()
               if ln.kernel.startswith("gemm"))
    default = baseline_plan("smollm2-135m", args, prompt_prefill(128))
    assert all(ln.config_dict["datapath"] == "bfp16" for ln in default.launches()
               if ln.kernel == "flash_attention")
    decode = recipe.plan("smollm2-135m", args, Decode(20))
    assert decode == Recipe().plan("smollm2-135m", args, Decode(20))


@pytest.mark.slow
def test_on_smollm2_the_bf16_attention_restores_the_oracles_first_token(smollm2):
    """The capital prompt through the chat template: the FP32 oracle's first token leads
    the runner-up by 0.08 logits; the default (BFP16) deployment on the emulator picks
    another, the bf16-attention one the oracle's."""
    from npu_deploy.kernels.emulation.emulator import EmulatorBackend
    from npu_deploy.oracle import reference_of
    from npu_deploy.pipeline.deployed import DeployedModel

    tok = smollm2.tokenizer
    ids = torch.tensor(tok.apply_chat_template(
        [{"role": "user", "content": "What is the capital of France?"}],
        add_generation_prompt=True, return_dict=True)["input_ids"])
    oracle = int(reference_of(smollm2).generate(ids, 1)[0][0])
    assert tok.decode([oracle]) == "The"
    first = {}
    for datapath in ("bfp16", "bf16"):
        deployed = DeployedModel("smollm2-135m", smollm2.args, smollm2.weights,
                                 Recipe(attention_datapath=datapath), EmulatorBackend())
        logits, _ = deployed.prefill(ids)
        first[datapath] = int(torch.argmax(logits.float()))
    assert first["bfp16"] != oracle
    assert first["bf16"] == oracle
