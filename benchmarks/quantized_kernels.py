#!/usr/bin/env python3
"""How much of upstream's 4-bit decode does the proj_qmm cost model account for?

For five of upstream's fused-decode models (Xilinx/mlir-air e972f29, the dims of
programming_examples/fused_decode/models/*.h), the modeled time of one token's projections on
the fused engine (16 proj cores; QKV, O, gate+up and down per layer, then the LM head in its
vocab chunks) from kernels.families.proj_qmm's cost, beside the decode time per token
upstream measured on NPU2 (its READMEs, cited per row). The model is not fitted to these
figures: its bandwidth is the bf16 GEMV's, fitted on GEMV_bf16.md, and its compute upstream's
static bundle counts. The rest of a token (attention over the KV cache, norms, RoPE, the
host) is not in the modeled column, so the share it shows is the projections' modeled part
of a measured whole. Nothing runs on an NPU or is timed here.

    .venv/bin/python -m benchmarks.quantized_kernels [--json]
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass

from npu_deploy.kernels.definition.registry import SPECS
from npu_deploy.kernels.families import proj_qmm
from npu_deploy.kernels.performance.model import PerfParams

#: where the fused decode's measured figures are
FUSED = "programming_examples/fused_decode/README.md"


@dataclass(frozen=True)
class Model:
    name: str
    header: str               # fused_decode/models/<header>
    dim: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    vocab: int
    layers: int
    codec: str
    vocab_i2: int             # the LM head's chunk (fused_decode.py's _MODELS; 0: none)
    pair_rows: int
    measured_ms: float        # decode per token, measured on NPU2 by upstream
    source: str


MODELS = (
    Model("Llama-3.2-1B", "llama3.2-1b.h", 2048, 32, 8, 64, 8192, 128256, 16, "q4nx", 18, 2,
          1000 / 53.00, f"{FUSED} (staircase table, baseline 53.00 tok/s)"),
    Model("Llama-3.2-3B", "llama3.2-3b.h", 3072, 24, 8, 128, 8192, 128256, 28, "q4nx", 9, 2,
          1000 / 22.20, f"{FUSED} (staircase table, baseline 22.20 tok/s)"),
    Model("Gemma3-4B", "gemma3-4b.h", 2560, 8, 4, 256, 10240, 262208, 34, "q4nx", 5, 1,
          1000 / 15.41, f"{FUSED} (staircase table, baseline 15.41 tok/s)"),
    Model("Llama-3.1-8B", "llama3.1-8b.h", 4096, 32, 8, 128, 14336, 128256, 32, "q4nx", 16, 2,
          93.1, "llms/llama31_8b_q4nx/README.md (93.1 ms/token)"),
    Model("Qwen2.5-3B", "qwen2.5-3b.h", 2048, 16, 2, 128, 11264, 151936, 36, "q4_0", 0, 1,
          105.5, f"{FUSED} (dual-channel table, 105.5 ms/tok)"),
)


def projection_seconds(m: Model, p: PerfParams) -> tuple[float, float, int]:
    """(modeled seconds of a token's projections, of its LM head, weight bytes streamed)."""
    spec = SPECS["proj_qmm"]
    q, kv = m.heads * m.head_dim, m.kv_heads * m.head_dim
    base = {**spec.tunables, "engine": "fused", "codec": m.codec, "pair_rows": m.pair_rows}
    layer = [(q + 2 * kv, m.dim), (m.dim, q), (2 * m.ffn, m.dim), (m.dim, m.ffn)]
    seconds, nbytes = 0.0, 0
    for rows, k in layer:
        shape = {"M": rows, "K": k}
        seconds += proj_qmm.work(spec, shape, base, p).seconds * m.layers
        nbytes += spec.operands(shape)[0].nbytes * m.layers
    head = {"M": proj_qmm.padded_vocab(m.vocab, m.dim), "K": m.dim}
    head_s = proj_qmm.work(spec, head, {**base, "vocab_i2": m.vocab_i2}, p).seconds
    return seconds, head_s, nbytes + spec.operands(head)[0].nbytes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    p = PerfParams()
    rows = []
    for m in MODELS:
        proj_s, head_s, nbytes = projection_seconds(m, p)
        modeled_ms = (proj_s + head_s) * 1e3
        rows.append({"model": m.name, "header": m.header, "codec": m.codec,
                     "weights_gib": nbytes / 2**30, "modeled_proj_ms": proj_s * 1e3,
                     "modeled_lm_head_ms": head_s * 1e3, "measured_decode_ms": m.measured_ms,
                     "share": modeled_ms / m.measured_ms, "measured_source": m.source})
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print("proj_qmm on the fused engine: modeled projections + LM head per token (modeled,")
    print("kernels.families.proj_qmm) beside upstream's decode per token (measured on NPU2)\n")
    print(f"{'model':14} {'codec':5} {'weights':>8} {'proj':>9} {'LM head':>9} "
          f"{'decode':>9} {'share':>6}")
    print(f"{'':14} {'':5} {'GiB':>8} {'modeled':>9} {'modeled':>9} {'measured':>9}")
    for r in rows:
        print(f"{r['model']:14} {r['codec']:5} {r['weights_gib']:8.2f} "
              f"{r['modeled_proj_ms']:7.1f}ms {r['modeled_lm_head_ms']:7.1f}ms "
              f"{r['measured_decode_ms']:7.1f}ms {r['share']:6.2f}")
    print("\nshare = modeled (projections + LM head) / measured decode; the measured figure "
          "also holds attention, norms, RoPE and the host. Sources:")
    for r in rows:
        print(f"  {r['model']}: {r['measured_source']}")


if __name__ == "__main__":
    main()
