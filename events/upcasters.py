"""Upcasters: bring a payload stored under an older schema to the current form.

They run on read, never on the stored row: the hash covers what was written.
Each one takes a payload of version v and returns version v + 1.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .payloads import EVENT_TYPES

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]


def _model_called_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Schema 1 predates prompt caching: nothing was read from or written to a cache.
    return {**payload, "cache_read_tokens": 0, "cache_write_tokens": 0}


def _model_called_v2_to_v3(payload: dict[str, Any]) -> dict[str, Any]:
    # Schema 2 kept no request id and no content.
    return {"request_id": None, "request": None, "response": None, **payload}


def _phase_exited_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Schema 1 did not record where a phase's time went.
    return {"wall_s": 0.0, "agent_s": 0.0, "backend_s": 0.0, **payload}


def _phase_exited_v2_to_v3(payload: dict[str, Any]) -> dict[str, Any]:
    # Schema 2 did not tell a person's waiting or a pause from the phase's work.
    return {"waiting_s": 0.0, "paused_s": 0.0, **payload}


def _run_forked_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Schema 1 forks carried no note and no config.
    return {"note": None, "config": {}, **payload}


def _lesson_recorded_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Schema 1 lessons had no id and proposed no catalog change.
    return {"lesson_id": "", "proposes": None, **payload}


def _experience_recorded_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Schema 1 experiences were free text: no transform, no times.
    return {"transform": None, "model": None, "shape": None, "speedup": None, "source": None,
            "plan_before": None, "plan_after": None, **payload}


def _human_decision_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Schema 1 had no gate override: every approve answered a checkpoint.
    return {"override": False, **payload}


def _debug_proposed_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    # Schema 1 proposals carried no evidence and no change, and said nothing of determinism.
    directions = [{"evidence": [], "change": None, **d} for d in payload["directions"]]
    return {"evidence": [], "deterministic": False, **payload, "directions": directions}


UPCASTERS: dict[tuple[str, int], Upcaster] = {
    ("debug.proposed", 1): _debug_proposed_v1_to_v2,
    ("human.decision", 1): _human_decision_v1_to_v2,
    ("lesson.recorded", 1): _lesson_recorded_v1_to_v2,
    ("experience.recorded", 1): _experience_recorded_v1_to_v2,
    ("model.called", 1): _model_called_v1_to_v2,
    ("model.called", 2): _model_called_v2_to_v3,
    ("phase.exited", 1): _phase_exited_v1_to_v2,
    ("phase.exited", 2): _phase_exited_v2_to_v3,
    ("run.forked", 1): _run_forked_v1_to_v2,
}


def upcast(type_name: str, schema_version: int, payload: dict[str, Any]) -> dict[str, Any]:
    """The payload in the current schema of its type."""
    current = EVENT_TYPES[type_name][1] if type_name in EVENT_TYPES else schema_version
    while schema_version < current:
        payload = UPCASTERS[(type_name, schema_version)](payload)
        schema_version += 1
    return payload
