"""What a retry of a failed phase changes, so that it is never the same attempt again.

The gates are deterministic: seeded inputs, and the emulator's (or the NPU's) arithmetic
give the same numbers for the same configuration. A retry that changes nothing fails the
same way, so the autopilot retries only with a concrete change, named in the proposal:

- phase 1: each failing kernel use moves to its next valid configuration in selection's
  ranking (`kernels.definition.selection.ranked_configs`: the other tile configurations of the high
  precision tier first, then those of the low tier, e.g. another GEMM method, whose own
  tolerance the gate applies), skipping every configuration an earlier attempt ran;
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
from npu_deploy.pipeline.toolbox import kernel_uses_cached
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
    return None


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
