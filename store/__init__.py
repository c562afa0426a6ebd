"""The append-only, hash-chained SQLite event log (through sqlite-utils): runs,
events, content-addressed blobs, snapshots, the inbox of human commands, the
per-run writer lock, verification, and export/import.

The names below load their modules when first used (PEP 562): the entry point imports
`npu_deploy.store.locations` before anything heavy, and importing a module of this package
runs this file first, which must not pull sqlite-utils (and numpy with it) in."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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
from .locations import default_db_path

if TYPE_CHECKING:
    from .eventstore import EventStore
    from .reading import RunSummary
    from .schema import SCHEMA_VERSION
    from .transfer import ExportedRun, export_run, import_run, read_export
    from .verification import VerifyReport
    from .writer import RunWriter

#: Each name loaded on first use, and the module that holds it.
_LAZY = {
    "EventStore": "eventstore", "RunSummary": "reading", "VerifyReport": "verification",
    "SCHEMA_VERSION": "schema", "ExportedRun": "transfer", "export_run": "transfer",
    "import_run": "transfer", "read_export": "transfer", "RunWriter": "writer",
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = [
    "SCHEMA_VERSION", "CommandAlreadyConsumed", "EventStore", "IdempotencyConflict",
    "ImportRefused", "NewerSchema", "NotAStore", "RunLocked", "RunSummary", "RunWriter",
    "StoreCorrupt", "StoreError", "StoreUnreadable", "Unanchored", "UnknownRun", "VerifyReport",
    "ExportedRun", "default_db_path", "export_run", "import_run", "read_export",
]
