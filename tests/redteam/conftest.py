"""Each red-team case carries its marker's words (area, case, before) in its reports'
`user_properties`, so that `python -m benchmarks.redteam -n 2` can list the cases from the
reports pytest-xdist's workers send back (the table's own collection hook sees no items
there: the workers collect)."""

from __future__ import annotations

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        mark = item.get_closest_marker("redteam")
        if mark is not None and not any(k == "redteam" for k, _ in item.user_properties):
            item.user_properties.append(("redteam", dict(mark.kwargs)))
