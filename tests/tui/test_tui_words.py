"""Issue 38 point 8, words on screen: at 80x24, 120x40 and 200x60 every row of the gates
table shows what identifies it (the kernel or prompt or layer, the metric), a column gives
up its shared words before the words that tell its rows apart, and the gate's name, the
same on every row, is in the line above the table instead of a column.

The runs are tests/tui_runs.py's: oracle-p0's gate has the checks of the real phase-0 gate
(pipeline/gates/oracle.py's metric names), checker-p1's the kernels of phase 1 with a
finding of the real constraint checker, wide-gate ten layers."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import tui_runs
from rich.console import Console
from textual.binding import Binding
from textual.command import CommandList, CommandPalette
from textual.geometry import Region
from textual.notifications import Notification
from textual.widgets import OptionList, Static, TabbedContent
from textual.widgets._toast import Toast
from tui_pilot import until

from npu_deploy.events import fold
from npu_deploy.skills import load_catalog
from npu_deploy.skills.matcher import title_of
from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.decision import DecisionDialog, direction_text, shared_change
from npu_deploy.tui.screens.help import HelpScreen
from npu_deploy.tui.screens.run import RunScreen
from npu_deploy.tui.standing import quit_line, returned_words
from npu_deploy.tui.timeline import gate_rows
from npu_deploy.tui.widgets.banner import Banner
from npu_deploy.tui.widgets.panels import GatesPanel
from npu_deploy.tui.widgets.panels.gates import fit_names
from npu_deploy.tui.widgets.scrubber import Scrubber

SIZES = [(80, 24), (120, 40), (200, 60)]
RUNS = ("oracle-p0", "checker-p1", "wide-gate")


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tui-words") / "runs.db"
    ids = tui_runs.build_store(path, tui_runs.oracle_gate_run, tui_runs.checker_run,
                               tui_runs.wide_gate_run)
    assert tuple(ids) == RUNS
    return path


@pytest.fixture
def db(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    yield tui_runs.private_copy(built, tmp_path, monkeypatch)


WORDS = re.compile(r"[^A-Za-z0-9]+")


def reads_as(shown: str, name: str) -> bool:
    """`shown` is `name` with some of its words cut to their first letters: the same words
    in the same order, each the start of the name's."""
    a, b = WORDS.split(shown), WORDS.split(name)
    return len(a) == len(b) and all(x and y.startswith(x) for x, y in zip(a, b, strict=True))


def test_a_column_gives_up_its_shared_words_first_and_keeps_the_rest_apart():
    metrics = ["prefill_logits_rel_l2", "decode_logits_rel_l2", "greedy_tokens_identical",
               "prefill_logits_max_abs", "prefill_logits_cosine", "stored_oracle_tokens"]
    for width in range(8, 24):
        shown = fit_names(metrics, width)
        assert all(len(s) <= width for s in shown.values())
        assert len(set(shown.values())) == len(metrics)       # never two alike
    assert fit_names(metrics, 18)["prefill_logits_max_abs"] == "prefill_lo_max_abs"
    assert fit_names(metrics, 12)["prefill_logits_max_abs"] == "p_lo_max_abs"
    assert fit_names(metrics, 12)["decode_logits_rel_l2"] == "decode_lo_rel_l2"[:11] + "…"
    # a word of one name alone tells it apart: a number is never cut
    assert fit_names(["layers.10.mlp", "layers.11.mlp"], 6) == {
        "layers.10.mlp": "l.10.m", "layers.11.mlp": "l.11.m"}
    assert fit_names(["gemv_fp32acc K=576 N=576 (q_proj)"], 14) == {
        "gemv_fp32acc K=576 N=576 (q_proj)": "gemv_fp32acc …"}


