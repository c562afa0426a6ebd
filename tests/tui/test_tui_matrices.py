"""The run browser on the head of matrices (issue 41): a group per matrix with its cells
done of all, a row per cell's run with its node, phase, status and last gate, the runs of
no matrix under their own header; rows that follow the book and the shipments as they
land; a decision on a run its node works left once, signed, in the head's inbox, and no
conductor started for it here. Real stores (runs by the real conductor on the fake
pipeline, shipped by store/ingest.py with a real node key), the real app under Pilot."""

from __future__ import annotations

from pathlib import Path

import pytest
import tui_matrices
import tui_runs
from textual.widgets import DataTable
from tui_matrices import MARKUP, MARKUP_MODEL, MATRIX, NODE, cell, cell_run
from tui_pilot import until

from npu_deploy.cli.tui import ConductorDriver
from npu_deploy.store import EventStore
from npu_deploy.store.ingest import relayable
from npu_deploy.store.matrix import note_cell, record_matrix
from npu_deploy.tui import DeployApp
from npu_deploy.tui.matrices import HEADER_KEY, OTHERS_KEY, QUEUED_KEY, gate_forms, read_groups
from npu_deploy.tui.screens.decision import DecisionDialog
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.screens.runs import RunsScreen
from npu_deploy.tui.standing import quit_line

SIZE = (200, 30)


