"""The store's public face, for type checkers and for lazy_loader (`__init__.py`)."""

from .errors import CommandAlreadyConsumed as CommandAlreadyConsumed
from .errors import DiskFull as DiskFull
from .errors import IdempotencyConflict as IdempotencyConflict
from .errors import ImportRefused as ImportRefused
from .errors import NewerSchema as NewerSchema
from .errors import NotAStore as NotAStore
from .errors import RunLocked as RunLocked
from .errors import StoreCorrupt as StoreCorrupt
from .errors import StoreError as StoreError
from .errors import StoreReadOnly as StoreReadOnly
from .errors import StoreUnreadable as StoreUnreadable
from .errors import Unanchored as Unanchored
from .errors import UnknownRun as UnknownRun
from .eventstore import EventStore as EventStore
from .locations import default_db_path as default_db_path
from .reading import RunSummary as RunSummary
from .schema import SCHEMA_VERSION as SCHEMA_VERSION
from .transfer import ExportedRun as ExportedRun
from .transfer import export_run as export_run
from .transfer import import_run as import_run
from .transfer import read_export as read_export
from .verification import VerifyReport as VerifyReport
from .writer import RunWriter as RunWriter
