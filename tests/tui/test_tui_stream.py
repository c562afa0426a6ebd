"""The event stream's search, filter, copy and folded tool steps, under Pilot on real stores
written by the real conductor (fake pipeline)."""

from __future__ import annotations

import json
import tempfile

import pytest
from tui_pilot import SIZE, start, until

from npu_deploy.machine import Policy
from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.runs import RunsScreen
from npu_deploy.tui.stream_view import KINDS, SearchQuery, StreamView, find
from npu_deploy.tui.widgets.event_stream import EventStream, SearchBar, copies_dir


@pytest.fixture
def finished_run(store, fake):
    """A run through all phases: phase 2's gate fails once, the policy picks and retries."""
    c = start(store, fake(fail="2:1,5:1"), Policy(auto_approve=True))
    assert c.run().reason == "finished"
    c.close()
    return "r1"


def versions(store: EventStore, run_id: str, where: str, *args: object) -> list[int]:
    return [v for (v,) in store.conn.execute(
        f"SELECT run_version FROM events WHERE run_id = ? AND {where} ORDER BY run_version",
        (run_id, *args))]


async def press(pilot, *keys: str) -> None:
    """Keys, then the messages they sent (the cursor's move reaches the screen)."""
    await pilot.press(*keys)
    await pilot.pause()


async def opened(pilot, app: DeployApp) -> EventStream:
    stream = app.screen.query_one(EventStream)
    await until(pilot, lambda: stream.building is None)      # the folded view is in
    return stream


async def test_search_moves_to_next_and_previous_match_with_the_count(store, db_path,
                                                                      finished_run):
    gates = versions(store, finished_run, "type = 'gate.evaluated'")
    assert len(gates) == 10
    app = DeployApp(db_path, run_id=finished_run, live=False)
    async with app.run_test(size=SIZE) as pilot:
        stream = await opened(pilot, app)
        screen = app.screen
        await press(pilot, "slash")
        assert isinstance(app.focused, SearchBar)
        await press(pilot, *"GATE.evaluated")           # case-insensitive, a plain substring
        await until(pilot, lambda: not stream.searching)
        assert stream.matches == gates
        await press(pilot, "enter")
        assert screen.cursor == gates[0] and stream.status() == "/gate.evaluated  match 1 of 10"
        await press(pilot, "enter")
        assert screen.cursor == gates[1] and "match 2 of 10" in stream.status()
        await press(pilot, "shift+enter")
        assert screen.cursor == gates[0]
        await press(pilot, "escape")                     # closes the field, keeps the matches
        assert app.focused is stream and not app.screen.query_one(SearchBar).display
        await press(pilot, "n", "n")
        assert screen.cursor == gates[2] and "match 3 of 10" in str(stream.border_subtitle)
        await press(pilot, "N")
        assert screen.cursor == gates[1]
        await press(pilot, "N", "N")                     # round the start to the last one
        assert screen.cursor == gates[-1]
        await press(pilot, "escape")                     # clears the search
        assert stream.matches == [] and stream.status() == ""
        await press(pilot, "n")                          # n is "next decision" again
        assert screen.cursor == versions(store, finished_run, "type = 'human.decision' AND "
                                         "run_version > ?", gates[-1])[0]
        await press(pilot, "escape")                     # and escape goes back to the runs
        assert isinstance(app.screen, RunsScreen)


async def test_search_by_phase_and_payload_text_is_a_plain_substring(store, db_path,
                                                                     finished_run):
    app = DeployApp(db_path, run_id=finished_run, live=False)
    async with app.run_test(size=SIZE) as pilot:
        stream = await opened(pilot, app)
        await press(pilot, "slash", *"phase:2 rel_l2")
        await until(pilot, lambda: not stream.searching)
        expected = versions(store, finished_run, "phase = 2 AND instr(payload, 'rel_l2')")
        assert expected and stream.matches == expected
        for text in ("[/]", "gat.*", "%gate%", "g_te"):    # no pattern, no markup: no match
            stream.search(text)
            await until(pilot, lambda: not stream.searching)
            assert stream.matches == []
        await press(pilot, "enter")
        assert app.screen.cursor == 1                   # nothing to go to: the cursor stays


