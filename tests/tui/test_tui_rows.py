"""Issue 38 point 1: at 80x24, 120x40 and 200x60 every row of the event stream shows what
identifies it (the kernel a step validates, the gate and its verdict, the decision), width
going to those words before the time and the full type names."""

from __future__ import annotations

from typing import Any

import pytest
from fake_pipeline import FakeAgent, make
from tui_pilot import start, until

from npu_deploy.store import EventStore
from npu_deploy.tui import DeployApp
from npu_deploy.tui.widgets.event_stream import TIMED_ROW, EventStream

KERNELS = ("gemm_bf16 M=128 K=576 N=1536", "flash_attention heads=9 kv_heads=3 Lq=128",
           "silu_mul rows=128 width=1536", "rmsnorm rows=128 width=576")


class Validating(FakeAgent):
    """Phase 0 validates a kernel per step, as phase 1's real agent does."""

    def work(self, run: Any) -> None:
        run.say(f"validating {len(KERNELS)} kernels at the model's shapes")
        for k in KERNELS:
            run.step("validate_kernel", {"kernel": k, "seed": 0}, lambda: {"ok": True},
                     backend=True)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)])
async def test_every_stream_row_names_its_kernel_gate_and_decision(store: EventStore, db_path,
                                                                   size) -> None:
    pipeline = make()
    pipeline.agent = Validating(0.0, 0)
    c = start(store, pipeline)
    assert c.run(wait=False).reason == "awaiting_human"
    c.close()
    app = DeployApp(db_path, run_id="r1", live=True)
    async with app.run_test(size=size) as pilot:
        stream = app.screen.query_one(EventStream)
        await until(pilot, lambda: stream.building is None and len(stream.view) > 0)
        rows = {v: "".join(s.text for s in stream._segments(stream.timeline.line(v)))
                for v in stream.view.rows}
        width = stream.scrollable_content_region.width
    assert all(len(r) <= width for r in rows.values())
    steps = [r for r in rows.values() if "validate_kernel" in r]
    assert len(steps) == len(KERNELS)
    for row, kernel in zip(steps, KERNELS, strict=True):
        assert kernel.split()[0] in row, row        # the kernel, whatever the width
        assert "✓" in row                           # and how the step ended
    [gate] = [r for r in rows.values() if "fake-0" in r]
    assert "fake-0: PASS" in gate
    [wait] = [r for r in rows.values() if "checkpoint" in r]
    assert "phase 0" in wait and "passed" in wait
    timed = any(":" in r[:16] for r in rows.values())
    assert timed == (width >= TIMED_ROW)            # the time only where there is room
