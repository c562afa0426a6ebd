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
from textual.widgets import OptionList, Static
from tui_pilot import until

from npu_deploy.events import fold
from npu_deploy.skills import load_catalog
from npu_deploy.skills.matcher import title_of
from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.screens.decision import DecisionDialog, direction_text, shared_change
from npu_deploy.tui.timeline import gate_rows
from npu_deploy.tui.widgets.panels import GatesPanel
from npu_deploy.tui.widgets.panels.gates import fit_names

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
    path = tmp_path / "runs.db"
    path.write_bytes(built.read_bytes())
    monkeypatch.setenv("NPU_DEPLOY_KEYMAP", str(tmp_path / "no-keymap.toml"))
    monkeypatch.setenv("NPU_DEPLOY_SETTINGS", str(tmp_path / "no-settings.toml"))
    yield path


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
    monkeypatch.setenv("NPU_DEPLOY_SETTINGS", str(tmp_path / "no-settings.toml"))
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