@pytest.fixture
def head(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tui_matrices.Head:
    monkeypatch.chdir(tmp_path)            # the browser's title names the store: runs.db
    monkeypatch.setenv("NPU_DEPLOY_KEYMAP", str(tmp_path / "no-keymap.toml"))
    built = tui_matrices.build_head(tmp_path, monkeypatch)
    built.path = Path("runs.db")
    return built


def screen_lines(app: DeployApp) -> list[str]:
    update = app.screen._compositor.render_full_update()
    return ["".join(seg.text for strip in chops for seg in strip).rstrip()
            for chops in update.strips]


def rows(screen: RunsScreen) -> dict[str, dict[str, str]]:
    """Each row of the browser's table by its key: each column's text."""
    table = screen.query_one(DataTable)
    columns = [str(c.value) for c in table.columns]
    return {str(k.value): dict(zip(columns, (c.plain for c in table.get_row(k)), strict=True))
            for k in table.rows}


async def test_the_browser_groups_runs_by_matrix(head):
    app = DeployApp(head.path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        await pilot.pause(0.2)
        table = rows(screen)
        # the newest matrix first, its cells in the book's order, then the other matrix,
        # then the runs of no matrix
        assert list(table) == [
            HEADER_KEY + MATRIX, cell_run(16), cell_run(32), QUEUED_KEY + cell_run(64),
            HEADER_KEY + MARKUP, cell_run(8, MARKUP), OTHERS_KEY, "here-1"]
        assert table[HEADER_KEY + MATRIX]["status"] == "1/3 done"
        assert table[HEADER_KEY + MARKUP]["status"] == "1/1 done"
        done, waiting, queued = (table[k] for k in (cell_run(16), cell_run(32),
                                                    QUEUED_KEY + cell_run(64)))
        assert (done["node"], done["phase"].split()[0], done["status"], done["verdict"]) == \
            (NODE, "7", "finished", "PASS")
        assert done["gate"] == "fake-7 PASS rel_l2 1e-05 <= 0.001"
        # its node waits at the checkpoint: the head holds no lock, the run is not crashed
        assert (waiting["node"], waiting["phase"].split()[0], waiting["status"]) == \
            (NODE, "0", "running")
        assert waiting["gate"] == "fake-0 PASS rel_l2 1e-05 <= 0.001"
        assert (queued["node"], queued["status"], queued["gate"]) == ("—", "queued", "—")
        assert table["here-1"]["status"] == "needs_human" and table["here-1"]["node"] == ""
        # markup in a matrix's or a model's name is text
        assert table[HEADER_KEY + MARKUP]["run"] in (f"matrix {MARKUP}", MARKUP)
        assert table[cell_run(8, MARKUP)]["model"] == MARKUP_MODEL
        # a header is no run: the run keys pass it by, its preview is the matrix's
        screen.query_one(DataTable).move_cursor(row=0)
        await pilot.pause()
        assert screen.selected() is None
        assert "1/3 done: 1 queued, 1 running, 1 finished" in "\n".join(screen_lines(app))
        await pilot.press("enter")
        assert app.screen is screen
        # the filter finds a matrix's runs by its node and its name
        await pilot.press("slash", *MARKUP, "enter")
        assert list(rows(screen)) == [HEADER_KEY + MARKUP, cell_run(8, MARKUP)]


def test_snapshot_of_the_grouped_browser(snap_compare, head):
    """The head of two matrices and a run of its own at 160x40, the cursor on a finished
    cell: its preview ends with its matrix, node, where it was made and its gate."""
    async def on_a_cell(pilot) -> None:
        await pilot.pause()
        await pilot.press("down")
        await pilot.pause()

    assert snap_compare(DeployApp(head.path), terminal_size=(160, 40), run_before=on_a_cell)


def test_a_gate_s_headline_is_its_first_failing_gating_check(tmp_path):
    """The book's query takes the headline out of the stored gate: the first failing gating
    check (a lens that fails, or an earlier passing check, does not lead), with how many
    more fail; for a gate that passed, its first gating check and how many there are."""
    with EventStore.open(tmp_path / "runs.db") as store, tui_runs.deterministic():
        runs = (tui_runs.oracle_gate_run(store), tui_runs.wide_gate_run(store),
                tui_runs.checkpoint_run(store))
        record_matrix(store, "m", {"models": ["tiny"], "seq_lens": [1, 2, 3]})
        for n, run_id in enumerate(runs):
            note_cell(store, "m", run_id, cell(n), "running")
        [group] = read_groups(store)
    oracle, wide, passed = (gate_forms(c.gate)["full"] for c in group.cells)
    assert oracle == "phase0.oracle FAIL decode_logits_rel_l2 0.0025 <= 0.0001", oracle
    assert wide == "wide-0 FAIL rel_l2 0.3 <= 0.001 (+5)"
    assert passed == "fake-0 PASS rel_l2 1e-05 <= 0.001"
    assert gate_forms(None) == {"full": "—", "short": "—"}


async def test_rows_follow_the_book_and_the_shipments_as_they_land(head):
    app = DeployApp(head.path)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        await pilot.pause(0.2)
        # the node records the person's approve and goes on to phase 1's checkpoint; the
        # shipment lands in the head's store while the browser is open
        with EventStore.open(head.node_path) as node:
            node.post_command(cell_run(32), "approve", author="ada@tui")
            assert tui_matrices.advance(node, cell_run(32)) == "awaiting_human"
        head.ship(cell_run(32))
        await until(pilot, lambda: rows(screen)[cell_run(32)]["phase"].startswith("1 "))
        assert rows(screen)[cell_run(32)]["gate"] == "fake-1 PASS rel_l2 1e-05 <= 0.001"
        # the book moves: the queued cell starts on another node; the waiting one's node
        # is lost, and no node holds its run now (a run at a checkpoint that nothing runs
        # reads as crashed, as a run of this store does)
        with EventStore.open(head.path) as store:
            note_cell(store, MATRIX, cell_run(64), cell(64), "running", node="npu-host-2",
                      started=True)
            note_cell(store, MATRIX, cell_run(32), cell(32), "error",
                      detail="lost its node too often (NodeDiedError)")
        await until(pilot, lambda: rows(screen).get(QUEUED_KEY + cell_run(64), {}).get(
            "node") == "npu-host-2")
        assert rows(screen)[QUEUED_KEY + cell_run(64)]["status"] == "running"
        assert rows(screen)[cell_run(32)]["status"] == "crashed"
        assert rows(screen)[HEADER_KEY + MATRIX]["status"] == "2/3 done"
        with EventStore.open(head.path) as store:
            note_cell(store, MATRIX, cell_run(64), cell(64), "finished")
        await until(pilot, lambda: rows(screen)[HEADER_KEY + MATRIX]["status"] == "3/3 done")


async def test_a_decision_on_a_run_its_node_works_is_one_signed_command_at_the_head(head):
    """Approve from the head's TUI, which can drive deployments (`npu-deploy tui`): the
    command waits, signed by this user's key, in the head's inbox for the node's shipper;
    the head starts no conductor of its own for the run (its node runs it), and the run's
    copy here is not written."""
    run_id = cell_run(32)
    with EventStore.open(head.path) as store:
        version = store.fold(run_id).version
    app = DeployApp(head.path, driver=ConductorDriver(head.path))
    async with app.run_test(size=SIZE) as pilot:
        screen = app.screen
        assert isinstance(screen, RunsScreen)
        table = screen.query_one(DataTable)
        table.move_cursor(row=table.get_row_index(run_id))
        await pilot.press("r")                      # its node runs it: nothing to resume here
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen) and not app.driving
        assert any("is running: there is nothing to resume" in n.message
                   for n in app._notifications)
        await pilot.press("enter")
        assert isinstance(app.screen, RunScreen) and app.screen.run_id == run_id
        # its node runs it: not crashed here, and deciding does not resume it here
        await until(pilot, lambda: "to decide" in "\n".join(screen_lines(app)))
        assert app.screen.status == "running" and app.screen.follow
        assert "nothing runs" not in "\n".join(screen_lines(app))
        await pilot.press("d")
        assert isinstance(app.screen, DecisionDialog)
        await pilot.press("enter")                                 # Approve has the focus
        await until(pilot, lambda: not isinstance(app.screen, DecisionDialog))
        await pilot.pause(0.5)
        assert not app.driving
        assert any(f"once {NODE}, which runs it, takes the command" in n.message
                   for n in app._notifications)
    with EventStore.open(head.path) as store:
        [command] = store.pending_commands(run_id)
        assert command["kind"] == "approve" and command["author"].endswith("@tui")
        assert store.command_unsigned(command) is None        # this user's key signed it
        assert [c["command_id"] for c in relayable(store, run_id)] == [command["command_id"]]
        assert store.fold(run_id).version == version
    # the node's shipper leaves it in the node's inbox once, however often it comes; the
    # conductor there records it, and the shipment consumes the head's command
    with EventStore.open(head.node_path) as node:
        for _ in range(2):
            with EventStore.open(head.path) as store:
                for c in relayable(store, run_id):
                    node.post_command(run_id, c["kind"], c["payload"], author=c["author"],
                                      relayed=c["command_id"])
        assert tui_matrices.advance(node, run_id) == "awaiting_human"     # phase 1's
        decisions = [e for e in node.events(run_id) if e.type == "human.decision"]
        assert [e.payload.get("command_id") for e in decisions] == [command["command_id"]]
    head.ship(run_id)
    with EventStore.open(head.path) as store:
        assert not store.pending_commands(run_id)


def test_the_line_after_quitting_sends_a_person_to_decide_not_to_resume(head):
    """A run its node works waits at a checkpoint: the shell is told to open it and
    decide, not to resume it here (which would write it apart from its node)."""
    line = quit_line(head.path, cell_run(32), here=False)
    assert line is not None and "`npu-deploy attach " in line and "resume" not in line, line
