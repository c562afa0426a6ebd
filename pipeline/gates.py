"""The phase gates. The harness runs them, never the agent: each one reads what the phases
stored (the recipe, the oracle) and computes its verdict itself, on the backend, with its own
inputs where the agent had some (phase 1 validates with another seed).

    0  the oracle against Hugging Face (oracle.gate), and the stored oracle runs it made
    1  every (kernel, shape) with its stored configuration: every element within
       atol + rtol |ref|, no blocking finding of the checker
    2  layer 0 alone: cosine >= 0.99 over the whole output, and a per-position minimum that
       loosens with head_dim
    3  the token-set check on every canonical prompt; the layer lens is recorded
    4  the phase-3 check, and the deployed prefill strictly faster than the baseline (modeled
       on the emulator backend, measured on the NPU on the xrt backend)
    5  the same for decode, against phase 4's decode plan
    6  the runner's token-set check, its answer to the chat question, and the report's figures
    7  the independent evaluator, in a fresh process (pipeline.evaluator)
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import replace
from typing import Any

from npu_deploy.kernels.specs import Decode, Prefill
from npu_deploy.oracle.gate import phase0_gate
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import (
    Toolbox,
    block_metrics,
    kernel_uses_cached,
    layer_lens,
    run_kernel,
    spread_text,
    token_checks,
    validation_summary,
)
from npu_deploy.pipeline.workspace import Workspace, blob_json, read_json, workspace_of

KERNEL_SEED = 1              # the gate's inputs differ from the agent's (seed 0)
BLOCK_COSINE = 0.99          # ARCHITECTURE.md, phase 2


def position_cosine(head_dim: int) -> float:
    """Phase 2's per-position minimum. Each attention score sums head_dim products, so the
    error of a position grows with head_dim: 0.98 at 64 (SmolLM2, Llama-3.2-1B), 0.01 lower
    per doubling, never stricter than 0.98."""
    return min(0.98, 0.98 - 0.01 * math.log2(head_dim / 64))


def check(subject: str, metric: str, value: float, threshold: float, comparison: str,
          gating: bool = True, message: str = "") -> dict[str, Any]:
    value = float(value) if math.isfinite(float(value)) else -1.0
    holds = {"<=": value <= threshold, "<": value < threshold, ">=": value >= threshold,
             ">": value > threshold, "==": value == threshold}[comparison]
    return {"subject": subject, "metric": metric, "value": value, "threshold": float(threshold),
            "comparison": comparison, "passed": bool(holds), "gating": gating,
            **({"message": message} if message else {})}


def verdict(gate: str, checks: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    passed = all(c["passed"] for c in checks if c["gating"])
    return {"gate": gate, "passed": passed, "checks": checks, **extra}


# --- what each gate computes (shared with the evaluator) ------------------------------------

def oracle_checks(ws: Workspace, answers: dict[str, Any] | None) -> list[dict[str, Any]]:
    report = phase0_gate(ws.loaded, ws.prompts(), steps=ws.settings.steps)
    checks = list(report.checks)
    for r in report.results:
        stored = (answers or {}).get(r.prompt, {}).get("tokens", [])
        same = sum(1 for a, b in zip(stored, r.ours_tokens, strict=False) if a == b)
        checks.append(check(r.prompt, "stored_oracle_tokens", same, len(r.ours_tokens), ">="))
    return checks


def kernel_checks(ws: Workspace, recipe: Recipe) -> list[dict[str, Any]]:
    checks = []
    for key, use in sorted(kernel_uses_cached(ws).items()):
        subject = f"{key} ({', '.join(use['roles'])})"
        config = recipe.configs.get(key)
        if config is None:
            checks.append(check(subject, "configured", 0, 1, ">="))
            continue
        summary = validation_summary(run_kernel(ws, key, config, KERNEL_SEED))
        blocking = [f for f in summary["findings"] if f.startswith(("[error]", "[corrupt]"))]
        checks.append(check(subject, "blocking_findings", len(blocking), 0, "<=",
                            message="; ".join(blocking)))
        for out in summary["outputs"].values():
            checks += [check(subject, "within_frac", out["within_frac"], 1.0, ">="),
                       check(subject, "cosine", out["cosine"], 0.999, ">=", gating=False),
                       check(subject, "max_abs", out["max_abs"], 1.0, "<=", gating=False),
                       check(subject, "pearson", out["pearson"], 0.999, ">=", gating=False)]
    return checks


def block_checks(ws: Workspace, recipe: Recipe, goldens: Any) -> list[dict[str, Any]]:
    metrics = block_metrics(ws, recipe, goldens)
    hd = ws.loaded.args.head_dim
    out = metrics["L0.ffn_residual"]
    subject = "L0 block output"
    checks = [check(subject, "cosine", out["cosine"], BLOCK_COSINE, ">="),
              check(subject, "cosine_pos_min", out["cosine_pos_min"], position_cosine(hd), ">="),
              check(subject, "rel_l2", out["rel_l2"], 0.05, "<=", gating=False),
              check(subject, "max_abs", out["max_abs"], 1.0, "<=", gating=False),
              check(subject, "pearson", out["pearson"], BLOCK_COSINE, ">=", gating=False)]
    checks += [check(name, "cosine", m["cosine"], BLOCK_COSINE, ">=", gating=False)
               for name, m in metrics.items() if name != "L0.ffn_residual"]
    return checks


def model_checks(ws: Workspace, recipe: Recipe, answers: dict[str, Any]
                 ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    runs = token_checks(ws, recipe, answers)
    checks = []
    for r in runs:
        checks.append(check(r["prompt"], "top5_token_set", 1 if r["passed"] else 0, 1, ">="))
        checks.append(check(r["prompt"], "greedy_tokens_agreed", r["agreed"], r["steps"], ">=",
                            gating=False))
    return checks, runs


def plan_s(ws: Workspace, recipe: Recipe, mode: Any) -> float:
    """The recipe's `mode` plan's time: modeled on the emulator, measured on the NPU."""
    return ws.time(recipe.plan(ws.settings.model, ws.loaded.args, mode, ws.hw)).total_s


def time_word(ws: Workspace) -> str:
    return "measured" if ws.settings.measured else "modeled"


def report_check(ws: Workspace, recipe: Recipe, mode: Any, name: str, stated: float,
                 label: str) -> dict[str, Any]:
    """A report's figure against the gate's own: the modeled time computed again, or on the
    NPU the nearest measured profile of that scope recorded in the log (a measurement
    repeated would differ run to run; the report must state one that was recorded)."""
    if not ws.settings.measured:
        own = plan_s(ws, recipe, mode)
        return check(label, "relative_difference", abs(stated - own) / own, 1e-9, "<=")
    recorded = [e.payload["total_s"] for e in ws.store.events(ws.run_id,
                                                              types=("profile.recorded",))
                if e.payload["scope"] == name and e.payload["source"] == "measured-npu"]
    nearest = min((abs(stated - r) / r for r in recorded), default=1.0)
    return check(f"{label} against the recorded profiles", "relative_difference", nearest,
                 1e-9, "<=")


def speed_check(ws: Workspace, recipe: Recipe, mode: Any) -> dict[str, Any]:
    """The deployed plan against the same recipe without this mode's transforms: modeled,
    faster; measured, its slowest run faster than the bare plan's fastest."""
    bare = (replace(recipe, prefill_transforms=()) if isinstance(mode, Prefill)
            else replace(recipe, decode_transforms=()))
    model, args = ws.settings.model, ws.loaded.args
    base = ws.time(bare.plan(model, args, mode, ws.hw))
    own = ws.time(recipe.plan(model, args, mode, ws.hw))
    name = "prefill" if isinstance(mode, Prefill) else "decode"
    subject = f"{name} plan ({', '.join(recipe.transforms(mode)) or 'no transform'})"
    metric, message = f"{name}_modeled_s", ""
    if own.runs:
        metric = f"{name}_measured_slowest_s"
        message = (f"slowest of {len(own.runs)} runs against the fastest of the plan "
                   f"without transforms ({spread_text(own, base)})")
    return check(subject, metric, own.slowest_s, base.fastest_s, "<", message=message)


