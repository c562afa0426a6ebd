"""End to end in a real terminal: a headless deploy runs in one process and waits at its
first checkpoint; `npu-deploy attach` in a tmux pane (another process) shows the banner, a
person presses d and Enter, and the deploy's conductor records the approval and goes on,
which the attached TUI shows.

tmux runs on a socket of its own (`tmux -L`), never touching anyone's sessions.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from paths import ROOT, TESTS

from npu_deploy.store import EventStore, StoreUnreadable

NPU_DEPLOY = Path(sys.executable).parent / "npu-deploy"
TMUX = shutil.which("tmux")
WIDTH, HEIGHT = 150, 45

pytestmark = pytest.mark.skipif(TMUX is None, reason="needs tmux")


class Pane:
    """One tmux session with one pane, on a private server socket."""

    def __init__(self, socket: str, name: str) -> None:
        self.socket, self.name = socket, name
        self.socket_path: Path | None = None

    def tmux(self, *args: str, check: bool = True) -> str:
        assert TMUX is not None
        done = subprocess.run([TMUX, "-L", self.socket, "-f", os.devnull, *args],
                              capture_output=True, text=True, timeout=10, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"tmux {' '.join(args)}: {done.stderr.strip()}")
        return done.stdout

    def start(self, env: dict[str, str]) -> None:
        shell = shutil.which("bash")
        command = [f"{shell} --noprofile --norc"] if shell else []
        self.tmux("new-session", "-d", "-s", self.name, "-x", str(WIDTH), "-y", str(HEIGHT),
                  *(arg for k, v in env.items() for arg in ("-e", f"{k}={v}")), *command)
        self.socket_path = Path(self.tmux("display-message", "-p", "#{socket_path}").strip())

    def type(self, text: str) -> None:
        self.tmux("send-keys", "-t", self.name, "-l", text)
        self.tmux("send-keys", "-t", self.name, "Enter")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", "-t", self.name, *keys)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-t", self.name)

    def wait_for(self, what: Callable[[str], bool] | str, timeout: float = 15.0) -> str:
        test = (lambda s: what in s) if isinstance(what, str) else what
        end = time.monotonic() + timeout
        while True:
            text = self.screen()
            if test(text):
                return text
            if time.monotonic() > end:
                raise AssertionError(f"timed out waiting for {what!r}; the pane shows:\n{text}")
            time.sleep(0.1)

    def kill(self) -> None:
        self.tmux("kill-server", check=False)
        if self.socket_path is not None and self.socket_path.name == self.socket:
            self.socket_path.unlink(missing_ok=True)


def wait_until(cond: Callable[[], object], what: str, timeout: float = 15.0,
               proc: subprocess.Popen[bytes] | None = None, log: Path | None = None) -> None:
    end = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the deploy exited ({proc.returncode}) before {what}:\n"
                                 + (log.read_text() if log and log.exists() else ""))
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def folded(db: Path, run_id: str):
    if not db.exists():
        return None
    try:
        store = EventStore.open(db, readonly=True)
    except StoreUnreadable:          # the deploy is still creating the file's schema
        return None
    with store:
        if run_id not in store.run_ids():
            return None
        return store.fold(run_id)


@pytest.fixture
def deploy(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[bytes], Path]]:
    """A headless deploy of run e2e in a subprocess: interactive, so it waits at each
    checkpoint polling its inbox; phase 1's gate fails once (FAKE_FAIL=1:1)."""
    db, log = tmp_path / "runs.db", tmp_path / "deploy.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
               p for p in (str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")) if p),
           "FAKE_FAIL": "1:1", "FAKE_STEPS": "3", "FAKE_STEP_S": "0.2"}
    with log.open("wb") as out:
        proc = subprocess.Popen([str(NPU_DEPLOY), "deploy", "tiny", "--headless", "--pipeline",
                                 "fake_pipeline:make", "--run-id", "e2e", "--db", str(db)],
                                cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        yield db, proc, log
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)


