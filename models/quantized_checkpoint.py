"""A model deployed with 4-bit weights: `MODEL@q4nx`, any checkpoint with its projections
quantized into Q4NX by upstream's quantizer.

The result is a Hugging Face directory in the cache, built once, whose
safetensors hold the projections DE-QUANTIZED (FP32, exactly what the 4-bit blocks stand
for) and everything else as the source had it, beside `quantized/` with the blocks the
decode's kernel reads and `quantization.json` saying what was done. So the checkpoint the
FP32 oracle, Hugging Face's own model and prefill's bf16 GEMMs read is the one the NPU's
4-bit kernels compute with: the deployment is gated against it. What quantization itself
costs is measured against the source checkpoint, the second reference (oracle.quant_cost).

Which tensors are quantized: every layer's seven projections, as upstream's 4-bit
deployments do (models.quantization `PROJECTIONS`); the embedding, the norms, the biases
and the LM head stay as the source has them (the LM head reads bf16, as upstream's Q4_0
Qwen2.5-3B does: README, Status).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from npu_deploy.models.errors import UnsupportedModel
from npu_deploy.models.quantization import PROJECTIONS, QuantizedWeights

#: the directory's files besides the checkpoint's own
INFO_FILE = "quantization.json"
BLOCKS_DIR = "quantized"
BLOCKS_FILE = "blocks.safetensors"
#: what the LM head reads in these deployments
LM_HEAD = "bf16, as the source has it (the decode's LM head runs the bf16 GEMV)"
#: bump when what is written changes: the cache key includes it
_VERSION = 1


@dataclass(frozen=True)
class QuantizedSet:
    """The 4-bit blocks of a quantized deployment, by the plans' weight names
    (`L{i}.{role}`), with what they are (`weights`) and the directory's record (`info`)."""

    weights: QuantizedWeights
    matrices: dict[str, Any]            # name -> formats QuantizedMatrix
    info: dict[str, Any]


def read_quantized(directory: Path) -> QuantizedSet | None:
    """The blocks a quantized directory holds, or None for a plain checkpoint."""
    info_path = directory / INFO_FILE
    if not info_path.is_file():
        return None
    from safetensors import safe_open

    from npu_deploy.formats.catalog import QuantizedMatrix

    info = json.loads(info_path.read_text())
    matrices = {}
    with safe_open(str(directory / BLOCKS_DIR / BLOCKS_FILE), framework="pt") as f:
        for name, shape in info["shapes"].items():
            matrices[name] = QuantizedMatrix(info["format"], (int(shape[0]), int(shape[1])),
                                             f.get_tensor(name).numpy().tobytes())
    weights = QuantizedWeights(info["format"], int(info["group"]), False, LM_HEAD,
                               info["origin"])
    return QuantizedSet(weights, matrices, info)


def quantized_dir(base: Any, weights: str, cache: Path) -> Path:
    """The cached directory of `base` (a models.sources ModelSource) with `weights`
    (a `CHOICES` key), built once."""
    from npu_deploy.models.sources import _build_once

    key = json.dumps([str(base.directory), _content_key(base.directory), weights, _VERSION])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    target = cache / "quantized" / f"{base.directory.name}-{weights}-{digest}"

    def build(tmp: Path) -> None:
        _build(base, weights, tmp)

    return _build_once(target, build)


def _content_key(directory: Path) -> list[Any]:
    """What identifies a checkpoint's weights cheaply: each safetensors file's size and
    modification time (the random models' directory names carry their recipe already)."""
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                  for p in directory.glob("*.safetensors"))


