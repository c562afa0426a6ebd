"""Gemma 3 and Phi-3 (Phi-4-mini): the FP32 reference against Hugging Face's own forward.

Each tiny model is built from transformers' config class, saved with `save_pretrained` and
read back through the loader's own path (config.json -> ModelArgs, safetensors -> the
adapter), then run by our reference and by transformers (eager attention) on prompts
longer than the sliding window and past LongRoPE's original length. Every feature the two
architectures add is also taken out again, one at a time, to show the comparison would
catch its absence.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import transformers

from npu_deploy.models import BadConfig, UnsupportedModel, model_args
from npu_deploy.models.adapters import Weights, weights_from_state_dict
from npu_deploy.models.config import FULL, SLIDING, ModelArgs, RopeScaling, read_config
from npu_deploy.models.loading import read_safetensors
from npu_deploy.oracle.reference import Reference

#: "within ~1e-5 relative": what FP32 reordering leaves between two correct forwards
REL_TOL = 1e-5

GEMMA3 = dict(hidden_size=64, num_hidden_layers=3, intermediate_size=96, num_attention_heads=2,
              num_key_value_heads=1, head_dim=32, vocab_size=256, max_position_embeddings=4096,
              rms_norm_eps=1e-6, sliding_window=6, query_pre_attn_scalar=24,
              layer_types=[SLIDING, FULL, SLIDING], tie_word_embeddings=True,
              rope_parameters={FULL: {"rope_type": "linear", "factor": 8.0,
                                      "rope_theta": 1_000_000.0},
                               SLIDING: {"rope_type": "default", "rope_theta": 10_000.0}})
_PHI3_HALF = 24             # 48 of head_dim 64 rotated: 24 frequencies
PHI3 = dict(hidden_size=128, num_hidden_layers=2, intermediate_size=96, num_attention_heads=2,
            num_key_value_heads=1, vocab_size=256, max_position_embeddings=4096,
            original_max_position_embeddings=16, rms_norm_eps=1e-5, tie_word_embeddings=True,
            pad_token_id=0, eos_token_id=1, bos_token_id=0,
            rope_parameters={"rope_type": "longrope", "rope_theta": 10_000.0,
                             "partial_rotary_factor": 0.75,
                             "short_factor": [1.0 + 0.05 * i for i in range(_PHI3_HALF)],
                             "long_factor": [1.0 + 0.5 * i for i in range(_PHI3_HALF)]})


def _build(tmp: Path, cls_name: str, kwargs: dict[str, Any]) -> tuple[Path, Any]:
    """A seeded random model of transformers' `cls_name` config, its norm weights jittered
    (transformers starts them where a reference that skipped them would still agree),
    saved as a Hugging Face directory; returns the directory and the model (eager)."""
    config = getattr(transformers, cls_name)(**kwargs)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation="eager")
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.2 * torch.randn(p.shape, generator=gen))
    model.save_pretrained(tmp)
    return tmp, model.eval()


def _ours(directory: Path) -> tuple[ModelArgs, Weights]:
    """The model read through the loader's path: config.json, then the safetensors."""
    args = model_args(read_config(directory / "config.json"))
    return args, weights_from_state_dict(args, read_safetensors(directory))


def _rel(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((ours - theirs).norm() / theirs.norm())


@torch.inference_mode()
def _hf_logits(model: Any, tokens: torch.Tensor) -> torch.Tensor:
    return model(tokens[None]).logits[0]


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModelArgs, Weights, Any]:
    directory, hf = _build(tmp_path_factory.mktemp("gemma3"), "Gemma3TextConfig", GEMMA3)
    return (*_ours(directory), hf)


@pytest.fixture(scope="module")
def phi3(tmp_path_factory: pytest.TempPathFactory) -> tuple[ModelArgs, Weights, Any]:
    directory, hf = _build(tmp_path_factory.mktemp("phi3"), "Phi3Config", PHI3)
    return (*_ours(directory), hf)


def _tokens(n: int) -> torch.Tensor:
    return torch.randint(0, 256, (n,), generator=torch.Generator().manual_seed(n))


# --- what each config reads as ------------------------------------------------------------

def test_gemma3_config_reads_every_feature(gemma3):
    args, weights, _ = gemma3
    assert (args.sandwich_norms, args.qk_norm, args.activation) == (True, True, "gelu_tanh")
    assert args.attn_scale == pytest.approx(24 ** -0.5)
    assert args.embed_scale == pytest.approx(math.sqrt(64))
    assert [args.window(i) for i in range(3)] == [6, None, 6]
    assert args.rope_of(0) == (10_000.0, RopeScaling())
    assert args.rope_of(1) == (1_000_000.0, RopeScaling("linear", 8.0))
    layer = weights.layers[0]
    assert layer.post_attn_norm is not None and layer.post_ffn_norm is not None


