"""The command line's test stores (tests/cli/): two runs in a store file, what a command
must leave untouched, and the fixtures' bodies both test_cli.py and test_cli_bad_input.py
use (a conftest.py under tests/cli/ would hide tests/conftest.py from `from conftest
import ...`)."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from conftest import STARTED, checkpoint

from npu_deploy.events import NewEvent
from npu_deploy.store import EventStore

RUN_A = "20260101T000000-aaaaaa"      # 5 events: run.started, 4 messages
RUN_B = "20260101T000001-bbbbbb"      # 3 events
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


# --- helpers and fixtures -----------------------------------------------------------

def message(text: str) -> NewEvent:
    return NewEvent("agent.message", {"role": "assistant", "text": text},
                    actor="agent", phase=0, attempt=1)


def build_store(db: Path) -> Path:
    """A store with RUN_A and RUN_B, its WAL checkpointed into the main file."""
    with EventStore.open(db) as s:
        w = s.create_run(STARTED, run_id=RUN_A)
        for i in range(4):
            w.append(message(f"hello {i}"))
        w.close()
        w = s.create_run({**STARTED, "model": "other"}, run_id=RUN_B)
        w.append_batch([message("one"), message("two")])
        w.close()
    checkpoint(db)
    return db


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def listing(directory: Path) -> dict[str, str | None]:
    """Every entry under a directory: relative path -> sha256 (None for directories)."""
    return {str(p.relative_to(directory)): (sha256(p) if p.is_file() else None)
            for p in sorted(directory.rglob("*"))}


@dataclass
class Untouched:
    """Records a directory before a command; `check()` asserts the store file kept its
    bytes and nothing appeared but (with `allow_wal`) SQLite's empty WAL companions,
    which a read-only SQLite connection to a WAL-mode file creates and leaves."""

    directory: Path
    store: Path | None = None

    def __post_init__(self) -> None:
        self.before = listing(self.directory)
        self.store_hash = sha256(self.store) if self.store and self.store.is_file() else None

    def check(self, *, allow_wal: bool = False) -> None:
        after = listing(self.directory)
        if self.store is not None and self.store_hash is not None:
            assert sha256(self.store) == self.store_hash, f"{self.store} was modified"
        changed = {k for k in self.before if k in after and after[k] != self.before[k]}
        assert not changed, f"files were modified: {changed}"
        gone = set(self.before) - set(after)
        assert not gone, f"files disappeared: {gone}"
        new = set(after) - set(self.before)
        if allow_wal and self.store is not None:
            wal, shm = f"{self.store.name}-wal", f"{self.store.name}-shm"
            new -= {shm}
            if wal in new:
                assert (self.directory / wal).stat().st_size == 0, "the WAL holds new frames"
                new.discard(wal)
        assert not new, f"files were created: {sorted(new)}"



def mentions_version(line: str, version: int) -> bool:
    return re.search(rf"\bv{version}\b", line) is not None


def no_default_store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Point the default store at a path no test uses, and check nothing created it:
    a command given --db must never fall back to the default."""
    sentinel = tmp_path / "sentinel" / "default.db"
    monkeypatch.setenv("NPU_DEPLOY_DB", str(sentinel))
    yield
    assert not sentinel.parent.exists(), "a command fell back to the default store"


def store_of_two_runs(tmp_path: Path) -> Path:
    (tmp_path / "store").mkdir()
    return build_store(tmp_path / "store" / "runs.db")


def exported(tmp_path: Path, db: Path, cli: Callable[..., Any]) -> Path:
    """RUN_A exported from `db`."""
    out = tmp_path / "exports" / "a.jsonl"
    out.parent.mkdir()
    result = cli("--db", db, "export", RUN_A, "-o", out)
    assert result.exit_code == 0, result.stderr
    return out