async def table_lines(db: Path, run_id: str, size: tuple[int, int]) -> tuple[list[str], str]:
    """The gates panel's lines as drawn at `size` (all of them: the panel scrolls), and the
    line above the table."""
    app = DeployApp(db, run_id=run_id, live=True)
    async with app.run_test(size=size) as pilot:
        panel = app.screen.query_one(GatesPanel)
        await until(pilot, lambda: "gate" in panel.text)
        lines = panel.text.splitlines()
        width = panel.scrollable_content_region.width
    assert all(len(line) <= width for line in lines), (width, lines)
    head = next(i for i, line in enumerate(lines) if "subject" in line and "metric" in line)
    return lines[head + 1:], " ".join(lines[:head])


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_every_gate_row_shows_its_prompt_and_metric_told_apart(db, size):
    """oracle-p0: six metrics on three prompts. Each row shows its prompt and a metric that
    reads as its own and as no other (at 120 columns two of them read `prefill_logi…`
    before), and no row repeats the gate's name (`p.o…` on every row before)."""
    rows = gate_rows(fold(EventStore.open(db, readonly=True).events("oracle-p0"))
                     .phases[0].gates)
    lines, above = await table_lines(db, "oracle-p0", size)
    assert "phase0.oracle" in above
    metrics = {r.metric for r in rows}
    for r, line in zip(rows, lines, strict=False):
        status, subject, metric, value, *threshold = line.split()
        assert subject == r.subject, line
        assert reads_as(metric, r.metric), (metric, r.metric)
        assert [m for m in metrics if reads_as(metric, m)] == [r.metric], line
        assert "phase0" not in line and "…" not in line
    if size[0] >= 200:
        assert all(r.metric in line for r, line in zip(rows, lines, strict=False))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_every_kernel_and_layer_row_keeps_the_word_that_names_it(db, size):
    """checker-p1: each row names its kernel (a failing one wraps under itself); wide-gate:
    each row its layer's number."""
    lines, above = await table_lines(db, "checker-p1", size)
    assert "kernels-1" in above
    kernels = [line for line in lines if line.split()[:1] in (["FAIL"], ["ok"], ["lens"])]
    assert len(kernels) == 6
    assert "gemm_bf16" in kernels[0] and "blocking_findings" in kernels[0]
    assert all("gemv_fp32acc" in line for line in kernels[1:])
    lines, _ = await table_lines(db, "wide-gate", size)
    layers = [re.search(r"\b(?:layers|l)\.(\d+)\.", line) for line in lines[:10]]
    assert [m.group(1) if m else None for m in layers] == [str(i) for i in range(10)]


# --- debug directions ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def dirs_built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tui-directions") / "runs.db"
    assert tui_runs.build_store(path, tui_runs.directions_run) == ["dirs-p1"]
    return path


def drawn(renderable: object, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), record=True)
    console.print(renderable)
    return console.export_text().splitlines()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_debug_directions_read_in_whole_words_and_say_their_one_change_once(
        dirs_built, tmp_path, monkeypatch, size):
    """dirs-p1: the real skill matcher proposes two directions whose retries make the same
    change. The dialog says that change once, above them, its configuration as `name =
    value` (a Python dict before, in each direction); each direction's title is its skill's
    first clause in whole words (cut mid-word at 120 characters before), wrapped under
    itself after its number."""
    db = tmp_path / "runs.db"
    db.write_bytes(dirs_built.read_bytes())
    monkeypatch.setenv("NPU_DEPLOY_KEYMAP", str(tmp_path / "no-keymap.toml"))
    app = DeployApp(db, run_id="dirs-p1", live=True)
    async with app.run_test(size=size) as pilot:
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DecisionDialog))
        shared = str(app.screen.query_one("#shared-change", Static).render())
        options = app.screen.query_one("#directions", OptionList)
        width = options.scrollable_content_region.width - 2       # the option's padding
        shown = [drawn(options.get_option_at_index(i).prompt, width)
                 for i in range(options.option_count)]
    assert shared.startswith("Whichever direction you pick, its retry changes gemm_bf16")
    assert "tile_k 256 -> 128" in shared
    assert "runs with herd_n = 8, ping_pong = true, tile_k = 128, tile_m = 64, tile_n = 64" \
        in " ".join(shared.split())
    catalog = load_catalog()
    for lines, skill in zip(shown, ("buffer-object-corruption", "silent-gemm-corruption"),
                            strict=True):
        text = " ".join(" ".join(lines).split())
        assert title_of(catalog[skill].description) in text, text
        assert f"({skill}, score" in text and "matched: " in text
        assert "{" not in text and "changes" not in text         # said once, above
        assert all(line.startswith("   ") for line in lines[1:] if line.strip()), lines


def test_a_direction_that_makes_an_earlier_ones_change_says_so():
    change = {"text": "X: tile_n 32 -> 64", "configs": {"X": {"tile_n": 64}}}
    other = {"text": "undo the prefill transform fuse_qkv", "undo": ["fuse_qkv"]}
    dirs = [{"title": f"t{i}", "skill": "s", "score": 0.5, "rationale": "r", "change": c}
            for i, c in enumerate((change, change, other))]
    assert shared_change(dirs) is None and shared_change(dirs[:2]) == change
    text = [" ".join(drawn(direction_text(i, d, dirs[:i - 1], False), 80))
            for i, d in enumerate(dirs, 1)]
    assert "changes: X: tile_n 32 -> 64" in text[0] and "X runs with tile_n = 64" in text[0]
    assert "changes: the same as direction 1" in text[1]
    assert "changes: undo the prefill transform fuse_qkv" in text[2]


