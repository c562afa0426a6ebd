"""The phase-3 token-set check, reused when a recipe provably computes what an already
checked one did.

Phases 4 and 5 try transforms one at a time, and each kept one used to re-run the whole
check (greedy runs of every canonical prompt on the backend); so did the gates of phases 4,
5 and 6 on recipes the check had just passed. A recipe's check signature is the arithmetic
signature (kernels.plans.signature) of every plan the check runs, each prompt's padded
prefill and every decode step of its greedy run, with the oracle's runs it follows and the
prompts' tokens. When an earlier check of this run has the same signature, its result is
the result this check would compute, and it is reused: the proof (the signature, how many
plans it covers, and the event whose result is reused) is recorded in the step's result.
Any changed kernel, shape, configuration or input of any plan changes the signature, and
the check runs.

Reuse is for the emulator backend (modeled times); on the NPU the check always runs.
Reuse from the log is for the run's own steps (`apply_transform`, and the gates inside
`recording`); the independent evaluator never reads results from the log: it shares a check
between its own gates by the same signature (`signature`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from npu_deploy.events import progress
from npu_deploy.kernels.definition.specs import Decode, Mode, prompt_prefill
from npu_deploy.metrics.tokens import Greedy, parted_at_tie, topk_check
from npu_deploy.oracle.prompts import Prompt
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.workspace import Workspace, blob_json, read_json

#: the proofs of the checks made inside `recording` (None: not recording, no reuse)
_PROOFS: ContextVar[list[dict[str, Any]] | None] = ContextVar("check_proofs", default=None)


def counted(prompts: list[Prompt], steps: int, name: str) -> Iterator[Prompt]:
    """`prompts` one by one, each `steps` greedy tokens of a stage `name` for the watcher."""
    with progress.stage(name, len(prompts) * steps, "token"):
        for i, p in enumerate(prompts):
            yield p
            progress.reach("token", (i + 1) * steps)     # a run may stop early


def token_checks(ws: Workspace, recipe: Recipe, answers: dict[str, Any]) -> list[dict[str, Any]]:
    """The token-set check of the deployed model against the oracle's greedy runs
    (`answers`: prompt name -> Greedy dict), prompt by prompt."""
    model = ws.deployed(recipe)
    out = []
    for p in counted(ws.prompts(), ws.settings.steps, "phase-3 token-set check"):
        ref = Greedy.from_dict(answers[p.name])
        ours = model.generate(ws.ids(p), ws.settings.steps, follow=ref.tokens)
        tc = topk_check(ours, ref)
        tok = ws.loaded.tokenizer
        out.append({"prompt": p.name, "passed": tc.passed, "agreed": tc.agreed,
                    "steps": tc.steps, "ours": tc.ours, "theirs": tc.theirs,
                    "tie": parted_at_tie(tc, ref),
                    "ours_token": None if tc.ours is None else tok.decode([tc.ours]),
                    "theirs_token": None if tc.theirs is None else tok.decode([tc.theirs]),
                    "text": tok.decode(ours.tokens)})
    return out


def check_modes(ws: Workspace) -> list[Mode]:
    """Every plan the token-set check may run: each prompt's padded prefill, and the decode
    steps of its greedy run (`DeployedModel.generate`: positions n .. n + steps - 2, built
    for a context of n + steps)."""
    modes: list[Mode] = []
    steps = ws.settings.steps
    for p in ws.prompts():
        n = int(ws.ids(p).shape[0])
        modes.append(prompt_prefill(n))
        modes += [Decode(pos, n + steps) for pos in range(n, n + steps - 1)]
    return list(dict.fromkeys(modes))


def signature(ws: Workspace, recipe: Recipe, answers: dict[str, Any]) -> tuple[str, int]:
    """The recipe's check signature and how many plans it covers: the arithmetic signature
    of every plan of `check_modes`, the oracle's runs, the prompts' tokens, the steps and
    the backend. Layouts count unless the backend says its kernels ignore them
    (`layout_invariant`)."""
    layouts = not getattr(ws.backend, "layout_invariant", False)
    model = ws.deployed(recipe)
    modes = check_modes(ws)
    h = hashlib.sha256()
    h.update(json.dumps({"backend": ws.settings.backend, "steps": ws.settings.steps,
                         "answers": answers, "layouts": layouts,
                         "prompts": {p.name: ws.ids(p).tolist() for p in ws.prompts()}},
                        sort_keys=True).encode())
    for mode in modes:
        h.update(f"{mode}={model.plan_signature(mode, layouts=layouts)};".encode())
    return "sha256:" + h.hexdigest(), len(modes)


def checked_runs(ws: Workspace, recipe: Recipe, answers: dict[str, Any]
                 ) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The token-set check's runs of `recipe` and its proof: reused from an earlier step of
    this run whose check had the same signature, else computed (and its runs stored as a
    blob for a later one)."""
    sig, plans = signature(ws, recipe, answers)
    proof: dict[str, Any] = {"signature": sig, "plans": plans}
    # On the NPU the check also runs the device between measurements (its state, its
    # clocks): there it always runs, and the signature is recorded only.
    earlier = None if ws.settings.measured else _earlier(ws, sig)
    if earlier is not None:
        event_id, runs_ref = earlier
        return read_json(ws.store, runs_ref), {**proof, "runs": runs_ref,
                                               "reused_from": event_id}
    runs = token_checks(ws, recipe, answers)
    return runs, {**proof, "runs": blob_json(ws.store, runs)}


def gate_runs(ws: Workspace, recipe: Recipe, answers: dict[str, Any]
              ) -> list[dict[str, Any]]:
    """The check's runs for a gate: reused with proof inside `recording` (the run's own
    gates), computed otherwise (the evaluator, a direct call)."""
    proofs = _PROOFS.get()
    if proofs is None:
        return token_checks(ws, recipe, answers)
    runs, proof = checked_runs(ws, recipe, answers)
    proofs.append(proof)
    return runs


@contextmanager
def recording() -> Iterator[list[dict[str, Any]]]:
    """Within: gates reuse checks by signature, and the proofs are collected here."""
    proofs: list[dict[str, Any]] = []
    token = _PROOFS.set(proofs)
    try:
        yield proofs
    finally:
        _PROOFS.reset(token)


def _earlier(ws: Workspace, sig: str) -> tuple[str, str] | None:
    """(event id, runs blob) of the first completed step of this run that computed the
    check with signature `sig`."""
    for e in ws.store.events(ws.run_id, types=("tool.completed",)):
        result = e.payload["result"] if e.payload["ok"] else {}
        for proof in (result.get("check_proof"), *result.get("check_proofs", ())):
            if proof and proof.get("signature") == sig and "reused_from" not in proof:
                return e.event_id, proof["runs"]
    return None
