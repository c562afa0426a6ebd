"""Errors of the store. Each message says what is wrong and what to do, on one line."""

from __future__ import annotations


class StoreError(Exception):
    """Base class: the CLI prints the message and exits non-zero."""


class StoreUnreadable(StoreError):
    """The path cannot be opened (missing, a directory, no permission)."""


class NotAStore(StoreError):
    """The file is not an SQLite database."""


class StoreCorrupt(StoreError):
    """The file is an SQLite database, but truncated, half-written or malformed."""


class StoreReadOnly(StoreError):
    """A writing command on a store that cannot be written (a read-only file, folder or
    mount): refused before anything is written."""


class DiskFull(StoreError):
    """A write found no room on the disk: it was rolled back, and what was stored stays."""


class NewerSchema(StoreError):
    """The database was written by a newer npu-deploy."""


class UnknownRun(StoreError):
    """No run with that id (or prefix)."""


class RunLocked(StoreError):
    """Another process holds the writer lock of that run."""


class Unanchored(StoreError):
    """A run verifies but is not anchored by this user's key: not extended unless adopted."""


class IdempotencyConflict(StoreError):
    """An idempotency key was reused for a different event."""


class CommandAlreadyConsumed(StoreError):
    """An inbox command was already recorded by another event."""


class DecisionRefused(StoreError):
    """The run no longer takes the decision being left (it moved on meanwhile)."""


class ImportRefused(StoreError):
    """An export file that cannot be imported as it is."""


class NestedTransaction(RuntimeError):
    """A transaction was opened inside another on one connection: a bug in the caller, since
    SQLite cannot nest them (store.transaction)."""
