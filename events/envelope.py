"""The event envelope, its canonical form, and the per-run hash chain.

An event is an immutable record of something that happened in a deployment.
The storage assigns `seq`; everything else is fixed when the event is built
and covered by `hash`, which also covers the previous event's hash, so a run
is a chain: change any byte of any event and every later link breaks.
"""

from __future__ import annotations

import builtins
import hashlib
import json
import os
import random
import re
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar

if TYPE_CHECKING:
    from .payloads import Payload

    P = TypeVar("P", bound=Payload)

ACTORS: Final = ("agent", "harness", "human", "evaluator")
PHASES: Final = range(8)

#: prev_hash of the first event of every run.
GENESIS_HASH: Final = "0" * 64

#: Bumped only if the hashed form of the envelope ever changes.
HASH_FORMAT: Final = "npu-deploy/event-hash/1"

#: `\Z`, not `$`: `$` also matches before a trailing newline, and "r1\n" is not a run id.
RUN_ID_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}\Z")


class InvalidEvent(ValueError):
    """An event that may not be stored; the message names the field."""


def canonical_json(value: Any) -> str:
    """The one text form of a JSON value: sorted keys, no spaces, ASCII only.

    ASCII-only keeps the text free of raw control characters and lone
    surrogates, so it always encodes and always hashes the same way.
    NaN and infinities are not JSON and are refused.
    """
    return _CANONICAL.encode(value)


# Built once: json.dumps with non-default options builds a new encoder per call.
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                              allow_nan=False)


def sha256_hex(data: bytes) -> str:
    """Hex SHA-256: event links, blob addresses."""
    return hashlib.sha256(data).hexdigest()


# Ids need uniqueness, not secrecy: a seeded Mersenne Twister is enough, and much
# cheaper than a system call per event.
_random = random.Random(int.from_bytes(os.urandom(16)))
# A forked child must not draw the same numbers as its parent.
os.register_at_fork(after_in_child=lambda: _random.seed(int.from_bytes(os.urandom(16))))
_uuid_lock = threading.Lock()
_uuid_last_ms = 0
_uuid_counter = 0


def uuid7() -> str:
    """A time-ordered UUID (RFC 9562 version 7) as a string.

    Within one millisecond a 12-bit counter keeps ids from one process
    strictly increasing; the remaining 62 bits are random.
    """
    global _uuid_last_ms, _uuid_counter
    rand = _random.getrandbits(64)
    with _uuid_lock:
        ms = time.time_ns() // 1_000_000
        if ms <= _uuid_last_ms:
            ms = _uuid_last_ms
            _uuid_counter += 1
            if _uuid_counter > 0xFFF:  # counter exhausted: borrow the next millisecond
                ms += 1
                _uuid_counter = 0
        else:
            _uuid_counter = rand >> 54  # a random start below 0x400 leaves headroom
        _uuid_last_ms = ms
        counter = _uuid_counter
    variant_and_rand = 0x8000000000000000 | (rand & 0x3FFFFFFFFFFFFFFF)
    h = f"{ms & 0xFFFFFFFFFFFF:012x}7{counter:03x}{variant_and_rand:016x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


_ts_second = -1
_ts_prefix = ""


