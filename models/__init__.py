"""models: where a model comes from (the bundled GGUF, a Hugging Face directory or cache,
a GGUF file, a config-only random model), its configuration read into `ModelArgs`, its
weights read into the reference's layout by an architecture adapter, and the catalog of the
bundled and target models.

No network, ever: the Hugging Face hub is switched to offline mode before transformers is
imported anywhere through this package.
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
