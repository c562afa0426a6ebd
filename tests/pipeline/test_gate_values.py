"""A gate value that misses its threshold never reads as the threshold, on every surface
that shows gate values: the event text (the headless deploy, `show`, the report's worst
check), the independent evaluator's table and the TUI's gates table."""

from __future__ import annotations

from rich.console import Console

from npu_deploy.events.describe import check_text
from npu_deploy.pipeline.evaluator import markdown
from npu_deploy.tui.timeline import GateRow
from npu_deploy.tui.widgets.panels import GateTable

MISS = {"subject": "flash_attention[2x1x2048x2048x32]", "metric": "within_frac",
        "value": 1 - 1 / 131072, "threshold": 1.0, "comparison": ">=", "passed": False,
        "gating": True}


def test_every_surface_shows_a_near_miss_with_the_digits_that_tell_it_apart():
    assert check_text(MISS).endswith("within_frac = 0.99999 (needs >= 1)")
    assert "| within_frac | 0.99999 | >= 1 | FAIL |" in markdown(False, [MISS])
    row = GateRow(MISS["subject"], "within_frac", MISS["value"], ">=", 1.0, False, True,
                  (0.99, None, MISS["value"]), "")
    console = Console(width=200, record=True)
    console.print(GateTable([row], "phase1-kernels"))
    text = console.export_text()
    assert "0.99999" in text and ">= 1 " in text and "0.99 → — → 0.99999" in text