def utc_now() -> str:
    """UTC timestamp with microseconds, e.g. 2026-11-21T05:12:58.123456Z."""
    global _ts_second, _ts_prefix
    second, micro = divmod(time.time_ns() // 1000, 1_000_000)
    if second != _ts_second:   # formatting the date is the slow part: once a second
        _ts_prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _ts_second = second
    return f"{_ts_prefix}.{micro:06d}Z"


def parse_ts(ts: str) -> datetime:
    return datetime.strptime(ts, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def new_run_id() -> str:
    """A readable, sortable run id: UTC start time plus 6 random hex digits."""
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%S-") + os.urandom(3).hex()


#: Separates the fields of the hashed preimage. No field can hold it: ids and
#: names are validated printable text, and canonical JSON escapes control
#: characters. `verify` counts separators, so a field edited to hold one is found.
SEP: Final = "\x1f"
PREIMAGE_SEPARATORS: Final = 14


def hash_preimage(event_id: str, run_id: str, run_version: int, type_: str,
                  schema_version: int, phase: int | None, attempt: int | None, actor: str,
                  ts: str, causation_id: str | None, correlation_id: str | None,
                  idempotency_key: str | None, payload_json: str, prev_hash: str) -> str:
    """What an event's hash covers: every stored column but `seq` and `hash`, in
    storage order, joined by SEP, NULL as the empty string (which no optional id
    may be). The payload enters as its exact stored text, so any changed byte of
    it changes the hash, even one that would decode to the same value."""
    return (f"{HASH_FORMAT}{SEP}{event_id}{SEP}{run_id}{SEP}{run_version}{SEP}{type_}{SEP}"
            f"{schema_version}{SEP}{'' if phase is None else phase}{SEP}"
            f"{'' if attempt is None else attempt}{SEP}{actor}{SEP}{ts}{SEP}"
            f"{causation_id or ''}{SEP}{correlation_id or ''}{SEP}{idempotency_key or ''}{SEP}"
            f"{payload_json}{SEP}{prev_hash}")


def chain_hash(*fields: Any) -> str:
    """SHA-256 (hex) of `hash_preimage(*fields)`."""
    return hashlib.sha256(hash_preimage(*fields).encode()).hexdigest()


@dataclass(frozen=True, slots=True)
class NewEvent:
    """What a writer asks to append; the store fills in the rest."""

    type: str
    payload: dict[str, Any]
    actor: str = "harness"
    phase: int | None = None
    attempt: int | None = None
    causation_id: str | None = None
    correlation_id: str | None = None
    idempotency_key: str | None = None

    @classmethod
    def of(cls, payload: Payload, *, actor: str = "harness", phase: int | None = None,
           attempt: int | None = None, causation_id: str | None = None,
           correlation_id: str | None = None, idempotency_key: str | None = None) -> NewEvent:
        """The event that records `payload`, a value of an event type's payload class."""
        return cls(payload.event_type, payload.to_dict(), actor=actor, phase=phase,
                   attempt=attempt, causation_id=causation_id, correlation_id=correlation_id,
                   idempotency_key=idempotency_key)


class Event(NamedTuple):
    """A stored event. `payload_json` is the exact hashed text of `payload`.

    A named tuple, not a dataclass: one is built per append and per row read,
    and the fields from `event_id` to `hash` are, in order, the stored columns.
    """

    seq: int | None
    event_id: str
    run_id: str
    run_version: int
    type: str
    schema_version: int
    phase: int | None
    attempt: int | None
    actor: str
    ts: str
    causation_id: str | None
    correlation_id: str | None
    idempotency_key: str | None
    payload_json: str
    prev_hash: str
    hash: str
    payload: dict[str, Any]

    def computed_hash(self) -> str:
        return chain_hash(*self[1:15])

    def typed(self, cls: builtins.type[P]) -> P:
        """The payload as a value of its class (`cls`, which must be this event's type's):
        `event.typed(ToolCompleted).ok`."""
        if cls.event_type != self.type:
            raise TypeError(f"event v{self.run_version} is a {self.type}, not a "
                            f"{cls.event_type} ({cls.__name__})")
        return cls.from_dict(self.payload)

    def row(self) -> dict[str, Any]:
        """The stored columns (no decoded payload)."""
        return dict(zip(STORED_COLUMNS, self[:16], strict=True))

    def to_dict(self) -> dict[str, Any]:
        """JSON form for export and `--json`: the decoded payload, no seq."""
        row = self.row()
        del row["seq"]
        row["payload"] = self.payload
        return row


#: The columns of the events table, in the order of `Event`'s first sixteen fields.
STORED_COLUMNS: Final = ("seq", "event_id", "run_id", "run_version", "type", "schema_version",
                         "phase", "attempt", "actor", "ts", "causation_id", "correlation_id",
                         "idempotency_key", "payload", "prev_hash", "hash")


def seal(new: NewEvent, *, run_id: str, run_version: int, prev_hash: str,
         schema_version: int, payload_json: str, payload: dict[str, Any] | None = None,
         event_id: str | None = None, ts: str | None = None) -> Event:
    """Fix an event's identity and time and compute its link in the chain."""
    event_id = event_id or uuid7()
    ts = ts or utc_now()
    digest = chain_hash(event_id, run_id, run_version, new.type, schema_version, new.phase,
                        new.attempt, new.actor, ts, new.causation_id, new.correlation_id,
                        new.idempotency_key, payload_json, prev_hash)
    return Event(None, event_id, run_id, run_version, new.type, schema_version, new.phase,
                 new.attempt, new.actor, ts, new.causation_id, new.correlation_id,
                 new.idempotency_key, payload_json, prev_hash, digest,
                 new.payload if payload is None else payload)


#: An event id: a UUID in its canonical lowercase text (`uuid7` makes every one).
EVENT_ID_RE: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\Z")
#: A time as `utc_now` writes it. ASCII digits only: `\d` would take any script's digits.
TS_RE: Final = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{6}Z\Z")
HASH_RE: Final = re.compile(r"[0-9a-f]{64}\Z")
#: The largest attempt number or run version stored: far past any real run, and inside
#: SQLite's 64-bit integers, which a bigger JSON number would overflow.
MAX_COUNT: Final = 2**31 - 1


def shown(value: Any, limit: int = 80) -> str:
    """A value as an error message quotes it: repr (so control characters show escaped),
    cut to `limit` characters."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def check_envelope(new: NewEvent) -> None:
    """Refuse an envelope that no reader could trust, naming the field."""
    check_names(new.actor, new.phase, new.attempt, new.causation_id, new.correlation_id,
                new.idempotency_key)


def check_names(actor: Any, phase: Any, attempt: Any, causation_id: Any,
                correlation_id: Any, idempotency_key: Any) -> None:
    """The envelope's names and numbers, as `check_envelope` (a new event) and
    `check_event` (a sealed or imported one) check them."""
    if actor not in ACTORS:
        raise InvalidEvent(f"actor: {shown(actor)} is not one of {', '.join(ACTORS)}")
    # `type(...) is int`: 2.0 is in range(8), but SQLite would store it as 2 and the
    # hash, taken over "2.0", would no longer match the row.
    if phase is not None and (type(phase) is not int or phase not in PHASES):
        raise InvalidEvent(f"phase: {shown(phase)} is not a phase number 0-7")
    if attempt is not None and (type(attempt) is not int or not 1 <= attempt <= MAX_COUNT):
        raise InvalidEvent(f"attempt: {shown(attempt)} must be an integer from 1 to "
                           f"{MAX_COUNT}")
    for name, value in (("causation_id", causation_id), ("correlation_id", correlation_id),
                        ("idempotency_key", idempotency_key)):
        if value is not None and (not isinstance(value, str) or not value or len(value) > 200
                                  or not value.isprintable()):
            raise InvalidEvent(f"{name}: {shown(value)} must be 1-200 printable characters")
