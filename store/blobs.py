"""Blobs: bytes stored once under their SHA-256, zlib-compressed, referenced from payloads
as 'sha256:<hex>'. Every read of a blob, whoever reads it (a command, `verify`, an export,
an import), goes through `unpack`: inflated a chunk at a time, never past MAX_BLOB_BYTES,
and checked against its digest, so damaged bytes are one line, never a zlib traceback."""

from __future__ import annotations

import hashlib
import zlib
from collections.abc import Iterator

from npu_deploy.events import BLOB_REF_RE, sha256_hex, utc_now

from .errors import StoreCorrupt, StoreError
from .storefile import StoreFile
from .transaction import transaction

#: The largest blob anyone reads (decompressed bytes). A run's blobs are plans, reports,
#: programs and activations of a few MB; a record that inflates past this is a damaged or
#: hostile file (a zlib "bomb" grows about 1000-fold), refused before it fills memory.
MAX_BLOB_BYTES = 256 * 2**20

CODECS = ("zlib", "raw")
_CHUNK = 1 << 20


class BlobMismatch(StoreCorrupt):
    """A blob whose stored bytes do not give back its digest (edited, cut, an unknown
    codec, or inflating past MAX_BLOB_BYTES)."""


def unpack(digest: str, codec: str, stored: bytes, *, keep: bool = True) -> tuple[int, bytes]:
    """(size, bytes) of the blob `digest` from its stored form; with `keep=False` the bytes
    are hashed and dropped (b""), so memory stays at one chunk. Raises BlobMismatch, whose
    message names the blob and says why; the caller adds where it was read."""
    what = f"blob sha256:{digest[:16]}..."
    if codec not in CODECS:
        raise BlobMismatch(f"{what} does not match its digest: its codec {codec!r} is none "
                           f"of {', '.join(CODECS)} (the stored row was edited)")
    h, size, kept = hashlib.sha256(), 0, []
    try:
        for chunk in _chunks(codec, stored):
            size += len(chunk)
            if size > MAX_BLOB_BYTES:
                raise BlobMismatch(f"{what} expands past {MAX_BLOB_BYTES >> 20} MiB, the most "
                                   "a blob may hold: its stored bytes are damaged or hostile")
            h.update(chunk)
            if keep:
                kept.append(chunk)
    except zlib.error:
        raise BlobMismatch(f"{what} does not match its digest: its stored bytes were "
                           "changed (they no longer inflate)") from None
    if h.hexdigest() != digest:
        raise BlobMismatch(f"{what} does not match its digest: its stored bytes were changed")
    return size, b"".join(kept)


def _chunks(codec: str, stored: bytes) -> Iterator[bytes]:
    if codec == "raw":
        yield stored
        return
    inflater = zlib.decompressobj()
    data = stored
    while data and not inflater.eof:
        yield inflater.decompress(data, _CHUNK)
        data = inflater.unconsumed_tail
    yield inflater.flush()
    if not inflater.eof or inflater.unused_data:
        raise zlib.error("truncated or trailing zlib stream")


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
        row = self.row(digest)
        if row is None:
            raise StoreError(f"blob {ref} is not in {self.file.path}; import the run's export "
                             "file, which carries its blobs")
        try:
            return unpack(digest, *row)[1]
        except BlobMismatch as e:
            raise BlobMismatch(f"{e} in {self.file.path}; run `npu-deploy verify` to see "
                               "which runs it breaks, and restore the store from an export "
                               "or a copy") from None

    def row(self, digest: str) -> tuple[str, bytes] | None:
        """The stored codec and bytes of a blob, as they are (for an export)."""
        row = self.file.conn.execute("SELECT codec, data FROM blobs WHERE sha256 = ?",
                                     (digest,)).fetchone()
        return (row[0], row[1]) if row else None
