"""Shared fixtures: real store files in a temporary directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from store import EventStore

STARTED = {"model": "tiny-llama", "backend": "emulator", "agent": "autopilot",
           "code_version": "test"}


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "runs.db"


@pytest.fixture
def store(db_path: Path):
    s = EventStore.open(db_path)
    yield s
    s.close()
