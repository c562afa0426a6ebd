"""Upstream's 4-bit deployments in the catalog (models.catalog `_QUANTIZED`), through the
command line: `models` lists them with their weight format; `plan` launches each decode
projection (and the LM head where upstream quantizes it) as the format's 4-bit kernel while
prefill keeps the bf16 GEMMs; `kernels` and `--emit-air --check` work and pass the verifier."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from npu_deploy.models import CATALOG

#: name -> (format, the decode's projection kernel, its LM head's kernel)
QUANTIZED = {
    "llama32_1b_q4nx": ("q4nx", "proj_qmm", "proj_qmm"),
    "llama32_3b_q4nx": ("q4nx", "proj_qmm", "proj_qmm"),
    "llama31_8b_q4nx": ("q4nx", "proj_qmm", "proj_qmm"),
    "qwen3_8b_q4nx": ("q4nx", "proj_qmm", "proj_qmm"),
    "qwen25_7b_q4nx": ("q4nx", "proj_qmm", "proj_qmm"),
    "qwen25_3b_q4": ("q4_0-container", "proj_qmm", "gemv"),
    "llama32_1b_int4": ("awq-int4", "gemv_int4", "gemv"),
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


@pytest.mark.parametrize("name", ["qwen25_3b_q4", "llama32_1b_int4"])
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
