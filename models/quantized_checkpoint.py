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

from npu_deploy.models.errors import ModelCorrupt, UnsupportedModel
from npu_deploy.models.files import SOURCE_FILE, build_once, read_safetensors
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
    """The blocks a quantized directory holds, or None for a plain checkpoint; a damaged
    one (its record or its blocks unreadable, a block the wrong size) is refused in one
    line (ModelCorrupt)."""
    info_path = directory / INFO_FILE
    if not info_path.is_file():
        return None
    from safetensors import SafetensorError, safe_open

    from npu_deploy.formats.catalog import QuantizedMatrix

    blocks = directory / BLOCKS_DIR / BLOCKS_FILE
    try:
        info = json.loads(info_path.read_text())
        matrices = {}
        with safe_open(str(blocks), framework="pt") as f:
            for name, shape in info["shapes"].items():
                matrices[name] = QuantizedMatrix(info["format"], (int(shape[0]), int(shape[1])),
                                                 f.get_tensor(name).numpy().tobytes())
        weights = QuantizedWeights(info["format"], int(info["group"]), False, LM_HEAD,
                                   info["origin"])
    except (OSError, SafetensorError, ValueError, KeyError, TypeError) as e:
        raise ModelCorrupt(f"{directory} holds damaged 4-bit blocks ({type(e).__name__}: "
                           f"{str(e)[:120]}); remove that directory and deploy again to "
                           "rebuild it") from None
    return QuantizedSet(weights, matrices, info)


def quantized_dir(base: Any, weights: str, cache: Path) -> Path:
    """The cached directory of `base` (a models.sources ModelSource) with `weights`
    (a `CHOICES` key), built once."""
    key = json.dumps([str(base.directory), _content_key(base.directory), weights, _VERSION])
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    target = cache / "quantized" / f"{base.directory.name}-{weights}-{digest}"

    def build(tmp: Path) -> None:
        _build(base, weights, tmp)

    return build_once(target, build)


def _content_key(directory: Path) -> list[Any]:
    """What identifies a checkpoint's weights cheaply: each safetensors file's size and
    modification time (the random models' directory names carry their recipe already)."""
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns)
                  for p in directory.glob("*.safetensors"))