def _build(base: Any, weights: str, out: Path) -> None:
    from safetensors.torch import save_file

    from npu_deploy.models.config import model_args, read_config
    from npu_deploy.models.loading import read_safetensors

    args = model_args(read_config(base.directory / "config.json"),
                      str(base.directory / "config.json"))
    state = read_safetensors(base.directory)
    blocks, fmt = _quantize(args, state), weights
    origin = (f"{base.spec}'s projections quantized into Q4NX by upstream's quantizer "
              "(Xilinx/mlir-air e972f2942d41, programming_examples/fused_decode/"
              "proj_qmm_pack.py; formats/q4nx.py)")
    errors = {}
    for name, m in blocks.items():
        layer, role = name.split(".", 1)
        hf, rows = _hf_slot(args, state, int(layer[1:]), role)
        original = state[hf][rows[0]:rows[1]].to(torch.float32)
        deq = m.dequantize()[:original.shape[0], :original.shape[1]]
        diff = (deq.double() - original.double())
        errors[name] = {"rel_rms": float(diff.square().mean().sqrt()
                                         / original.double().square().mean().sqrt()),
                        "max_abs": float(diff.abs().max())}
        state[hf] = state[hf].to(torch.float32)     # the blocks' values exactly
        state[hf][rows[0]:rows[1]] = deq
    for p in base.directory.iterdir():
        if p.is_file() and not p.name.endswith(".safetensors") and \
                p.name != "model.safetensors.index.json":
            shutil.copy2(p, out / p.name)
    save_file({k: v.contiguous() for k, v in state.items()}, str(out / "model.safetensors"))
    (out / BLOCKS_DIR).mkdir()
    save_file({name: torch.frombuffer(bytearray(m.data), dtype=torch.uint8)
               for name, m in blocks.items()}, str(out / BLOCKS_DIR / BLOCKS_FILE))
    group = 32
    (out / INFO_FILE).write_text(json.dumps({
        "format": fmt, "group": group, "weights": weights, "base": base.spec,
        "base_directory": str(base.directory), "origin": origin,
        "shapes": {name: list(m.shape) for name, m in blocks.items()},
        "errors": errors}, indent=1))


def _hf_slot(args: Any, state: dict[str, torch.Tensor], layer: int,
             role: str) -> tuple[str, tuple[int, int]]:
    """Where projection `role` of `layer` sits in the checkpoint: its tensor's name and its
    rows there (Phi-3 fuses q, k, v into qkv_proj and gate, up into gate_up_proj)."""
    p = f"model.layers.{layer}."
    attn = role in ("q_proj", "k_proj", "v_proj", "o_proj")
    own = p + ("self_attn." if attn else "mlp.") + role + ".weight"
    if own in state:
        return own, (0, int(state[own].shape[0]))
    fused = {"q_proj": ("self_attn.qkv_proj.weight", 0, args.q_dim),
             "k_proj": ("self_attn.qkv_proj.weight", args.q_dim, args.kv_dim),
             "v_proj": ("self_attn.qkv_proj.weight", args.q_dim + args.kv_dim, args.kv_dim),
             "gate_proj": ("mlp.gate_up_proj.weight", 0, args.ffn),
             "up_proj": ("mlp.gate_up_proj.weight", args.ffn, args.ffn)}.get(role)
    if fused is None or p + fused[0] not in state:
        raise UnsupportedModel(f"{args.arch}: no tensor {own} to quantize (a checkpoint "
                               "stored under other names; deploy it with --weights bf16)")
    return p + fused[0], (fused[1], fused[1] + fused[2])


def _quantize(args: Any, state: dict[str, torch.Tensor]) -> dict[str, Any]:
    """Every projection of every layer in Q4NX, refused where a matrix is not whole blocks
    (32 rows x 256 columns: the kernel reads nothing else)."""
    from npu_deploy.formats.catalog import QuantizedMatrix
    from npu_deploy.formats.q4nx import COLS, ROWS

    out = {}
    for i in range(args.n_layers):
        for role in PROJECTIONS:
            hf, rows = _hf_slot(args, state, i, role)
            w = state[hf][rows[0]:rows[1]].to(torch.float32)
            if w.shape[0] % ROWS or w.shape[1] % COLS:
                raise UnsupportedModel(
                    f"{args.arch} layer {i} {role} is {w.shape[0]}x{w.shape[1]}: Q4NX blocks "
                    f"are {ROWS} rows x {COLS} columns and the kernel reads whole blocks; "
                    "deploy this model with --weights bf16")
            out[f"L{i}.{role}"] = QuantizedMatrix.quantize("q4nx", w)
    return out


__all__ = ["QuantizedSet", "quantized_dir", "read_quantized"]