def test_attach_in_tmux_approves_a_checkpoint_of_a_deploy_in_another_process(deploy,
                                                                              tmp_path):
    db, proc, log = deploy
    wait_until(lambda: (s := folded(db, "e2e")) is not None and s.phases[0].pending_checkpoint,
               "phase 0's checkpoint", proc=proc, log=log)

    pane = Pane(f"npu-deploy-test-{uuid.uuid4().hex[:8]}", "e2e")
    try:
        pane.start({"TERM": "xterm-256color", "PS1": "$ ",
                    "NPU_DEPLOY_KEYMAP": str(tmp_path / "no-keymap.toml")})
        pane.type(f"cd {tmp_path} && TERM=xterm-256color {NPU_DEPLOY} attach e2e --db {db}")
        screen = pane.wait_for("press d to decide")
        assert "phase 0 (build CPU oracle) passed its gate" in screen
        assert "e2e" in screen and "LIVE" in screen and "run running" in screen

        pane.keys("d")
        screen = pane.wait_for("Approve")
        assert "Phase 0 — build CPU oracle — attempt 1" in screen and "Redirect" in screen
        pane.keys("Enter")                              # Approve has the focus

        # the other process's conductor records the decision, once, by the TUI's author
        def approved() -> list:
            with EventStore.open(db, readonly=True) as store:
                return [e for e in store.events("e2e", types=("human.decision",))
                        if e.payload["decision"] == "approve"]
        wait_until(approved, "the approval in the log", proc=proc, log=log)
        [decision] = approved()
        assert decision.phase == 0 and decision.actor == "human"
        assert decision.payload["author"].endswith("@tui")
        assert decision.payload["checkpoint_id"] == "p0.a1"

        # ... and the attached TUI follows phase 1 to its failed gate and the next decision
        # (the banner moves with each poll, the title and the panels at most every 0.25 s)
        wait_until(lambda: (s := folded(db, "e2e")) is not None and s.phases[1].pending_proposal,
                   "phase 1's debug proposal", proc=proc, log=log)
        state = folded(db, "e2e")
        assert state is not None and state.phases[0].status == "exited:passed"
        head = f"LIVE v{state.version}/{state.version}"
        screen = pane.wait_for(lambda s: head in s and "gate fake-1: FAIL" in s)
        assert "phase 1 kernel validation  run running" in screen
        assert "phase 1 (kernel validation) failed its gate: pick one of 2 debug " \
               "directions  —  press d to decide" in screen

        pane.keys("q")
        pane.wait_for(lambda s: "phase 1 kernel validation" not in s, timeout=10)
    finally:
        pane.kill()
    assert proc.poll() is None, log.read_text()        # still waiting for the pick


EXITED = re.compile(r"\[exit \d+\]")     # what the shell echoes after the command


def pane_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """What a pane's shell needs to run the fake pipeline with the session's key and cache."""
    keep = ("NPU_DEPLOY_KEY_FILE", "NPU_DEPLOY_PIPELINES", "NPU_DEPLOY_CACHE",
            "NPU_DEPLOY_MEASUREMENTS", "NPU_DEPLOY_SETTINGS", "HOME")
    return {"TERM": "xterm-256color", "PS1": "$ ",
            "NPU_DEPLOY_KEYMAP": str(tmp_path / "no-keymap.toml"),
            "PYTHONPATH": os.pathsep.join((str(TESTS), str(ROOT))),
            **{k: os.environ[k] for k in keep if k in os.environ}, **extra}


def test_deploy_in_the_tui_of_a_model_it_cannot_deploy_is_a_one_line_error(tmp_path):
    """Without --headless the model is checked after the first frame (it imports torch);
    refused, the TUI leaves and the shell gets the command line's one error line, a
    non-zero status and no run."""
    db = tmp_path / "runs.db"
    pane = Pane(f"npu-deploy-test-{uuid.uuid4().hex[:8]}", "refused")
    try:
        pane.start(pane_env(tmp_path))
        pane.type(f"cd {tmp_path} && {NPU_DEPLOY} deploy no-such-model --db {db}; "
                  "echo \"[exit $?]\"")
        screen = pane.wait_for(EXITED.search, timeout=60)
    finally:
        pane.kill()
    lines = [line for line in screen.splitlines() if line.startswith("npu-deploy: error:")]
    assert len(lines) == 1 and "no-such-model" in lines[0], screen
    assert "[exit 1]" in screen
    assert "opening the TUI" not in screen      # the loading line was taken back
    assert "Traceback" not in screen
    if db.exists():
        with EventStore.open(db, readonly=True) as store:
            assert store.run_ids() == []


