"""The run screen at 80x24 and 160x48, and its legend: the title keeps the run's status and
verdict, the gates table keeps its five columns with the failing check and the checker's
message on screen, and every glyph the widgets draw is explained by help (`?`).

The runs are tests/tui_runs.py's: the real conductor and the fake pipeline under a fake
clock; checker-p1's phase-1 gate carries a finding of the real constraint checker."""

from __future__ import annotations

import io
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
import tui_runs
from rich.console import Console
from textual.widgets import Static

from npu_deploy.events import fold
from npu_deploy.events.payloads import EVENT_TYPES, Outcome
from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp, legend
from npu_deploy.tui.screens.help import HelpScreen, Legend
from npu_deploy.tui.screens.run import RunScreen, fit_title, unique_prefix
from npu_deploy.tui.stream_view import StreamView
from npu_deploy.tui.timeline import RunTimeline
from npu_deploy.tui.widgets.event_stream import STEP_GLYPHS, EventStream, step_label
from npu_deploy.tui.widgets.panels import GATE_COLUMNS, GatesPanel, shorten
from npu_deploy.tui.widgets.phase_strip import phase_cells

SIZES = [(80, 24), (160, 48)]
RUNS = ("done-pass", "stopped-p2", "checker-p1", "live-p0", "work-p1")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tui-sizes") / "runs.db"
    ids = tui_runs.build_store(path, tui_runs.finished_run, tui_runs.stopped_run,
                               tui_runs.checker_run, tui_runs.checkpoint_run,
                               tui_runs.working_run)
    assert tuple(ids) == RUNS
    return path


