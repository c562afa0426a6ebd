"""Blobs: bytes stored once under their SHA-256, zlib-compressed, referenced from payloads
as 'sha256:<hex>'; checked against their digest whenever they are read."""

from __future__ import annotations

import zlib

from npu_deploy.events import BLOB_REF_RE, sha256_hex, utc_now

from .errors import StoreCorrupt, StoreError
from .storefile import StoreFile
from .transaction import transaction


class Blobs:
    """The blobs of `file`."""

    def __init__(self, file: StoreFile) -> None:
        self.file = file

    def put(self, data: bytes) -> str:
        """Store bytes once, compressed; returns the reference 'sha256:<hex>'."""
        digest = sha256_hex(data)
        with transaction(self.file.db):
            self.file.conn.execute("INSERT OR IGNORE INTO blobs VALUES (?, ?, ?, ?, ?)",
                                   (digest, len(data), "zlib", zlib.compress(data, 6),
                                    utc_now()))
        return f"sha256:{digest}"

    def get(self, ref: str) -> bytes:
        if not BLOB_REF_RE.match(ref):
            raise StoreError(f"{ref!r} is not a blob reference (sha256:<64 hex>)")
        digest = ref.removeprefix("sha256:")
        row = self.file.conn.execute("SELECT codec, data FROM blobs WHERE sha256 = ?",
                                     (digest,)).fetchone()
        if row is None:
            raise StoreError(f"blob {ref} is not in {self.file.path}; import the run's export "
                             "file, which carries its blobs")
        data = zlib.decompress(row[1]) if row[0] == "zlib" else row[1]
        if sha256_hex(data) != digest:
            raise StoreCorrupt(f"blob {ref} in {self.file.path} does not match its hash: the "
                               "stored bytes were changed")
        return data

    def row(self, digest: str) -> tuple[str, bytes] | None:
        """The stored codec and bytes of a blob, as they are (for an export)."""
        row = self.file.conn.execute("SELECT codec, data FROM blobs WHERE sha256 = ?",
                                     (digest,)).fetchone()
        return (row[0], row[1]) if row else None
