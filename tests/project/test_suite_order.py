"""The suite's own order (tests/conftest.py): under pytest-xdist's worksteal every worker's
block of tests starts with its share of the longest ones, so that `make test` does not end
on one long test on one worker."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conftest import longest_first


@dataclass
class Item:
    """What the ordering reads of a collected test: its markers and its fixtures."""

    name: str
    marks: tuple[str, ...] = ()
    fixturenames: tuple[str, ...] = field(default=())

    def get_closest_marker(self, name: str) -> str | None:
        return name if name in self.marks else None


def names(items: list) -> list[str]:
    return [i.name for i in items]


SUITE = [Item("a"), Item("deploy1", ("e2e", "slow")), Item("b"), Item("slow1", ("slow",)),
         Item("c"), Item("bundled", fixturenames=("smollm2",)), Item("deploy2", ("e2e",)),
         Item("slow2", ("slow",)), Item("d")]


def test_one_worker_runs_the_longest_first_in_file_order():
    assert names(longest_first(SUITE, 1)) == ["deploy1", "bundled", "deploy2", "slow1",
                                              "slow2", "a", "b", "c", "d"]


def test_each_workers_block_starts_with_its_share_of_the_longest():
    ordered = longest_first(SUITE, 2)
    assert sorted(names(ordered)) == sorted(names(SUITE))
    # worksteal: worker 0 gets the first half of the list, worker 1 the second
    half = len(ordered) // 2
    assert names(ordered[:half]) == ["deploy1", "slow1", "a", "b"]
    assert names(ordered[half:]) == ["bundled", "deploy2", "slow2", "c", "d"]


def test_no_second_top_level_conftest():
    """Tests import helpers from tests/conftest.py by its bare name (`from conftest import
    ...`). A conftest.py in a test folder that is not a package is imported under that same
    name and, collected first, shadows it: 11 test files failed to collect when one came in
    (tests/kernels/conftest.py). Shared fixtures go into tests/conftest.py."""
    tests = Path(__file__).resolve().parent.parent
    shadows = [p.relative_to(tests) for p in tests.rglob("conftest.py")
               if p.parent != tests and not (p.parent / "__init__.py").exists()]
    assert not shadows, shadows
