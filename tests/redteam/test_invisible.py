"""Issue 39, point 5: text shown is text seen. A model name, a person's instruction, a gate's
name or an agent's message that holds characters a terminal draws as nothing (zero-width
spaces, right-to-left marks, a byte-order mark), as a line break (U+2028, U+2029) or as a
plain space (a no-break space) is shown with those characters escaped, on the command line,
in the TUI and in the Phase-6 report: `tiny-qwen2` and `tiny-qwen2` plus invisibles never
look the same. One function does it everywhere: events/describe.py `printable`."""

from __future__ import annotations

import unicodedata

import pytest
from fake_pipeline import make

from npu_deploy.events import NewEvent
from npu_deploy.events.describe import printable
from npu_deploy.machine import Conductor, Policy
from npu_deploy.store import EventStore

#: A zero-width space, a right-to-left mark, a byte-order mark: drawn as nothing.
HIDDEN = "tiny-qwen2\u200b\u200f\ufeff"
#: A line and a paragraph separator, a no-break space, a right-to-left override.
INSTRUCTION = "use\u2028the\u2029tile\u00a0sizes \u202eof phase 1"
#: Every character a terminal would not show as itself; what may never be printed raw.
INVISIBLE = "\u200b\u200f\ufeff\u2028\u2029\u00a0\u202e"


@pytest.fixture(autouse=True)
def _gates_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_FAIL", "")


def raw(text: str) -> list[str]:
    """The invisible characters in `text`, by name: none is the only right answer."""
    return [unicodedata.name(c, hex(ord(c))) for c in text if c in INVISIBLE]


def two_runs(db) -> None:
    """r1 deploys `tiny-qwen2`, r2 `tiny-qwen2` plus invisibles, which waits at its first
    checkpoint with a person's redirect (line separators, a no-break space, an override)
    and an agent's message with the same characters."""
    with EventStore.open(db) as store:
        for run_id, model in (("r1", "tiny-qwen2"), ("r2", HIDDEN)):
            c = Conductor.start(store, make(), Policy(), model=model, run_id=run_id,
                                config={"pipeline": "fake_pipeline:make"})
            assert c.run(wait=False).reason == "awaiting_human"
            c.close()
        with store.writer("r2") as w:
            w.append(NewEvent("agent.message", {"role": "assistant", "text": INSTRUCTION},
                              actor="agent", phase=0, attempt=1))
        store.post_command("r2", "redirect", {"instruction": INSTRUCTION,
                                              "checkpoint_id": "p0.a1"})


@pytest.mark.redteam(area="text", case="invisible characters in a model name: runs",
                     before="`runs` printed r2's model `tiny-qwen2` + ZWSP, RLM and BOM raw: "
                            "its row read exactly as r1's `tiny-qwen2`")
def test_runs_tells_a_model_name_with_invisibles_from_the_plain_one(cli, tmp_path):
    db = tmp_path / "runs.db"
    two_runs(db)
    listed = cli("--db", db, "runs")
    assert listed.exit_code == 0, listed.stderr
    assert raw(listed.stdout) == []
    assert "tiny-qwen2\\u200b\\u200f\\ufeff" in listed.stdout
    rows = {line.split()[0]: line.split()[1] for line in listed.stdout.splitlines()
            if line.startswith(("r1 ", "r2 "))}
    assert rows["r1"] != rows["r2"]


@pytest.mark.redteam(area="text", case="line separators and an override in show and resume",
                     before="`show` and `resume` printed the redirect's U+2028, U+2029, "
                            "no-break space and right-to-left override raw: the terminal broke "
                            "the line and reversed the rest of it")
def test_show_and_resume_escape_separators_and_overrides(cli, tmp_path):
    db = tmp_path / "runs.db"
    two_runs(db)
    shown = cli("--db", db, "show", "r2", "--events", "40")
    assert shown.exit_code == 0, shown.stderr
    assert raw(shown.stdout) == []
    assert "r2  tiny-qwen2\\u200b\\u200f\\ufeff on emulator" in shown.stdout
    assert printable(INSTRUCTION) == "use\\u2028the\\u2029tile\\xa0sizes \\u202eof phase 1"
    resumed = cli("--db", db, "resume", "r2", "--no-wait")
    assert resumed.exit_code == 3, resumed.stderr
    assert f"decision: redirect {printable(INSTRUCTION)} (by human)" in resumed.stdout
    assert raw(resumed.stdout + resumed.stderr) == []