async def test_the_filter_narrows_the_stream_and_the_search_to_a_kind(store, db_path,
                                                                      finished_run):
    app = DeployApp(db_path, run_id=finished_run, live=False)
    async with app.run_test(size=SIZE) as pilot:
        stream = await opened(pilot, app)
        all_rows = len(stream.view)
        await press(pilot, "v")                           # agent
        await until(pilot, lambda: stream.building is None)
        assert stream.view.kind == "agent" and stream.status() == "filter agent"
        agent = versions(store, finished_run, "actor = 'agent' AND type != 'tool.completed'")
        assert list(stream.view.rows) == agent and len(agent) < all_rows
        await press(pilot, "v")                           # gate
        await until(pilot, lambda: stream.building is None)
        gate = versions(store, finished_run, "type = 'gate.evaluated' OR (type = "
                        "'tool.requested' AND json_extract(payload, '$.tool') = 'gate')")
        assert list(stream.view.rows) == gate
        await press(pilot, "down")                       # the cursor moves between its rows
        assert app.screen.cursor == gate[1]
        stream.search("phase:3")
        await until(pilot, lambda: not stream.searching)
        assert stream.matches == versions(
            store, finished_run, "phase = 3 AND (type = 'gate.evaluated' OR type = "
            "'tool.requested' AND json_extract(payload, '$.tool') = 'gate')")
        for _ in range(len(KINDS) - 2):
            await press(pilot, "v")
        await until(pilot, lambda: stream.building is None)
        assert stream.view.kind == "all" and len(stream.view) == all_rows


