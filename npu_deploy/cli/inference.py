"""The commands that use a deployed model: generate, chat."""

from __future__ import annotations

import sys
from typing import Any

import click

from npu_deploy.events.describe import printable

from .options import db_option, open_readonly
from .output import fail


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
    """A piece of the model's answer: text it generated, shown as any other (its control
    and invisible characters escaped, events/describe.py `printable`)."""
    sys.stdout.write(printable(piece, None))
    sys.stdout.flush()


@click.command("generate")
@db_option
@click.argument("run")
@click.argument("prompt")
@click.option("--max-tokens", type=click.IntRange(1, 2048), default=64, show_default=True)
@click.option("--compare", is_flag=True,
              help="Also answer with the FP32 oracle and Hugging Face's bf16 run of the "
                   "original model (both on the CPU), each on a line of its own.")
def generate_cmd(run: str, prompt: str, max_tokens: int, compare: bool) -> None:
    """Answer PROMPT with RUN's deployed model on the run's backend, streaming the tokens."""
    from npu_deploy.pipeline.inference import PromptRefused

    runner = _runner(run)
    messages = [{"role": "user", "content": prompt}]
    if compare:
        where = "measured on the NPU" if runner.ws.settings.measured else "emulated NPU"
        sys.stdout.write(f"{'deployed (' + where + ')':28} ")
    try:
        runner.generate(messages, max_tokens, on_text=_stream)
    except PromptRefused as e:
        fail(str(e))
    sys.stdout.write("\n")
    if compare:
        for label, answer in runner.references(messages, max_tokens):
            click.echo(f"{label:28} {printable(answer, None)}")


@click.command("chat")
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
        from npu_deploy.pipeline.inference import PromptRefused

        try:
            answer = runner.generate(messages, max_tokens, on_text=_stream)
        except PromptRefused as e:
            fail(str(e))
        sys.stdout.write("\n")
        messages.append({"role": "assistant", "content": answer})
