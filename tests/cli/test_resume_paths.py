"""One resume path: `npu-deploy resume` and the TUI's resume (its run browser's `r`, and the
run it goes on with after a decision taken in the window) check the same things before any
conductor opens the run (Claude's key, the NPU of an xrt run) and refuse with the same line,
the store untouched."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import ERROR_PREFIX, assert_one_error

from npu_deploy.cli.tui import ConductorDriver
from npu_deploy.deploy_request import CLAUDE_PIPELINE, Refused
from npu_deploy.machine import Conductor, Policy
from npu_deploy.store import EventStore


def stopped_run(db_path: Path, fake: Any, **config: Any) -> tuple[str, list[str]]:
    """A run opened and left (as after a crash) with `config`: its id and events' hashes."""
    with EventStore.open(db_path) as store:
        c = Conductor.start(store, fake(), Policy(), model="tiny-llama",
                            backend=config.get("backend", "emulator"), config=config)
        c.close()
        return c.run_id, [e.hash for e in store.events(c.run_id)]


def hashes(db_path: Path, run_id: str) -> list[str]:
    with EventStore.open(db_path, readonly=True) as store:
        return [e.hash for e in store.events(run_id)]


def tui_resume(db_path: Path, run_id: str, monkeypatch: pytest.MonkeyPatch) -> Refused:
    """The TUI's resume (`ConductorDriver.resume`, what the app calls in its worker): the
    refusal it raises. Its conductor is not driven if it opens one (a refused check opens
    none), so that a missing check fails here, not by waiting for a person."""
    def not_driven(conductor: Any) -> str:
        conductor.close()
        return "opened"

    monkeypatch.setattr(ConductorDriver, "_drive", staticmethod(not_driven))
    with pytest.raises(Refused) as refused:
        ConductorDriver(db_path).resume(run_id)
    return refused.value


def test_the_tuis_resume_of_a_claude_run_without_the_key_is_refused_as_the_clis(
        cli, db_path, fake, monkeypatch):
    run_id, before = stopped_run(db_path, fake, pipeline=CLAUDE_PIPELINE)
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    line = assert_one_error(cli("--db", db_path, "resume", run_id,
                                env={"ANTHROPIC_API_KEY": None}),
                            "ANTHROPIC_API_KEY", f"run {run_id} is worked by Claude")
    refused = tui_resume(db_path, run_id, monkeypatch)
    assert f"{ERROR_PREFIX} {refused}" == line
    assert hashes(db_path, run_id) == before


def test_the_tuis_resume_of_an_xrt_run_without_an_npu_is_refused_as_the_clis(
        cli, db_path, fake, monkeypatch):
    run_id, before = stopped_run(db_path, fake, backend="xrt", pipeline="fake_pipeline:make",
                                 air_objects=str(db_path.parent))
    result = cli("--db", db_path, "resume", run_id)
    line = assert_one_error(result, f"run {run_id} runs on the NPU: resuming it: this "
                                    "machine lacks pyxrt")
    assert result.exit_code == 2
    refused = tui_resume(db_path, run_id, monkeypatch)
    assert f"{ERROR_PREFIX} {refused}" == line
    assert hashes(db_path, run_id) == before
