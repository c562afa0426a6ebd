"""The red-team cases of issue 26: each test is one thing an attacker or a careless user
tried, marked `redteam(area, case, before)`: `before` says what it did before the fix (a
traceback, a hang, a changed file, a forged record accepted). `benchmarks/redteam.py` runs
this folder and prints the table: area, case, before, after (the test's outcome)."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # The hook sees every collected test of the session, not only this folder's.
    for item in items:
        if HERE not in Path(str(item.fspath)).resolve().parents:
            continue
        mark = item.get_closest_marker("redteam")
        if mark is None:
            raise pytest.UsageError(f"{item.nodeid}: every red-team test names its case with "
                                    "@pytest.mark.redteam(area=..., case=..., before=...)")
        missing = {"area", "case", "before"} - set(mark.kwargs)
        if missing:
            raise pytest.UsageError(f"{item.nodeid}: redteam marker lacks {sorted(missing)}")
