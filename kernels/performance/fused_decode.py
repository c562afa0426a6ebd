"""Upstream's 4-bit decode modeled as what it is: one fused dispatch a token.

Upstream's Q4NX (and Q4_0) decode runs every decoder layer and the LM head of one token in a
single dispatch, the fused_decode superkernel (Xilinx/mlir-air e972f2942d41,
programming_examples/fused_decode/README.md "Design"; fused_decode.py `build_module`,
fused_decode_qwen.py for the Q4_0 build). Our decode plans price a dispatch per layer's
merged launches instead, so they model that decode 2-4x slower than it runs. This module
models the fused token from its parts, as the README and the builder describe them:

    token = projections + LM head + KV readback + layers x per-layer rest + dispatch

- projections: each layer's four proj phases (QKV, O, gate+up, down: fused_decode.py
  `NPH=4`, `DEST`) on the 16 proj cores (aie_array_layout.h MVM_CORES), each phase
  kernels.families.proj_qmm's fused-engine `work`: the core's Q4NX blocks streamed at the
  bf16 GEMV's fitted column bandwidth (kernels/families/gemv.py, fitted on upstream's
  GEMV_bf16.md) or computed at upstream's static bundle counts
  (programming_examples/fused_decode/README.md), whichever is longer, the blocks being
  double-buffered. A phase's blocks per core are upstream's I2P x PAIR_ROWS x 2 J2P
  (`_MODELS`); Qwen2.5-3B streams its FFN padded to 12288 (fused_decode_qwen.py
  INTERMEDIATE);
- LM head: the vocab padded to a multiple of the model dim (model_spec.h
  VOCAB_SIZE_PADDED) on the same cores, plus a host-armed wave per vocab chunk (~20 us,
  measured upstream: proj_qmm.VOCAB_WAVE_S), the chunk being each model's VOCAB_CHUNK_I2
  and PAIR_ROWS (fused_decode.py `_MODELS`; the README of each llms/*_q4nx);
- KV readback: the template is built at ATTN_MAXL=2048 and streams all 2048 positions of
  every layer's K and V whatever the context (programming_examples/fused_decode/README.md,
  "Decode staircase"), over the attention compute units (N_ATTN_CU: 4 in every `_MODELS`
  entry, 2 in fused_decode_qwen.py), each at the GEMV's fitted column bandwidth, as
  kernels.families.decode_attention streams a cache;
- dispatch: the performance model's dispatch overhead (PerfParams.dispatch_overhead_s);
- per-layer rest: what a layer spends outside its projections' weight stream and its
  cache readback (attention's arithmetic, RMSNorm + residual, RoPE, the GLU, the phase
  hand-offs between cores; "its layers do not pipeline",
  programming_examples/fused_decode/README.md). This is the model's ONE end-to-end term,
  and it is calibrated on Llama-3.2-1B alone (`calibrate_layer_s`, on llama32_1b_q4nx's
  measured ~50 tok/s): every other model's figure is a prediction from its own dimensions.

Qwen2.5-3B's decode runs its final norm and LM head on the host and its measured figure is
the device's alone (llms/qwen25_3b_q4/README.md, Status), so its fused token has no LM head.
The int4-AWQ entry has no fused decode upstream (llms/llama32_1b_int4/README.md: its decode
driver is a follow-up), so it has no fused figure. Every time here is modeled.
"""

from __future__ import annotations

from dataclasses import dataclass

from npu_deploy.models import CATALOG
from npu_deploy.models.config import ModelArgs

from ..definition.registry import SPECS
from ..definition.specs import BF16
from ..families import proj_qmm
from ..measured.quantized_deployments import QUANTIZED_MEASURED
from .model import PerfParams

#: the template's KV window: every fused decode is built at ATTN_MAXL=2048 (Qwen2.5-3B's
#: LBUILD default too) and streams all of it each token
#: (programming_examples/fused_decode/README.md)
ATTN_MAXL = 2048


@dataclass(frozen=True)
class FusedLayout:
    """How upstream's fused decode lays one model out, where it differs between models: the
    LM head's chunk (VOCAB_CHUNK_I2, 0 when the LM head is not on the device) and its egress
    pairing (PAIR_ROWS), the attention compute units (N_ATTN_CU), and the FFN width the
    engine streams (its INTERMEDIATE, padded past the model's own; None: the model's)."""

    vocab_i2: int
    pair_rows: int
    attn_cus: int = 4
    ffn: int | None = None


#: each 4-bit catalog entry's fused decode, from fused_decode.py `_MODELS` (VOCAB_CHUNK_I2
#: through UNI_LM, PAIR_ROWS, N_ATTN_CU=4 in every entry) and, for Qwen2.5-3B,
#: fused_decode_qwen.py (N_ATTN_CU=2; INTERMEDIATE 12288: 11008 padded with zero rows to an
#: even GLU trip count, streamed like the rest; its LM head on the host)
FUSED_LAYOUTS: dict[str, FusedLayout] = {
    "llama32_1b_q4nx": FusedLayout(18, 2), "llama32_3b_q4nx": FusedLayout(9, 2),
    "llama31_8b_q4nx": FusedLayout(16, 2), "qwen3_8b_q4nx": FusedLayout(8, 2),
    "qwen25_7b_q4nx": FusedLayout(7, 1), "gemma3_4b_q4nx": FusedLayout(5, 1),
    "phi4_mini_q4nx": FusedLayout(18, 2),
    "qwen25_3b_q4": FusedLayout(0, 1, attn_cus=2, ffn=12288)}
