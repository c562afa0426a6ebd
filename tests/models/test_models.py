"""Model sources and loading: offline only, every bad input one clear error, and the
golden tensors kept in the store once per run."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import STARTED, assert_one_error
from safetensors.torch import load_file, save_file

from npu_deploy.models import (
    BadConfig,
    ModelCorrupt,
    ModelNotFound,
    UnsupportedModel,
    model_args,
    resolve,
)
from npu_deploy.models.errors import TokenizerMismatch
from npu_deploy.models.loading import load_model
from npu_deploy.oracle.goldens import find_goldens, goldens_for, goldens_key
from npu_deploy.store import EventStore, export_run, import_run, read_export


@pytest.fixture
def model_dir(tiny_models, tmp_path: Path) -> Path:
    """A private copy of the tiny Llama directory, to damage."""
    return Path(shutil.copytree(tiny_models["tiny-llama"].source.directory, tmp_path / "m"))


def edit_config(directory: Path, **changes) -> None:
    path = directory / "config.json"
    config = json.loads(path.read_text())
    for k, v in changes.items():
        if v is None:
            config.pop(k, None)
        else:
            config[k] = v
    path.write_text(json.dumps(config))


# --- offline sources ---------------------------------------------------------------------

def test_importing_oracle_switches_the_hub_offline():
    import npu_deploy.oracle  # noqa: F401
    assert os.environ["HF_HUB_OFFLINE"] == "1"


def test_hub_id_not_in_the_local_cache_says_download_elsewhere(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    with pytest.raises(ModelNotFound, match="never downloads.*pass its path"):
        resolve("Qwen/Qwen2.5-0.5B")


def test_config_only_catalog_entry_cannot_be_run():
    with pytest.raises(ModelNotFound, match="config-only.*meta-llama/Llama-3.2-1B"):
        resolve("llama-3.2-1b")


def test_unknown_spec_names_what_is_accepted(tmp_path):
    with pytest.raises(ModelNotFound, match="npu-deploy models"):
        resolve(str(tmp_path / "nothing-here"))


@pytest.mark.slow
def test_converted_gguf_is_reused_not_converted_again(smollm2):
    directory = smollm2.source.directory
    before = (directory / "model.safetensors").stat().st_mtime_ns
    again = resolve("smollm2-135m")
    assert again.directory == directory
    # not written again: the hash of the GGUF matched, nothing was de-quantized
    assert (directory / "model.safetensors").stat().st_mtime_ns == before
    assert json.loads((directory / "npu-deploy-source.json").read_text())["dequantized_to"] \
        == "float32"


@pytest.mark.slow         # the bundled model, de-quantized once per session: ~20 s
def test_a_gguf_path_is_converted_like_the_bundled_file(smollm2):
    from npu_deploy.models.sources import bundled_gguf

    source = resolve(str(bundled_gguf()))
    assert source.kind == "gguf" and source.directory == smollm2.source.directory


def test_a_local_hf_directory_loads_through_the_same_path(model_dir):
    loaded = load_model(str(model_dir))
    assert loaded.source.kind == "hf-dir" and loaded.args.arch == "llama"


def test_random_models_are_seeded_and_repeatable(tiny_models, tmp_path):
    again = load_model("tiny-qwen2", cache=tmp_path)
    assert torch.equal(again.weights.layers[0].bq, tiny_models["tiny-qwen2"].weights.layers[0].bq)
    other = load_model("tiny-qwen2", cache=tmp_path, seed=1)
    assert not torch.equal(other.weights.embed, again.weights.embed)


# --- the architecture check ----------------------------------------------------------------

BASE = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
        "vocab_size": 512, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "max_position_embeddings": 128}


@pytest.mark.parametrize("changes,exc,needle", [
    ({"model_type": "mixtral", "num_local_experts": 8}, UnsupportedModel, "mixture-of-experts"),
    ({"model_type": "qwen2_moe", "num_experts": 60}, UnsupportedModel, "mixture-of-experts"),
    ({"model_type": "deepseek_v2", "kv_lora_rank": 512}, UnsupportedModel,
     "multi-head latent attention"),
    ({"model_type": "t5", "is_encoder_decoder": True}, UnsupportedModel, "encoder-decoder"),
    ({"model_type": "qwen2", "use_sliding_window": True, "sliding_window": 4096},
     UnsupportedModel, "sliding-window"),
    ({"model_type": "qwen3", "head_dim": 16,
      "layer_types": ["full_attention", "sliding_attention"]},
     UnsupportedModel, "sliding-window"),
    ({"model_type": "gpt2"}, UnsupportedModel, "architecture 'gpt2'"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, UnsupportedModel, "'yarn'"),
    ({"hidden_act": "gelu"}, UnsupportedModel, "hidden_act"),
    ({"fancy_new_thing": 3}, BadConfig, "fancy_new_thing"),
    ({"hidden_size": 66}, BadConfig, "not divisible by num_attention_heads=4"),
    ({"num_key_value_heads": 3}, BadConfig, "not a multiple of num_key_value_heads=3"),
    ({"rope_theta": None}, BadConfig, "rope_theta"),
    ({"rms_norm_eps": "small"}, BadConfig, "rms_norm_eps"),
    ({"tie_word_embeddings": "yes"}, BadConfig, "tie_word_embeddings"),
    ({"model_type": "qwen3"}, BadConfig, "missing head_dim"),
])
def test_architecture_check_names_the_feature(changes, exc, needle):
    config = {**BASE, **changes}
    config = {k: v for k, v in config.items() if v is not None}
    with pytest.raises(exc, match=needle) as info:
        model_args(config)
    if exc is UnsupportedModel:     # it says what would work instead
        assert "; supported: " in str(info.value)
        if "architecture" in needle or "experts" in needle or "attention" in needle:
            assert "llama" in str(info.value) and "qwen3" in str(info.value)


def test_every_field_that_matters_is_read_explicitly():
    a = model_args({**BASE, "head_dim": 32, "tie_word_embeddings": True, "attention_bias": True,
                    "mlp_bias": True, "rms_norm_eps": 3e-6})
    assert (a.head_dim, a.q_dim, a.tie_embeddings, a.qkv_bias, a.o_bias, a.mlp_bias,
            a.norm_eps) == (32, 128, True, True, True, True, 3e-6)
    q2 = model_args({**BASE, "model_type": "qwen2", "use_sliding_window": False,
                     "sliding_window": 32768})
    assert q2.qkv_bias and not q2.o_bias and not q2.qk_norm


# --- damaged models --------------------------------------------------------------------------

def test_directory_without_config(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFound, match="no config.json"):
        resolve(str(tmp_path / "empty"))


def test_truncated_safetensors(model_dir):
    weights = model_dir / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with pytest.raises(ModelCorrupt, match="not a valid safetensors file"):
        load_model(str(model_dir))


def test_pickled_weights_only(model_dir):
    (model_dir / "model.safetensors").rename(model_dir / "pytorch_model.bin")
    with pytest.raises(ModelNotFound, match="convert it to safetensors"):
        load_model(str(model_dir))


def test_missing_and_extra_tensors(model_dir):
    state = load_file(model_dir / "model.safetensors")
    del state["model.layers.1.mlp.up_proj.weight"]
    save_file(state, model_dir / "model.safetensors")
    with pytest.raises(BadConfig, match="no tensor model.layers.1.mlp.up_proj.weight"):
        load_model(str(model_dir))
    state["model.layers.1.mlp.up_proj.weight"] = torch.zeros(192, 128)
    state["model.layers.1.mlp.extra.weight"] = torch.zeros(3)
    save_file(state, model_dir / "model.safetensors")
    with pytest.raises(BadConfig, match="does not use: model.layers.1.mlp.extra.weight"):
        load_model(str(model_dir))


def test_config_that_disagrees_with_the_weights(model_dir):
    edit_config(model_dir, intermediate_size=128)
    with pytest.raises(BadConfig, match=r"shape \(192, 128\) but config.json implies \(128, 128\)"):
        load_model(str(model_dir))


@pytest.mark.slow         # the bundled model, de-quantized once per session: ~20 s
def test_tokenizer_of_another_model(model_dir, smollm2):
    for f in model_dir.glob("tokenizer*"):
        f.unlink()
    for f in smollm2.source.directory.glob("tokenizer*"):
        shutil.copy(f, model_dir)
    with pytest.raises(TokenizerMismatch, match="49152 tokens but the model's vocab_size is 512"):
        load_model(str(model_dir))


def test_corrupt_gguf(tmp_path):
    bad = tmp_path / "model.gguf"
    bad.write_bytes(b"GGUF" + os.urandom(4000))
    with pytest.raises(ModelCorrupt, match="not a readable GGUF"):
        resolve(str(bad))


def test_gguf_of_an_unsupported_architecture(tmp_path):
    import gguf
    import numpy as np

    path = tmp_path / "gpt2.gguf"
    writer = gguf.GGUFWriter(str(path), "gpt2")
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModel, match="GGUF architecture 'gpt2'"):
        resolve(str(path))


# --- the command line ------------------------------------------------------------------------

@pytest.mark.parametrize("damage,needle", [
    ("missing", "no model"),
    ("no-config", "no config.json"),
    ("truncated", "not a valid safetensors file"),
    ("unknown-field", "unknown field fancy"),
    ("moe", "mixture-of-experts"),
])
def test_cli_bad_model_is_one_line(cli, model_dir, damage, needle):
    target = model_dir
    if damage == "missing":
        target = model_dir / "nope"
    elif damage == "no-config":
        (model_dir / "config.json").unlink()
    elif damage == "truncated":
        (model_dir / "model.safetensors").write_bytes(b"\x10\x00")
    elif damage == "unknown-field":
        edit_config(model_dir, fancy=1)
    elif damage == "moe":
        edit_config(model_dir, num_local_experts=8)
    assert_one_error(cli("oracle", target), needle)


@pytest.mark.slow         # 5 s on 2 busy cores: out of the fast core
def test_cli_oracle_prints_the_phase0_gate(cli):
    result = cli("oracle", "tiny-qwen3", "--seq-len", "40", "--steps", "8")
    assert result.exit_code == 0, result.stderr
    assert "Phase-0 gate" in result.stdout and "computed on the CPU" in result.stdout
    assert "prefill-40" in result.stdout and "8/8" in result.stdout
    assert result.stdout.rstrip().endswith("gate PASS")


def test_cli_oracle_json_and_own_prompts(cli):
    result = cli("oracle", "tiny-llama", "--prompt", "hello there", "--steps", "4", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["verdict"] == "PASS" and out["gate"] == "phase0.oracle"
    assert [r["prompt"] for r in out["results"]] == ["prompt1"]
    assert out["source"] == "measured-cpu"


def test_cli_models_lists_bundled_and_targets(cli):
    result = cli("models", "--json")
    assert result.exit_code == 0
    models = json.loads(result.stdout)
    # the bundled model, the nine bf16 targets, upstream's nine 4-bit deployments
    assert len(models) == 19 and models[0]["name"] == "smollm2-135m"
    assert sum(m["format"] == "bf16" for m in models) == 10
    assert all(m["params"] > 1e8 for m in models)


# --- golden tensors in the store -------------------------------------------------------------

def test_goldens_are_captured_once_per_run_and_reused_on_resume(tiny_models, store, tmp_path):
    loaded = tiny_models["tiny-qwen2"]
    ids = torch.arange(5, 25)
    writer = store.create_run(STARTED)
    run_id = writer.run_id
    first, reused = goldens_for(writer, loaded, ids)
    assert not reused and len(first) == 2 * (17 - 2) + 3    # no QK norm in Qwen2
    events_after_capture = writer.version
    writer.close()                              # the process ends; a new writer resumes

    writer = store.writer(run_id)
    again, reused = goldens_for(writer, loaded, ids)
    assert reused and writer.version == events_after_capture
    assert all(torch.equal(first[k], again[k]) for k in first)
    other, reused = goldens_for(writer, loaded, ids[:10])      # another prompt: captured
    assert not reused and writer.version == events_after_capture + 2
    writer.close()

    # The export carries the blob; the imported run finds its goldens without recomputing.
    out = tmp_path / "run.jsonl"
    export_run(store, run_id, out)
    with EventStore.open(tmp_path / "other.db") as target:
        import_run(target, read_export(out))
        ref = find_goldens(target, run_id, goldens_key(loaded, ids))
        assert ref is not None and len(target.get_blob(ref)) > 0


def test_the_oracle_only_random_models_are_exactly_those_the_npu_path_cannot_plan():
    """ORACLE_ONLY (kept light for the TUI's form) says what unplannable computes."""
    import json

    import transformers

    from npu_deploy.kernels.plans.plan import unplannable
    from npu_deploy.models.random_models import DEPLOYABLE, ORACLE_ONLY, RANDOM_MODELS

    def args_of(name: str) -> Any:
        cls_name, kwargs, _ = RANDOM_MODELS[name]
        return model_args(json.loads(getattr(transformers, cls_name)(**kwargs).to_json_string()))

    gaps = {name: unplannable(args_of(name)) for name in RANDOM_MODELS}
    assert set(ORACLE_ONLY) == {name for name, g in gaps.items() if g}
    assert set(DEPLOYABLE) == set(RANDOM_MODELS) - set(ORACLE_ONLY)
    assert gaps["tiny-gemma3"] == []      # window, two RoPE tables, post norms, GELU, scale
    assert gaps["tiny-phi3"] == []        # rope_partial, LongRoPE in the host's table


def test_deploying_a_model_the_npu_path_cannot_plan_is_refused_in_one_line_before_a_run(
        cli, tmp_path):
    """A Gemma 3 whose query_pre_attn_scalar is not its head_dim (32 against 64): the
    FlashAttention build compiles 1/sqrt(head_dim) only, so deploy refuses it before a run,
    and kernels and plan exit in one line rather than list a recipe that scales wrongly."""
    import transformers

    from npu_deploy.models.random_models import RANDOM_MODELS, build_tokenizer

    _, kwargs, _ = RANDOM_MODELS["tiny-gemma3"]
    config = transformers.Gemma3TextConfig(**{**kwargs, "query_pre_attn_scalar": 32})
    model = tmp_path / "gemma-scaled"
    transformers.AutoModelForCausalLM.from_config(config).save_pretrained(model)
    build_tokenizer().save_pretrained(model)
    db = tmp_path / "runs.db"
    assert_one_error(cli("--db", db, "deploy", model, "--headless", "--auto-approve"),
                     "the NPU path has no kernel yet for")
    assert not db.exists() or EventStore.open(db, readonly=True).run_ids() == []
    for command in ("kernels", "plan"):
        assert_one_error(cli(command, model), "an attention scale other than 1/sqrt(head_dim)",
                         "cannot be planned yet")
