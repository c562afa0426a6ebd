"""`npu-deploy matrix compare A B` (cluster/compare.py): real runs of the real conductor on
a real store, in matrices entered in the store's book (store/matrix.py), compared through
the command line. Phases 4 and 5 plan SmolLM2-135M with the real planner and performance
model (tests/tui_runs.py's planning agent), so every time is modeled; phase 2's gate
checks a cosine; the other gates are the fake pipeline's (tests/fake_pipeline.py).

Matrix A and three matrices B, each the same cells with one regression seeded into ONE
cell: phase 2's gate fails (`gate`), the prefill plan loses a transform so its modeled time
is slower (`slower`), phase 2's cosine drops by more than its tolerance (`worse`)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from conftest import assert_one_error, checkpoint
from tui_runs import _PlanningAgent, pipeline

from npu_deploy.cluster.compare import MARK, Time, compare, slower
from npu_deploy.cluster.spec import Cell
from npu_deploy.events.payloads import GateCheck, GateEvaluated
from npu_deploy.machine import Conductor, Policy
from npu_deploy.store import EventStore
from npu_deploy.store.matrix import note_cell, record_matrix

#: The cells of every matrix: one model named with [brackets], as a person may name one.
PLAIN = Cell("smollm2-135m", 16, "emulator", "autopilot")
BRACKETS = Cell("smollm2-135m[exp]", 32, "emulator", "autopilot")
#: A's phase-2 cosine; a drop of 0.0002 is within the tolerance (a tenth of 1 - 0.99)
COSINE, SMALL_DROP, BIG_DROP = 0.9995, 0.9993, 0.9950


@dataclass(frozen=True)
class Seed:
    """How one cell's run is made: phase 2's cosine, phase 3's gate failing for good,
    whether phases 4 and 5 plan (and record modeled profiles: two seconds of the planner's
    work a run) and the transform its prefill plan goes without."""

    cosine: float = COSINE
    gate_fails: bool = False
    planned: bool = True
    lost_transform: str | None = None


class CosineGate:
    """Phase 2's gate as pipeline/gates/block.py words it: the block's cosine, gating."""

    def __init__(self, cosine: float) -> None:
        self.cosine = cosine

    def evaluate(self, run: Any) -> GateEvaluated:
        ok = self.cosine >= 0.99
        return GateEvaluated(gate="phase2.block", passed=ok, checks=[
            GateCheck(subject="layer 0", metric="cosine", value=self.cosine, threshold=0.99,
                      comparison=">=", passed=ok)])


class SeqPlanningAgent(_PlanningAgent):
    """tests/tui_runs.py's planning agent at the cell's prompt length, which may go without
    one transform (a plan that lost it: slower)."""

    def __init__(self, seq_len: int, lost: str | None) -> None:
        super().__init__()
        self.seq_len, self.lost = seq_len, lost

    def work(self, run: Any) -> None:
        if run.phase not in (4, 5):
            super().work(run)
            return
        from npu_deploy.kernels.definition.specs import Decode, Prefill
        from npu_deploy.kernels.plans.transforms import TRANSFORMS

        mode = Prefill(self.seq_len) if run.phase == 4 else Decode(self.seq_len)
        with mock.patch.dict(TRANSFORMS):       # the planner's table, as it was after
            if self.lost is not None and run.phase == 4:
                del TRANSFORMS[self.lost]
            self._optimize(run, mode)


def deploy_cell(store: EventStore, matrix: str, cell: Cell, seed: Seed) -> None:
    """The cell's run, to its end (or to a stop for a person), entered in the book."""
    pipe = pipeline("3:9" if seed.gate_fails else "")
    if seed.planned:
        pipe.agent = SeqPlanningAgent(cell.seq_len, seed.lost_transform)
    pipe.agent.name = cell.agent       # type: ignore[attr-defined]
    pipe.gates[2] = CosineGate(seed.cosine)
    run_id = cell.run_id(matrix)
    note_cell(store, matrix, run_id, cell.__dict__, "running", node="here", started=True)
    c = Conductor.start(store, pipe, Policy(auto_approve=True, budget=2),
                        model=cell.model, backend=cell.backend, run_id=run_id)
    try:
        halt = c.run(wait=False)
    finally:
        c.close()
    note_cell(store, matrix, run_id, cell.__dict__,
              "finished" if halt.reason == "finished" else "needs_human")


