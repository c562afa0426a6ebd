"""The red team's table: every case under tests/redteam/ (issue 26), what it did before the
fix (the test's `before`) and what it does now (the test's outcome on this machine).

    python -m benchmarks.redteam [pytest args, e.g. -n 2]

Prints one row per case and the counts; exits non-zero if any case fails."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


class Table:
    """A pytest plugin that keeps each red-team test's marker and outcome."""

    def __init__(self) -> None:
        self.rows: dict[str, dict[str, Any]] = {}

    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            mark = item.get_closest_marker("redteam")
            if mark is not None:
                row = {**mark.kwargs, "after": "not run"}
                if "[" in item.nodeid:          # one case, run once per parameter
                    row["case"] += f" [{item.nodeid.split('[', 1)[1]}"
                self.rows[item.nodeid] = row

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        row = self.rows.get(report.nodeid)
        if row is None:                 # run by an xdist worker: the marker's words come along
            words = dict(report.user_properties).get("redteam")
            if not isinstance(words, dict):
                return
            row = self.rows[report.nodeid] = {**words, "after": "not run"}
            if "[" in report.nodeid:
                row["case"] += f" [{report.nodeid.split('[', 1)[1]}"
        if report.when == "call" or report.outcome != "passed":
            if report.skipped:
                reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else ""
                row["after"] = f"skipped: {reason}"
            elif report.failed:
                row["after"] = "FAILS"
            elif report.when == "call":
                row["after"] = "fixed (test passes)"


def main(argv: list[str]) -> int:
    table = Table()
    code = pytest.main(["-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "redteam"),
                        *argv], plugins=[table])
    rows = sorted(table.rows.values(), key=lambda r: (r["area"], r["case"]))
    print("\n| area | case | before | after |\n|---|---|---|---|")
    for r in rows:
        print(f"| {r['area']} | {r['case']} | {r['before']} | {r['after']} |")
    fixed = sum(r["after"].startswith("fixed") for r in rows)
    print(f"\n{len(rows)} cases: {fixed} fixed, "
          f"{sum(r['after'].startswith('skipped') for r in rows)} skipped, "
          f"{sum(r['after'] == 'FAILS' for r in rows)} failing")
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
