"""Starting and quitting (issue 38 point 5), in a real terminal (tmux): every entry point
that opens the TUI shows its first line at once, whatever the order of `--db` and the
command; that line stays until the TUI's first screen is drawn (the terminal is never blank
between the two); quitting a deploy while it loads leaves a clean terminal and says that no
run was started. Under Pilot: a deploy quit while it loads makes no run, even when its
loading ends after the quit.

One tmux server for the module (`tmux -L`, never touching anyone's sessions), one store with
a run waiting at its checkpoint (tests/tui_runs.py) for attach and replay.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_tui_tmux import EXITED, NPU_DEPLOY, TMUX, Pane, folded, pane_env
from tui_pilot import SIZE

from npu_deploy.cli.tui import ConductorDriver
from npu_deploy.machine import Policy
from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp

needs_tmux = pytest.mark.skipif(TMUX is None, reason="needs tmux")

#: The issue's bound: from the Enter that starts the command to its first line.
FIRST_LINE_S = 0.5
#: npu_deploy/loading.py's line, as the terminal shows it
LOADING = re.compile(r"npu-deploy (\w+)\b.*: (opening|loading) .*…")
RUN_TITLE = "times UTC"                          # the run screen's title line
RUNS_TITLE = re.compile(r"npu-deploy  .*  \d+ runs")  # the run browser's title (not the line)
RUN = "live-p0"


@pytest.fixture(scope="module")
def terminal(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Pane, Path]]:
    import tui_runs

    tmp = tmp_path_factory.mktemp("startup")
    db = tmp / "runs.db"
    tui_runs.build_store(db, tui_runs.checkpoint_run)
    pane = Pane(f"npu-deploy-test-{uuid.uuid4().hex[:8]}", "startup")
    try:
        pane.start(pane_env(tmp))
        pane.type(f"cd {tmp}")
        yield pane, db
    finally:
        pane.kill()


@pytest.fixture
def shell(terminal: tuple[Pane, Path]) -> Iterator[tuple[Pane, Path]]:
    """The module's pane, given back at its prompt whatever the test left running."""
    yield terminal
    pane = terminal[0]
    for key in ("q", "C-c"):
        if EXITED.search(pane.screen()):
            return
        pane.keys(key)
        try:
            pane.wait_for(EXITED.search, timeout=10)
        except AssertionError:
            continue


def sample(pane: Pane) -> tuple[bool, str]:
    """Whether the pane shows the alternate screen (the TUI's), and its text: one tmux call."""
    alt, _, text = pane.tmux("display-message", "-p", "-t", pane.name, "#{alternate_on}",
                             ";", "capture-pane", "-p", "-t", pane.name).partition("\n")
    return alt.strip() == "1", text


def launch(pane: Pane, command: str) -> float:
    """Clear the pane, type COMMAND (and the echo of its status), press Enter: when."""
    pane.keys("clear", "Enter")
    pane.wait_for(lambda s: len(s.strip().splitlines()) == 1)        # the prompt alone
    pane.tmux("send-keys", "-t", pane.name, "-l", f"{command}; echo \"[exit $?]\"")
    started = time.monotonic()
    pane.keys("Enter")
    return started


def line_of(text: str) -> str | None:
    found = LOADING.search(text)
    return None if found is None else found.group(0)


CASES = [(command, db_first) for command in ("tui", "attach", "replay", "deploy")
         for db_first in (True, False)]


@needs_tmux
@pytest.mark.parametrize(("command", "db_first"), CASES,
                         ids=[f"{c}-db-{'before' if f else 'after'}" for c, f in CASES])