def make_matrix(store: EventStore, name: str, seeds: dict[Cell, Seed]) -> None:
    record_matrix(store, name, {"name": name, "cells": [c.label for c in seeds]})
    for cell, seed in seeds.items():
        deploy_cell(store, name, cell, seed)


def first_kept_transform() -> str:
    """The prefill transform the planner keeps first at PLAIN's length (a plan without it
    is slower, modeled)."""
    from npu_deploy.kernels.definition.hardware import XDNA2
    from npu_deploy.kernels.definition.specs import Prefill
    from npu_deploy.kernels.performance.model import estimate
    from npu_deploy.kernels.plans.transforms import TRANSFORMS, IllegalTransform
    from npu_deploy.models import CATALOG
    from npu_deploy.pipeline.recipe import Recipe

    plan = Recipe().plan("smollm2-135m", CATALOG["smollm2-135m"].args,
                         Prefill(PLAIN.seq_len), XDNA2)
    for name, transform in TRANSFORMS.items():
        try:
            if estimate(transform.apply(plan), XDNA2).total_s < estimate(plan, XDNA2).total_s:
                return name
        except IllegalTransform:
            continue
    raise AssertionError("no transform makes the prefill plan faster")


SEEDS: dict[str, Callable[[], Seed]] = {
    "gate": lambda: Seed(gate_fails=True),
    "slower": lambda: Seed(lost_transform=first_kept_transform()),
    "worse": lambda: Seed(cosine=BIG_DROP),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, anchor_key: Path) -> Path:
    """One store: matrix `a`; `b-gate`, `b-slower`, `b-worse`, each with PLAIN seeded and
    BRACKETS as in A but for a cosine drop within its tolerance; `c` without BRACKETS and
    with a cell A lacks. Only PLAIN plans (BRACKETS' runs record no profile)."""
    db = tmp_path_factory.mktemp("compare") / "runs.db"
    unplanned = Seed(planned=False)
    with EventStore.open(db) as store:
        make_matrix(store, "a", {PLAIN: Seed(), BRACKETS: unplanned})
        for kind, seed in SEEDS.items():
            make_matrix(store, f"b-{kind}", {PLAIN: seed(), BRACKETS: Seed(
                cosine=SMALL_DROP, planned=False)})
        extra = Cell("smollm2-135m", 64, "emulator", "autopilot")
        make_matrix(store, "c", {PLAIN: Seed(), extra: unplanned})
    checkpoint(db)
    return db


@pytest.fixture
def db(built: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "runs.db"
    copy.write_bytes(built.read_bytes())
    return copy


def marked_rows(markdown: str) -> list[str]:
    return [line for line in markdown.splitlines() if f"**{MARK}**" in line]


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SEEDS))
def test_the_seeded_cell_alone_is_marked(kind: str, db: Path, tmp_path: Path,
                                         cli: Callable[..., Any]) -> None:
    md, js = tmp_path / "cmp.markdown", tmp_path / "cmp.json"
    result = cli("--db", db, "matrix", "compare", "a", f"b-{kind}", "--markdown", md,
                 "--json", js)
    assert result.exit_code == 1, result.output
    # the printed table: the regression is in PLAIN's section, none in BRACKETS'
    printed = result.stdout
    assert printed.count(f"{MARK}:") >= 1
    plain_part, brackets_part = printed.split(BRACKETS.model)
    assert f"{MARK}:" in plain_part and f"{MARK}:" not in brackets_part
    # the JSON: exactly the seeded cell has regressions, of the seeded kind
    data = json.loads(js.read_text())
    marked = {c["cell"]["model"] + f"/{c['cell']['seq_len']}": c["regressions"]
              for c in data["cells"] if c["regressions"]}
    assert list(marked) == [f"{PLAIN.model}/{PLAIN.seq_len}"]
    words = " ".join(marked[f"{PLAIN.model}/{PLAIN.seq_len}"])
    expected = {"gate": "gate fake-3 passed -> failed", "slower": "prefill",
                "worse": "cosine 0.9995 -> 0.995"}[kind]
    assert expected in words, words
    assert data["regressions"] == len(marked[f"{PLAIN.model}/{PLAIN.seq_len}"])
    # the Markdown: every marked row is the seeded cell's
    rows = md.read_text().splitlines()
    first_brackets = next(i for i, r in enumerate(rows) if BRACKETS.label in r)
    assert marked_rows(md.read_text())
    assert not marked_rows("\n".join(rows[first_brackets:]))


