"""Upstream's 4-bit deployments in the catalog (models.catalog `_QUANTIZED`), through the
command line: `models` lists them with their weight format; `plan` launches each decode
projection (and the LM head where upstream quantizes it) as the format's 4-bit kernel while
prefill keeps the bf16 GEMMs; `kernels` and `--emit-air --check` work and pass the verifier."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import torch

from npu_deploy.models import CATALOG, RopeScaling

#: name -> (format, the decode's projection kernel, its LM head's kernel)
QUANTIZED = {
    "llama32_1b_q4nx": ("q4nx", "proj_qmm", "proj_qmm"),
    "llama32_3b_q4nx": ("q4nx", "proj_qmm", "proj_qmm"),
    "llama31_8b_q4nx": ("q4nx", "proj_qmm", "proj_qmm"),
    "qwen3_8b_q4nx": ("q4nx", "proj_qmm", "proj_qmm"),
    "qwen25_7b_q4nx": ("q4nx", "proj_qmm", "proj_qmm"),
    "qwen25_3b_q4": ("q4_0-container", "proj_qmm", "gemv"),
    "llama32_1b_int4": ("awq-int4", "gemv_int4", "gemv"),
    "gemma3_4b_q4nx": ("q4nx", "proj_qmm", "proj_qmm"),
    "phi4_mini_q4nx": ("q4nx", "proj_qmm", "proj_qmm"),
}


def test_models_lists_every_quantized_entry_with_its_format(cli):
    result = cli("models", "--json")
    assert result.exit_code == 0, result.output
    rows = {r["name"]: r for r in json.loads(result.stdout)}
    for name, (fmt, _, _) in QUANTIZED.items():
        assert rows[name]["format"] == fmt
        assert rows[name]["weights"]["format"] == fmt
    assert rows["llama-3.2-1b"]["format"] == "bf16" and rows["llama-3.2-1b"]["weights"] is None
    assert "q4_0-container" in cli("models").stdout


def test_the_entries_are_upstreams_shapes_with_their_lm_heads():
    """Untied 8B/7B heads quantized (a separate Q4NX lm_head), the tied 1B/3B Llama head the
    embedding requantized into Q4NX for the fused decode, Qwen2.5-3B's and the AWQ model's
    kept bf16; parameter counts of the public configs."""
    billions = {"llama31_8b_q4nx": 8.03, "qwen3_8b_q4nx": 8.19, "qwen25_7b_q4nx": 7.62}
    for name, want in billions.items():
        args = CATALOG[name].args
        assert round(args.n_params() / 1e9, 2) == want and not args.tie_embeddings
    assert CATALOG["llama31_8b_q4nx"].args.rope_scaling.factor == 8.0
    assert CATALOG["llama32_1b_q4nx"].args.tie_embeddings
    for name, (fmt, _, head) in QUANTIZED.items():
        w = CATALOG[name].args.weights
        assert w is not None and w.format == fmt and w.lm_head_quantized == (head != "gemv")
        assert "lm_head" in (w.quantized_tensors() if head != "gemv" else
                             w.bf16_tensors(False, False))
    assert "q_bias" in CATALOG["qwen25_7b_q4nx"].args.weights.bf16_tensors(True, False)


def test_gemma3_4b_is_upstreams_gemma3_text_model():
    """llms/gemma3_4b_q4nx/README.md (Architecture) and its weights.py: 34 layers of which
    every 6th is global (theta 1e6, positions scaled by 8) and the rest slide over 1024
    positions (theta 1e4); attention scale 0.0625; 4 norms a layer stay bf16; the LM head is
    the bundle's Q4NX lm_head; 3.88B parameters in the text model."""
    args = CATALOG["gemma3_4b_q4nx"].args
    assert (args.n_layers, args.hidden, args.n_heads, args.n_kv_heads, args.head_dim,
            args.ffn, args.vocab) == (34, 2560, 8, 4, 256, 10240, 262208)
    assert [i for i in range(34) if args.window(i) is None] == [5, 11, 17, 23, 29]
    assert {args.window(i) for i in range(34)} == {None, 1024}
    assert args.rope_of(5) == (1e6, RopeScaling("linear", 8.0)) and args.rope_of(0)[0] == 1e4
    assert args.attn_scale == 0.0625 and args.embed_scale == math.sqrt(2560)
    assert args.activation == "gelu_tanh" and args.tie_embeddings and args.norm_eps == 1e-6
    assert round(args.n_params() / 1e9, 2) == 3.88
    w = args.weights
    assert w is not None and "lm_head" in w.quantized_tensors()
    assert {"post_attn_norm", "post_ffn_norm", "q_norm", "k_norm"} <= set(
        w.bf16_tensors(args.qkv_bias, args.qk_norm, args.sandwich_norms))