def test_first_line_at_once_then_the_tui(shell, command, db_first):
    """`npu-deploy --db X CMD` and `npu-deploy CMD --db X`: within 0.5 s the pane shows the
    line saying what opens (a run by its id); the TUI's first frame is that line again,
    until its screen is drawn; q gives back a clean terminal."""
    pane, db = shell
    args = {"tui": "", "attach": f" {RUN}", "replay": f" {RUN}",
            "deploy": f" tiny --pipeline fake_pipeline:make --run-id d-{int(db_first)}"}
    argv = (f"--db {db} {command}{args[command]}" if db_first
            else f"{command}{args[command]} --db {db}")
    header = ((lambda s: RUNS_TITLE.search(s) is not None) if command == "tui"
              else (lambda s: RUN_TITLE in s))
    started = launch(pane, f"{NPU_DEPLOY} {argv}")
    first_line = None
    on_tui_screen = False             # the line, drawn by the TUI before its first screen
    end = started + 60
    while True:
        alt, text = sample(pane)
        now = time.monotonic()
        line = line_of(text)
        if first_line is None and (line is not None or header(text)):
            first_line, said = now - started, line
        if header(text):
            break
        on_tui_screen = on_tui_screen or (alt and line is not None)
        assert now < end, f"no header within 60 s; the pane shows:\n{text}"
    assert first_line is not None and first_line <= FIRST_LINE_S, \
        f"first line after {first_line:.2f} s"
    assert said is not None and said.startswith(f"npu-deploy {command}"), text
    if command in ("attach", "replay"):
        assert said.startswith(f"npu-deploy {command} {RUN}  tiny  phase 0"), said
    assert on_tui_screen, "the TUI's screen was blank until its first screen was drawn"

    pane.keys("q")
    screen = pane.wait_for(EXITED.search, timeout=30)
    assert "[exit 0]" in screen, screen
    assert line_of(screen) is None, screen                   # the line was taken back


@needs_tmux
def test_quit_while_deploy_loads_leaves_a_clean_terminal_and_no_run(shell):
    """q while the deploy's pipeline still loads (FAKE_LOAD_S): the terminal is as before
    the command but for one true line (no run was started) and status 0; no run is made,
    now or later."""
    pane, db = shell
    launch(pane, f"FAKE_LOAD_S=30 {NPU_DEPLOY} --db {db} deploy tiny --pipeline "
                 "fake_pipeline:make --run-id q-load")
    pane.wait_for(lambda s: RUN_TITLE in s and "loading the pipeline" in s, timeout=60)
    pane.keys("q")
    screen = pane.wait_for(EXITED.search, timeout=30)
    lines = [line for line in screen.splitlines() if line.strip()]
    typed = next(i for i, line in enumerate(lines) if line.endswith('echo "[exit $?]"'))
    assert lines[typed + 1:-1] == [
        "run q-load was not started: quit while it loaded (the pipeline and the model); "
        "nothing was stored", "[exit 0]"], screen                # then the prompt
    time.sleep(0.5)                     # the process is gone: nothing can make the run now
    assert folded(db, "q-load") is None
    with EventStore.open(db, readonly=True) as store:
        assert store.pending_commands(RUN) == []          # and no other run was touched


async def test_a_deploy_quit_while_it_loads_makes_no_run_when_its_loading_ends(
        store, db_path, monkeypatch):
    """q while the pipeline loads (held here until after the quit): the app records the
    deploy as not started and leaves no command; when the loading ends after the quit, the
    driver makes no run (making it and quitting take the same lock: ConductorDriver.leave)."""
    import threading

    import fake_pipeline

    loading, release = threading.Event(), threading.Event()
    make = fake_pipeline.make

    def held() -> object:
        loading.set()
        assert release.wait(timeout=30)
        return make()

    monkeypatch.setattr(fake_pipeline, "make", held)
    driver = ConductorDriver(db_path, "fake_pipeline:make", Policy(), "tiny",
                             {"pipeline": "fake_pipeline:make"})
    app = DeployApp(db_path, run_id="dep", live=True, driver=driver, drive="deploy")
    try:
        async with app.run_test(size=SIZE) as pilot:
            assert await asyncio.to_thread(loading.wait, 30)
            await pilot.press("q")
        assert app.not_started == ["dep"] and app.left_paused == []
    finally:
        release.set()
    assert await asyncio.to_thread(app.conducting["dep"].wait, 30)     # the loading ended
    assert "dep" not in app.halted                          # the driver made no run: it raised
    assert store.run_ids() == []