def _build(base: Any, weights: str, out: Path) -> None:
    from safetensors.torch import save_file

    from npu_deploy.models.config import model_args, read_config

    args = model_args(read_config(base.directory / "config.json"),
                      str(base.directory / "config.json"))
    state = read_safetensors(base.directory)
    if weights == "q4":
        blocks, fmt, origin = _gguf_blocks(base, args, state)
    else:
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
    """Every projection of every layer in Q4NX. K is padded to whole 256-column blocks with
    zero groups (scale 1, min 0: exactly 0), as the plans pad x with zeros (kernels.plans.plan
    `block_k`: SmolLM2's 576 runs as 768); rows are not padded: a projection whose rows are
    not whole 32-row blocks is refused (the kernel writes whole blocks of y)."""
    from npu_deploy.formats.catalog import QuantizedMatrix
    from npu_deploy.formats.q4nx import COLS, ROWS

    out = {}
    for i in range(args.n_layers):
        for role in PROJECTIONS:
            hf, rows = _hf_slot(args, state, i, role)
            w = state[hf][rows[0]:rows[1]].to(torch.float32)
            if w.shape[0] % ROWS:
                raise UnsupportedModel(
                    f"{args.arch} layer {i} {role} has {w.shape[0]} rows: Q4NX blocks hold "
                    f"{ROWS} rows and the kernel writes whole blocks; deploy this model with "
                    "--weights bf16")
            k = -(-w.shape[1] // COLS) * COLS
            w = torch.nn.functional.pad(w, (0, k - w.shape[1]))
            out[f"L{i}.{role}"] = QuantizedMatrix.quantize("q4nx", w)
    return out


#: GGUF's tensor names for the projections (llama.cpp's `blk.N.*`)
_GGUF_NAMES = {"q_proj": "attn_q", "k_proj": "attn_k", "v_proj": "attn_v",
               "o_proj": "attn_output", "gate_proj": "ffn_gate", "up_proj": "ffn_up",
               "down_proj": "ffn_down"}


def _gguf_blocks(base: Any, args: Any, state: dict[str, torch.Tensor]
                 ) -> tuple[dict[str, Any], str, str]:
    """A GGUF's own 4-bit projections repacked into the device format (formats.repack:
    Q4_1 -> Q4NX, Q4_0 -> the Q4_0 container; K padded to whole blocks), each checked
    against the checkpoint transformers converted from the same file: the GGUF's rows, put
    back in the checkpoint's order, must de-quantize to it exactly."""
    import gguf

    from npu_deploy.formats.catalog import QuantizedMatrix
    from npu_deploy.formats.gguf_blocks import GGUF_CODECS
    from npu_deploy.formats.repack import REPACK_TARGETS, repack_gguf

    record = base.directory / SOURCE_FILE
    if base.kind not in ("bundled", "gguf") or not record.is_file():
        raise UnsupportedModel(f"{base.spec} is not a GGUF model: --weights q4 repacks a "
                               "GGUF's own 4-bit blocks; use --weights q4nx to quantize it")
    path = json.loads(record.read_text())["gguf"]
    reader = gguf.GGUFReader(path)
    tensors = {t.name: t for t in reader.tensors}
    arch = bytes(reader.fields["general.architecture"].parts[-1]).decode()
    out, kinds = {}, set()
    for i in range(args.n_layers):
        for role in PROJECTIONS:
            t = tensors[f"blk.{i}.{_GGUF_NAMES[role]}.weight"]
            qtype = gguf.GGMLQuantizationType(t.tensor_type)
            if qtype not in REPACK_TARGETS:
                raise UnsupportedModel(
                    f"{path}: blk.{i}.{_GGUF_NAMES[role]} is {qtype.name}; --weights q4 "
                    f"repacks {' and '.join(q.name for q in REPACK_TARGETS)} blocks only "
                    "(use --weights q4nx to quantize this model)")
            shape = (int(t.shape[1]), int(t.shape[0]))
            data = t.data.tobytes()
            order = _checkpoint_rows(arch, role, shape[0], args)
            parts = GGUF_CODECS[qtype].unpack(data, shape)
            if order is not None:                   # llama.cpp's Q/K row order undone
                parts = type(parts)(parts.q[order], parts.scales[order],
                                    None if parts.offsets is None else parts.offsets[order])
                data = GGUF_CODECS[qtype].pack(parts)
            hf, rows = _hf_slot(args, state, i, role)
            if not torch.equal(GGUF_CODECS[qtype].dequantize(data, shape),
                               state[hf][rows[0]:rows[1]].to(torch.float32)):
                raise ModelCorrupt(f"{path}: blk.{i}.{_GGUF_NAMES[role]} does not de-quantize "
                                   f"to {hf} of {base.directory}; remove that directory and "
                                   "convert the GGUF again")
            r = repack_gguf(data, shape, qtype)
            out[f"L{i}.{role}"] = QuantizedMatrix(r.codec.format.name, r.shape, r.data)
            kinds.add(f"{qtype.name} -> {r.codec.format.name}")
    origin = (f"{base.spec}'s own 4-bit blocks ({', '.join(sorted(kinds))}) repacked for the "
              "NPU (formats/repack.py): the blocks move exactly, their float16 scales and mins "
              "round to bfloat16")
    return out, next(iter(out.values())).format, origin


def _checkpoint_rows(arch: str, role: str, rows: int, args: Any) -> torch.Tensor | None:
    """The GGUF row each row of the checkpoint's q_proj or k_proj is, for a llama GGUF:
    llama.cpp's converter interleaves each head's two rotary halves row by row
    (convert_hf_to_gguf.py `LlamaModel.permute`), which transformers undoes on load
    (modeling_gguf_pytorch_utils.py `LlamaTensorProcessor`). None: the rows are in order."""
    if arch != "llama" or role not in ("q_proj", "k_proj"):
        return None
    heads = args.n_heads if role == "q_proj" else args.n_kv_heads
    half = rows // heads // 2
    return torch.arange(rows).reshape(heads, half, 2).transpose(1, 2).reshape(rows)


__all__ = ["QuantizedSet", "quantized_dir", "read_quantized"]