def test_gemma3_norm_weights_hold_one_plus_w(gemma3):
    """The adapter adds Gemma's 1 once: a checkpoint's zero norm weight is a scale of 1."""
    args, weights, hf = gemma3
    stored = hf.model.layers[0].pre_feedforward_layernorm.weight.detach()
    assert torch.equal(weights.layers[0].ffn_norm, 1.0 + stored)
    assert torch.equal(weights.final_norm, 1.0 + hf.model.norm.weight.detach())


def test_phi3_config_reads_partial_rotary_and_longrope(phi3):
    args, weights, hf = phi3
    assert (args.head_dim, args.rope_dim) == (64, 48)
    s = args.rope_scaling
    assert s.kind == "longrope" and s.original_max_position == 16
    # transformers' default: s = max_position / original = 256, sqrt(1 + ln 256 / ln 16) = sqrt 3
    assert s.attention_factor == pytest.approx(math.sqrt(3.0))
    qkv = hf.model.layers[1].self_attn.qkv_proj.weight.detach()
    layer = weights.layers[1]
    assert torch.equal(torch.cat((layer.wq, layer.wk, layer.wv)), qkv)
    gate_up = hf.model.layers[1].mlp.gate_up_proj.weight.detach()
    assert torch.equal(torch.cat((layer.w_gate, layer.w_up)), gate_up)


# --- our logits against Hugging Face's ----------------------------------------------------

@pytest.mark.parametrize("n", [5, 20])
def test_gemma3_prefill_matches_hf(gemma3, n):
    """20 tokens span three windows of 6; 5 fit in one."""
    args, weights, hf = gemma3
    tokens = _tokens(n)
    logits, _ = Reference(args, weights).prefill(tokens)
    assert _rel(logits, _hf_logits(hf, tokens)) < REL_TOL


@pytest.mark.parametrize("n", [12, 24])
def test_phi3_prefill_matches_hf(phi3, n):
    """12 tokens stay within LongRoPE's original 16 positions (short factors), 24 pass
    them (long factors, for the whole call, as transformers switches)."""
    args, weights, hf = phi3
    tokens = _tokens(n)
    logits, _ = Reference(args, weights).prefill(tokens)
    assert _rel(logits, _hf_logits(hf, tokens)) < REL_TOL


@pytest.mark.parametrize("which", ["gemma3", "phi3"])
def test_decode_through_the_cache_matches_hf_full_forward(which, request):
    """Prefill 18 tokens, then decode 4 one at a time: each step's logits against
    transformers' forward of the whole sequence so far (the sliding window moves with
    each step; LongRoPE stays in its long regime, so the cache's keys still hold)."""
    args, weights, hf = request.getfixturevalue(which)
    tokens = _tokens(22)
    ref = Reference(args, weights)
    _, cache = ref.prefill(tokens[:18])
    full = _hf_logits(hf, tokens)
    for i in range(18, 22):
        step = ref.decode(int(tokens[i]), cache)
        assert _rel(step, full[i]) < REL_TOL, f"decode step at position {i}"
    assert cache.length == 22


# --- each feature, taken out, fails the comparison ----------------------------------------

def _without_post_norms(args: ModelArgs, w: Weights) -> tuple[ModelArgs, Weights]:
    layers = tuple(dataclasses.replace(lw, post_attn_norm=None, post_ffn_norm=None)
                   for lw in w.layers)
    return args, dataclasses.replace(w, layers=layers)


def _plain_norm_weights(args: ModelArgs, w: Weights) -> tuple[ModelArgs, Weights]:
    """Gemma's norms read as w instead of (1 + w)."""
    names = ("attn_norm", "ffn_norm", "post_attn_norm", "post_ffn_norm", "q_norm", "k_norm")
    layers = tuple(dataclasses.replace(lw, **{n: getattr(lw, n) - 1.0 for n in names})
                   for lw in w.layers)
    return args, dataclasses.replace(w, layers=layers)


GEMMA_BREAKS: dict[str, Callable[[ModelArgs, Weights], tuple[ModelArgs, Weights]]] = {
    "no post-sublayer norms": _without_post_norms,
    "norms as w, not 1 + w": _plain_norm_weights,
    "no sliding window": lambda a, w: (dataclasses.replace(a, sliding_window=None), w),
    "head_dim as the attention scale": lambda a, w: (dataclasses.replace(a, attn_scalar=None),
                                                     w),
    "no embedding scale": lambda a, w: (dataclasses.replace(a, embed_scale=1.0), w),
    "one theta for all layers": lambda a, w: (dataclasses.replace(a, local_rope_theta=None), w),
    "SiLU for GELU-tanh": lambda a, w: (dataclasses.replace(a, activation="silu"), w),
    "no QK norm": lambda a, w: (dataclasses.replace(a, qk_norm=False), w),
}


