"""Phase 0's gate: the decomposed FP32 reference against the Hugging Face model itself.

For every canonical prompt: the prefill logits, and the logits of every
KV-cache decode step, within the phase table's relative L2 error (1e-4); and
the same 32 greedy tokens. The reference decodes its 32 greedy steps (end-of-sequence does
not stop it); the Hugging Face side reads the prompt and those tokens in one teacher-forced
forward pass of its own, so every step's logits are compared, and its argmax at each step
must be the reference's token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from npu_deploy.events import progress
from npu_deploy.events.phases import phase
from npu_deploy.metrics.comparison import compare
from npu_deploy.models.errors import OracleError
from npu_deploy.models.loading import LoadedModel
from npu_deploy.oracle import reference_of
from npu_deploy.oracle.bf16 import hf_teacher_forced
from npu_deploy.oracle.prompts import Prompt, canonical_prompts
from npu_deploy.oracle.quant_cost import QuantizationCost, quantization_cost
from npu_deploy.pipeline.toolbox import Toolbox
from npu_deploy.pipeline.workspace import Workspace

from .common import _Gate, check, verdict

GREEDY_STEPS = 32


@dataclass(frozen=True)
class PromptResult:
    prompt: str
    tokens: int                         # prompt length
    prefill_rel_l2: float
    prefill_max_abs: float
    prefill_cosine: float
    decode_rel_l2: float                # worst step
    steps_identical: int                # leading greedy steps where both agree
    steps: int
    ours_text: str
    hf_text: str
    ours_tokens: tuple[int, ...] = ()

    def passed(self, rel_tol: float | None = None) -> bool:
        rel_tol = phase(0).threshold("logits_rel_l2") if rel_tol is None else rel_tol
        return (self.prefill_rel_l2 <= rel_tol and self.decode_rel_l2 <= rel_tol
                and self.steps_identical >= self.steps)


@dataclass(frozen=True)
class Phase0Report:
    model: str
    origin: str
    results: list[PromptResult]
    rel_tol: float
    checks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c["passed"] for c in self.checks if c.get("gating", True))

    def gate_payload(self) -> dict[str, Any]:
        """The `gate.evaluated` payload of this result."""
        return {"gate": phase(0).gate, "passed": self.passed, "checks": self.checks}


def check_prompt(loaded: LoadedModel, prompt: Prompt, steps: int = GREEDY_STEPS
                 ) -> PromptResult:
    ids = prompt.token_ids(loaded.tokenizer)
    if ids.shape[0] == 0:
        raise OracleError(f"prompt {prompt.name!r} has no tokens: give text to check")
    if ids.shape[0] + steps > loaded.args.max_positions:
        raise OracleError(f"prompt {prompt.name!r} has {ids.shape[0]} tokens; with {steps} "
                          f"decode steps it passes max_position_embeddings="
                          f"{loaded.args.max_positions}: use a shorter prompt or --seq-len")
    ref = reference_of(loaded)
    ours_prefill, _ = ref.prefill(ids)
    ours_tokens, ours_steps = ref.generate(ids, steps)
    # Hugging Face reads the same tokens ours chose, in one teacher-forced pass: the logits
    # of every step are comparable, and its argmax at each step is the token its own greedy
    # run picks there as long as the two agree (a decode step per token read the weights
    # once per token: ten times the time on a CPU, for the same figures).
    hf_prefill, hf_steps = hf_teacher_forced(loaded.hf, ids, ours_tokens)
    hf_tokens = [int(t) for t in hf_steps.argmax(-1)]
    pre = compare(hf_prefill, ours_prefill)
    same = next((i for i, (a, b) in enumerate(zip(hf_tokens, ours_tokens, strict=True))
                 if a != b), steps)
    decode_worst = max((compare(hf_steps[i], ours_steps[i]).rel_l2 for i in range(steps)),
                       default=0.0)
    return PromptResult(
        prompt=prompt.name, tokens=int(ids.shape[0]), prefill_rel_l2=pre.rel_l2,
        prefill_max_abs=pre.max_abs, prefill_cosine=pre.cosine, decode_rel_l2=decode_worst,
        steps_identical=same, steps=steps,
        ours_text=loaded.tokenizer.decode(ours_tokens),
        hf_text=loaded.tokenizer.decode(hf_tokens), ours_tokens=tuple(ours_tokens))


def phase0_gate(loaded: LoadedModel, prompts: list[Prompt] | None = None, *,
                steps: int = GREEDY_STEPS, rel_tol: float | None = None) -> Phase0Report:
    """Run the Phase-0 check on every prompt and collect the gate's checks (`rel_tol`: the
    phase table's unless given)."""
    table = phase(0)
    rel_tol = table.threshold("logits_rel_l2") if rel_tol is None else rel_tol
    if prompts is None:
        chat = bool(getattr(loaded.tokenizer, "chat_template", None))
        prompts = canonical_prompts(chat=chat)
    results = []
    with progress.stage("greedy runs: ours and Hugging Face's", len(prompts), "prompt"):
        for p in prompts:
            results.append(check_prompt(loaded, p, steps))
            progress.advance("prompt")
    checks: list[dict[str, Any]] = []
    for r in results:
        checks += [
            check(r.prompt, "prefill_logits_rel_l2", r.prefill_rel_l2, rel_tol, "<="),
            check(r.prompt, "decode_logits_rel_l2", r.decode_rel_l2, rel_tol, "<="),
            check(r.prompt, "greedy_tokens_identical", r.steps_identical, r.steps, ">="),
            # Lenses: recorded for the reader, they do not decide the gate.
            check(r.prompt, "prefill_logits_max_abs", r.prefill_max_abs,
                  table.threshold("lens_max_abs"), "<=", gating=False),
            check(r.prompt, "prefill_logits_cosine", r.prefill_cosine,
                  table.threshold("lens_cosine"), ">=", gating=False),
        ]
    return Phase0Report(loaded.source.spec, loaded.source.origin, results, rel_tol, checks)