@pytest.mark.slow
def test_a_gate_that_fails_marks_the_verdict_too(db: Path) -> None:
    with EventStore.open(db, readonly=True) as store:
        result = compare(store, "a", "b-gate")
    cell = next(c for c in result.cells if c.cell == PLAIN)
    assert cell.a is not None and cell.b is not None
    assert (cell.a.standing, cell.b.standing) == ("PASS", "needs_human")
    assert cell.regressions[0] == "verdict PASS -> needs_human"


@pytest.mark.slow
def test_a_slower_plan_is_marked_as_modeled(db: Path) -> None:
    with EventStore.open(db, readonly=True) as store:
        result = compare(store, "a", "b-slower")
    cell = next(c for c in result.cells if c.cell == PLAIN)
    assert cell.a is not None and cell.b is not None
    a, b = cell.a.times["prefill"], cell.b.times["prefill"]
    assert (a.source, b.source) == ("modeled", "modeled") and b.total_s > a.total_s
    row = next(r for r in cell.rows if r.what == "prefill time")
    assert "(modeled)" in row.a and "(modeled)" in row.b and "measured" not in row.b
    assert row.regression.startswith("prefill ") and "ms modeled" in row.regression
    # decode kept every transform: the same modeled seconds, not marked
    assert not next(r for r in cell.rows if r.what == "decode time").regression


@pytest.mark.slow
def test_a_matrix_against_itself_has_no_mark(db: Path, tmp_path: Path,
                                             cli: Callable[..., Any]) -> None:
    md, js = tmp_path / "same.markdown", tmp_path / "same.json"
    result = cli("--db", db, "matrix", "compare", "a", "a", "--markdown", md, "--json", js)
    assert result.exit_code == 0, result.output
    assert MARK not in result.stdout.replace(f"marked {MARK}", "")
    assert not marked_rows(md.read_text())
    data = json.loads(js.read_text())
    assert data["regressions"] == 0 and all(not c["regressions"] for c in data["cells"])
    assert {c["cell"]["model"] for c in data["cells"]} == {PLAIN.model, BRACKETS.model}


@pytest.mark.slow
def test_a_model_named_with_brackets_prints_as_named(db: Path,
                                                     cli: Callable[..., Any]) -> None:
    result = cli("--db", db, "matrix", "compare", "a", "a")
    assert f"{BRACKETS.model} {BRACKETS.seq_len}" in result.stdout


@pytest.mark.slow
def test_an_unknown_matrix_is_refused_with_the_names_held(db: Path,
                                                          cli: Callable[..., Any]) -> None:
    before = db.read_bytes()
    result = cli("--db", db, "matrix", "compare", "a", "nightly")
    line = assert_one_error(result, "no matrix 'nightly'", "a, b-gate, b-slower, b-worse, c")
    assert result.exit_code == 2, line
    assert db.read_bytes() == before


def test_a_store_without_matrices_says_so(tmp_path: Path, cli: Callable[..., Any]) -> None:
    with EventStore.open(tmp_path / "empty.db"):
        pass
    result = cli("--db", tmp_path / "empty.db", "matrix", "compare", "a", "b")
    assert_one_error(result, "no matrix 'a'", "none (run `npu-deploy matrix` first)")
    assert result.exit_code == 2