#: the weight formats the fused engine decodes, as proj_qmm builds (codec) name them
CODECS = {"q4nx": "q4nx", "q4_0-container": "q4_0"}


@dataclass(frozen=True)
class MeasuredDecode:
    """An upstream decode rate measured on NPU2: the catalog entry, tokens/s, the source."""

    model: str
    tokens_per_s: float
    source: str



def measured_decode(model: str) -> MeasuredDecode:
    """A 4-bit catalog entry's measured decode rate, as kernels.measured's
    QUANTIZED_MEASURED holds it (the row section 7 of benchmarks.hardware_fidelity prints)."""
    _, rate, source = QUANTIZED_MEASURED[model]
    if rate is None:
        raise ValueError(f"upstream publishes no decode rate for {model!r}")
    return MeasuredDecode(model, rate, f"measured on NPU2 (upstream, {source})")


#: the one end-to-end figure the fused model is calibrated on: Llama-3.2-1B's row
CALIBRATION_TARGET = measured_decode("llama32_1b_q4nx")


@dataclass(frozen=True)
class FusedToken:
    """One token of the fused decode, modeled, by part (seconds) and its bytes streamed."""

    model: str
    projections_s: float
    lm_head_s: float
    kv_readback_s: float
    layers_s: float            # layers x the calibrated per-layer rest
    dispatch_s: float
    weight_bytes: int
    kv_bytes: int

    @property
    def total_s(self) -> float:
        return (self.projections_s + self.lm_head_s + self.kv_readback_s + self.layers_s
                + self.dispatch_s)

    @property
    def tokens_per_s(self) -> float:
        return 1.0 / self.total_s


def has_fused_decode(model: str) -> bool:
    """Whether upstream decodes this catalog entry with the fused superkernel."""
    return model in FUSED_LAYOUTS


def layer_phases(args: ModelArgs, ffn: int | None = None) -> list[tuple[int, int]]:
    """A layer's four proj phases (fused_decode.py NPH=4) as (rows M, columns K): QKV, O,
    gate+up, down, at the FFN width the engine streams (`ffn`, default the model's)."""
    d, q, kv, ffn = args.hidden, args.q_dim, args.kv_dim, ffn or args.ffn
    return [(q + 2 * kv, d), (d, q), (2 * ffn, d), (d, ffn)]


def fused_token(model: str, layer_s: float | None = None,
                params: PerfParams | None = None) -> FusedToken:
    """The modeled fused decode of one token of 4-bit catalog entry `model` (see the module
    docstring), its per-layer rest `layer_s` (default: the calibrated FUSED_LAYER_S)."""
    if not has_fused_decode(model):
        raise KeyError(f"{model!r} has no fused decode upstream; the fused engine models "
                       f"{', '.join(FUSED_LAYOUTS)}")
    args = CATALOG[model].args
    assert args.weights is not None, f"{model} is not a 4-bit catalog entry"
    p = params or PerfParams()
    spec = SPECS["proj_qmm"]
    layout = FUSED_LAYOUTS[model]
    config = {**spec.tunables, "engine": "fused", "codec": CODECS[args.weights.format],
              "pair_rows": layout.pair_rows}
    proj_s, nbytes = 0.0, 0
    for rows, k in layer_phases(args, layout.ffn):
        shape = {"M": rows, "K": k}
        proj_s += args.n_layers * proj_qmm.work(spec, shape, config, p).seconds
        nbytes += args.n_layers * spec.operands(shape)[0].nbytes
    head_s = 0.0
    if layout.vocab_i2:
        head = {"M": proj_qmm.padded_vocab(args.vocab, args.hidden), "K": args.hidden}
        head_s = proj_qmm.work(spec, head, {**config, "vocab_i2": layout.vocab_i2}, p).seconds
        nbytes += spec.operands(head)[0].nbytes
    kv_layer = 2 * args.n_kv_heads * args.head_dim * ATTN_MAXL * BF16
    kv_s = args.n_layers * kv_layer / (layout.attn_cus * p.gemv_column_bw)
    rest = FUSED_LAYER_S if layer_s is None else layer_s
    return FusedToken(model, proj_s, head_s, kv_s, args.n_layers * rest,
                      p.dispatch_overhead_s, nbytes, args.n_layers * kv_layer)


def calibrate_layer_s(target: MeasuredDecode, params: PerfParams | None = None) -> float:
    """The per-layer rest that makes the fused model give Llama-3.2-1B's measured decode
    rate: what its measured time per token leaves after the modeled projections, LM head,
    KV readback and dispatch, over its 16 layers. Only that one figure may be fitted on:
    any other model's is refused."""
    if target.model != CALIBRATION_TARGET.model:
        raise ValueError(f"the fused decode is calibrated on {CALIBRATION_TARGET.model}'s "
                         f"measured decode alone, not {target.model}'s: every other model's "
                         "figure is a prediction, never fitted")
    parts = fused_token(target.model, 0.0, params)
    return (1.0 / target.tokens_per_s - parts.total_s) / CATALOG[target.model].args.n_layers


#: calibrate_layer_s(CALIBRATION_TARGET) at the default PerfParams (a test checks it)
FUSED_LAYER_S = 1.846626e-04