def quantization_checks(cost: QuantizationCost) -> list[dict[str, Any]]:
    """What a quantized model's 4-bit weights cost against its source checkpoint
    (oracle.quant_cost), as recorded checks: reported beside the verdict, never deciding it
    (the deployment is gated against the de-quantized model)."""
    table = phase(0)
    out = [check(f"quantization L{c.layer}", "layer_cosine_vs_source", c.cosine,
                 table.threshold("lens_quant_layer_cosine"), ">=", gating=False)
           for c in cost.layers]
    out += [check(f"quantization {p.prompt}", "greedy_tokens_agreed_vs_source",
                  p.tokens_agreed, p.steps, ">=", gating=False) for p in cost.prompts]
    out.append(check("quantization weights", "projection_rel_rms", cost.weight_rel_rms,
                     table.threshold("lens_quant_weight_rel_rms"), "<=", gating=False))
    return out


def oracle_checks(ws: Workspace, answers: dict[str, Any] | None) -> list[dict[str, Any]]:
    report = phase0_gate(ws.loaded, ws.prompts(), steps=ws.settings.steps)
    checks = list(report.checks)
    if ws.loaded.weights.packed is not None:
        with progress.stage("what quantization costs: the source checkpoint's greedy runs",
                            len(ws.prompts()), "prompt"):
            cost = quantization_cost(ws.loaded, ws.prompts(), ws.settings.steps)
        if cost is not None:
            checks += quantization_checks(cost)
    for r in report.results:
        stored = (answers or {}).get(r.prompt, {}).get("tokens", [])
        same = sum(1 for a, b in zip(stored, r.ours_tokens, strict=False) if a == b)
        checks.append(check(r.prompt, "stored_oracle_tokens", same, len(r.ours_tokens), ">="))
    return checks


class OracleGate(_Gate):
    phase = 0

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        try:
            answers = tb.answers()
        except LookupError:
            answers = None
        return verdict(phase(self.phase).gate, oracle_checks(ws, answers))
