"""Which machine made a run: node keys, and the head's keyring of the nodes it trusts.

A matrix (npu-deploy matrix) runs deployments on several hosts and gathers their events in
one store, the head's. Each host (a node) holds an Ed25519 key of its own, a 32-byte seed in
a file like the user's key (mode 0600, never a link; `NPU_DEPLOY_NODE_KEY_FILE`, else
`node.key` in the node's folder). What a node ships it signs: the run, and the version and
hash of the newest event shipped, which the hash chain binds to every event before it.

The head checks each signature against its keyring, a JSON file beside the user's key
(`nodes.json`, or `NPU_DEPLOY_KEYRING`) that a person edits only through `npu-deploy node
enroll` and `node revoke`: a name and a public key per node, when it was enrolled and, once
revoked, when. The head takes nothing from a key it does not hold or has revoked, and
`verify` names the node that signed each stretch of a run. A public key is no secret: the
keyring can be shared, and a head that is broken into cannot sign as a node.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from filelock import FileLock
from platformdirs import user_config_path, user_data_path

from npu_deploy.events import canonical_json, utc_now

from .anchor import KEY_BYTES, place_key, read_key
from .errors import StoreError
from .files import atomic_file

NODE_DIR_ENV = "NPU_DEPLOY_NODE_DIR"
NODE_KEY_ENV = "NPU_DEPLOY_NODE_KEY_FILE"
KEYRING_ENV = "NPU_DEPLOY_KEYRING"
SIGNED = "npu-deploy shipment"        # the domain of a node's signature
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class NodeRefused(StoreError):
    """A node, a key or a signature the head does not take."""


def node_dir() -> Path:
    """This host's node folder (its key and its runs' stores): `NPU_DEPLOY_NODE_DIR`, else
    npu-deploy's data folder's `node/`."""
    env = os.environ.get(NODE_DIR_ENV)
    return Path(env) if env else user_data_path("npu-deploy") / "node"


def node_key_path() -> Path:
    env = os.environ.get(NODE_KEY_ENV)
    return Path(env) if env else node_dir() / "node.key"


def key_id(public: bytes) -> str:
    """A node key's id: 16 hex digits of a digest of its public key."""
    return hashlib.sha256(b"npu-deploy node key\x00" + public).hexdigest()[:16]


@dataclass(frozen=True)
class NodeKey:
    """This host's signing key."""

    seed: bytes

    @property
    def public(self) -> bytes:
        from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

        return self._private().public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)

    @property
    def id(self) -> str:
        return key_id(self.public)

    def _private(self) -> Any:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        return Ed25519PrivateKey.from_private_bytes(self.seed)

    def sign(self, run_id: str, version: int, head_hash: str) -> str:
        """The signature of a run's head as shipped: "<key id>:<hex>"."""
        text = canonical_json([SIGNED, run_id, version, head_hash]).encode()
        return f"{self.id}:{self._private().sign(text).hex()}"


def node_key(*, create: bool) -> NodeKey | None:
    """This host's node key; made (mode 0600) when missing and `create`."""
    path = node_key_path()
    seed = read_key(path, NODE_KEY_ENV)
    if seed is None and create:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
        )

        fresh = Ed25519PrivateKey.generate().private_bytes(
            Encoding.Raw, PrivateFormat.Raw, NoEncryption())
        if not place_key(path, fresh, NODE_KEY_ENV):   # another process made it first
            return node_key(create=False)
        seed = fresh
    assert seed is None or len(seed) == KEY_BYTES
    return None if seed is None else NodeKey(seed)


# --- the head's keyring -------------------------------------------------------------------

def keyring_path() -> Path:
    env = os.environ.get(KEYRING_ENV)
    return Path(env) if env else user_config_path("npu-deploy") / "nodes.json"


@dataclass(frozen=True)
class Enrolled:
    name: str
    public: bytes
    enrolled_ts: str
    revoked_ts: str | None = None

    @property
    def id(self) -> str:
        return key_id(self.public)


