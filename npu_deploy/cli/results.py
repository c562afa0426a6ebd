"""The commands over what a run produced: report, lessons."""

from __future__ import annotations

from pathlib import Path

import click

from npu_deploy.events.describe import printable

from .options import db_option, json_option, open_existing, open_readonly
from .output import EXIT_USAGE, emit_json, fail


@click.command("report")
@db_option
@click.argument("run")
@click.option("-o", "--output", type=click.Path(path_type=Path, file_okay=False),
              required=True, help="Directory for report.md, the plots, lessons.md and the "
                                  "evaluation.")
def report_cmd(run: str, output: Path) -> None:
    """Write RUN's performance report, plots, lessons and evaluation to a directory."""
    import json

    store = open_readonly()
    run_id = store.resolve_run(run)
    files: dict[str, bytes] = {}
    for e in store.events(run_id, types=("tool.completed", "gate.evaluated")):
        p = e.payload
        if e.type == "tool.completed" and p["tool"] == "write_report" and p["ok"]:
            files.update({name: store.get_blob(ref) for name, ref in p["result"]["files"].items()})
        elif e.type == "gate.evaluated" and p["gate"] == "phase7.evaluator" and p.get("inputs"):
            files["evaluation.md"] = json.loads(store.get_blob(p["inputs"]))["markdown"].encode()
    if not files:
        fail(f"run {run_id} has no report yet: phase 6 writes it")
    output.mkdir(parents=True, exist_ok=True)
    for name, data in sorted(files.items()):
        (output / name).write_bytes(data)
        click.echo(output / name)


@click.command("lessons")
@db_option
@click.argument("run")
@click.argument("action", required=False, type=click.Choice(["approve"]))
@click.argument("lesson_id", required=False)
@click.option("--author", default="human", show_default=True)
@json_option()
def lessons_cmd(run: str, action: str | None, lesson_id: str | None, author: str,
                as_json: bool) -> None:
    """List RUN's lessons, or approve one (`lessons RUN approve ID`): its proposed trigger is
    added to the store's skill overlay, which the debug matcher reads from then on."""
    from npu_deploy.skills.catalog import overlay_dir
    from npu_deploy.skills.lessons import approve_lesson, lessons_markdown

    if action is None:
        store = open_readonly()
        run_id = store.resolve_run(run)
        approved = {e.payload["lesson_id"]
                    for e in store.events(run_id, types=("lesson.approved",))}
        lessons = [{**e.payload, "draft": e.payload["lesson_id"] not in approved}
                   for e in store.events(run_id, types=("lesson.recorded",))]
        if as_json:
            emit_json(lessons)
        else:
            # an agent wrote them: its escape sequences are shown, never sent
            click.echo(printable(lessons_markdown(lessons), None))
        return
    if not lesson_id:
        fail("approve needs the lesson id: npu-deploy lessons RUN approve ID", EXIT_USAGE)
    store = open_existing()
    run_id = store.resolve_run(run)
    try:
        path = approve_lesson(store, run_id, lesson_id, overlay_dir(store.path), author)
    except (KeyError, ValueError) as e:
        fail(str(e).strip("'\""))
    click.echo(f"lesson {lesson_id} approved: trigger written to {path}")