async def test_copy_puts_the_event_json_on_the_clipboard_and_in_a_file(store, db_path,
                                                                       finished_run,
                                                                       tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    gate = versions(store, finished_run, "type = 'gate.evaluated'")[0]
    app = DeployApp(db_path, run_id=finished_run, live=False)
    async with app.run_test(size=SIZE) as pilot:
        await opened(pilot, app)
        app.screen.seek(gate)
        await press(pilot, "c")
        path = copies_dir() / f"{finished_run}-v{gate}.json"
        assert path.parent == tmp_path / "npu-deploy-copies"
        text = path.read_text()
        assert json.loads(text) == json.loads(json.dumps(store.event_at(finished_run, gate)
                                                         .to_dict(), default=str))
        assert app.clipboard == text.rstrip("\n")         # what went out as OSC 52
        assert any(str(path) in n.message for n in app._notifications)


async def test_a_tool_step_is_one_line_with_its_duration_and_expands(store, db_path,
                                                                      finished_run,
                                                                      tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    requested, completed = versions(store, finished_run, "type IN ('tool.requested', "
                                    "'tool.completed')")[:2]
    app = DeployApp(db_path, run_id=finished_run, live=False)
    async with app.run_test(size=SIZE) as pilot:
        stream = await opened(pilot, app)
        assert stream.view.shows(requested) and not stream.view.shows(completed)
        app.screen.seek(completed)                       # the cursor shows on the step's line
        assert stream.selected == requested
        line = "".join(s.text for s in stream.render_line(stream.cursor_row
                                                          - stream.scroll_offset.y))
        duration = store.event_at(finished_run, completed).payload["duration_s"]
        # a narrow row: the glyph says "tool", the type column how it ended and its time
        assert f"✓ {duration:.2f} s" in line and "▸" in line and "compute i=0" in line
        await press(pilot, "c")                           # a folded step copies both events
        copied = json.loads(app.clipboard)
        assert [e["run_version"] for e in copied] == [requested, completed]
        await press(pilot, "e")
        assert stream.view.shows(completed) and app.screen.cursor == requested
        await press(pilot, "down")
        assert app.screen.cursor == completed
        await press(pilot, "e")                           # fold back from the result's row
        assert not stream.view.shows(completed) and app.screen.cursor == requested


def test_a_step_without_its_result_yet_is_running_and_pairs_when_it_comes(store, fake):
    """As the live stream grows the view: a request shows as running until its result."""
    c = start(store, fake(), Policy(auto_approve=True), run_id="r2")
    c.run()
    c.close()
    requested, completed = versions(store, "r2", "type IN ('tool.requested', "
                                    "'tool.completed')")[:2]
    view = StreamView.build(store, "r2", "all", requested)
    assert view.shows(requested) and requested not in view.results
    assert view.grow(store, "r2", completed) == {requested}
    assert view.results[requested].version == completed and view.results[requested].ok
    assert view.shown_as(completed) == requested and not view.shows(completed)


def test_search_text_is_found_in_its_json_escaped_form(store, fake):
    c = start(store, fake(), Policy(auto_approve=True), run_id="r3")
    c.run()
    c.close()
    head = store.fold("r3").version
    assert find(store, "r3", SearchQuery.parse('no "instruction"'), 0, head) == []
    said = versions(store, "r3", "type = 'agent.message'")
    assert find(store, "r3", SearchQuery.parse("NO INSTRUCTION"), 0, head) == said
    assert SearchQuery.parse("phase:4  ab  C").phases == (4,)
    assert SearchQuery.parse("phase:4  ab  C").text == "ab c"


@pytest.mark.parametrize("where", ["first", "middle", "newest"])
def test_the_view_read_around_a_version_has_the_whole_views_rows_there(store, finished_run,
                                                                        where):
    """What the first frame shows of a long run, read from the events around its cursor,
    is the whole view there, and has as many rows (the scrollbar does not move after)."""
    head = store.conn.execute("SELECT max(run_version) FROM events WHERE run_id = ?",
                              (finished_run,)).fetchone()[0]
    version = {"first": 1, "middle": head // 2, "newest": head}[where]
    whole = StreamView.build(store, finished_run, "all", head)
    part = StreamView.around(store, finished_run, head, version, 20)
    assert part.partial and len(part) == len(whole)
    row = whole.row_of(version)
    near = slice(max(0, row - 10), row + 10)
    assert part.rows[near] == whole.rows[near]
    assert [part.results.get(v) for v in part.rows[near]] == \
        [whole.results.get(v) for v in whole.rows[near]]


@pytest.mark.parametrize("live", [False, True])
async def test_a_long_run_opens_with_its_steps_folded_in_the_first_frame(
        store, db_path, finished_run, monkeypatch, live):
    """A run longer than SHORT_RUN shows its steps folded from its first frame, at its first
    event (a replay) or its newest (live): what the whole view, built by a worker, shows
    after is the same lines and the same scroll."""
    import npu_deploy.tui.widgets.event_stream as es

    monkeypatch.setattr(es, "SHORT_RUN", 40)
    monkeypatch.setattr(es, "OPENED_EVENTS", 30)
    builds: list[tuple[str, int]] = []
    build = EventStream._build
    monkeypatch.setattr(EventStream, "_build", lambda self, kind, head: builds.append(
        (kind, head)))
    app = DeployApp(db_path, run_id=finished_run, live=live)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: bool(app.screen.query(EventStream)))
        stream = app.screen.query_one(EventStream)
        await pilot.pause()

        def shown() -> tuple[list[str], int]:
            return ["".join(s.text for s in stream.render_line(y))
                    for y in range(stream.size.height)], stream.scroll_offset.y

        first = shown()
        assert any("✓" in line for line in first[0])           # a folded step's line
        assert builds == [("all", stream.timeline.head)]
        build(stream, *builds[0])
        await until(pilot, lambda: not stream.view.partial)
        await pilot.pause()
        assert shown() == first
