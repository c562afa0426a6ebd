"""The optimization memory: what earlier deployments saw of each plan transform.

Every plan transform a phase tries is an `experience.recorded` event (the plans before and
after, the transform, the speed-up and where its times came from). They stay in the store
across runs; `transform_order` reads every run's and orders the transforms of the next
deployment: those that worked before first, those never tried next, those that only ever
failed last (each group keeping the skill's order, which respects what must come before
what).
"""

from __future__ import annotations

from typing import Any

from npu_deploy.store import EventStore


def experiences(store: EventStore, *, exclude_run: str | None = None) -> list[dict[str, Any]]:
    """Every transform experience in the store (payloads, with their run id)."""
    out = []
    for run_id in store.run_ids():
        if run_id == exclude_run:
            continue
        for e in store.events(run_id, types=("experience.recorded",)):
            if e.payload.get("transform"):
                out.append({**e.payload, "run_id": run_id})
    return out


def transform_order(store: EventStore, base: tuple[str, ...], scope: str, *,
                    exclude_run: str | None = None) -> tuple[list[str], dict[str, str]]:
    """`base` reordered by what earlier runs saw for `scope` ("prefill" or "decode"), and
    why each transform is where it is."""
    seen: dict[str, list[str]] = {}
    for x in experiences(store, exclude_run=exclude_run):
        if str(x.get("shape") or "").startswith(scope):
            seen.setdefault(x["transform"], []).append(x["outcome"])
    worked = [t for t in base if "worked" in seen.get(t, [])]
    fresh = [t for t in base if t not in seen]
    failed = [t for t in base if t in seen and "worked" not in seen[t]]
    why = {t: f"worked in {seen[t].count('worked')} of {len(seen[t])} earlier tries"
           for t in worked}
    why |= {t: "never tried before" for t in fresh}
    why |= {t: f"failed in all {len(seen[t])} earlier tries: tried last" for t in failed}
    return worked + fresh + failed, why
