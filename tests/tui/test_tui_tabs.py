"""The run screen's tabs in replay: the Agent, Gates and Plan tabs show the run as it was
at the event under the cursor, the Plan tab's tables and the trend sparklines."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import tui_runs
from textual.widgets import TabbedContent

from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.widgets.panels import AgentPanel, GatesPanel, PlanPanel, sparkline

SIZE = (160, 48)
RUN = "plan-done"


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tui-plan") / "runs.db"
    assert tui_runs.build_store(path, tui_runs.planned_run) == [RUN]
    return path


@pytest.fixture
def db(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield tui_runs.private_copy(built, tmp_path, monkeypatch, chdir=True)


def versions(text: str) -> list[int]:
    """The event numbers the Agent tab's transcript lines start with."""
    return [int(m[1]) for m in re.finditer(r"^\s*(\d+) ", text, re.M)]


def on_screen(panel, version: int) -> bool:
    """Whether the transcript line of event `version` is inside the panel's viewport."""
    lines = panel.text.splitlines()
    [row] = [i for i, line in enumerate(lines) if re.match(rf"\s*{version} ", line)]
    top = panel.scroll_offset.y
    return top <= row < top + panel.scrollable_content_region.height


async def replay_at(pilot, tab: str, version: int) -> RunScreen:
    screen = pilot.app.screen
    assert isinstance(screen, RunScreen)
    screen.query_one(TabbedContent).active = tab
    await pilot.pause()
    screen.seek(version)
    await pilot.pause()
    return screen


async def test_the_agent_tab_shows_the_transcript_up_to_the_cursor(db):
    with EventStore.open(db, readonly=True) as store:
        agent = [e.run_version for e in store.events(RUN) if e.actor == "agent"
                 and e.type in ("agent.message", "tool.requested", "tool.completed")]
    early = agent[5]
    app = DeployApp(db, run_id=RUN, live=False)
    async with app.run_test(size=SIZE) as pilot:
        for tab_first in (True, False):        # the tab shown before the seek, and after
            screen = pilot.app.screen
            assert isinstance(screen, RunScreen)
            if tab_first:
                await replay_at(pilot, "tab-agent", early)
            else:
                screen.query_one(TabbedContent).active = "tab-gates"
                screen.seek(early)
                await pilot.pause()
                screen.query_one(TabbedContent).active = "tab-agent"
                await pilot.pause()
            panel = screen.query_one(AgentPanel)
            shown = versions(panel.text)
            assert shown and max(shown) == early
            assert set(agent[:6]) <= set(shown)
            assert on_screen(panel, early)
            screen.seek(screen.timeline.head)
            await pilot.pause()


async def test_the_agent_tab_keeps_the_cursors_event_in_view_as_the_cursor_moves(db):
    """Stepping through the run with the Agent tab open: the tab's newest line is the
    agent's newest event at the cursor, and it is on screen, not below the fold."""
    with EventStore.open(db, readonly=True) as store:
        agent = [e.run_version for e in store.events(RUN) if e.actor == "agent"
                 and e.type in ("agent.message", "tool.requested", "tool.completed")]
    app = DeployApp(db, run_id=RUN, live=False)
    async with app.run_test(size=SIZE) as pilot:
        screen = await replay_at(pilot, "tab-agent", agent[50])
        panel = screen.query_one(AgentPanel)
        for v in (agent[50], agent[25], agent[-1], agent[2]):
            screen.seek(v)
            await pilot.pause()
            assert max(versions(panel.text)) == v and on_screen(panel, v), v
        await pilot.press("full_stop")           # one event on, in the keys' way
        await pilot.pause()
        newest = max(a for a in agent if a <= screen.cursor)
        assert max(versions(panel.text)) == newest and on_screen(panel, newest)


def gate_events(store: EventStore, phase: int, upto: int):
    return [e for e in store.events(RUN, upto_version=upto)
            if e.type == "gate.evaluated" and e.phase == phase]


def transforms(store: EventStore, upto: int):
    return [e for e in store.events(RUN, upto_version=upto) if e.type == "tool.completed"
            and e.payload["tool"] == "apply_transform"]


