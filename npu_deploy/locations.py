"""Where the store is by default: imported by the store and by the entry point
(launch.py), which may not import the store's dependencies."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_data_path


def default_db_path() -> Path:
    """`NPU_DEPLOY_DB`, else runs.db in the user's data dir (~/.local/share/npu-deploy)."""
    env = os.environ.get("NPU_DEPLOY_DB")
    return Path(env) if env else user_data_path("npu-deploy") / "runs.db"