# --- the gates ------------------------------------------------------------------------------

class _Gate:
    phase: int = -1

    def evaluate(self, run: Any) -> dict[str, Any]:
        ws = workspace_of(run)
        result: dict[str, Any] = run.step(f"gate{self.phase}", {"phase": self.phase},
                                          lambda: self.compute(ws, Toolbox(run)), backend=True)
        return result

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        raise NotImplementedError


class OracleGate(_Gate):
    phase = 0

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        try:
            answers = tb.answers()
        except LookupError:
            answers = None
        return verdict("phase0.oracle", oracle_checks(ws, answers))


class KernelGate(_Gate):
    phase = 1

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        return verdict("phase1.kernels", kernel_checks(ws, ws.recipe()))


class BlockGate(_Gate):
    phase = 2

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        return verdict("phase2.block", block_checks(ws, ws.recipe(), tb.goldens()))


class ModelGate(_Gate):
    phase = 3

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        recipe = ws.recipe()
        checks, _ = model_checks(ws, recipe, tb.answers())
        lens = layer_lens(ws, recipe, tb.goldens())
        checks += [check(name, "layer_cosine", value, 0.99, ">=", gating=False)
                   for name, value in lens.items()]
        return verdict("phase3.model", checks)


class SpeedGate(_Gate):
    """Phases 4 and 5: the phase-3 check still passes, and the mode's plan is faster."""

    def __init__(self, phase: int, decode: bool) -> None:
        self.phase, self.decode = phase, decode

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        recipe = ws.recipe()
        checks, _ = model_checks(ws, recipe, tb.answers())
        L = ws.settings.seq_len
        checks.append(speed_check(ws, recipe, Decode(L) if self.decode else Prefill(L)))
        return verdict("phase5.decode" if self.decode else "phase4.prefill", checks)


