"""The red-team cases of issue 26: each test is one thing an attacker or a careless user
tried, marked `redteam(area, case, before)`: `before` says what it did before the fix (a
traceback, a hang, a changed file, a forged record accepted). `benchmarks/redteam.py` runs
this folder and prints the table: area, case, before, after (the test's outcome)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def _shared() -> object:
    """tests/conftest.py's helpers: this file takes the module name `conftest` from it
    (pytest imports both under that name), so `from conftest import assert_one_error` in
    a test here finds them through these names."""
    spec = importlib.util.spec_from_file_location("_tests_conftest", HERE.parent / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_root = _shared()
ERROR_PREFIX = _root.ERROR_PREFIX               # type: ignore[attr-defined]
STARTED = _root.STARTED                         # type: ignore[attr-defined]
assert_one_error = _root.assert_one_error       # type: ignore[attr-defined]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # a conftest's hook sees the whole session's items: check only this folder's
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