@dataclass(frozen=True)
class Keyring:
    nodes: tuple[Enrolled, ...] = ()

    def by_id(self, kid: str) -> Enrolled | None:
        return next((n for n in self.nodes if n.id == kid), None)

    def by_name(self, name: str) -> Enrolled | None:
        return next((n for n in self.nodes if n.name == name), None)

    def check(self, run_id: str, version: int, head_hash: str, signature: str) -> Enrolled:
        """The enrolled, unrevoked node whose key made `signature` over this head; else
        NodeRefused, saying why in one line."""
        kid, _, hex_sig = signature.partition(":")
        node = self.by_id(kid)
        if node is None:
            raise NodeRefused(f"run {run_id}: signed by node key {kid}, which the head's "
                              f"keyring ({keyring_path()}) does not hold; on that node "
                              "`npu-deploy node key` prints it, and `npu-deploy node enroll "
                              "NAME KEY` here trusts it")
        if node.revoked_ts is not None:
            raise NodeRefused(f"run {run_id}: signed by node {node.name}, whose key "
                              f"{node.id} was revoked at {node.revoked_ts}")
        if not verifies(node.public, run_id, version, head_hash, hex_sig):
            raise NodeRefused(f"run {run_id}: the signature of node {node.name} over v{version} "
                              "does not match what was shipped: the events were changed on "
                              "the way, or signed by another key")
        return node


def verifies(public: bytes, run_id: str, version: int, head_hash: str, hex_sig: str) -> bool:
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    text = canonical_json([SIGNED, run_id, version, head_hash]).encode()
    try:
        Ed25519PublicKey.from_public_bytes(public).verify(bytes.fromhex(hex_sig), text)
    except (InvalidSignature, ValueError):
        return False
    return True


def load_keyring() -> Keyring:
    """The head's keyring; empty when there is none. A file that is not one is refused in
    one line."""
    path = keyring_path()
    try:
        raw = json.loads(path.read_text())
        nodes = tuple(Enrolled(n["name"], bytes.fromhex(n["public_key"]), n["enrolled_ts"],
                               n.get("revoked_ts")) for n in raw["nodes"])
    except FileNotFoundError:
        return Keyring()
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise NodeRefused(f"the keyring {path} is not an npu-deploy keyring ({e}); restore "
                          f"it, or point {KEYRING_ENV} at the right file") from None
    return Keyring(nodes)


def _save(ring: Keyring) -> None:
    path = keyring_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    text = json.dumps({"nodes": [{"name": n.name, "public_key": n.public.hex(),
                                  "enrolled_ts": n.enrolled_ts, "revoked_ts": n.revoked_ts}
                                 for n in ring.nodes]}, indent=2) + "\n"
    with atomic_file(path) as f:
        f.write(text)


def _keyring_lock() -> FileLock:
    path = keyring_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    return FileLock(str(path) + ".lock")


def public_from_text(text: str) -> bytes:
    """A public key as `node key` prints it (64 hex digits), or NodeRefused."""
    if not re.fullmatch(r"[0-9a-f]{64}", text.strip().lower()):
        raise NodeRefused(f"{text[:80]!r} is not a node's public key (64 hex digits, as "
                          "`npu-deploy node key` prints it on that node)")
    return bytes.fromhex(text.strip().lower())


def enroll(name: str, public: bytes) -> Enrolled:
    """Trust `public` as node `name`. A name or key already enrolled is refused (revoke the
    old key first: a name means one key, so `verify` can say who made a run)."""
    if not NAME_RE.match(name):
        raise NodeRefused(f"node name {name[:80]!r}: use 1-64 letters, digits, '.', '_' or '-'")
    with _keyring_lock():
        ring = load_keyring()
        for node in ring.nodes:
            if node.public == public:
                raise NodeRefused(f"that key is enrolled already, as node {node.name}"
                                  + (" (revoked: a revoked key is never trusted again; make "
                                     "the node a new key)" if node.revoked_ts else ""))
            if node.name == name and node.revoked_ts is None:
                raise NodeRefused(f"node {name} is enrolled with key {node.id}; `npu-deploy "
                                  f"node revoke {name}` first to give it another key")
        new = Enrolled(name, public, utc_now())
        _save(Keyring((*ring.nodes, new)))
    return new


def revoke(name: str) -> Enrolled:
    """Stop trusting node `name`'s key: nothing more is taken from it, and `verify` says
    UNANCHORED for a run a revoked key signed."""
    with _keyring_lock():
        ring = load_keyring()
        live = [n for n in ring.nodes if n.name == name and n.revoked_ts is None]
        if not live:
            raise NodeRefused(f"no enrolled node {name[:80]!r} to revoke; `npu-deploy node "
                              "list` shows the keyring")
        done = Enrolled(name, live[0].public, live[0].enrolled_ts, utc_now())
        _save(Keyring(tuple(done if n is live[0] else n for n in ring.nodes)))
    return done