def test_phi4_mini_carries_the_real_longrope_tables():
    """Phi-4-mini-instruct's config: 96 of 128 dims rotated, 48 LongRoPE factors each way.
    Upstream states the short table is all 1.0 and the long one tops out at 47.75 as the
    bundle stores it in bf16 (llms/phi4_mini_q4nx/README.md, LongRoPE): 47.77 rounds to
    that; and its attention factor 1.1902380714238083 (phi4_mini_q4nx_weights.py
    longrope_attention_scaling). transformers' own Phi3Config accepts the entry and its
    LongRoPE init computes the same factor and inverse frequencies."""
    entry = CATALOG["phi4_mini_q4nx"]
    args = entry.args
    rope = args.rope_scaling
    assert args.rotary_dim == 96 and args.head_dim == 128 and args.sliding_window is None
    assert rope.kind == "longrope" and rope.original_max_position == 4096
    assert rope.short_factor == (1.0,) * 48 and len(rope.long_factor) == 48
    assert list(rope.long_factor) == sorted(rope.long_factor)
    top = torch.tensor(max(rope.long_factor)).to(torch.bfloat16).item()
    assert top == 47.75
    assert rope.attention_factor == pytest.approx(1.1902380714238083, rel=1e-12)
    assert round(args.n_params() / 1e9, 2) == 3.84 and args.tie_embeddings

    from transformers import Phi3Config
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf = Phi3Config(**{k: v for k, v in entry.config.items() if k != "model_type"})
    for seq_len, table in ((4096, rope.short_factor), (4097, rope.long_factor)):
        inv, factor = ROPE_INIT_FUNCTIONS["longrope"](hf, "cpu", seq_len)
        assert factor == pytest.approx(rope.attention_factor, rel=1e-12)
        ours = 1.0 / (torch.tensor(table, dtype=torch.float64)
                      * args.rope_theta ** (torch.arange(0, 96, 2, dtype=torch.float64) / 96))
        assert torch.allclose(inv.double(), ours, rtol=1e-6)


@pytest.mark.parametrize("name", list(QUANTIZED))
def test_decode_plans_the_4bit_kernel_and_its_programs_pass_the_verifier(cli, tmp_path, name):
    fmt, proj, head = QUANTIZED[name]
    out = tmp_path / "air"
    result = cli("plan", name, "--mode", "decode", "--pos", 64, "--emit-air", out, "--check",
                 "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    assert plan["air_check"]["clean"] and not plan["air_check"]["violations"]
    assert fmt in plan["weights"] and "de-quantized to bf16 on the host" in plan["weights"]
    kernels = {s["name"]: {ln["kernel"] for ln in s["launches"]}
               for s in plan["steps"] if "launches" in s}
    for role in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
        assert kernels[f"L0.{role}"] == {proj}
    assert kernels["lm_head.0"] == {head}
    sources = "".join(p.read_text() for p in out.glob("*.py"))
    assert ("proj_qmm_acc256" if proj == "proj_qmm" else "matvec_int4_bf16") in sources


@pytest.mark.parametrize("name", ["qwen25_3b_q4", "llama32_1b_int4", "gemma3_4b_q4nx",
                                  "phi4_mini_q4nx"])
def test_prefill_keeps_the_bf16_gemms(cli, name):
    result = cli("plan", name, "--seq-len", 128, "--check", "--json")
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout)
    used = Counter(ln["kernel"] for s in plan["steps"] for ln in s.get("launches", ()))
    assert used["gemm_bf16"] == 7 * CATALOG[name].args.n_layers
    assert not {"proj_qmm", "gemv_int4"} & set(used)
    assert plan["air_check"]["clean"]


def test_kernels_fixes_the_q4_0_build_and_every_use_fits(cli):
    result = cli("kernels", "qwen25_3b_q4", "--decode", 64, "--json")
    assert result.exit_code == 0, result.output
    uses = json.loads(result.stdout)
    qmm = [u for u in uses if u["kernel"] == "proj_qmm"]
    assert qmm and all(u["config"]["codec"] == "q4_0" and u["valid"] for u in qmm)
    assert all(u["valid"] for u in uses)