def test_quit_mid_step_returns_the_shell_and_resume_finishes_the_run(tmp_path):
    """q while a step runs: the prompt comes back at once with how to go on, the run holds
    the pause the TUI left, and `npu-deploy resume` finishes it (the step is run again)."""
    db = tmp_path / "runs.db"
    pane = Pane(f"npu-deploy-test-{uuid.uuid4().hex[:8]}", "quit")
    try:
        pane.start(pane_env(tmp_path, FAKE_STEP_S="3", FAKE_STEPS="2"))
        pane.type(f"cd {tmp_path} && {NPU_DEPLOY} deploy tiny --pipeline fake_pipeline:make "
                  f"--auto-approve --run-id q1 --db {db}; echo \"[exit $?]\"")
        wait_until(lambda: folded(db, "q1") is not None and step_open(db),
                   "a step in flight", timeout=60)
        pane.wait_for("q1")
        pane.keys("q")
        quit_at = time.monotonic()
        screen = pane.wait_for(EXITED.search, timeout=20)
        took = time.monotonic() - quit_at
    finally:
        pane.kill()
    assert "[exit 0]" in screen, screen
    assert "npu-deploy resume q1" in screen          # how to go on
    assert took < 3, f"the shell waited {took:.1f} s for a step of 3 s"   # not the step
    with EventStore.open(db, readonly=True) as store:
        assert [c["kind"] for c in store.pending_commands("q1")] == ["pause"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(TESTS), str(ROOT))),
           "FAKE_STEP_S": "0", "FAKE_STEPS": "2"}
    done = subprocess.run([str(NPU_DEPLOY), "resume", "q1", "--db", str(db)], env=env,
                          cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    state = folded(db, "q1")
    assert state is not None and state.terminal and state.verdict == "PASS", done.stdout


def step_open(db: Path) -> bool:
    with EventStore.open(db, readonly=True) as store:
        steps = {e.payload["call_id"]: e.type for e in store.events(
            "q1", types=("tool.requested", "tool.completed"))}
    return "tool.requested" in steps.values()


def colours(pane: Pane, row: str) -> str:
    """The escape sequences of the pane's first line that holds `row`: its colours."""
    text = pane.tmux("capture-pane", "-p", "-e", "-t", pane.name)
    line = next((line for line in text.splitlines() if row in SGR.sub("", line)), "")
    return "".join(SGR.findall(line))


SGR = re.compile(r"\x1b\[[0-9;:]*m")


def test_a_chosen_theme_is_there_at_the_next_launch_and_quitting_says_how_to_go_on(tmp_path):
    """Launch, choose textual-light in the palette ("change theme"), quit; launch again: the
    title is drawn in textual-light's colours, which the settings file names. Each quit
    leaves one line on the shell: the run waits at its checkpoint, and the command that
    goes on."""
    import tui_runs

    db, settings = tmp_path / "runs.db", tmp_path / "settings" / "tui.toml"
    tui_runs.build_store(db, tui_runs.checkpoint_run)
    pane = Pane(f"npu-deploy-test-{uuid.uuid4().hex[:8]}", "theme")
    title = "AT END v13/13"         # the TUI's title row (the loading line before it has not)
    said = ("run live-p0 waits: phase 0 (build CPU oracle) passed its gate: approve or "
            "redirect; `npu-deploy resume live-p0` goes on")
    try:
        pane.start(pane_env(tmp_path, NPU_DEPLOY_SETTINGS=str(settings), COLORTERM="truecolor"))
        pane.type(f"cd {tmp_path} && {NPU_DEPLOY} attach live-p0 --db {db}; echo \"[exit $?]\"")
        pane.wait_for(title, timeout=30)
        wait_until(lambda: colours(pane, title), "the title drawn")
        dark = colours(pane, title)
        pane.keys("C-p")
        pane.wait_for("Search for commands")
        pane.type("change theme")
        pane.wait_for("Search for themes")
        pane.type("textual-light")
        pane.wait_for(lambda s: "Search for themes" not in s)      # the palette is closed
        wait_until(lambda: colours(pane, title) not in ("", dark), "the light theme drawn")
        time.sleep(0.5)
        light = colours(pane, title)
        pane.keys("q")
        first = pane.wait_for(EXITED.search, timeout=20)
        assert 'theme = "textual-light"' in settings.read_text()
        pane.type("clear")
        pane.type(f"{NPU_DEPLOY} attach live-p0 --db {db}; echo \"[exit $?]\"")
        pane.wait_for(title, timeout=30)
        wait_until(lambda: colours(pane, title) == light, "the title in the chosen theme")
        pane.keys("q")
        second = pane.wait_for(EXITED.search, timeout=20)
    finally:
        pane.kill()
    assert light != dark
    for screen in (first, second):
        assert "[exit 0]" in screen, screen
        assert " ".join(screen.split()).count(said) == 1, screen
