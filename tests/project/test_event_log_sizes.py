"""The event log's modules and their tests stay short enough to read whole: none over 600
lines (events/payloads.py was split at 716: the event types in payloads.py, the checking of
a JSON value against a dataclass in checking.py; EventStore into a module per role)."""

from __future__ import annotations

import pytest
from paths import ROOT

MAX_LINES = 600
FOLDERS = ("events", "store", "tests/events", "tests/store")


@pytest.mark.parametrize("folder", FOLDERS)
def test_no_module_of_the_event_log_is_over_600_lines(folder):
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"split along a seam of their own: {long}"
