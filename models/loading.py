"""Load a resolved model: its config checked, its tokenizer matched, its weights read.

The FP32 reference (`oracle.reference_of`) reads the weights read here straight from the
safetensors files, not from the Hugging Face model object: transformers fills a missing
tensor with random values and a warning, and an oracle built on that would agree with a
model nobody trained. The Hugging Face model is loaded as well; it is what the
Phase-0 gate checks the reference against.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from npu_deploy.models.adapters import Weights, weights_from_state_dict
from npu_deploy.models.config import ModelArgs, model_args, read_config
from npu_deploy.models.errors import BadConfig, ModelCorrupt, ModelNotFound, TokenizerMismatch
from npu_deploy.models.quantized_checkpoint import read_quantized
from npu_deploy.models.sources import ModelSource, resolve


@dataclass
class LoadedModel:
    source: ModelSource
    args: ModelArgs
    weights: Weights
    tokenizer: Any
    _hf: Any = None

    @property
    def hf(self) -> Any:
        """The Hugging Face model in FP32, loaded on first use."""
        if self._hf is None:
            self._hf = load_hf_model(self.source.directory)
        return self._hf


def load_model(spec: str | ModelSource, *, cache: Path | None = None,
               seed: int = 0) -> LoadedModel:
    source = spec if isinstance(spec, ModelSource) else resolve(spec, cache=cache, seed=seed)
    directory = source.directory
    args = model_args(read_config(directory / "config.json"), str(directory / "config.json"))
    weights = weights_from_state_dict(args, read_safetensors(directory), str(directory))
    quantized = read_quantized(directory)
    if quantized is not None:       # 4-bit blocks beside the weights they stand for
        args = replace(args, weights=quantized.weights)
        weights = replace(weights, packed=quantized.matrices)
    tokenizer = load_tokenizer(directory, args)
    return LoadedModel(source, args, weights, tokenizer)


def check_safetensors(directory: Path) -> None:
    """Refuse a checkpoint whose files cannot be read whole, without loading a tensor:
    opening a safetensors file parses its header and checks that the data it lists covers
    the file exactly, so a damaged header or a cut file is found here, before a run."""
    from safetensors import SafetensorError, safe_open

    for path in _safetensors_files(directory):
        try:
            with safe_open(str(path), framework="pt") as f:
                f.keys()
        except (SafetensorError, OSError, RuntimeError) as e:
            raise ModelCorrupt(f"{path} is not a valid safetensors file ({e}); re-download "
                               "or re-convert the model") from None


def _safetensors_files(directory: Path) -> list[Path]:
    """The checkpoint's weight files (from its index when it has one), each present."""
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        try:
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        except (json.JSONDecodeError, KeyError, TypeError) as e:
            raise ModelCorrupt(f"{index} is not a valid safetensors index ({e})") from None
    else:
        files = sorted(p.name for p in directory.glob("*.safetensors"))
    if not files:
        bins = sorted(p.name for p in directory.glob("*.bin"))
        hint = (f" (it has {bins[0]}: convert it to safetensors, npu-deploy does not unpickle "
                "weights)") if bins else ""
        raise ModelNotFound(f"{directory} has no *.safetensors weights{hint}")
    for name in files:
        if not (directory / name).is_file():
            raise ModelNotFound(f"{directory / name} is listed in the safetensors index but "
                                "missing")
    return [directory / name for name in files]


def read_safetensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint, each file checked as it is opened."""
    from safetensors import SafetensorError, safe_open

    state: dict[str, torch.Tensor] = {}
    for path in _safetensors_files(directory):
        try:
            with safe_open(str(path), framework="pt") as f:
                for key in f.keys():  # noqa: SIM118 (safe_open is not a dict)
                    state[key] = f.get_tensor(key)
        except (SafetensorError, OSError, RuntimeError) as e:
            raise ModelCorrupt(f"{path} is not a valid safetensors file ({e}); re-download "
                               "or re-convert the model") from None
    return state


def load_tokenizer(directory: Path, args: ModelArgs) -> Any:
    from transformers import AutoTokenizer

    files = ("tokenizer.json", "tokenizer.model", "vocab.json", "tokenizer_config.json")
    if not any((directory / f).is_file() for f in files):
        raise ModelNotFound(f"{directory} has no tokenizer (tokenizer.json or "
                            "tokenizer_config.json); copy the model's tokenizer files there")
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(directory))
    except Exception as e:  # transformers raises many types for a broken tokenizer
        raise ModelCorrupt(f"the tokenizer in {directory} could not be loaded "
                           f"({type(e).__name__}: {str(e)[:160]})") from None
    if len(tokenizer) > args.vocab:
        raise TokenizerMismatch(
            f"the tokenizer in {directory} has {len(tokenizer)} tokens but the model's "
            f"vocab_size is {args.vocab}: it belongs to another model")
    return tokenizer


def load_hf_model(directory: Path, dtype: torch.dtype = torch.float32) -> Any:
    """transformers' model of `directory`, in `dtype` (FP32 for the phase-0 gate; bf16 for
    the bf16 reference, oracle/bf16.py), for inference."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    try:
        model = AutoModelForCausalLM.from_pretrained(str(directory), dtype=dtype)
    except Exception as e:  # noqa: BLE001 (every failure becomes one line)
        raise BadConfig(f"transformers could not load {directory} ({type(e).__name__}: "
                        f"{str(e)[:160]})") from None
    return model.eval()
