"""Load a resolved model: its config checked, its tokenizer matched, its weights read.

The FP32 reference (`oracle.reference_of`) reads the weights read here straight from the
safetensors files, not from the Hugging Face model object: transformers fills a missing
tensor with random values and a warning, and an oracle built on that would agree with a
model nobody trained. The Hugging Face model is loaded as well; it is what the
Phase-0 gate checks the reference against.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from npu_deploy.models.adapters import Weights, weights_from_state_dict
from npu_deploy.models.config import ModelArgs, model_args, read_config
from npu_deploy.models.errors import BadConfig, ModelCorrupt, ModelNotFound, TokenizerMismatch
from npu_deploy.models.files import read_safetensors
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


__all__ = ["LoadedModel", "load_hf_model", "load_model", "load_tokenizer", "read_safetensors"]
