"""What a retry of a failed phase changes, so that it is never the same attempt again.

The gates are deterministic: seeded inputs, and the emulator's (or the NPU's) arithmetic
give the same numbers for the same configuration. A retry that changes nothing fails the
same way, so the autopilot retries only with a concrete change, named in the proposal:

- phase 1: each failing kernel use moves to its next valid configuration in selection's
  ranking (`kernels.definition.selection.ranked_configs`: the other tile configurations of the high
  precision tier first, then those of the low tier, e.g. another GEMM method, whose own
  tolerance the gate applies), skipping every configuration an earlier attempt ran;
- phase 3, when the deployment falls behind the bf16 bar (another first answer token, or
  fewer greedy tokens shared with the oracle than Hugging Face's bf16 run shares): the
  change `pipeline.divergence` finds for the token it answers wrongly (a matmul datapath,
  FP32 logits), replayed and priced; none brings the oracle's token back: a person decides;
- phases 4 and 5: the last transform the phase kept is taken out of the recipe and not
  tried again.

Nothing left to change (another phase, every configuration tried, no transform kept) is
`None`: the run stops for a person with the evidence.
"""

from __future__ import annotations

from typing import Any

from npu_deploy.events.payloads import RetryChange
from npu_deploy.kernels.definition.selection import ranked_configs
from npu_deploy.kernels.definition.specs import SPECS, KernelUse
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import divergence, kernel_uses_cached, stored_bf16
from npu_deploy.pipeline.workspace import Workspace, workspace_of

#: ordinals for the change's words
_NTH = {1: "1st", 2: "2nd", 3: "3rd"}


def retry_change(run: Any, failing: list[dict[str, Any]]) -> RetryChange | None:
    """The change the next attempt of `run.phase` makes after the gate's `failing` checks,
    on top of the change the failed attempt followed (`run.debug_change`); None when
    nothing is left to change."""
    before = RetryChange(**run.debug_change) if run.debug_change else None
    if run.phase == 1:
        return _next_configs(workspace_of(run), failing, before)
    if run.phase in (4, 5):
        scope = "prefill" if run.phase == 4 else "decode"
        return _undo_last_transform(workspace_of(run), run.phase, scope, before)
    if run.phase == 3 and any(c["metric"] in BAR_METRICS for c in failing):
        return _numerics_change(workspace_of(run), before)
    return None


#: the phase-3 checks of the bf16 bar (pipeline/gates/model.py)
BAR_METRICS = ("greedy_tokens_agreed_vs_bf16", "first_token_vs_bf16")


def _numerics_change(ws: Workspace, before: RetryChange | None) -> RetryChange | None:
    """The change for the token the deployment answers wrongly (`pipeline.divergence`), on
    the prompt whose first token it loses, else the one it falls furthest behind the bf16
    reference on; None when no supported change brings the oracle's token back."""
    bf16 = stored_bf16(ws)
    gates = list(ws.store.events(ws.run_id, phase=3, types=("gate.evaluated",)))
    gate = gates[-1] if gates else None
    if bf16 is None or gate is None:
        return None
    agreed = {c["subject"]: int(c["value"]) for c in gate.payload["checks"]
              if c["metric"] == "greedy_tokens_agreed"}
    lost = [c["subject"] for c in gate.payload["checks"]
            if c["metric"] == "first_token_vs_bf16" and not c["passed"]]
    behind = sorted((bf16[p].agreed - n, p) for p, n in agreed.items() if p in bf16)
    prompt = lost[0] if lost else (behind[-1][1] if behind and behind[-1][0] > 0 else None)
    if prompt is None:
        return None
    d = divergence(ws, prompt, agreed[prompt])
    if d is None or d.chosen is None:
        return None
    settings = {**(before.recipe if before else {}), **d.chosen}
    return RetryChange(text=d.words, recipe=settings)


def kernel_of(subject: str) -> str:
    """The kernel use a phase-1 check is about: its subject is "KEY (role, role)"."""
    return subject.split(" (")[0]


def tried_configs(ws: Workspace, key: str) -> list[dict[str, Any]]:
    """Every configuration of kernel use `key` a phase-1 attempt of this run selected."""
    tried: list[dict[str, Any]] = []
    for e in ws.store.events(ws.run_id, phase=1, types=("tool.completed",)):
        p = e.payload
        if p["ok"] and p["tool"] == "select_tiles" and "recipe" in p["result"]:
            config = Recipe.from_json(ws.store.get_blob(p["result"]["recipe"])).configs.get(key)
            if config is not None and config not in tried:
                tried.append(config)
    return tried


def _next_configs(ws: Workspace, failing: list[dict[str, Any]],
                  before: RetryChange | None) -> RetryChange | None:
    uses = kernel_uses_cached(ws)
    keys = sorted({kernel_of(c["subject"]) for c in failing} & uses.keys())
    configs = dict(before.configs) if before else {}
    words = []
    for key in keys:
        use = uses[key]
        spec = SPECS[use["kernel"]]
        ranked = ranked_configs(KernelUse(use["roles"][0], spec, use["shape"]), ws.hw)
        tried = tried_configs(ws, key)
        untried = [(i, c) for i, c in enumerate(ranked, 1) if c not in tried]
        if not untried:
            continue
        i, config = untried[0]
        now = ws.recipe().configs.get(key, {})        # what the failed attempt ran
        moved = {k: v for k, v in config.items() if now.get(k) != v}
        configs[key] = config
        diff = ", ".join(f"{k} {now.get(k)} -> {v}" for k, v in moved.items())
        words.append(f"{key} ({', '.join(use['roles'][:2])}): {diff} (the selection's "
                     f"{_NTH.get(i, f'{i}th')} valid configuration of {len(ranked)})")
    if not words:
        return None
    return RetryChange(text="; ".join(words), configs=configs)


def _undo_last_transform(ws: Workspace, phase: int, scope: str,
                         before: RetryChange | None) -> RetryChange | None:
    undone = list(before.undo) if before else []
    kept = [e.payload["result"]["transform"]
            for e in ws.store.events(ws.run_id, phase=phase, types=("tool.completed",))
            if e.payload["ok"] and e.payload["tool"] == "apply_transform"
            and e.payload["result"].get("kept")]
    left = [t for t in kept if t not in undone]
    if not left:
        return None
    return RetryChange(text=f"undo the {scope} transform {left[-1]} (the last one this phase "
                            "kept) and do not try it again", undo=[*undone, left[-1]])
