"""Issue 26, "text is data", and the command line's bad input. What a person or an agent
wrote (a model name, a redirect, an exit reason) prints as written: brackets are not
markup, escape sequences are shown and never sent, 100 KB is cut for display with the whole
text one step away. A run reference is never empty, a run id never ends in a newline, and
a bad option or prompt is one line on stderr with every stored byte unchanged."""

from __future__ import annotations

import hashlib
import sqlite3
from pathlib import Path

import pytest
from conftest import assert_one_error
from fake_pipeline import make

from npu_deploy.events.describe import SHOWN_CHARS, printable
from npu_deploy.machine import Conductor, NeedsHuman, Policy
from npu_deploy.store import EventStore

ESC = "\x1b[2J\x1b[31m"                  # clear the screen, then paint everything red
MODEL = f"tiny[/][bold {ESC}"            # Rich markup: a closing tag that closes nothing
INSTRUCTION = f"[b]fix[/b] it [/] {ESC}now"
LONG = "fix the tile " * 8000            # 104 KB of instruction


@pytest.fixture(autouse=True)
def _gates_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake pipeline's gates all pass (FAKE_FAIL names none)."""
    monkeypatch.setenv("FAKE_FAIL", "")


def digest(db: Path) -> str:
    """sha256 of the store's bytes, after its write-ahead log is folded into the file (a
    command's connection may still be open in this process, and keep an empty log)."""
    with sqlite3.connect(db) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    wal = db.with_name(db.name + "-wal")
    return hashlib.sha256(db.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
                          ).hexdigest()


def redirected(db: Path, model: str = MODEL, instruction: str = INSTRUCTION,
               monkeypatch: pytest.MonkeyPatch | None = None) -> None:
    """Run r1 (fake pipeline) to its first checkpoint, and leave a redirect for it."""
    with EventStore.open(db) as store:
        c = Conductor.start(store, make(), Policy(), model=model, run_id="r1",
                            config={"pipeline": "fake_pipeline:make"})
        assert c.run(wait=False).reason == "awaiting_human"
        c.close()
        store.post_command("r1", "redirect", {"instruction": instruction,
                                              "checkpoint_id": "p0.a1"})


class GivesUp:
    """An agent that stops for a person with `reason` (its words: data)."""

    name = "gives-up"

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def work(self, run: object) -> None:
        raise NeedsHuman(self.reason)


def stopped(db: Path, reason: str, model: str = MODEL) -> None:
    pipeline = make()
    pipeline.agent = GivesUp(reason)
    with EventStore.open(db) as store:
        c = Conductor.start(store, pipeline, Policy(), model=model, run_id="r1",
                            config={"pipeline": "fake_pipeline:make"})
        assert c.run(wait=False).reason == "needs_human"
        c.close()


# --- text: the command line ------------------------------------------------------------------

@pytest.mark.redteam(area="text", case="markup in a model name: runs",
                     before="MarkupError traceback (closing tag '[/]' has nothing to close); "
                            "every later `runs` on that store crashed the same way")
def test_runs_lists_a_model_name_with_markup_as_written(cli, tmp_path, monkeypatch):
    db = tmp_path / "runs.db"
    redirected(db)
    listed = cli("--db", db, "runs")
    assert listed.exit_code == 0, listed.stderr
    assert printable(MODEL) in listed.stdout            # tiny[/][bold \x1b[2J\x1b[31m
    assert "\x1b" not in listed.stdout


@pytest.mark.redteam(area="text", case="escape sequences in show and resume",
                     before="markup printed as written, but the model name's and the "
                            "instruction's ESC[2J ESC[31m reached the terminal raw: it "
                            "cleared and turned red")
def test_show_and_resume_show_escapes_and_never_send_them(cli, tmp_path, monkeypatch):
    db = tmp_path / "runs.db"
    redirected(db)
    resumed = cli("--db", db, "resume", "r1", "--no-wait")
    assert resumed.exit_code == 3, resumed.stderr               # at the next checkpoint
    assert f"decision: redirect {printable(INSTRUCTION)} (by human)" in resumed.stdout
    assert f"a person's instruction: {printable(INSTRUCTION)}" in resumed.stdout
    shown = cli("--db", db, "show", "r1", "--events", "40")
    assert shown.exit_code == 0, shown.stderr
    assert f"r1  {printable(MODEL)} on emulator" in shown.stdout
    assert f"redirect {printable(INSTRUCTION)}" in shown.stdout
    for out in (resumed.stdout, resumed.stderr, shown.stdout):
        assert "\x1b" not in out


@pytest.mark.redteam(area="text", case="markup and escapes: the headless deploy",
                     before="the model name's ESC[2J ESC[31m printed raw in the headless "
                            "deploy's first line")
