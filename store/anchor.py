"""The anchor: a per-user secret outside the database, and the MACs made with it.

A SHA-256 chain alone proves only that the events link up: whoever can write the file can
edit an event and compute every later hash again. The key is what such a writer lacks. It
lives in a file of its own (`key_path`: `NPU_DEPLOY_KEY_FILE`, else `key` in the user's
config dir, ~/.config/npu-deploy/key), 32 random bytes created on first use with mode 0600,
and it keys three MACs (HMAC-SHA256, RFC 2104):

* the head of each run: the whole `runs` row (head version and hash, the listing columns,
  where it came from), rewritten in the same transaction as every append;
* each cached snapshot of a folded state;
* each command a person leaves in the inbox (`decide`, the TUI's dialogs).

A stored MAC is "<key id>:<hex>": the key id (a digest of the key, which reveals nothing of
it) says which key made it, so a MAC from another user's key reads as *unanchored here*,
not as tampering, and one from this key that does not match is tampering.
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import logging
import os
import secrets
import sqlite3
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from platformdirs import user_config_path

from npu_deploy.events import canonical_json

from .errors import StoreError
from .files import kind_of

KEY_ENV = "NPU_DEPLOY_KEY_FILE"
#: Where a new key is announced (the command line prints it; without a handler, Python's
#: last-resort handler writes the message on stderr).
log = logging.getLogger(__name__)
KEY_BYTES = 32

#: The columns of a `runs` row the head MAC covers: all but `head_seq` (a position in this
#: file, like an event's seq: an imported run has others) and the MAC itself.
HEAD_FIELDS = ("run_id", "created_ts", "model", "backend", "agent", "parent_run_id",
               "parent_version", "head_version", "head_hash", "head_type", "head_ts",
               "status", "current_phase", "phase_reached", "verdict", "input_tokens",
               "output_tokens", "cost_usd")

Check = Literal["ok", "absent", "foreign", "bad"]


class KeyUnusable(StoreError):
    """The key file exists but cannot be used as it is."""


def key_path() -> Path:
    """`NPU_DEPLOY_KEY_FILE`, else `key` in the user's config dir (~/.config/npu-deploy)."""
    env = os.environ.get(KEY_ENV)
    return Path(env) if env else user_config_path("npu-deploy") / "key"


def user_key(*, create: bool, purpose: str = "") -> bytes | None:
    """This user's key; created (mode 0600) when missing and `create`, else None. `purpose`
    says, in the one notice a new key gets, what it was made for."""
    path = key_path()
    key = read_key(path, KEY_ENV)
    if key is None and create:
        return _create(path, purpose)
    return key


def read_key(path: Path, env: str) -> bytes | None:
    """The KEY_BYTES secret in the file at `path`, or None when there is none. Refused in one
    line, naming `env` (the variable that points elsewhere): a link, a folder, a file of
    another size, or one others can read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise KeyUnusable(_unopenable(path, e, env)) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise KeyUnusable(f"the key {path} is {kind_of(info.st_mode)}, not a file; remove it "
                          f"or point {env} at the key file")
    with os.fdopen(fd, "rb") as f:
        key = f.read(KEY_BYTES + 1)
    # The size first: a file that is no key at all (the store, a certificate) is said to be
    # one, not to need a chmod. Its size as the file system says: only KEY_BYTES + 1 of a
    # longer one were read.
    if len(key) != KEY_BYTES:
        size = max(len(key), info.st_size)
        raise KeyUnusable(f"the key {path} holds {size} bytes, not {KEY_BYTES}: it is not "
                          f"an npu-deploy key; restore it, or point {env} at another file")
    if info.st_mode & 0o077:
        raise KeyUnusable(f"the key {path} can be read by others (mode "
                          f"{stat.S_IMODE(info.st_mode):o}); `chmod 600 {path}`")
    return key


def _unopenable(path: Path, e: OSError, env: str) -> str:
    """Why the key file cannot be opened, by its cause (a link is never followed: it could
    lead anywhere another process chooses)."""
    if e.errno == errno.ELOOP:
        return (f"the key {path} is a symbolic link, and npu-deploy reads its key only from "
                f"the file itself; put the key file there, or point {env} at it")
    if e.errno == errno.ENOTDIR:
        return (f"the key's path {path} goes through something that is not a folder; point "
                f"{env} at the key file")
    if e.errno in (errno.EACCES, errno.EPERM):
        return (f"cannot read the key {path}: permission denied; `chmod 600 {path}` as its "
                f"owner, or point {env} at your key file")
    return f"cannot read the key {path} ({e.strerror}); point {env} at the key file"


def signing_key(purpose: str = "") -> bytes:
    """This user's key, created on first use: what every writer of a MAC holds. Call it only
    where the MAC is made, once nothing can refuse the command any more: a key made for a
    command that is then refused would turn every run an earlier key anchored into one "made
    by another key". `purpose` ("to anchor run X") goes into the notice a new key gets."""
    key = user_key(create=True, purpose=purpose)
    assert key is not None
    return key


