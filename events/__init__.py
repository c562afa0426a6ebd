"""The vocabulary of a deployment: events, their canonical form and hash chain,
typed payloads (checked by checking.py), and the pure fold into a `DeploymentState`; the
phase table (phases.py), which decisions a run takes now (decisions.py), what an event says
(describe.py), and the stages a long step marks (progress.py, not events: the one place the
oracle, the pipeline and the conductor all reach). No I/O here, and no imports from the rest
of the project."""

from .decisions import OpenDecisions, Waiting, open_decisions, refusal, waiting_on
from .describe import EventView, describe, view
from .envelope import (
    ACTORS,
    GENESIS_HASH,
    Event,
    InvalidEvent,
    NewEvent,
    canonical_json,
    check_envelope,
    new_run_id,
    seal,
    sha256_hex,
    utc_now,
    uuid7,
)
from .keys import RUN_FINISHED, RUN_START, AttemptKey
from .payloads import (
    BLOB_REF_RE,
    EVENT_TYPES,
    Payload,
    blob_refs,
    check_event,
    check_ts,
    current_schema_version,
    declared_blob_refs,
    validate_payload,
)
from .phases import PHASE_NAMES, PHASES, Phase, Threshold, threshold, thresholds_in_force
from .state import (
    REDUCER_VERSION,
    DeploymentState,
    GateSummary,
    PhaseState,
    RunTotals,
    apply,
    fold,
    with_head,
)
from .upcasters import UPCASTERS, upcast

__all__ = [
    "ACTORS", "BLOB_REF_RE", "EVENT_TYPES", "GENESIS_HASH", "PHASES", "PHASE_NAMES",
    "REDUCER_VERSION", "RUN_FINISHED", "RUN_START", "UPCASTERS", "AttemptKey",
    "DeploymentState", "Event", "EventView", "GateSummary", "InvalidEvent", "NewEvent",
    "OpenDecisions", "Payload", "Phase", "PhaseState", "RunTotals", "Threshold", "Waiting",
    "apply", "blob_refs", "canonical_json", "check_envelope", "check_event", "check_ts",
    "current_schema_version", "declared_blob_refs", "describe", "fold", "new_run_id",
    "open_decisions", "refusal",
    "seal", "sha256_hex", "threshold", "thresholds_in_force", "upcast", "utc_now", "uuid7",
    "validate_payload", "view", "waiting_on", "with_head",
]
