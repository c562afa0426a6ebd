"""Golden tensors: every (layer, op) of the reference for a prompt, kept in the store.

They are computed once per run: the capture is stored as one safetensors blob
and announced by a `tool.completed` event whose result names its key. A
resumed run finds that event and reads the blob instead of recomputing, and
an exported run carries the blob along.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import torch

from npu_deploy.models.loading import LoadedModel
from npu_deploy.oracle import reference_of

CAPTURE_TOOL = "oracle.capture"
#: Bumped when the set or naming of captured ops changes; old captures are then ignored.
CAPTURE_VERSION = 1


def model_fingerprint(directory: Path) -> str:
    """A cheap identity of a checkpoint: config.json and every safetensors header and size.
    Headers hold each tensor's name, dtype, shape and offsets, so a different model or
    a re-converted one gets a different fingerprint without hashing gigabytes."""
    h = hashlib.sha256((directory / "config.json").read_bytes())
    for path in sorted(directory.glob("*.safetensors")):
        with path.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            h.update(path.name.encode() + f.read(min(size, 1 << 24)))
        h.update(str(path.stat().st_size).encode())
    return h.hexdigest()


def goldens_key(loaded: LoadedModel, prompt_ids: torch.Tensor) -> str:
    h = hashlib.sha256(json.dumps({
        "model": model_fingerprint(loaded.source.directory),
        "prompt": prompt_ids.tolist(), "capture_version": CAPTURE_VERSION}).encode())
    return "goldens-" + h.hexdigest()[:32]


def encode(tensors: dict[str, torch.Tensor]) -> bytes:
    from safetensors.torch import save
    return save({k: v.contiguous() for k, v in tensors.items()})


def decode(data: bytes) -> dict[str, torch.Tensor]:
    from safetensors.torch import load
    return load(data)


def find_goldens(store: Any, run_id: str, key: str) -> str | None:
    """The blob reference of a capture with this key already recorded in the run."""
    for event in store.events(run_id):
        p = event.payload
        if (event.type == "tool.completed" and p.get("tool") == CAPTURE_TOOL and p.get("ok")
                and p.get("result", {}).get("key") == key):
            return str(p["result"]["goldens"])
    return None


def goldens_for(writer: Any, loaded: LoadedModel, prompt_ids: torch.Tensor, *,
                phase: int = 0, attempt: int = 1) -> tuple[dict[str, torch.Tensor], bool]:
    """The golden tensors of `prompt_ids` for this run: read back when the run already
    captured them, otherwise captured, stored and recorded. Returns (tensors, reused)."""
    from npu_deploy.events import NewEvent

    store = writer.store
    key = goldens_key(loaded, prompt_ids)
    ref = find_goldens(store, writer.run_id, key)
    if ref is not None:
        return decode(store.get_blob(ref)), True
    writer.append(NewEvent("tool.requested", {
        "call_id": key, "tool": CAPTURE_TOOL,
        "arguments": {"tokens": int(prompt_ids.shape[0])}},
        actor="harness", phase=phase, attempt=attempt, idempotency_key=key + ":requested"))
    tensors = reference_of(loaded).capture(prompt_ids)
    blob = encode(tensors)
    ref = store.put_blob(blob)
    writer.append(NewEvent("tool.completed", {
        "call_id": key, "tool": CAPTURE_TOOL, "ok": True,
        "result": {"key": key, "goldens": ref, "tensors": len(tensors), "bytes": len(blob)}},
        actor="harness", phase=phase, attempt=attempt, idempotency_key=key + ":completed"))
    return tensors, False
