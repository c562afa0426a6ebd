"""The eight phases of a deployment, as one table (`PHASES`): each phase's number, name,
skill, gate and the thresholds its gate holds the work to, each with why it is that value
(at length: docs/design.md#the-eight-phases).

The gates (pipeline/gates/) read their thresholds here, at every evaluation, and the
conductor records `thresholds_in_force()` in each new run's `run.started`. A threshold is
named "phase<k>.<name>" (`threshold("phase2.cosine")`); names starting with `lens_` are
recorded beside the gate's verdict and never decide it.

Plain data: no imports from the rest of the project (events/ is the bottom of the
dependency order), so every layer may read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Threshold:
    """A value a phase's gate compares a metric with."""

    name: str
    value: float
    why: str                 # where the value comes from (a document, a measurement)


@dataclass(frozen=True, slots=True)
class Phase:
    """One row of the table."""

    number: int
    name: str
    skill: str               # the phase skill in skills/catalog/
    gate: str                # the `gate` of its gate.evaluated events
    thresholds: tuple[Threshold, ...] = ()

    def threshold(self, name: str) -> float:
        for t in self.thresholds:
            if t.name == name:
                return t.value
        raise KeyError(f"phase {self.number} has no threshold {name!r}; it has "
                       f"{', '.join(t.name for t in self.thresholds) or 'none'}")


_FP32_LENS = ("what FP32-vs-FP32 agreement looks like (two matmul orders differ by ~1e-6 "
              "relative): outside it is worth a look even when the gate passes")

