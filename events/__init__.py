"""The vocabulary of a deployment: events, their canonical form and hash chain,
typed payloads, and the pure fold into a `DeploymentState`. No I/O here, and no
imports from the rest of the project."""

from .describe import describe
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
    current_schema_version,
    validate_payload,
)
from .state import (
    PHASE_NAMES,
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
    "ACTORS", "BLOB_REF_RE", "EVENT_TYPES", "GENESIS_HASH", "PHASE_NAMES", "REDUCER_VERSION",
    "RUN_FINISHED", "RUN_START", "UPCASTERS", "AttemptKey", "DeploymentState", "Event",
    "GateSummary", "InvalidEvent", "NewEvent", "Payload", "PhaseState", "RunTotals", "apply",
    "blob_refs", "canonical_json", "check_envelope", "current_schema_version", "describe",
    "fold", "new_run_id", "seal", "sha256_hex", "upcast", "utc_now", "uuid7",
    "validate_payload", "with_head",
]