def _create(path: Path, purpose: str) -> bytes:
    key = secrets.token_bytes(KEY_BYTES)
    if not place_key(path, key, KEY_ENV):   # another process made one first: use theirs
        return signing_key()
    # Once: the next command finds it. The command line prints it as a note on stderr.
    log.warning("made a new key at %s%s (there was none): it anchors the runs you write and "
                "signs your decisions from now on; back it up with the store. Runs an "
                "earlier key anchored read as UNANCHORED until that key is back at %s",
                path, f" {purpose}" if purpose else "", path)
    return key


def place_key(path: Path, key: bytes, env: str) -> bool:
    """Put a new key file at `path` whole (mode 0600), or return False when one is there
    already. The bytes are written to a file of their own and linked into place, so a process
    that opens the path finds the whole key or nothing: two processes making the first key at
    once (two deployments started together) agree on the one that was linked first."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as e:
        raise KeyUnusable(f"cannot create the key {path} ({e.strerror}); point {env} "
                          "at a writable place") from None
    try:
        with os.fdopen(fd, "wb") as f:     # mkstemp makes it 0600
            f.write(key)
            f.flush()
            os.fsync(f.fileno())
        os.link(tmp, path)
    except FileExistsError:
        return False
    except OSError as e:
        raise KeyUnusable(f"cannot create the key {path} ({e.strerror}); point {env} "
                          "at a writable place") from None
    finally:
        os.unlink(tmp)
    return True


def key_id(key: bytes) -> str:
    """Which key made a MAC: 16 hex digits of a digest of the key."""
    return hashlib.sha256(b"npu-deploy key id\x00" + key).hexdigest()[:16]


def mac(key: bytes, domain: str, fields: Sequence[Any]) -> str:
    """The MAC of `fields` (JSON values) for one use (`domain`), as "<key id>:<hex>"."""
    text = canonical_json([domain, *fields]).encode()
    return f"{key_id(key)}:{hmac.new(key, text, hashlib.sha256).hexdigest()}"


def check(key: bytes | None, stored: str | None, domain: str, fields: Sequence[Any]) -> Check:
    """ok: made by `key` over these fields. absent: no MAC. foreign: made by another key
    (or no key here to tell). bad: made by `key` over something else: tampered."""
    if not stored:
        return "absent"
    if key is None or not stored.startswith(key_id(key) + ":"):
        return "foreign"
    return "ok" if hmac.compare_digest(stored, mac(key, domain, fields)) else "bad"


_HEAD_ROW = f"SELECT {', '.join(HEAD_FIELDS)}, head_mac FROM runs WHERE run_id = ?"


def anchor_head(conn: sqlite3.Connection, key: bytes, run_id: str) -> None:
    """MAC the run's row as it now stands: call it inside the transaction that changed it."""
    row = conn.execute(_HEAD_ROW, (run_id,)).fetchone()
    conn.execute("UPDATE runs SET head_mac = ? WHERE run_id = ?",
                 (mac(key, "head", row[:-1]), run_id))


def command_fields(run_id: str, command_id: str, kind: str, payload_json: str,
                   author: str | None) -> list[Any]:
    """What a person's command MAC covers: everything the conductor records from it."""
    return [run_id, command_id, kind, payload_json, author]


def snapshot_fields(run_id: str, run_version: int, reducer_version: int, hash_: str,
                    state_json: str) -> list[Any]:
    return [run_id, run_version, reducer_version, hash_, state_json]
