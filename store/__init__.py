"""The append-only, hash-chained SQLite event log (through sqlite-utils): runs,
events, content-addressed blobs, snapshots, the inbox of human commands, the
per-run writer lock, verification, and export/import."""

from .errors import (
    CommandAlreadyConsumed,
    IdempotencyConflict,
    ImportRefused,
    NewerSchema,
    NotAStore,
    RunLocked,
    StoreCorrupt,
    StoreError,
    StoreUnreadable,
    Unanchored,
    UnknownRun,
)
from .eventstore import EventStore, RunSummary, VerifyReport, default_db_path
from .schema import SCHEMA_VERSION
from .transfer import ExportedRun, export_run, import_run, read_export
from .writer import RunWriter

__all__ = [
    "SCHEMA_VERSION", "CommandAlreadyConsumed", "EventStore", "IdempotencyConflict",
    "ImportRefused", "NewerSchema", "NotAStore", "RunLocked", "RunSummary", "RunWriter",
    "StoreCorrupt", "StoreError", "StoreUnreadable", "Unanchored", "UnknownRun", "VerifyReport",
    "ExportedRun", "default_db_path", "export_run", "import_run", "read_export",
]
