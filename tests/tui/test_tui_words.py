"""Issue 38 point 8, words on screen: at 80x24, 120x40 and 200x60 every row of the gates
table shows what identifies it (the kernel or prompt or layer, the metric), a column gives
up its shared words before the words that tell its rows apart, and the gate's name, the
same on every row, is in the line above the table instead of a column.

The runs are tests/tui_runs.py's: oracle-p0's gate has the checks of the real phase-0 gate
(pipeline/gates/oracle.py's metric names), checker-p1's the kernels of phase 1 with a
finding of the real constraint checker, wide-gate ten layers."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import tui_runs
from tui_pilot import until

from npu_deploy.events import fold
from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
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