@pytest.mark.parametrize("name", GEMMA_BREAKS)
def test_gemma3_comparison_catches_a_missing_feature(gemma3, name):
    args, weights, hf = gemma3
    tokens = _tokens(20)
    broken = Reference(*GEMMA_BREAKS[name](args, weights)).prefill(tokens)[0]
    assert _rel(broken, _hf_logits(hf, tokens)) > 100 * REL_TOL


def _scaling(args: ModelArgs, **changes: Any) -> ModelArgs:
    return dataclasses.replace(args, rope_scaling=dataclasses.replace(args.rope_scaling,
                                                                      **changes))


PHI3_BREAKS: dict[str, Callable[[ModelArgs], ModelArgs]] = {
    "no LongRoPE attention factor": lambda a: _scaling(a, attention_factor=1.0),
    "rotary over the whole head": lambda a: dataclasses.replace(
        a, rotary_dim=None, rope_scaling=dataclasses.replace(   # 32 factors for 64 dims
            a.rope_scaling, short_factor=(a.rope_scaling.short_factor * 2)[:32],
            long_factor=(a.rope_scaling.long_factor * 2)[:32])),
    "short factors past the original length": lambda a: _scaling(
        a, long_factor=a.rope_scaling.short_factor),
}


@pytest.mark.parametrize("name", PHI3_BREAKS)
def test_phi3_comparison_catches_a_missing_feature(phi3, name):
    args, weights, hf = phi3
    tokens = _tokens(24)
    broken = Reference(PHI3_BREAKS[name](args), weights).prefill(tokens)[0]
    assert _rel(broken, _hf_logits(hf, tokens)) > 100 * REL_TOL


# --- the multimodal Gemma 3 checkpoint's text model ---------------------------------------

def test_gemma3_multimodal_checkpoint_reads_its_text_model(tmp_path):
    """The 4B's config.json is model_type "gemma3" with the text model in text_config and
    a vision tower beside it: the text model is read, the vision half left out by name,
    and the logits are transformers' own multimodal model's on a text-only prompt."""
    vision = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                  num_attention_heads=2, image_size=28, patch_size=14)
    config = transformers.Gemma3Config(text_config=GEMMA3, vision_config=vision,
                                       mm_tokens_per_image=4)
    torch.manual_seed(0)
    hf = transformers.Gemma3ForConditionalGeneration(config).eval()
    hf.config._attn_implementation = "eager"
    hf.save_pretrained(tmp_path)
    args, weights = _ours(tmp_path)
    assert args.arch == "gemma3" and args.n_layers == 3 and args.sliding_window == 6
    tokens = _tokens(20)
    logits, _ = Reference(args, weights).prefill(tokens)
    assert _rel(logits, _hf_logits(hf, tokens)) < REL_TOL


# --- what is refused ------------------------------------------------------------------------

def _gemma_config(**changes: Any) -> dict[str, Any]:
    config = json.loads(transformers.Gemma3TextConfig(**GEMMA3).to_json_string())
    return {k: v for k, v in {**config, **changes}.items() if v is not None}


@pytest.mark.parametrize("changes,exc,needle", [
    ({"attn_logit_softcapping": 50.0}, UnsupportedModel, "attention logit soft-capping"),
    ({"final_logit_softcapping": 30.0}, UnsupportedModel, "final logit soft-capping"),
    ({"use_bidirectional_attention": True}, UnsupportedModel, "bidirectional"),
    ({"hidden_activation": "gelu"}, UnsupportedModel, "hidden_activation='gelu'"),
    ({"layer_types": [SLIDING, FULL]}, BadConfig, "layer_types must list 3"),
    ({"sliding_window": None}, BadConfig, "sliding_window must be a positive integer"),
])
def test_gemma3_refusals_say_what_is_wrong(changes, exc, needle):
    with pytest.raises(exc, match=needle):
        model_args(_gemma_config(**changes))


def test_phi3_longrope_tables_must_match_the_rotated_dims():
    config = json.loads(transformers.Phi3Config(**PHI3).to_json_string())
    config["rope_parameters"]["short_factor"] = [1.0] * 32     # the whole head's 32, not 24
    with pytest.raises(BadConfig, match="short_factor has 32 entries; the 48 rotated dims "
                                        "need 24"):
        model_args(config)


def test_partial_rotary_is_refused_where_transformers_would_ignore_it():
    config = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 2, "intermediate_size": 96, "vocab_size": 256,
              "rms_norm_eps": 1e-6, "rope_theta": 1e4, "max_position_embeddings": 64,
              "partial_rotary_factor": 0.5}
    with pytest.raises(UnsupportedModel, match="partial rotary"):
        model_args(config)