def test_the_headless_deploy_shows_a_model_name_as_written(cli, tmp_path, monkeypatch):
    db = tmp_path / "runs.db"
    deployed = cli("--db", db, "deploy", MODEL, "--headless", "--auto-approve", "--pipeline",
                   "fake_pipeline:make", "--run-id", "r2")
    assert deployed.exit_code == 0, deployed.stderr
    assert f"run r2: {printable(MODEL)}, policy auto-approve" in deployed.stdout
    assert "\x1b" not in deployed.stdout


@pytest.mark.redteam(area="text", case="an exit reason with line breaks and escapes",
                     before="`resume` ended with an error of three lines on stderr, the "
                            "reason's ESC[2J sent raw; a 100 KB reason made a 100 KB line")
def test_an_error_that_quotes_an_agent_is_one_line(cli, tmp_path, monkeypatch):
    db = tmp_path / "runs.db"
    stopped(db, f"stuck:\nsee {ESC}\nthe log")
    line = assert_one_error(cli("--db", db, "resume", "r1", "--no-wait"))
    assert "stuck: see \\x1b[2J\\x1b[31m the log" in line and "\x1b" not in line
    long = tmp_path / "long.db"
    stopped(long, "stuck " + "x" * 100_000)
    line = assert_one_error(cli("--db", long, "resume", "r1", "--no-wait"), "more characters")
    assert len(line) < 2 * SHOWN_CHARS


@pytest.mark.redteam(area="text", case="100 KB redirect: show and resume",
                     before="`resume` printed 209 KB (the 104 KB instruction twice), `show` "
                            "390 KB; each took 0.4 s here: the reported 94 s (super-linear) "
                            "did not reproduce at this commit")
def test_a_long_instruction_is_cut_for_display_and_whole_in_json(cli, tmp_path, monkeypatch):
    db = tmp_path / "runs.db"
    redirected(db, model="tiny", instruction=LONG)
    resumed = cli("--db", db, "resume", "r1", "--no-wait")
    assert resumed.exit_code == 3, resumed.stderr
    assert len(resumed.stdout) < 10 * SHOWN_CHARS
    assert f"{len(LONG) - SHOWN_CHARS:,} more characters" in resumed.stdout
    shown = cli("--db", db, "show", "r1", "--events", "40")
    assert shown.exit_code == 0, shown.stderr
    assert len(shown.stdout) < 20 * SHOWN_CHARS          # 390 KB before
    assert "`npu-deploy show r1 --json` prints all of it" in shown.stdout
    whole = cli("--db", db, "show", "r1", "--events", "40", "--json")
    assert LONG in whole.stdout                          # what is stored is never cut


# --- text: the TUI ---------------------------------------------------------------------------

@pytest.mark.redteam(area="text", case="markup, escapes and 10 KB in the TUI",
                     before="no crash (the screens used Text), but the model name's and the "
                            "exit reason's ESC[2J ESC[31m went raw into the title, the banner "
                            "and the decide dialog; the banner and the dialog showed all 10 KB "
                            "of the reason")
async def test_the_tui_shows_text_as_written_cut_and_whole_one_key_away(tmp_path,
                                                                       monkeypatch):
    from textual.widgets import DataTable

    from npu_deploy.tui import DeployApp
    from npu_deploy.tui.screens.decision import DecisionDialog
    from npu_deploy.tui.screens.dialogs import EventDetail, FullText
    from npu_deploy.tui.screens.runs import RunsScreen

    db = tmp_path / "runs.db"
    reason = f"stuck on [/] and [bold]this {ESC}" + "x" * 10_000
    stopped(db, reason)
    app = DeployApp(db, run_id="r1", live=False)
    async with app.run_test(size=(150, 45)) as pilot:
        await pilot.pause()
        title = str(app.screen.query_one("#run-title").render())
        banner = str(app.screen.query_one("#banner").render())
        assert f"r1  {printable(MODEL)}  emulator" in title
        assert "stuck on [/] and [bold]this \\x1b[2J\\x1b[31m" in banner
        assert "\x1b" not in title + banner and len(banner) < 400
        await pilot.press("d")
        assert isinstance(app.screen, DecisionDialog)
        why = str(app.screen.query_one("#decision-why").render())
        assert "stuck on [/] and [bold]this \\x1b[2J" in why and "\x1b" not in why
        assert "more characters" in why and len(why) < SHOWN_CHARS + 300
        assert "ctrl+t the whole reason" in str(app.screen.query_one("#decision-keys").render())
        await pilot.press("ctrl+t")
        assert isinstance(app.screen, FullText)
        body = str(app.screen.query_one("#full-text-body").render())
        assert body == printable(reason, None)           # all of it, escapes shown
        await pilot.press("escape")
        assert isinstance(app.screen, DecisionDialog)
        await pilot.press("escape")
        # the event that says why the phase stopped: its payload cut, in full on ctrl+t
        exited = next(e for e in EventStore.open(db, readonly=True).events("r1")
                      if e.type == "phase.exited")
        app.push_screen(EventDetail(exited))
        await pilot.pause()
        assert app.screen.query("#cut-note")
        payload = str(app.screen.query_one("#payload").render())
        assert len(payload) < 3 * SHOWN_CHARS and "\x1b" not in payload
        await pilot.press("ctrl+t")
        assert isinstance(app.screen, FullText)
        assert "x" * 10_000 in str(app.screen.query_one("#full-text-body").render())
        await pilot.press("escape")
        await pilot.press("escape")
        app.screen.action_back()
        await pilot.pause()
        assert isinstance(app.screen, RunsScreen)
        assert str(app.screen.query_one(DataTable).get_row("r1")[1]) == printable(MODEL)


