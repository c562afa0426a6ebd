"""The suite's own order (tests/conftest.py): under pytest-xdist's worksteal every worker's
block of tests starts with its share of the longest ones, so that `make test` does not end
on one long test on one worker."""

from __future__ import annotations

from dataclasses import dataclass, field

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