PHASES: tuple[Phase, ...] = (
    # phase 0
    Phase(0, "build CPU oracle", "phase-0-cpu-oracle", "phase0.oracle", (
        Threshold("logits_rel_l2", 1e-4,
                  "docs/design.md#phase-0-cpu-oracle: oracle logits match the Hugging Face "
                  "model (FP32) to ~1e-4 relative, prefill and every decode step"),
        Threshold("lens_max_abs", 1e-3, _FP32_LENS),
        Threshold("lens_cosine", 0.999999, _FP32_LENS),
        # A 4-bit deployment's second reference, its source checkpoint (oracle/quant_cost.py):
        # recorded, never deciding, since no deployment can win back what quantization costs
        Threshold("lens_quant_layer_cosine", 0.99,
                  "each layer's output, de-quantized model against the source checkpoint: "
                  "below phase 2's block cosine (0.99) quantization alone costs more than the "
                  "bf16 datapath is allowed to"),
        Threshold("lens_quant_weight_rel_rms", 0.1,
                  "the projections' rounding, relative RMS pooled over every matrix: 4 bits "
                  "in groups of 32 with a min (Q4NX) round a Gaussian weight to ~8% "
                  "(docs/quantized-kernels.md, measured on the tiny models)"),
    )),
    # phase 1
    Phase(1, "kernel validation", "phase-1-kernel-validation", "phase1.kernels", (
        Threshold("rtol", 1.6e-2,
                  "docs/design.md#phase-1-kernel-validation: |out-ref| <= atol + rtol |ref| "
                  "on every element, rtol of bf16; the atol is per kernel "
                  "(kernels/emulation/validate.py ATOL, measured)"),
        Threshold("within_frac", 1.0, "every element within atol + rtol |ref|"),
        # The 4-bit kernels' atols (kernels/families/proj_qmm.py, gemv_int4.py read them
        # here), at the unit-scale outputs of Phase 1's seeded weights: random codes under
        # scales and offsets of upstream's quantizer. Measured on the CPU emulator
        # (2026-12-03), 256 rows, seeds 0-2; each the largest needed at upstream's widths,
        # rounded up. The arithmetic's worst case per row: kernels/emulation/quantized.py.
        Threshold("atol_proj_qmm", 4e-2,
                  "Q4NX's fused GEMV: its group partials cast toward -inf bias every output "
                  "down, more the wider K: 0.022, 0.027, 0.032, 0.038 needed at K = 2048, "
                  "4096, 11008, 18944 (Qwen2.5-7B's down projection, the widest upstream runs)"),
        Threshold("atol_proj_qmm_q4_0", 7e-2,
                  "the same kernel's Q4_0 build (signed codes, no min): 0.033, 0.061 needed "
                  "at K = 2048 and 11008, the widths of Qwen2.5-3B, the one model upstream "
                  "runs in Q4_0"),
        Threshold("atol_gemv_int4", 2e-2,
                  "the int4-AWQ GEMV at k_chunk 2048: its output is rounded to bf16 once per "
                  "call; 0.016 and 0.013 needed at K = 8192 and 14336 (Llama-3.2-1B's and "
                  "-3.1-8B's down projections)"),
        Threshold("atol_gemv_int4_k1024", 3e-2, "k_chunk 1024: 0.021, 0.025 needed"),
        Threshold("atol_gemv_int4_k512", 3e-2, "k_chunk 512: 0.018, 0.028 needed"),
        Threshold("atol_gemv_int4_k256", 5e-2, "k_chunk 256: 0.037, 0.040 needed"),
        Threshold("atol_gemv_int4_k128", 8e-2,
                  "k_chunk 128: 0.045, 0.075 needed (more calls, more roundings)"),
        Threshold("blocking_findings", 0.0,
                  "no [error] or [corrupt] finding of the hardware checker "
                  "(docs/design.md#phase-1-kernel-validation)"),
        Threshold("lens_cosine", 0.999, "a kernel's output against FP32, recorded"),
        Threshold("lens_max_abs", 1.0, "unit-scale outputs of the seeded inputs, recorded"),
        Threshold("lens_pearson", 0.999, "a kernel's output against FP32, recorded"),
    )),
    # phase 2
    Phase(2, "single block", "phase-2-single-block", "phase2.block", (
        Threshold("cosine", 0.99,
                  "docs/design.md#phase-2-single-block: block output vs oracle, cosine over "
                  "the whole tensor; also the lens of each sub-layer and of Pearson"),
        Threshold("position_cosine", 0.98,
                  "docs/design.md#phase-2-single-block: the per-position minimum at head_dim 64 "
                  "(SmolLM2, Llama-3.2-1B)"),
        Threshold("position_cosine_per_doubling", 0.01,
                  "each attention score sums head_dim products, so a position's error grows "
                  "with head_dim: the minimum drops this much per doubling past 64"),
        Threshold("lens_rel_l2", 0.05, "relative L2 of the block output, recorded"),
        Threshold("lens_max_abs", 1.0, "max-abs of the block output, recorded"),
    )),
    # phase 3
    Phase(3, "full model", "phase-3-full-model", "phase3.model", (
        Threshold("top_k", 5,
                  "docs/design.md#phase-3-full-model: at the first divergence of greedy "
                  "decoding each token is among the other's top 5 (vLLM's check_logprobs_close "
                  "idea)"),
        # The bf16 bar (oracle/bf16.py): summed over the canonical prompts, the deployment's
        # greedy tokens shared with the oracle from the start (topk_check's `agreed`) are at
        # least the bf16 reference's minus this margin; and on every prompt where the bf16
        # reference answers with the oracle's first token, the deployment does too.
        Threshold("bf16_agreed_margin", 0,
                  "docs/design.md#phase-3-full-model: the deployment computes in bf16, so "
                  "Hugging Face's own bf16 run of the model (phase 0, on the CPU) is what it "
                  "can be asked to match: summed over the canonical prompts its greedy "
                  "agreement with the oracle may fall this many tokens below that run's, and "
                  "where that run keeps the oracle's first answer token the deployment must "
                  "too (a near tie bf16 itself decides the oracle's way, decided the other "
                  "way, is a different answer that the top-5 rule lets through); a prompt "
                  "the deployment leaves at a later token whose two candidates the oracle "
                  "ranks less than one bf16 step apart counts at that run's figure (rounding "
                  "alone decides such a tie)"),
        Threshold("lens_layer_cosine", 0.99,
                  "each layer's output against the oracle (phase 2's cosine), recorded"),
    )),
    # phase 4 (and 5): phase 3's check still passes, and the plan is strictly faster than
    # the same recipe without the phase's transforms; no threshold of their own
    Phase(4, "prefill optimization", "phase-4-prefill-optimization", "phase4.prefill"),
    # phase 5
    Phase(5, "decode optimization", "phase-5-decode-optimization", "phase5.decode"),
    # phase 6
    Phase(6, "finalize & learn", "phase-6-finalize-and-learn", "phase6.runner", (
        Threshold("report_rel_diff", 1e-9,
                  "the report's figures equal the gate's own (modeled again, or a recorded "
                  "NPU profile): float round-off only"),
    )),
    # phase 7: re-runs the gates of phases 0-6, with their thresholds
    Phase(7, "independent evaluator", "phase-7-independent-evaluation", "phase7.evaluator"),
)

PHASE_NAMES: Final = tuple(p.name for p in PHASES)


def phase(number: int) -> Phase:
    """Phase `number` of the table (read at every call: a test may swap the table)."""
    return PHASES[number]


def threshold(qualified: str) -> float:
    """A threshold by its qualified name, "phase<k>.<name>": threshold("phase2.cosine")."""
    head, _, name = qualified.partition(".")
    if not head.startswith("phase") or not head[5:].isdigit() or not name:
        raise KeyError(f"{qualified!r}: expected phase<k>.<name>, e.g. phase2.cosine")
    return phase(int(head[5:])).threshold(name)


def thresholds_in_force() -> dict[str, float]:
    """Every threshold as {"phase2.cosine": 0.99, ...}: what `run.started` records."""
    return {f"phase{p.number}.{t.name}": float(t.value) for p in PHASES for t in p.thresholds}