# --- notices ---------------------------------------------------------------------------------

#: Words of the code, not of the person who reads a notice
JARGON = ("conductor", "inbox", "left for run", "records it", "not open now", "v1")


@pytest.fixture(scope="module")
def checkpoint_built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tui-notices") / "runs.db"
    assert tui_runs.build_store(path, tui_runs.checkpoint_run) == ["live-p0"]
    return path


def overlaps(a: Region, b: Region) -> bool:
    return bool(a.intersection(b).area)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_notices_say_what_happened_in_plain_words_clear_of_the_scrubber_and_gates(
        checkpoint_built, tmp_path, monkeypatch, size):
    """live-p0 waits at its checkpoint and nothing runs it: approving leaves the approval
    and says, in plain words, that it happens once the run is resumed and how ("its
    conductor records it once" before); a jump with nothing to jump to says so. Every
    notice sits over the top of the event stream, never over the banner, the tabs (the
    gates) or the scrubber (bottom right over the scrubber and the gates before), and goes
    within a few seconds."""
    db = tmp_path / "runs.db"
    db.write_bytes(checkpoint_built.read_bytes())
    monkeypatch.setenv("NPU_DEPLOY_KEYMAP", str(tmp_path / "no-keymap.toml"))
    app = DeployApp(db, run_id="live-p0", live=True)
    said: list[Notification] = []
    async with app.run_test(size=size, notifications=True) as pilot:
        await pilot.press("d")
        await until(pilot, lambda: isinstance(app.screen, DecisionDialog))
        await pilot.press("a")
        await until(pilot, lambda: isinstance(app.screen, RunScreen))
        said += list(app._notifications)
        await pilot.press("f")
        await until(pilot, lambda: len(app.screen.query(Toast)) == 2)
        said += [n for n in app._notifications if n not in said]
        screen = app.screen
        toasts = [t.region for t in screen.query(Toast)]
        kept = [screen.query_one(w).region for w in (Scrubber, TabbedContent, Banner)]
    words = [n.message for n in said]
    assert words[0] == ("Approved: run live-p0 goes on after phase 0 once it runs again: "
                        "nothing runs it now. Resume it with r in the runs list, or "
                        "npu-deploy resume live-p0 in a shell.")
    assert words[1] == "No gate failure after this event."
    assert not [w for w in words if any(j in w for j in JARGON)]
    assert all(n.timeout <= 5 for n in said)
    assert toasts and all(r.area for r in toasts)
    assert not [(t, k) for t in toasts for k in kept if overlaps(t, k)], (toasts, kept)


# --- the theme, kept ------------------------------------------------------------------------

def palette_hits(app: DeployApp) -> list[str]:
    results = app.screen.query_one(CommandList)
    return [str(getattr(results.get_option_at_index(i).prompt, "plain",
                        results.get_option_at_index(i).prompt)).split("\n")[0]
            for i in range(results.option_count)]


async def choose_theme(app: DeployApp, pilot, search: str, theme: str) -> None:
    """The palette, as a person uses it: ctrl+p, `search`, the first hit, then `theme`."""
    await pilot.press("ctrl+p")
    await until(pilot, lambda: isinstance(app.screen, CommandPalette))
    await pilot.press(*search)
    await until(pilot, lambda: bool(palette_hits(app)))
    assert palette_hits(app)[0].startswith("Change theme"), palette_hits(app)
    await pilot.press("enter")
    await until(pilot, lambda: isinstance(app.screen, CommandPalette)
                and any(theme in h for h in palette_hits(app)))
    await pilot.press(*theme)
    await until(pilot, lambda: palette_hits(app)[:1] == [theme])
    await pilot.press("enter")
    await until(pilot, lambda: not isinstance(app.screen, CommandPalette))