async def test_the_gates_tab_and_its_sparklines_follow_the_cursor(db):
    """At each of phase 4's gates, and between them, the Gates tab shows the newest gate at
    the cursor, and each check's sparkline draws its values at the attempts so far, as the
    log records them."""
    with EventStore.open(db, readonly=True) as store:
        gates = gate_events(store, 4, 10**6)
        assert len(gates) == 3
        app = DeployApp(db, run_id=RUN, live=False)
        async with app.run_test(size=SIZE) as pilot:
            screen = await replay_at(pilot, "tab-gates", gates[0].run_version)
            panel = screen.query_one(GatesPanel)
            for at in (gates[2].run_version, gates[0].run_version, gates[1].run_version + 3,
                       gates[1].run_version):
                screen.seek(at)
                await pilot.pause()
                recorded = gate_events(store, 4, at)
                attempt = recorded[-1].attempt
                assert f"gate fake-4: {'PASS' if recorded[-1].payload['passed'] else 'FAIL'}" \
                       f"  attempt {attempt}," in panel.text, at
                want = {(c["subject"], c["metric"]): tuple(
                    next(d["value"] for d in g.payload["checks"]
                         if (d["subject"], d["metric"]) == (c["subject"], c["metric"]))
                    for g in recorded) for c in recorded[-1].payload["checks"]}
                if len(recorded) == 1:
                    assert panel.trends == {} and "across attempts" not in panel.text
                else:
                    assert panel.trends == want
                    for values in want.values():
                        assert sparkline(values).plain in panel.text


async def test_the_plan_tab_and_its_sparklines_follow_the_cursor(db):
    """Before phase 4, no plan; during it, the transforms tried so far, the prefill plan
    as it is at the cursor, timed only by a profile of that plan, and the sparkline of its
    times as the transform results record them; at the end, both plans."""
    with EventStore.open(db, readonly=True) as store:
        tried = transforms(store, 10**6)
        head = store.fold(RUN).version
        app = DeployApp(db, run_id=RUN, live=False)
        async with app.run_test(size=SIZE) as pilot:
            screen = await replay_at(pilot, "tab-plan", 20)
            panel = screen.query_one(PlanPanel)
            assert "No plan yet" in panel.text or "transforms tried" not in panel.text
            for at in (tried[1].run_version, head, tried[0].run_version, tried[4].run_version):
                screen.seek(at)
                await pilot.pause()
                seen = transforms(store, at)
                shown = [int(m[1]) for m in re.finditer(r"^\s*(\d+) \S", panel.text, re.M)
                         if int(m[1]) in {e.run_version for e in tried}]
                assert shown == [e.run_version for e in seen], at
                for scope in ("prefill", "decode"):
                    mine = [e.payload["result"] for e in seen
                            if e.payload["result"]["mode"].startswith(scope)]
                    if not mine:
                        assert f"{scope} plan (" not in panel.text
                        continue
                    want = (mine[0]["before_s"], *(r["after_s"] if r["kept"] else r["before_s"]
                                                   for r in mine))
                    assert panel.trends[scope] == want
                    assert f"{scope} MODELED" in panel.text
                    assert sparkline(want).plain in panel.text
                    assert f"{scope} plan (" in panel.text
                # timed only by a profile recorded after the plan's newest kept transform
                prefill = [e for e in seen if e.payload["result"]["mode"].startswith("prefill")]
                kept = [e.run_version for e in prefill if e.payload["result"]["kept"]]
                profiled = [e.run_version for e in store.events(RUN, upto_version=at)
                            if e.type == "profile.recorded" and e.payload["scope"] == "prefill"]
                timed = bool(profiled) and (not kept or profiled[-1] > kept[-1])
                assert ("prefill plan (prefill L=128)" in panel.text) == bool(prefill)
                # the words may wrap where the panel is narrow
                plan = " ".join(panel.text.split("prefill plan (")[-1].split())
                assert ("times MODELED (v" in plan) == timed


@pytest.mark.parametrize("size", [(120, 40), (160, 48)], ids=lambda s: f"{s[0]}x{s[1]}")
async def test_the_plan_table_keeps_its_columns_at_120_columns_and_up(db, size):
    """Every dispatch row of the finished run's plans has its kernels, launches, time and
    share on its first line, and the times say they are MODELED."""
    app = DeployApp(db, run_id=RUN, live=True)
    async with app.run_test(size=size) as pilot:
        screen = await replay_at(pilot, "tab-plan", 10**6)
        text = screen.query_one(PlanPanel).text
        for scope in ("prefill", "decode"):
            table = text.split(f"{scope} plan (")[1]
            assert "times MODELED" in table.split("\ndispatch")[0].replace("\n", " ")
            rows = [line for line in table.splitlines()
                    if re.match(r"L\d+\.", line) and " host " not in line][:40]
            assert rows and all(re.search(r"\s\d+\s+\d+\.\d{3}\s+\d+\.\d%$", r) for r in rows)