@pytest.mark.slow
def test_a_cell_in_one_side_only_is_listed_not_marked(db: Path, tmp_path: Path,
                                                      cli: Callable[..., Any]) -> None:
    js = tmp_path / "c.json"
    result = cli("--db", db, "matrix", "compare", "a", "c", "--json", js)
    assert result.exit_code == 0, result.output
    data = json.loads(js.read_text())
    only = {(c["cell"]["model"], c["cell"]["seq_len"]): c["only_in"] for c in data["cells"]}
    assert only == {(PLAIN.model, 16): None, (BRACKETS.model, 32): "A",
                    (PLAIN.model, 64): "B"}
    assert "(only in A)" in result.stdout and "(only in B)" in result.stdout
    assert "not in B" in result.stdout and "not in A" in result.stdout


def test_measured_times_are_judged_against_their_spread() -> None:
    """Measured times are noisy: slower only beyond MEASURED_TOLERANCE and outside the
    runs' spread; modeled ones beyond round-off; two sources are never compared."""
    a = Time("prefill", 0.100, "measured-npu", (0.098, 0.100, 0.104))
    overlapping = Time("prefill", 0.110, "measured-npu", (0.103, 0.110, 0.112))
    apart = Time("prefill", 0.110, "measured-npu", (0.108, 0.110, 0.112))
    assert slower(a, overlapping) == ""
    assert "measured" in slower(a, apart)
    assert slower(a, Time("prefill", 0.104, "measured-npu")) == ""
    assert slower(Time("prefill", 0.1, "modeled"), Time("prefill", 0.1001, "modeled"))
    assert slower(Time("prefill", 0.1, "modeled"), Time("prefill", 0.2, "measured-npu")) == ""


@pytest.mark.slow
def test_a_cell_whose_run_has_not_begun_stands_as_the_book_says(db: Path) -> None:
    """A queued cell (no event of its run yet) reads as queued, and A's PASS lost there is
    marked: a matrix compared before it ended does not pass CI."""
    with EventStore.open(db) as store:
        record_matrix(store, "d", {"name": "d"})
        note_cell(store, "d", PLAIN.run_id("d"), PLAIN.__dict__, "queued")
        result = compare(store, "a", "d")
    cell = next(c for c in result.cells if c.cell == PLAIN)
    assert cell.b is not None and cell.b.standing == "queued" and not cell.b.gates
    assert cell.regressions == ["verdict PASS -> queued"]


@pytest.mark.e2e
def test_a_real_deployment_compares_by_its_gates_metrics(deployed: Any, tmp_path: Path,
                                                          cli: Callable[..., Any]) -> None:
    """The autopilot's tiny-llama deployment (the session's, tests/conftest.py) as the one
    cell of a matrix, compared with itself: the real gates' deciding metrics and the modeled
    times are in the table, each metric of a known kind, and nothing is marked."""
    cell = Cell("tiny-llama", 32, "emulator", "autopilot")
    with EventStore.open(deployed.db) as store:
        record_matrix(store, "real", {"name": "real"})
        note_cell(store, "real", deployed.run_id, cell.__dict__, "finished")
    js = tmp_path / "real.json"
    result = cli("--db", deployed.db, "matrix", "compare", "real", "real", "--json", js)
    assert result.exit_code == 0, result.output
    side = json.loads(js.read_text())["cells"][0]["a"]
    assert side["verdict"] == "PASS" and sorted(side["gates"]) == [str(k) for k in range(8)]
    kinds = {m: v["kind"] for g in side["gates"].values() for m, v in g["values"].items()}
    assert {"prefill_logits_rel_l2", "within_frac", "cosine", "cosine_pos_min",
            "prefill_modeled_s", "decode_modeled_s"} <= set(kinds), kinds
    assert "other" not in kinds.values(), kinds
    assert {t["source"] for t in side["times"].values()} == {"modeled"}
    assert "(modeled)" in result.stdout and "measured" not in result.stdout


def test_a_file_in_a_missing_folder_is_refused_before_anything(tmp_path: Path,
                                                               cli: Callable[..., Any]) -> None:
    with EventStore.open(tmp_path / "runs.db"):
        pass
    result = cli("--db", tmp_path / "runs.db", "matrix", "compare", "a", "a", "--json",
                 tmp_path / "no" / "cmp.json")
    assert_one_error(result, "--json", "no folder", "create it")
    assert result.exit_code == 2 and result.stdout == ""
