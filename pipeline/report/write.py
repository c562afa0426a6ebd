"""The Phase-6 report as a step of the run: the performance report (report.md, the roofline
and timeline plots) and lessons.md stored as blobs, the same for both agents. On the NPU
the report's times are profiles recorded by this step first, so that every figure has a
`profile.recorded` event behind it."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from npu_deploy.pipeline.toolbox import Toolbox
from npu_deploy.pipeline.workspace import blob_json
from npu_deploy.skills.lessons import harvest_lessons, lessons_markdown


def write_report(run: Any, tb: Toolbox) -> dict[str, Any]:
    """The performance report (markdown, roofline and timeline plots) and lessons.md, as
    blobs of the run."""
    ws = tb.ws
    measured = None
    if ws.settings.measured:        # the report's NPU times are recorded profiles
        # gather (and matplotlib, through render) loads only when a report is written
        from npu_deploy.pipeline.report.gather import report_plans
        measured = {key: tb.profile(mode, recipe=recipe)["total_s"]
                    for key, (mode, recipe) in report_plans(ws).items()}

    def work() -> dict[str, Any]:
        from npu_deploy.pipeline.report.gather import render_to_blobs, report_data
        data = report_data(ws, measured)
        files = render_to_blobs(ws, data)
        lessons = harvest_lessons(ws.store, ws.run_id)
        files["lessons.md"] = ws.store.put_blob(lessons_markdown(lessons).encode())
        return {"report_data": blob_json(ws.store, asdict(data)), "files": files}
    return run.step("write_report", {}, work)
