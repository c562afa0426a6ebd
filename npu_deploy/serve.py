"""The commands that use a deployment: generate, chat, report, lessons."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from npu_deploy.store import EventStore

from .cli import EXIT_USAGE, db_option, db_path, emit_json, fail, main, open_readonly


def _runner(run: str) -> Any:
    from npu_deploy.pipeline.inference import NotDeployed, Runner
    from npu_deploy.pipeline.workspace import Workspace

    store = open_readonly()
    run_id = store.resolve_run(run)
    try:
        runner = Runner(Workspace(store, run_id))
    except NotDeployed as e:
        fail(str(e))
    s = store.fold(run_id)
    if s.verdict != "PASS":
        click.echo(f"note: run {run_id} is {s.status} (verdict {s.verdict or 'none yet'}); "
                   "answering with the deployment as it stands", err=True)
    return runner


def _stream(piece: str) -> None:
    sys.stdout.write(piece)
    sys.stdout.flush()


@main.command("generate")
@db_option
@click.argument("run")
@click.argument("prompt")
@click.option("--max-tokens", type=click.IntRange(1, 2048), default=64, show_default=True)
def generate_cmd(run: str, prompt: str, max_tokens: int) -> None:
    """Answer PROMPT with RUN's deployed model (emulator backend), streaming the tokens."""
    runner = _runner(run)
    runner.generate([{"role": "user", "content": prompt}], max_tokens, on_text=_stream)
    sys.stdout.write("\n")


@main.command("chat")
@db_option
@click.argument("run")
@click.option("--max-tokens", type=click.IntRange(1, 2048), default=128, show_default=True)
def chat_cmd(run: str, max_tokens: int) -> None:
    """A conversation with RUN's deployed model; an empty line or end of input ends it."""
    runner = _runner(run)
    messages: list[dict[str, str]] = []
    while True:
        try:
            text = input("you> ").strip()
        except EOFError:
            break
        if not text:
            break
        messages.append({"role": "user", "content": text})
        sys.stdout.write("model> ")
        try:
            answer = runner.generate(messages, max_tokens, on_text=_stream)
        except ValueError as e:
            fail(str(e))
        sys.stdout.write("\n")
        messages.append({"role": "assistant", "content": answer})


@main.command("report")
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


@main.command("lessons")
@db_option
@click.argument("run")
@click.argument("action", required=False, type=click.Choice(["approve"]))
@click.argument("lesson_id", required=False)
@click.option("--author", default="human", show_default=True)
@click.option("--json", "as_json", is_flag=True)
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
            click.echo(lessons_markdown(lessons))
        return
    if not lesson_id:
        fail("approve needs the lesson id: npu-deploy lessons RUN approve ID", EXIT_USAGE)
    store = EventStore.open(db_path())
    run_id = store.resolve_run(run)
    try:
        path = approve_lesson(store, run_id, lesson_id, overlay_dir(store.path), author)
    except (KeyError, ValueError) as e:
        fail(str(e).strip("'\""))
    click.echo(f"lesson {lesson_id} approved: trigger written to {path}")
