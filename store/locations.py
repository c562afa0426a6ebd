"""Where the store is by default, and where the files beside it go: read by the store
(`EventStore.open()` without a path) and by the entry point (npu_deploy/launch.py,
npu_deploy/loading.py), which may not import the store's dependencies. Importing this module
runs store/__init__.py, which therefore loads sqlite-utils (and numpy through it) only when
a name that needs it is first used."""

from __future__ import annotations

import os
from pathlib import Path

from platformdirs import user_data_path


def default_db_path() -> Path:
    """`NPU_DEPLOY_DB`, else runs.db in the user's data dir (~/.local/share/npu-deploy)."""
    env = os.environ.get("NPU_DEPLOY_DB")
    return Path(env) if env else user_data_path("npu-deploy") / "runs.db"


def locks_dir(db: str | os.PathLike[str]) -> Path:
    """The folder of the runs' writer locks: beside the store file itself, whatever path
    reached it (a symbolic link, a relative path, a linked folder), as SQLite puts its `-wal`
    beside the file a link leads to. Two paths to one file give one folder, so one lock."""
    real = Path(os.path.realpath(db))
    return real.with_name(real.name + ".locks")
