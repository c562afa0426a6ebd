"""The append-only, hash-chained SQLite event log (through sqlite-utils): runs,
events, content-addressed blobs, snapshots, the inbox of human commands, the
per-run writer lock, verification, and export/import.

Each public name, listed in `__init__.pyi`, loads its module when first used (lazy_loader): the
entry point imports `npu_deploy.store.locations` before anything heavy, and importing a module
of this package runs this file first, which must not pull sqlite-utils (and numpy with it)
in."""

import lazy_loader as lazy

__getattr__, __dir__, __all__ = lazy.attach_stub(__name__, __file__)
