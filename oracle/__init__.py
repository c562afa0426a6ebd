"""oracle: Phase 0. Models loaded offline, the FP32 reference decomposed op by op,
the comparison metrics every gate uses, and the Phase-0 gate.

No network, ever: the Hugging Face hub is switched to offline mode before
transformers is imported anywhere through this package.
"""

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

from .catalog import CATALOG, CatalogEntry  # noqa: E402
from .config import SUPPORTED, ModelArgs, RopeScaling, model_args  # noqa: E402
from .errors import (  # noqa: E402
    BadConfig,
    ModelCorrupt,
    ModelNotFound,
    OracleError,
    TokenizerMismatch,
    UnsupportedModel,
)
from .sources import BUNDLED, ModelSource, cache_dir, resolve  # noqa: E402

__all__ = [
    "BUNDLED", "CATALOG", "SUPPORTED", "BadConfig", "CatalogEntry", "ModelArgs", "ModelCorrupt",
    "ModelNotFound", "ModelSource", "OracleError", "RopeScaling", "TokenizerMismatch",
    "UnsupportedModel", "cache_dir", "model_args", "resolve",
]
