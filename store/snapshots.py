"""Snapshots: folded states cached in the store, so a fold or a resume starts from the
newest one instead of the first event. Each carries a MAC of this user's key
(store/anchor.py); one that fails it is never used. Deleting them changes nothing but
speed."""

from __future__ import annotations

import json

from npu_deploy.events import REDUCER_VERSION, DeploymentState, canonical_json, utc_now

from .anchor import check, mac, signing_key, snapshot_fields, user_key
from .storefile import StoreFile
from .transaction import transaction


class Snapshots:
    """The snapshots of `file`'s runs."""

    def __init__(self, file: StoreFile) -> None:
        self.file = file

    def save(self, state: DeploymentState) -> None:
        """Cache a folded state. Deleting snapshots changes nothing but speed."""
        if self.file.readonly or not state.run_id:
            return
        fields = snapshot_fields(state.run_id, state.version, REDUCER_VERSION, state.last_hash,
                                 canonical_json(state.to_dict()))
        with transaction(self.file.db):
            self.file.conn.execute(
                "INSERT OR REPLACE INTO snapshots (run_id, run_version, reducer_version, hash, "
                "state, created_ts, mac) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (*fields, utc_now(), mac(signing_key(), "snapshot", fields)))

    def load(self, run_id: str, upto_version: int | None = None) -> DeploymentState | None:
        """The newest usable snapshot: same reducer, its hash still on the chain, and its MAC
        made by this user's key (an edited or foreign snapshot is passed over: the fold then
        starts from an older one, or from the first event)."""
        key = user_key(create=False)
        if key is None:
            return None
        rows = self.file.conn.execute(
            "SELECT s.run_version, s.hash, s.state, s.mac FROM snapshots s JOIN events e "
            "ON e.run_id = s.run_id AND e.run_version = s.run_version AND e.hash = s.hash "
            "WHERE s.run_id = ? AND s.reducer_version = ? AND s.run_version <= ? "
            "ORDER BY s.run_version DESC",
            (run_id, REDUCER_VERSION, upto_version if upto_version is not None else 2**62))
        for version, hash_, text, stored_mac in rows:
            fields = snapshot_fields(run_id, version, REDUCER_VERSION, hash_, text)
            if check(key, stored_mac, "snapshot", fields) != "ok":
                continue
            try:
                return DeploymentState.from_dict(json.loads(text))
            except (ValueError, TypeError, KeyError):
                continue   # a damaged cache entry is ignored, never trusted
        return None
