"""Why the deployment answers another token than the oracle, and the change that fixes it.

When phase 3's gate finds the deployment falling behind the bf16 bar (pipeline/gates/model.py:
fewer greedy tokens shared with the FP32 oracle than Hugging Face's own bf16 run shares, or
another first answer token), a retry must change what decides that token. This module finds
it, on the emulator (the NPU's numerics on the CPU):

1. **The token.** The prompt whose first token the deployment loses (else the one it falls
   furthest behind the bar on) and the greedy step where it first differs. The step is
   replayed teacher-forced: the prompt and the oracle's tokens before the step, so every run
   below reads the same context, and the margin of the oracle's token over the best other
   one says who wins (below zero: the deployment's answer).
2. **The kernels.** The step again with one kernel family at a time computed in FP32 (its
   reference instead of its NPU numerics; the LM head's logits kept in FP32 too, since no
   kernel reads them): a family whose rounding decides the token brings the margin above
   zero. This is the evidence, not the change: FP32 is not what the
   hardware runs.
3. **The change.** Each change the hardware supports for those families (each family's
   `numerics_changes`: the
   GEMMs or FlashAttention on the native bf16 matmul datapath instead of the BFP16-emulated
   one, the LM head writing FP32 logits) is replayed as the deployment would run it, and
   priced by the performance model on the deployment's prefill and decode. The cheapest
   that brings the oracle's token back is the change; none: the run stops for a person with
   this evidence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch

from npu_deploy.kernels.definition.registry import FAMILIES, family
from npu_deploy.kernels.definition.specs import Mode
from npu_deploy.kernels.emulation.emulator import EMULATED, REFERENCE, EmulatorBackend
from npu_deploy.kernels.emulation.numerics import to_bf16
from npu_deploy.kernels.performance.model import estimate
from npu_deploy.kernels.plans.plan import LM_HEAD_OUT
from npu_deploy.kernels.plans.plan_runner import PlanRunner
from npu_deploy.pipeline.deployed import DeployedModel
from npu_deploy.pipeline.recipe import Recipe


class WidenedBackend(EmulatorBackend):
    """The emulator with the kernels of `widen` computed in FP32 (their references, which
    read and write attention operands head-first), their outputs stored as the device
    stores them (bf16 where the device's tensor is, in the layout its binding gives)."""

    def __init__(self, widen: frozenset[str]) -> None:
        self.widen = widen

    def run(self, spec: Any, shape: Any, config: dict, inputs: Any, outputs: Any) -> None:
        if spec.name not in self.widen or spec.name not in REFERENCE:
            super().run(spec, shape, config, inputs, outputs)
            return
        dims = {op.name: op.dims for op in spec.operands(shape)}
        seq_first = {name for name, layout in config.get("layouts", {}).items()
                     if layout == "seq-first" and len(dims.get(name, ())) == 3}

        def head_first(name: str, t: torch.Tensor) -> torch.Tensor:
            if name not in seq_first:
                return t
            heads, rows, width = dims[name]
            return t.reshape(rows, heads, width).transpose(0, 1)

        x = {name: head_first(name, t) for name, t in inputs.items()}
        for name, value in REFERENCE[spec.name](shape, {**spec.tunables, **config}, x).items():
            out = outputs[name]
            if name in seq_first:
                value = value.transpose(0, 1)
            value = value.reshape(out.shape)
            out.copy_(to_bf16(value) if out.dtype == torch.bfloat16 else value)
        self.wrote(outputs)


@dataclass(frozen=True)
class Trial:
    what: str                      # "flash_attention in FP32", "attention_datapath=bf16"
    token: int                     # the argmax at the step
    margin: float                  # the oracle's token over the best other one
    safe: bool = True              # a change: keeps every first token the bar protects

    @property
    def restores(self) -> bool:
        return self.margin > 0


@dataclass(frozen=True)
class Diagnosis:
    prompt: str
    step: int
    oracle_token: int
    ours: Trial                    # the recipe as it is
    families: tuple[Trial, ...]    # each family widened alone
    changes: tuple[tuple[Trial, float, float], ...]   # (trial, modeled s before, after)
    chosen: dict[str, str] | None  # the recipe settings of the change, or None
    words: str                     # the evidence and the choice, in words


def step_logits(model: DeployedModel, ids: torch.Tensor, oracle: list[int], step: int,
                context: int) -> torch.Tensor:
    """The logits of greedy step `step`, teacher-forced: the prompt, then the oracle's tokens
    before the step, decoded with plans built for `context` positions."""
    logits, cache = model.prefill(ids)
    pos = int(ids.shape[0])
    for token in oracle[:step]:
        logits, cache = model.decode(token, pos, cache, context)
        pos += 1
    return logits.float()


def _trial(what: str, logits: torch.Tensor, token: int) -> Trial:
    others = logits.clone()
    others[token] = float("-inf")
    return Trial(what, int(logits.argmax()), round(float(logits[token] - others.max()), 4))


def diagnose(name: str, loaded: Any, recipe: Recipe, hw: Any, prompt: str,
             ids: torch.Tensor, oracle: list[int], step: int, steps: int,
             modes: tuple[Mode, Mode], decode: Callable[[list[int]], str] | None = None,
             guards: tuple[tuple[str, torch.Tensor, int], ...] = (),
             runner: PlanRunner | None = None) -> Diagnosis:
    """Replay greedy step `step` of `prompt` (the oracle's tokens `oracle`) as described in
    the module docstring; `steps`: the generation's length (its decode context), `modes`:
    the deployment's prefill and decode, on which a change is priced; `decode`: a token id
    -> text for the words (the tokenizer's decode); `guards`: (prompt, ids, the oracle's
    first token) of the prompts whose first answer token the bar protects: a change that
    loses one of them is not taken, whatever it does for this token; `runner`: a plan runner
    of these weights whose prepared operands every replay shares (`PlanRunner.on`)."""
    context = int(ids.shape[0]) + max(steps, step + 1)
    token = oracle[step]
    base = runner or PlanRunner(loaded.args, loaded.weights, EmulatorBackend())

    def deployed(r: Recipe, widen: frozenset[str] = frozenset()) -> DeployedModel:
        return DeployedModel(name, loaded.args, loaded.weights, r, hw=hw,
                             backend=None, runner=base.on(WidenedBackend(widen)))

    def replay(r: Recipe, widen: frozenset[str] = frozenset()) -> torch.Tensor:
        return step_logits(deployed(r, widen), ids, oracle, step, context)

    ours = _trial("as deployed", replay(recipe), token)
    # the kernels the replay runs (step 0: the prefill alone), each with the roles it plays
    roles: dict[str, set[str]] = {}
    for m in modes[:1] if step == 0 else modes:
        for ln in recipe.plan(name, loaded.args, m, hw).launches():
            roles.setdefault(ln.kernel, set()).add(ln.role.split(".")[0])

    def widened(f: str) -> torch.Tensor:
        """The replay with kernel `f` in FP32; where its output is the logits (the LM head),
        they stay FP32 too (its `fp32_out` variant): nothing on the device reads them."""
        fp32_out = family(f).fp32_out
        if f == LM_HEAD_OUT[recipe.lm_head_out] and fp32_out is not None:
            return replay(recipe.with_settings({"lm_head_out": "f32"}),
                          frozenset({f, fp32_out}))
        return replay(recipe, frozenset({f}))

    families = tuple(_trial(f"{f} in FP32", widened(f), token)
                     for f in sorted(roles.keys() & EMULATED.keys() & REFERENCE.keys()))

    def seconds(r: Recipe) -> float:
        return sum(estimate(r.plan(name, loaded.args, m, hw), hw).total_s for m in modes)

    tried, changes = set(), []
    for t in families:
        for pairs, _ in family(t.what.split(" ")[0]).numerics_changes:
            settings = dict(pairs)
            after = recipe.with_settings(settings)
            key = tuple(sorted(settings.items()))
            if key in tried or after == recipe:
                continue
            tried.add(key)
            what = ", ".join(f"{k}={v}" for k, v in settings.items())
            trial = _trial(what, replay(after), token)
            if trial.restores:
                lost = [g for g, g_ids, first in guards if g != prompt and int(step_logits(
                    deployed(after), g_ids, [first], 0, context).argmax()) != first]
                if lost:
                    trial = replace(trial, what=f"{what} (loses the first token of "
                                                f"{', '.join(map(repr, lost))})", safe=False)
            changes.append((trial, seconds(recipe), seconds(after)))
    good = sorted((c for c in changes if c[0].restores and c[0].safe),
                  key=lambda c: (c[2], -c[0].margin))
    chosen = None
    if good:
        best = good[0][0].what
        chosen = dict(kv.split("=") for kv in best.split(", "))   # a safe one's is plain
    return Diagnosis(prompt, step, token, ours, families, tuple(changes), chosen,
                     _words(prompt, step, token, ours, families, changes, chosen, decode,
                            roles))


def _words(prompt: str, step: int, token: int, ours: Trial, families: tuple[Trial, ...],
           changes: list[tuple[Trial, float, float]], chosen: dict[str, str] | None,
           text: Callable[[list[int]], str] | None, roles: dict[str, set[str]]) -> str:
    def tok(t: int) -> str:
        return repr(text([t])) if text is not None else f"token {t}"

    def named(t: Trial) -> str:         # "gemv (lm_head)": the kernel and what it computes
        f = t.what.split(" ")[0]
        return f"{f} ({', '.join(sorted(roles.get(f, ())))})"

    lines = [f"{prompt!r} step {step}: the deployment answers {tok(ours.token)} where the "
             f"oracle answers {tok(token)} (margin {ours.margin:+.4f})"]
    closest = sorted(families, key=lambda t: -t.margin)[:3]
    decisive = [t for t in families if t.restores]
    lines.append("one kernel family at a time in FP32: " + (
        "brings it back: " + ", ".join(named(t) for t in decisive)
        if decisive else "none brings it back alone") + " (closest: " + ", ".join(
        f"{t.what.split(' ')[0]} {t.margin:+.4f}" for t in closest) + ")")
    for t, before, after in changes:
        lines.append(f"{t.what}: {'brings it back' if t.restores else 'does not'}"
                     f"{'' if t.safe else ', but is not taken'} "
                     f"({t.margin:+.4f}); modeled prefill + decode step {before * 1e3:.3f} -> "
                     f"{after * 1e3:.3f} ms ({(after / before - 1) * 100:+.1f}%)")
    every = (c for f in FAMILIES.values() for c in f.numerics_changes)
    for pairs, why in every:
        settings = dict(pairs)
        if chosen == settings:
            lines.append(f"change: {', '.join(f'{k}={v}' for k, v in settings.items())}: {why}")
            break
    else:
        lines.append("no change the hardware supports brings it back: a person decides")
    return "; ".join(lines)


__all__ = ["Diagnosis", "Trial", "WidenedBackend", "diagnose", "step_logits"]