@pytest.mark.parametrize("search", ["change theme", "theme"])
async def test_change_theme_is_found_in_the_palette_and_kept_for_the_next_launch(
        db, tui_settings, search):
    """"change theme" found nothing in the palette before (its command was "Theme"), and
    the theme chosen was gone at the next launch."""
    app = DeployApp(db, run_id="oracle-p0", live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        assert app.theme == "textual-dark"
        await choose_theme(app, pilot, search, "textual-light")
        assert app.theme == "textual-light"
    assert 'theme = "textual-light"' in tui_settings.read_text()
    again = DeployApp(db, run_id="oracle-p0", live=True)
    async with again.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert again.theme == "textual-light"
        assert not list(again._notifications)


@pytest.mark.parametrize("text, says", [
    ("theme = [\n", "is not a settings file"),
    ('theme = "no-such-theme"\n', "there is no theme 'no-such-theme'")])
async def test_a_settings_file_it_cannot_use_is_one_notice_and_the_defaults(
        db, tui_settings, text, says):
    tui_settings.write_text(text)
    app = DeployApp(db, run_id="oracle-p0", live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.theme == "textual-dark"
        [notice] = [n.message for n in app._notifications]
        assert says in notice and str(tui_settings) in notice and "\n" not in notice
        app.theme = "nord"                      # a choice writes the file anew
    assert 'theme = "nord"' in tui_settings.read_text()


# --- where a run stands when the TUI quits ---------------------------------------------------

@pytest.fixture(scope="module")
def standing_built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tui-standing") / "runs.db"
    tui_runs.build_store(path, tui_runs.checkpoint_run, tui_runs.stopped_run,
                         tui_runs.finished_run, tui_runs.working_run)
    return path


def test_quitting_says_where_a_waiting_run_stands_and_the_command_that_goes_on(
        standing_built):
    db = standing_built
    assert quit_line(db, "live-p0", here=False) == (
        "run live-p0 waits: phase 0 (build CPU oracle) passed its gate: approve or redirect; "
        "`npu-deploy resume live-p0` goes on")
    with EventStore.open(db) as store, tui_runs.held(store, "live-p0"):   # another process
        assert quit_line(db, "live-p0", here=False) == (
            "run live-p0 waits: phase 0 (build CPU oracle) passed its gate: approve or "
            "redirect; `npu-deploy attach live-p0` opens it to decide")
    # its conductor ran in the TUI's process, which left it a pause
    assert quit_line(db, "live-p0", here=True) == (
        "run live-p0 is paused: phase 0 (build CPU oracle) passed its gate: approve or "
        "redirect; `npu-deploy resume live-p0` goes on")
    stopped = quit_line(db, "stopped-p2", here=False)
    assert stopped is not None and stopped.startswith(
        "run stopped-p2 waits: phase 2 (single block) stopped for a person: ")
    assert stopped.endswith("; `npu-deploy resume stopped-p2` goes on")
    assert quit_line(db, "done-pass", here=False) is None          # ended
    assert quit_line(db, "work-p1", here=True) is None             # mid-step: said apart
    assert quit_line(db, "no-such-run", here=False) is None


def test_a_conductor_that_returns_says_where_its_run_stands(standing_built):
    with EventStore.open(standing_built, readonly=True) as store:
        done, waiting = store.fold("done-pass"), store.fold("live-p0")
    assert returned_words("done-pass", "finished PASS", done) == (
        "Run done-pass finished: verdict PASS.", "information")
    assert returned_words("live-p0", "stopped: ValueError: no NPU", waiting) == (
        "Run live-p0 stopped on an error: ValueError: no NPU", "error")


# --- help --------------------------------------------------------------------------------

@pytest.mark.parametrize("run_id", ["oracle-p0", None], ids=["run screen", "run browser"])
async def test_help_opens_on_this_screens_own_keys_without_binding_ids(db, run_id):
    """Help began with a table's cursor keys (the run browser) or the stream's scroll keys,
    each with its binding id; now the screen's own keys come first, Textual's keys every
    widget has come last, and the ids are left to keymap.toml (a note says where)."""
    app = DeployApp(db, run_id=run_id, live=True)
    async with app.run_test(size=(120, 40)) as pilot:
        beneath = app.screen
        await pilot.press("question_mark")
        await until(pilot, lambda: isinstance(app.screen, HelpScreen))
        text = drawn_text(app.screen.keys())
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert lines[0] == "This screen"
    own = {b.description for cls in type(beneath).__mro__
           for b in cls.__dict__.get("BINDINGS", ()) if isinstance(b, Binding)}
    section = lines[1:next(i for i, line in enumerate(lines)
                           if line in ("Where the focus is", "Everywhere"))]
    assert section and all(line.split(None, 1)[1] in own for line in section), section
    generic = [i for i, line in enumerate(lines) if "Focus Next" in line]
    assert generic and generic[0] > lines.index("Also (every Textual app)")
    assert not re.search(r"\b(run|stream|replay|runs|app)\.[a-z_]+\b", text), text
    assert "Keys can be changed in" in lines[-2] + lines[-1] and "keymap" in text


def drawn_text(renderable: object) -> str:
    console = Console(width=150, file=io.StringIO(), record=True)
    console.print(renderable)
    return console.export_text()