@pytest.fixture
def db(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield tui_runs.private_copy(built, tmp_path, monkeypatch)


def drawn_text(renderable: object) -> str:
    """What Rich draws of `renderable` on a wide console, as plain text."""
    console = Console(width=150, file=io.StringIO(), record=True)
    console.print(renderable)
    return console.export_text()


def title_of(app: DeployApp) -> str:
    return str(app.screen.query_one("#run-title").render())


def shown_lines(panel: GatesPanel) -> list[str]:
    """The lines of the panel a person sees now (its scroll position, its height)."""
    top = panel.scroll_offset.y
    return panel.text.splitlines()[top:top + panel.scrollable_content_region.height]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_a_failed_gate_keeps_every_column_its_status_and_the_checkers_message(db, size):
    """checker-p1: phase 1's gate failed on a constraint-checker finding. The title has the
    run id, status and verdict; the Gates tab shows the five column names, the failing row
    with FAIL, and the finding's words under it, inside the panel's visible lines."""
    app = DeployApp(db, run_id="checker-p1", live=True)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        title = title_of(app)
        assert title.startswith("checker-p1")
        assert "crashed" in title         # no conductor holds the run
        assert "no verdict yet" in title or "verdict —" in title
        assert len(title) <= size[0] - 2
        shown = shown_lines(app.screen.query_one(GatesPanel))
        header = next(line for line in shown if "subject" in line.split())
        # the status heading makes room first ("ok", "FAIL" say what the column is)
        assert header.split() in (list(GATE_COLUMNS), list(GATE_COLUMNS[1:]))
        failing = next(line for line in shown if line.startswith("FAIL"))
        assert "blocking_findings" in failing and "<= 0" in failing
        below = " ".join(shown[shown.index(failing) + 1:])
        assert "↳ [error] L1 footprint 70.0 KiB" in below


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_title_keeps_status_and_verdict_of_a_finished_run(db, size):
    app = DeployApp(db, run_id="done-pass", live=True)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        title = title_of(app)
        assert title.startswith("done-pass") and "tiny" in title
        assert "finished" in title and "verdict PASS" in title
        assert "phase 7" in title or "p7" in title


def test_the_title_shortens_the_rest_before_status_and_verdict():
    parts = [("a-very-long-run-identifier-0001", "a-very-l…"),
             ("HuggingFaceTB/SmolLM2-135M-Instruct", "HuggingFaceTB/S…", "Huggin…"),
             ("emulator  agent autopilot", ""), ("LIVE v1234/5678", "LIVE"),
             ("phase 3 full model", "phase 3 model", "p3"), ("run needs_human", "needs_human"),
             ("verdict FAIL",), ("times UTC", "")]
    for width in range(30, 160):
        title = fit_title(parts, width).plain
        assert "needs_human" in title and title.endswith("verdict FAIL")
        if width >= 70:
            assert len(title) <= width and "Huggin" in title
    assert fit_title(parts, 200).plain == "  ".join(p[0] for p in parts)   # all, in full


def test_a_short_run_id_is_a_unique_prefix():
    assert unique_prefix("0198a2b3-1111", ["0198a2b3-2222", "0198a2b3-1111"]) == "0198a2b3-1"
    assert unique_prefix("debug-p1", ["done-pass"]) == "debug-p1"


def test_a_shortened_subject_ends_in_an_ellipsis_or_keeps_its_last_part():
    from rich.text import Text

    assert shorten(Text("layers.0.mlp.down_proj"), 15).plain == "l.0.m.down_proj"
    assert shorten(Text("layers.0.mlp.down_proj"), 10).plain == "l.0.m.dow…"
    assert shorten(Text("block"), 5).plain == "block"
    for width in range(4, 30):
        out = shorten(Text("gemm_bf16 K=576 M=128 N=1536 (gate_proj, up_proj)"), width).plain
        assert len(out) <= width and out.endswith("…")


# --- the legend ------------------------------------------------------------------------------

PHASE_STATUSES = ("pending", "working", "gating", "passed", "failed", "awaiting_human",
                  "debugging", *(f"exited:{o}" for o in typing.get_args(Outcome)))


def test_every_glyph_a_widget_can_draw_is_in_the_legend():
    """The tables the widgets draw from cover every phase state (events/state.py), every
    event type (events/payloads.py) and every scrubber mark the timeline makes."""
    explained = legend.glyphs()
    assert set(PHASE_STATUSES) <= set(legend.PHASE_STATES)
    assert {legend.phase_glyph(s).glyph for s in PHASE_STATUSES} <= explained
    assert {legend.EVENT_GLYPHS.get(t, legend.EVENT_GLYPHS[""]).glyph
            for t in EVENT_TYPES} <= explained
    assert set(legend.GATE_MARKS) == {"passed", "failed", "lens"}
    # the marks the scrubber draws as a glyph (phases and passed gates are its bands)
    assert set(legend.SCRUBBER_MARKS) == {"gate_fail", "error", "decision", "debug",
                                          "checkpoint", "finished"}


def test_every_glyph_drawn_for_the_fixture_runs_is_in_the_legend(built):
    """Each run's event lines, and its phase strip at every event: no glyph the legend does
    not explain."""
    explained = legend.glyphs()
    drawn: set[str] = set()
    with EventStore.open(built, readonly=True) as store:
        for run_id in RUNS:
            timeline = RunTimeline(store, run_id)
            state = fold([])
            for e in store.events(run_id):
                state = fold([e], state)
                drawn.update(detail.split(" ")[0] for _, detail, _ in phase_cells(state))
                line = timeline.line(e.run_version)
                assert line is not None
                drawn.add(line.glyph)
            # a folded tool step: its glyph, folded or expanded, and its outcome's mark
            view = StreamView.build(store, run_id, "all", timeline.head)
            for result in [*view.results.values(), None]:
                drawn.add(step_label(result).split(" ")[1])
            if view.results:
                drawn.update(STEP_GLYPHS)
    assert drawn - explained == set()
    assert {"▸", "✓"} <= drawn         # the fixture runs have finished tool steps
    assert len(drawn) >= 12            # the runs draw a fair share of the table


async def test_help_lists_every_key_of_the_run_screen_and_the_legend(db):
    app = DeployApp(db, run_id="checker-p1", live=True)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        assert isinstance(app.screen, HelpScreen)
        keys = drawn_text(app.screen.query_one("#help-keys", Static).content)
        for b in (*RunScreen.BINDINGS, *EventStream.BINDINGS, *DeployApp.BINDINGS):
            assert b.description in keys, b.description     # type: ignore[union-attr]
            assert b.id not in keys             # type: ignore[union-attr]
        shown = drawn_text(app.screen.query_one(Legend).content)
        for glyph in legend.glyphs():
            assert glyph in shown
        await pilot.press("escape")
        assert isinstance(app.screen, RunScreen)



@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_a_live_runs_newest_event_is_on_screen_and_the_stream_has_its_rows(db, size):
    """Live at a checkpoint, the cursor's row (the newest event) is drawn, not covered by a
    horizontal scrollbar, and the narrow layout gives the stream two fifths of the body."""
    with EventStore.open(db) as store, tui_runs.held(store, "live-p0"):
        app = DeployApp(db, run_id="live-p0", live=True)
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            stream = app.screen.query_one(EventStream)
            for _ in range(100):
                if stream.building is None:
                    break
                await pilot.pause(0.02)
            await pilot.pause()
            assert not stream.show_horizontal_scrollbar
            shown = app.export_screenshot().replace("&#160;", " ")
            assert "checkpoint" in shown and "passed its gate" in shown
            body = app.screen.query_one("#run-body").size.height
            assert stream.size.height >= (body * 2) // 5 - 2       # less its border
