"""What can go wrong when loading a model, each with a message that says what to do."""

from __future__ import annotations


class OracleError(Exception):
    """Base class: an expected failure, reported as one line without a traceback."""


class ModelNotFound(OracleError):
    """The model spec names nothing on this machine (and we never download)."""


class ModelCorrupt(OracleError):
    """A model file exists but cannot be read: a broken safetensors, GGUF or JSON."""


class BadConfig(OracleError):
    """config.json has unknown fields, missing fields or sizes that do not fit together."""


class UnsupportedModel(OracleError):
    """The architecture or one of its features has no adapter."""


class TokenizerMismatch(OracleError):
    """The tokenizer does not belong to the model's vocabulary."""