@pytest.mark.redteam(area="text", case="invisible characters in a gate's name: show",
                     before="`show`'s phase table printed the last gate's name raw (the one "
                            "name there that did not go through `printable`)")
def test_show_escapes_a_gate_name(cli, tmp_path):
    db = tmp_path / "runs.db"
    with EventStore.open(db) as store, store.create_run(
            {"model": "tiny", "backend": "emulator", "agent": "autopilot",
             "code_version": "t"}, run_id="g1") as w:
        w.append(NewEvent("phase.entered", {"name": "oracle"}, phase=0, attempt=1))
        w.append(NewEvent("gate.evaluated", {
            "gate": "phase0\u200b.oracle\u2066", "passed": True, "checks": [
                {"subject": "x", "metric": "m", "value": 0.0, "threshold": 1.0,
                 "comparison": "<=", "passed": True, "gating": True}]},
            phase=0, attempt=1))
    shown = cli("--db", db, "show", "g1")
    assert shown.exit_code == 0, shown.stderr
    assert "phase0\\u200b.oracle\\u2066 PASS" in shown.stdout
    assert "\u200b" not in shown.stdout and "\u2066" not in shown.stdout


@pytest.mark.redteam(area="text", case="invisible characters in the TUI's run browser",
                     before="the browser's model column and the run screen's title showed "
                            "`tiny-qwen2` for both runs; the redirect's separators broke the "
                            "event line")
async def test_the_tui_shows_invisibles_escaped(tmp_path):
    from textual.widgets import DataTable

    from npu_deploy.tui import DeployApp
    from npu_deploy.tui.screens.runs import RunsScreen

    db = tmp_path / "runs.db"
    two_runs(db)
    app = DeployApp(db, live=False)
    async with app.run_test(size=(150, 45)) as pilot:
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)
        table = app.screen.query_one(DataTable)
        models = {key: str(table.get_row(key)[1]) for key in ("r1", "r2")}
        assert models == {"r1": "tiny-qwen2", "r2": "tiny-qwen2\\u200b\\u200f\\ufeff"}
        assert raw(app.export_screenshot()) == []
    app = DeployApp(db, run_id="r2", live=False)
    async with app.run_test(size=(150, 45)) as pilot:
        await pilot.pause()
        title = str(app.screen.query_one("#run-title").render())
        assert "r2  tiny-qwen2\\u200b\\u200f\\ufeff  emulator" in title
        assert raw(app.export_screenshot()) == []


@pytest.mark.redteam(area="text", case="invisible characters in the Phase-6 report",
                     before="report.md's title and its Answers section held the model name's "
                            "ZWSP, RLM and BOM and the prompt's U+2028 raw")
def test_the_report_escapes_invisibles():
    from npu_deploy.pipeline.report.render import ReportData, report_markdown

    text = report_markdown(ReportData(
        run_id="r2", model=HIDDEN, backend="emulator", time_source="modeled",
        peak_flops=1e12, ddr_bw=1e10, prefill={"baseline_s": 2.0, "deployed_s": 0.5},
        decode={}, transforms=[], kernels=[], phases=[],
        gates=[{"phase": 0, "gate": "phase0\u200b.oracle", "passed": True, "attempts": 1,
                "worst": "-"}],
        answers=[{"prompt": "say\u2028hi", "answer": "hi\u200b there\u202e"}]))
    assert raw(text) == []
    assert "# Performance report: tiny-qwen2\\u200b\\u200f\\ufeff, run r2" in text
    assert "phase0\\u200b.oracle" in text
    assert "**Prompt:** say\\u2028hi" in text and "> hi\\u200b there\\u202e" in text
