"""Verification: a run's hash chain checked link by link, the blobs its payloads reference,
its snapshots and its head's anchor (store/anchor.py), with the first bad event named; and
SQLite's own check of the whole file."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from hashlib import sha256
from typing import Any

from npu_deploy.events import (
    EVENT_TYPES,
    GENESIS_HASH,
    DeploymentState,
    blob_refs,
    declared_blob_refs,
    with_head,
)
from npu_deploy.events.envelope import PREIMAGE_SEPARATORS, SEP, hash_preimage
from npu_deploy.events.state import REDUCED_TYPES, reduce_body

from .anchor import HEAD_FIELDS, KEY_ENV, check, key_id, key_path, snapshot_fields, user_key
from .blobs import BlobMismatch, unpack
from .errors import StoreCorrupt, UnknownRun
from .matrix import node_stretches
from .nodes import keyring_path, load_keyring, verifies
from .rows import EVENT_COLUMNS, RUN_OPENERS, event_from_row
from .storefile import StoreFile
from .transaction import read_snapshot


@dataclass(frozen=True)
class VerifyReport:
    run_id: str
    ok: bool
    events: int
    head_hash: str
    problem: str | None = None
    bad_version: int | None = None
    bad_seq: int | None = None
    state: DeploymentState | None = None
    #: The head's MAC checked with this user's key (store/anchor.py); `ok` alone says the
    #: chain, blobs and snapshots hold together, which anyone able to write the file can fake.
    anchored: bool = False
    unanchored: str | None = None    # why not, when the chain is intact but not anchored
    #: The id of the key whose MAC the run carries, when that key is not this user's (or
    #: there is no key here to tell).
    unanchored_by: str | None = None
    #: Where the run was made, when nodes of a matrix shipped it here (store/ingest.py): each
    #: stretch as "NODE v1-v40", its signature checked against the keyring.
    made_on: tuple[str, ...] = ()

    @property
    def status(self) -> str:
        """ok (intact and anchored), unanchored (intact, nothing more proven), broken."""
        return "broken" if not self.ok else "ok" if self.anchored else "unanchored"

    @property
    def trusted(self) -> bool:
        return self.ok and self.anchored

    def line(self) -> str:
        if not self.ok:
            return f"{self.run_id}: BROKEN: {self.problem}"
        if not self.anchored:
            return (f"{self.run_id}: UNANCHORED: chain intact ({self.events} events, head "
                    f"{self.head_hash[:16]}), but {self.unanchored}: without the key that wrote "
                    "it, a rewritten chain cannot be told from the original")
        where = f", made on {', '.join(self.made_on)}" if self.made_on else ""
        return (f"{self.run_id}: OK, {self.events} events, head {self.head_hash[:16]}, "
                f"anchored by this user's key{where}")


class Verifier:
    """Verifies the runs of `file`."""

    def __init__(self, file: StoreFile) -> None:
        self.file = file

    def verify(self, run_id: str, *, fold: bool = True) -> VerifyReport:
        """Check a run's hash chain link by link and name the first bad event.

        Checks: versions contiguous from 1, seq increasing with version, each
        `prev_hash` equal to the previous event's hash, each hash recomputed
        from the stored columns (the payload as its exact stored text, so no
        re-encoding is needed), no field holding the preimage separator, the
        first event a run start, and the run's recorded head equal to its last
        event (which catches deleted tail events); then every blob a payload
        references that the store holds (its bytes hashing to its digest), every snapshot
        whose MAC this user's key made, and last the head MAC over the runs row
        (store/anchor.py), which alone tells a rewritten chain from the original.
        Folds the run on the way when asked, decoding only the events that change
        the state. The runs row, the events, the blobs and the snapshots are read in one
        read transaction, so a writer appending meanwhile is not taken for a cut or
        altered chain.
        """
        with read_snapshot(self.file.conn):
            return self._verify(run_id, fold=fold)

    def _verify(self, run_id: str, *, fold: bool) -> VerifyReport:
        head_row = self.file.conn.execute(f"SELECT {', '.join(HEAD_FIELDS)}, head_mac FROM runs "
                                     "WHERE run_id = ?", (run_id,)).fetchone()
        if head_row is None:
            raise UnknownRun(f"no run {run_id!r} in {self.file.path}; `npu-deploy runs` lists them")
        expected_prev, version, last_seq = GENESIS_HASH, 0, 0
        state, last = DeploymentState(), None
        blobs: dict[str, int] = {}   # every blob a payload references -> the first version
        needed: set[str] = set()      # those its schema declares (BlobRef): must be here
        try:
            cur = self.file.conn.execute(f"SELECT {EVENT_COLUMNS} FROM events WHERE run_id = ? "
                                    "ORDER BY run_version", (run_id,))
            while rows := cur.fetchmany(1024):
                for row in rows:
                    seq, type_, stored_hash = row[0], row[4], row[15]
                    preimage = hash_preimage(*row[1:15])
                    if (row[3] != version + 1 or row[14] != expected_prev or seq <= last_seq
                            or preimage.count(SEP) != PREIMAGE_SEPARATORS
                            or sha256(preimage.encode()).hexdigest() != stored_hash
                            or (version == 0 and type_ not in RUN_OPENERS)
                            or type_ not in EVENT_TYPES):
                        problem = _problem(row, version, expected_prev, last_seq)
                        return VerifyReport(run_id, False, version, expected_prev,
                                            f"event v{row[3]} (seq {seq}, {type_}): {problem}",
                                            bad_version=row[3], bad_seq=seq)
                    version, expected_prev, last_seq, last = row[3], stored_hash, seq, row
                    # The hash covers the payload's exact text, so only the events that
                    # change the state need decoding (see events.state.fold).
                    if fold and type_ in REDUCED_TYPES:
                        state = reduce_body(state, event_from_row(row))
                    if "sha256:" in row[13]:
                        for ref in blob_refs(json.loads(row[13])):
                            blobs.setdefault(ref.removeprefix("sha256:"), row[3])
                        needed.update(r.removeprefix("sha256:") for r in declared_blob_refs(
                            type_, event_from_row(row).payload))
        except sqlite3.DatabaseError as e:
            raise StoreCorrupt(f"{self.file.path} is damaged while reading run {run_id} ({e}); "
                               "restore it from a copy or an export") from None
        except ValueError:   # a payload that is not JSON, though its hash matched
            raise StoreCorrupt(f"run {run_id}: event v{version + 1} has a payload that is not "
                               "JSON yet matches its hash: it was written by something other "
                               "than npu-deploy") from None
        head_version, head_hash = head_row[7:9]
        if version != head_version or expected_prev != head_hash:
            return VerifyReport(
                run_id, False, version, expected_prev,
                f"the run's recorded head is v{head_version} but its last event is v{version}: "
                + ("events after the last one were removed" if version < head_version
                   else "the run's head record was altered"), bad_version=version + 1)
        if last is None:
            return VerifyReport(run_id, False, 0, GENESIS_HASH, "the run has no events")
        damage = self._blob_problem(blobs, needed) or self._snapshot_problem(run_id)
        key = user_key(create=False)
        anchor = check(key, head_row[-1], "head", head_row[:-1])
        if anchor == "bad":
            damage = ("its head MAC, made by this user's key, does not match the run as stored: "
                       "events or the runs row were rewritten since (an edit, a cut, an "
                       "insertion or a recomputed chain)")
        made_on, node_damage, node_doubt = self._made_on(run_id, version)
        damage = damage or node_damage
        if damage:
            return VerifyReport(run_id, False, version, expected_prev, damage)
        if fold:
            state = with_head(state, event_from_row(last))
        anchored = anchor == "ok" and node_doubt is None
        return VerifyReport(run_id, True, version, expected_prev, state=state if fold else None,
                            anchored=anchored, made_on=made_on,
                            unanchored=None if anchored else
                            node_doubt or _unanchored(anchor, key, head_row[-1]),
                            unanchored_by=(head_row[-1] or "").partition(":")[0]
                            if anchor == "foreign" else None)

    def _blob_problem(self, blobs: dict[str, int], needed: set[str]) -> str | None:
        """The first referenced blob whose stored bytes are not its digest, or that its
        payload's schema declares (`needed`) and the store lacks. Another string that only
        looks like a reference (a skill file's digest in `skill.loaded`) may name no blob."""
        for digest, version in blobs.items():
            row = self.file.conn.execute("SELECT codec, data FROM blobs WHERE sha256 = ?",
                                         (digest,)).fetchone()
            if row is None:
                if digest in needed:
                    return (f"blob sha256:{digest[:16]}... (referenced by v{version}) is "
                            "missing from the store: it was deleted")
                continue
            try:
                unpack(digest, row[0], row[1], keep=False)
            except BlobMismatch as e:
                return f"{e} (referenced by v{version})"
        return None

    def _made_on(self, run_id: str, head_version: int
                 ) -> tuple[tuple[str, ...], str | None, str | None]:
        """The nodes that shipped the run here, stretch by stretch; a signature that does
        not hold (damage: BROKEN); a key the keyring lacks or revoked (doubt: UNANCHORED,
        the node no longer vouches for it). Nothing when no node shipped the run."""
        stretches = node_stretches(self.file.conn, run_id)
        if not stretches:
            return (), None, None
        ring = load_keyring()
        made_on: list[tuple[str, int, int]] = []
        start, doubt = 1, None
        for upto, head_hash, node, kid, signature in stretches:
            row = self.file.conn.execute("SELECT hash FROM events WHERE run_id = ? AND "
                                         "run_version = ?", (run_id, upto)).fetchone()
            if row is None or row[0] != head_hash:
                return (), (f"node {node}'s signature is over v{upto} as it shipped it, and "
                            "the store's event there differs: the run was rewritten"), None
            enrolled = ring.by_id(kid)
            if enrolled is None:
                doubt = doubt or (f"node {node} signed v{start}-v{upto} with key {kid}, which "
                                  f"the keyring ({keyring_path()}) does not hold")
            elif not verifies(enrolled.public, run_id, upto, head_hash,
                              signature.partition(":")[2]):
                return (), f"node {node}'s signature over v{upto} does not match", None
            elif enrolled.revoked_ts is not None:
                doubt = doubt or (f"node {node}'s key {kid}, which signed v{start}-v{upto}, "
                                  f"was revoked at {enrolled.revoked_ts}")
            if made_on and made_on[-1][0] == node:
                made_on[-1] = (node, made_on[-1][1], upto)
            else:
                made_on.append((node, start, upto))
            start = upto + 1
        lines = [f"{n} (v{a}-v{b})" for n, a, b in made_on]
        if start <= head_version:
            lines.append(f"this store (v{start}-v{head_version})")
        return tuple(lines), None, doubt

    def _snapshot_problem(self, run_id: str) -> str | None:
        """A snapshot whose MAC, made by this user's key, no longer matches it. (A snapshot
        without a MAC of this key is never used, so it proves nothing and breaks nothing.)"""
        key = user_key(create=False)
        rows = self.file.conn.execute("SELECT run_version, reducer_version, hash, state, mac "
                                 "FROM snapshots WHERE run_id = ?", (run_id,))
        for version, reducer, hash_, text, stored in rows:
            fields = snapshot_fields(run_id, version, reducer, hash_, text)
            if check(key, stored, "snapshot", fields) == "bad":
                return f"the snapshot at v{version} was altered after it was written"
        return None

    def integrity_problem(self) -> str | None:
        """SQLite's own structural check of the whole file (B-trees, pages)."""
        try:
            result = [r[0] for r in self.file.conn.execute("PRAGMA quick_check")]
        except sqlite3.DatabaseError as e:
            return str(e)
        return None if result == ["ok"] else "; ".join(result[:3])


def _problem(row: tuple[Any, ...], version: int, expected_prev: str, last_seq: int) -> str:
    """Why a stored row is not the next link of its chain, in words."""
    seq, run_version, type_, prev_hash, stored_hash = row[0], row[3], row[4], row[14], row[15]
    if run_version != version + 1:
        return (f"expected v{version + 1} next: " +
                (f"v{version + 1}..v{run_version - 1} are missing" if run_version > version + 1
                 else "versions out of order"))
    if version == 0 and type_ not in RUN_OPENERS:
        return "a run must begin with run.started or run.forked"
    if seq <= last_seq:
        return f"seq {seq} does not follow seq {last_seq}: rows were reordered"
    if prev_hash != expected_prev:
        return "prev_hash does not link to the previous event: the chain was cut or spliced"
    preimage = hash_preimage(*row[1:15])
    if preimage.count(SEP) != PREIMAGE_SEPARATORS:
        return "a field holds a separator character: the stored row was edited"
    if sha256(preimage.encode()).hexdigest() != stored_hash:
        return "hash mismatch: the stored row differs from what was written"
    return f"unknown event type {type_!r}"


def _unanchored(anchor: str, key: bytes | None, stored: str | None) -> str:
    if anchor == "absent":
        return ("it carries no anchor (imported from a store anchored by another key, or "
                "written before anchoring)")
    if key is None:
        return (f"it was anchored by key {(stored or '').partition(':')[0]}, and there is no "
                f"key at {key_path()} to check it (put that key file back there, or point "
                f"{KEY_ENV} at it)")
    return (f"its anchor was made by another key (key id {(stored or '').partition(':')[0]}) "
            f"than this user's (key id {key_id(key)})")
