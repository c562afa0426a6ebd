"""A long step says how far it has got: stages marked (events/progress.py) and counted by
their unit, nested, written beside the run's lock while the step runs and gone after it
(store/progress.py); the greedy loops of the reference and of the deployed model count
their tokens."""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
from fake_pipeline import FakeGate, FakeMatcher

from npu_deploy.events import progress
from npu_deploy.machine import Conductor, Pipeline, Policy
from npu_deploy.store import progress as progress_file

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def recorded(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Every state a reporter was asked to write, held back or not."""
    seen: list[dict[str, Any]] = []
    write = progress_file.Reporter.write

    def keep(self: progress_file.Reporter, *, force: bool = False) -> None:
        seen.append(asdict(self.progress))
        write(self, force=force)
    monkeypatch.setattr(progress_file.Reporter, "write", keep)
    return seen


def distinct(counts: list[int]) -> list[int]:
    """The counts written, each once (a held-back count is written again by its timer)."""
    return [c for i, c in enumerate(counts) if i == 0 or c != counts[i - 1]]


def test_nested_stages_count_their_own_unit_and_fill_the_outer_bar(tmp_path, monkeypatch):
    monkeypatch.setattr(progress_file, "WRITE_S", 0.0)        # every count written at once
    path = tmp_path / "r.progress"
    with progress_file.reporting(path, "p7.a1.gate", "gate"):
        with progress.stage("independent check", 4):
            progress.advance()                          # one part of four
            with progress.stage("greedy runs", 10, "token"):
                for _ in range(5):
                    progress.advance("token")
                progress.advance("tile")                # no stage counts tiles: nothing
                shown = progress_file.read(path)
                assert shown is not None and shown.call_id == "p7.a1.gate"
                assert shown.text() == ("independent check 1/4 parts · greedy runs 5/10 "
                                        "tokens")
                assert shown.fraction() == pytest.approx((1 + 0.5) / 4)
                progress.reach("token", 9)
            # the inner stage closed: the outer count is written again, its own
            assert progress_file.read(path).text() == "independent check 1/4 parts"
    assert not path.exists()                            # the step ended: nothing to show


def test_outside_a_step_nothing_counts_or_writes(tmp_path):
    with progress.stage("greedy runs", 3, "token"):
        progress.advance("token")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("text", ["", "{", '{"call_id": "x"}', "[1, 2]",
                                  '{"call_id": "x", "tool": "t", "stages": [{"name": 1}]}'])
def test_a_file_that_is_not_progress_reads_as_none(tmp_path, text):
    path = tmp_path / "r.progress"
    path.write_text(text)
    assert progress_file.read(path) is None
    assert progress_file.read(tmp_path / "absent.progress") is None


def test_the_reference_and_the_deployed_model_count_their_greedy_tokens(
        monkeypatch, tiny_models, tmp_path):
    """The token loops are the models' own: a stage over two prompts of 6 steps sees 12
    tokens counted one by one, and reach() closes each prompt's share."""
    from npu_deploy.kernels.emulation.emulator import EmulatorBackend
    from npu_deploy.oracle import reference_of
    from npu_deploy.pipeline.check_reuse import counted
    from npu_deploy.pipeline.deployed import DeployedModel
    from npu_deploy.pipeline.recipe import Recipe

    seen = recorded(monkeypatch)
    loaded = tiny_models["tiny-llama"]
    ids = loaded.tokenizer("The capital of France is", return_tensors="pt").input_ids[0]
    with progress_file.reporting(tmp_path / "r.progress", "c", "build_oracle"):
        for p in counted(["a", "b"], 6, "greedy runs"):
            assert p in ("a", "b")
            reference_of(loaded).generate(ids, 6)
    # opened at 0, then each token, one by one
    assert distinct([s["stages"][0]["done"] for s in seen if s["stages"]]) == list(range(13))
    assert seen[-1]["stages"][0]["total"] == 12

    seen.clear()
    deployed = DeployedModel("tiny-llama", loaded.args, loaded.weights, Recipe(),
                             EmulatorBackend())
    with progress_file.reporting(tmp_path / "r.progress", "c", "run_model"):
        with progress.stage("greedy run", 5, "token"):
            deployed.generate(ids, 5)
    assert distinct([s["stages"][0]["done"] for s in seen if s["stages"]]) == list(range(6))


class CountingAgent:
    """One step that counts 3 of 10 tokens, then waits until the test has looked."""

    name = "counting"

    def __init__(self) -> None:
        self.counted, self.release = threading.Event(), threading.Event()

    def work(self, run: Any) -> None:
        run.step("count", {}, self._count)

    def _count(self) -> dict[str, Any]:
        with progress.stage("greedy runs", 10, "token"):
            progress.advance("token", 3)
            self.counted.set()
            assert self.release.wait(timeout=30)
        return {"ok": True}


def test_a_conductor_step_writes_its_progress_beside_the_lock_and_removes_it(
        store):
    agent = CountingAgent()
    pipeline = Pipeline(agent, make_gates(), FakeMatcher())
    c = Conductor.start(store, pipeline, Policy(auto_approve=True), model="tiny", run_id="r1")
    worker = threading.Thread(target=lambda: c.run(wait=False), daemon=True)
    worker.start()
    path: Path = store.progress_path("r1")
    assert agent.counted.wait(timeout=30)
    shown = progress_file.read(path)
    step = [e for e in store.events("r1", types=("tool.requested",))][-1]
    assert shown is not None and shown.call_id == step.payload["call_id"]
    assert shown.tool == "count"
    assert shown.text() in ("greedy runs 0/10 tokens", "greedy runs 3/10 tokens")  # throttled
    agent.release.set()
    worker.join(timeout=30)
    c.close()
    assert not path.exists()


def make_gates() -> dict[int, Any]:
    return {k: FakeGate(0) for k in range(8)}


def test_a_count_held_back_reaches_the_file_however_long_the_next_one_takes(tmp_path):
    path = tmp_path / "r.progress"
    with progress_file.reporting(path, "c", "t"), progress.stage("greedy runs", 10, "token"):
        progress.advance("token", 4)            # within WRITE_S of the stage's opening
        assert progress_file.read(path).text() == "greedy runs 0/10 tokens"
        deadline = time.monotonic() + 5
        while progress_file.read(path).text() != "greedy runs 4/10 tokens":
            assert time.monotonic() < deadline, "the held-back count was never written"
            time.sleep(0.05)
    assert not path.exists()
