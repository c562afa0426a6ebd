"""A model deployed with 4-bit weights (models/quantized_checkpoint.py): `MODEL@q4nx` is a
cached checkpoint holding the projections de-quantized beside their Q4NX blocks; the plan
runner hands the blocks to the decode's 4-bit kernel; phase 0 measures what quantization
costs against the source checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from npu_deploy.formats import QuantizedMatrix
from npu_deploy.models.errors import UnsupportedModel
from npu_deploy.models.loading import load_model, read_safetensors
from npu_deploy.models.quantization import PROJECTIONS, split_spec, with_weights

Q4 = "tiny-llama-q4@q4nx"


@pytest.fixture(scope="module")
def q4():
    return load_model(Q4)


def test_a_spec_names_its_weights_after_an_at():
    assert split_spec("tiny-llama@q4nx") == ("tiny-llama", "q4nx")
    assert split_spec("smollm2-135m@q4") == ("smollm2-135m", "q4")
    assert split_spec("org/model@main") == ("org/model@main", None)   # not a weights choice
    assert with_weights("tiny-llama", "bf16") == "tiny-llama"
    assert with_weights("tiny-llama", "q4nx") == "tiny-llama@q4nx"
    with pytest.raises(ValueError, match="bf16, q4nx, q4"):
        with_weights("tiny-llama", "q3")


def test_the_checkpoint_holds_exactly_what_its_blocks_stand_for(q4):
    assert q4.source.kind == "quantized" and q4.args.weights is not None
    assert q4.args.weights.format == "q4nx" and not q4.args.weights.lm_head_quantized
    packed = q4.weights.packed
    assert packed is not None
    assert sorted(packed) == sorted(f"L{i}.{r}" for i in range(2) for r in PROJECTIONS)
    state = read_safetensors(q4.source.directory)
    for i, layer in enumerate(q4.weights.layers):
        for role, ours in (("q_proj", layer.wq), ("down_proj", layer.w_down)):
            m = packed[f"L{i}.{role}"]
            assert isinstance(m, QuantizedMatrix) and m.format == "q4nx"
            assert torch.equal(ours, m.dequantize())         # bit for bit
            part = "self_attn" if role == "q_proj" else "mlp"
            assert torch.equal(state[f"model.layers.{i}.{part}.{role}.weight"], m.dequantize())


def test_what_is_not_a_projection_is_the_source_s_own(q4):
    info = json.loads((q4.source.directory / "quantization.json").read_text())
    source = load_model(info["base"])
    assert torch.equal(source.weights.embed, q4.weights.embed)
    assert torch.equal(source.weights.layers[0].attn_norm, q4.weights.layers[0].attn_norm)
    assert source.weights.packed is None
    # quantized, so not the source's: a cost the phase-0 check reports
    assert not torch.equal(source.weights.layers[0].wq, q4.weights.layers[0].wq)
    assert 0.01 < info["errors"]["L0.q_proj"]["rel_rms"] < 0.1


def test_k_short_of_whole_blocks_is_padded_with_zero_groups():
    """tiny-llama's hidden 128 is half a Q4NX block: its blocks are 256 columns wide, the
    padding zero groups (exactly 0), and the decode runs proj_qmm at K = 256 with x bound
    128 deep, zero past it (kernels.plans.plan `block_k`)."""
    from npu_deploy.kernels.definition.hardware import XDNA2
    from npu_deploy.kernels.definition.specs import Decode
    from npu_deploy.kernels.plans.plan import baseline_plan

    m = load_model("tiny-llama@q4nx")
    q = m.weights.packed["L0.q_proj"]
    assert q.shape == (128, 256)
    assert torch.equal(q.dequantize()[:, 128:], torch.zeros(128, 128))
    assert torch.equal(q.dequantize()[:, :128], m.weights.layers[0].wq)
    plan = baseline_plan("d", m.args, Decode(8), XDNA2)
    qkv = [ln for d in plan.dispatches for ln in d.launches if ln.role == "q_proj"]
    assert qkv[0].kernel == "proj_qmm" and qkv[0].shape_dict == {"M": 128, "K": 256}
    assert qkv[0].binding("x").width == 128
    down = [ln for d in plan.dispatches for ln in d.launches if ln.role == "down_proj"][0]
    assert down.shape_dict == {"M": 128, "K": 256} and down.binding("x").width == 192


def test_rows_short_of_whole_blocks_are_refused_in_one_line(tmp_path):
    from npu_deploy.models.quantized_checkpoint import _quantize

    tiny = load_model("tiny-llama")
    state = read_safetensors(tiny.source.directory)
    state["model.layers.0.mlp.gate_proj.weight"] = torch.randn(200, 128)
    with pytest.raises(UnsupportedModel, match=r"200 rows: Q4NX blocks hold 32 rows.*bf16"):
        _quantize(tiny.args, state)


def test_q4_repacks_a_gguf_s_blocks_and_nothing_else():
    with pytest.raises(UnsupportedModel, match="not a GGUF.*--weights q4nx"):
        load_model("tiny-llama-q4@q4")


@pytest.mark.slow                     # the bundled GGUF read and repacked: ~40 s
def test_the_bundled_model_s_own_q4_1_blocks_move_exactly(smollm2):
    """`smollm2-135m@q4`: each projection's Q4_1 blocks become Q4NX blocks, the codes and
    their order exactly (llama.cpp's Q/K row order undone: checked on the build against the
    checkpoint transformers converted), the scales and mins rounded to bf16, K padded from
    576 to 768."""
    import gguf

    from npu_deploy.formats.gguf_blocks import GGUF_Q4_1
    from npu_deploy.models.sources import bundled_gguf

    m = load_model("smollm2-135m@q4")
    assert m.args.weights is not None and m.args.weights.format == "q4nx"
    packed = m.weights.packed
    assert packed["L0.gate_proj"].shape == (1536, 768) and packed["L3.down_proj"].shape == \
        (576, 1536)
    t = next(t for t in gguf.GGUFReader(bundled_gguf()).tensors
             if t.name == "blk.0.ffn_gate.weight")
    source = GGUF_Q4_1.unpack(t.data.tobytes(), (1536, 576))
    ours = packed["L0.gate_proj"].parts()
    assert torch.equal(ours.q[:, :576], source.q)
    assert torch.equal(ours.scales[:, :18], source.scales.to(torch.bfloat16))
    info = json.loads((m.source.directory / "quantization.json").read_text())
    assert max(e["rel_rms"] for e in info["errors"].values()) < 0.01     # bf16 scales only


def test_deploy_refuses_weights_twice_and_a_model_it_cannot_quantize(cli, tmp_path):
    db = tmp_path / "runs.db"
    r = cli("--db", db, "deploy", Q4, "--weights", "q4nx", "--headless")
    assert r.exit_code == 2 and "names its weights already" in r.output
    r = cli("--db", db, "deploy", "tiny-llama", "--weights", "q4", "--headless")
    assert r.exit_code != 0 and "not a GGUF" in r.output
    assert not db.exists() or "tiny-llama" not in cli("--db", db, "runs").output


def test_the_decode_reads_the_blocks_not_their_bf16_copy(q4):
    """A decode step's projections are proj_qmm on the blocks: blocks changed change the
    logits; the bf16 copy of the same weight changed changes nothing."""
    from npu_deploy.kernels.definition.hardware import XDNA2
    from npu_deploy.kernels.definition.specs import Decode, Prefill
    from npu_deploy.kernels.emulation.emulator import EmulatorBackend
    from npu_deploy.kernels.plans.plan import baseline_plan
    from npu_deploy.kernels.plans.plan_runner import PlanRunner

    runner = PlanRunner(q4.args, q4.weights, EmulatorBackend())
    tokens = torch.arange(3, 19)
    prefill = runner.run(baseline_plan("p", q4.args, Prefill(16), XDNA2, lm_head="last-token"),
                         tokens)
    decode = baseline_plan("d", q4.args, Decode(16), XDNA2)
    kernels = {ln.kernel for d in decode.dispatches for ln in d.launches}
    assert "proj_qmm" in kernels and "gemv" in kernels            # gemv: the bf16 LM head

    def step(r: PlanRunner) -> torch.Tensor:
        return r.run(decode, torch.tensor([5]), prefill.cache).logits

    base = step(runner)
    bf16_changed = runner.on(EmulatorBackend())
    bf16_changed.weights = dict(runner.weights)
    bf16_changed.weights["w.L0.q_proj"] = torch.zeros_like(runner.weights["w.L0.q_proj"])
    assert torch.equal(step(bf16_changed), base)
    blocks_changed = PlanRunner(q4.args, q4.weights, EmulatorBackend())
    blocks_changed.packed["L0.q_proj"] = blocks_changed.packed["L1.q_proj"]
    assert not torch.equal(step(blocks_changed), base)
    # and the step is the de-quantized model's, to the NPU's rounding
    from npu_deploy.metrics.comparison import compare
    from npu_deploy.oracle import reference_of

    ref = reference_of(q4)
    _, cache = ref.prefill(tokens)
    assert compare(ref.decode(5, cache)[None], base).cosine > 0.999


def test_phase_0_reports_what_quantization_costs_beside_its_verdict(q4):
    from npu_deploy.oracle.prompts import Prompt
    from npu_deploy.oracle.quant_cost import quantization_cost
    from npu_deploy.pipeline.gates.oracle import quantization_checks

    prompts = [Prompt("story", "Once upon a time"), Prompt("npu", "A neural processing unit")]
    cost = quantization_cost(q4, prompts, steps=4)
    assert cost is not None and cost.base == "tiny-llama-q4"
    assert [c.layer for c in cost.layers] == [0, 1]
    assert all(0.9 < c.cosine < 1.0 and c.rel_l2 > 0 for c in cost.layers)
    assert [p.prompt for p in cost.prompts] == ["story", "npu"]
    checks = quantization_checks(cost)
    assert checks and not any(c["gating"] for c in checks)
    assert quantization_cost(load_model("tiny-llama"), prompts, steps=4) is None


def test_damaged_blocks_are_refused_in_one_line_and_nothing_else_is_touched(q4, tmp_path):
    """A copy of the quantized directory with its blocks cut short, then with its record
    unreadable: a one-line ModelCorrupt that names the directory and says to rebuild it."""
    import shutil

    from npu_deploy.models.errors import ModelCorrupt
    from npu_deploy.models.quantized_checkpoint import read_quantized

    copy = tmp_path / "q4"
    shutil.copytree(q4.source.directory, copy)
    blocks = copy / "quantized" / "blocks.safetensors"
    blocks.write_bytes(blocks.read_bytes()[:-100])
    with pytest.raises(ModelCorrupt, match=r"damaged 4-bit blocks .* remove that directory"):
        read_quantized(copy)
    shutil.copy2(q4.source.directory / "quantized" / "blocks.safetensors", blocks)
    assert read_quantized(copy) is not None
    (copy / "quantization.json").write_text("{not json")
    with pytest.raises(ModelCorrupt, match="damaged 4-bit blocks"):
        read_quantized(copy)
    assert read_quantized(q4.source.directory) is not None          # the original untouched