# --- input: run ids and references -----------------------------------------------------------

@pytest.mark.redteam(area="input", case="empty run-id prefix",
                     before="`decide \"\" abort` left an abort for the store's only run: the "
                            "empty prefix matched it")
def test_an_empty_or_blank_run_reference_matches_nothing(cli, tmp_path, monkeypatch):
    db = tmp_path / "runs.db"
    redirected(db, model="tiny", instruction="go on")
    before = digest(db)
    assert_one_error(cli("--db", db, "decide", "", "abort"), "run '' is empty")
    for ref in ("r1\n", " r1", "r\x1b"):
        assert_one_error(cli("--db", db, "decide", ref, "abort"), "is not a run id")
        assert_one_error(cli("--db", db, "show", ref), "is not a run id")
    assert digest(db) == before
    with EventStore.open(db, readonly=True) as store:
        assert [c["kind"] for c in store.pending_commands("r1")] == ["redirect"]


@pytest.mark.redteam(area="input", case="run id with a trailing newline",
                     before="`deploy --run-id $'r2\\n'` stored a run whose id ends in a "
                            "newline; `--run-id ''` was taken as no id (a new UUIDv7)")
def test_a_run_id_is_checked_before_anything_is_stored(cli, tmp_path, monkeypatch):
    db = tmp_path / "runs.db"
    redirected(db, model="tiny", instruction="go on")
    before = digest(db)
    for bad in ("r2\n", "", "r 2", "r2\t", "x" * 65):
        assert_one_error(cli("--db", db, "deploy", "tiny", "--headless", "--auto-approve",
                             "--pipeline", "fake_pipeline:make", "--run-id", bad), "--run-id")
    assert digest(db) == before
    fresh = tmp_path / "fresh.db"
    assert_one_error(cli("--db", fresh, "deploy", "tiny", "--headless", "--auto-approve",
                         "--pipeline", "fake_pipeline:make", "--run-id", "r2\n"), "--run-id")
    assert not fresh.exists()                            # no store created for it


# --- input: numbers and prompts --------------------------------------------------------------

@pytest.mark.redteam(area="input", case="--decode and --pos unbounded",
                     before="accepted: `plan --pos 99999999999` modeled a decode step at that "
                            "position (2,560,007 ms per token)")
def test_decode_positions_are_bounded(cli):
    for args in (("kernels", "tiny-llama", "--decode", 99_999_999_999),
                 ("plan", "tiny-llama", "--mode", "decode", "--pos", 99_999_999_999),
                 ("plan", "tiny-llama", "--mode", "decode", "--pos", -1)):
        assert_one_error(cli(*args), "0<=x<=2048")
    ok = cli("plan", "tiny-llama", "--mode", "decode", "--pos", 2048)
    assert ok.exit_code == 0 and "decode p=2048" in ok.stdout


@pytest.mark.slow
@pytest.mark.redteam(area="input", case="oracle --prompt \"\"",
                     before="RuntimeError traceback: cannot reshape tensor of 0 elements")
def test_an_empty_oracle_prompt_is_one_line(cli):
    assert_one_error(cli("oracle", "tiny-llama", "--prompt", ""), "has no tokens")


@pytest.mark.slow
@pytest.mark.redteam(area="input", case="generate prompt longer than the context",
                     before="ValueError traceback: the conversation has 6019 tokens, the "
                            "model takes 4096")
def test_an_over_long_prompt_is_one_line_and_changes_nothing(cli, deployed):
    db = deployed.db
    before = digest(db)
    assert_one_error(cli("--db", db, "generate", "d1", "word " * 5000, "--max-tokens", 2),
                     "the model takes 4096")
    assert digest(db) == before
