"""A checkpoint's files: its safetensors read and checked, and a directory the cache builds
once (a converted GGUF, a random model, a quantized checkpoint). The bottom of models/: it
imports nothing else of the project's but the errors, so the modules that build checkpoints
(sources.py, quantized_checkpoint.py) and the one that loads them (loading.py) all read it."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from filelock import FileLock

from npu_deploy.models.errors import ModelCorrupt, ModelNotFound

#: beside a converted GGUF: where it came from (the file, its digest)
SOURCE_FILE = "npu-deploy-source.json"


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


def build_once(target: Path, build: Callable[[Path], None]) -> Path:
    """Create `target` with `build(tmp)` and one atomic rename, under a file lock so
    that two processes never build it twice or see it half-written."""
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):
        if (target / "config.json").is_file():
            return target
        tmp = Path(tempfile.mkdtemp(prefix=target.name + ".", dir=target.parent))
        try:
            build(tmp)
            tmp.rename(target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return target