class RunnerGate(_Gate):
    """The runner end to end: the token-set check through it, its answer to the chat
    question recorded, and the report's figures equal to the performance model's."""

    phase = 6

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        from npu_deploy.pipeline.inference import Runner

        runner = Runner(ws)
        checks, _ = model_checks(ws, runner.recipe, tb.answers())
        report = ws.latest("report_data", tool="write_report")
        checks.append(check("report", "written", 0 if report is None else 1, 1, ">="))
        if report is not None:
            data = read_json(ws.store, report["report_data"])
            for mode, name in ((Prefill(ws.settings.seq_len), "prefill"),
                               (Decode(ws.settings.seq_len), "decode")):
                checks.append(report_check(ws, runner.recipe, mode, name,
                                           float(data[name]["deployed_s"]), f"report {name}"))
        return verdict("phase6.runner", checks)


class EvaluatorGate(_Gate):
    """Runs `python -m npu_deploy.pipeline.evaluator` in a fresh process on a read-only store
    and records its checks; its full report is stored as a blob."""

    phase = 7

    def compute(self, ws: Workspace, tb: Toolbox) -> dict[str, Any]:
        ws.release_backend()        # the evaluator's process opens the NPU itself
        cmd = [sys.executable, "-m", "npu_deploy.pipeline.evaluator", str(ws.store.path),
               ws.run_id, "--json"]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        try:
            report = json.loads(done.stdout)
        except json.JSONDecodeError:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            return verdict("phase7.evaluator", [check("evaluator", "ran", 0, 1, ">=",
                                                      message=tail[:300])])
        ref = blob_json(ws.store, report)
        return verdict("phase7.evaluator", report["checks"], inputs=ref)


def gates() -> dict[int, Any]:
    return {g.phase: g for g in (OracleGate(), KernelGate(), BlockGate(), ModelGate(),
                                 SpeedGate(4, decode=False), SpeedGate(5, decode=True),
                                 RunnerGate(), EvaluatorGate())}
