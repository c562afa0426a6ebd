"""The commands that drive runs: deploy, resume, fork, decide."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console

from npu_deploy.deploy_request import (
    AGENTS,
    AIR_OBJECTS_ENV,
    BACKENDS,
    CLAUDE_PIPELINE,
    DEFAULT_PIPELINE,
    DEFAULT_SEQ_LEN,
    SEQ_LEN,
    DeployRequest,
    Refused,
    checked,
    code_version,
    resume_run,
)
from npu_deploy.events import PHASE_NAMES, Event
from npu_deploy.events.decisions import naming, open_decisions, waiting_on
from npu_deploy.events.describe import cut
from npu_deploy.models.quantization import CHOICES as WEIGHT_CHOICES
from npu_deploy.models.quantization import split_spec, with_weights
from npu_deploy.store import DiskFull, EventStore, RunLocked, Unanchored

from .options import db_option, db_path, open_existing
from .output import EXIT_FAILED, EXIT_USAGE, console, fail
from .render import data, progress

EXIT_NEEDS_HUMAN = 3      # the run stopped for a person (needs_human, or waiting headless)


def _progress(out: Console) -> Any:
    """The headless view: the lines of each event that moves the deployment (render.py)."""
    def show(e: Event) -> None:
        for line in progress(e):
            out.print(line)
    return show


def _drive(conductor: Any, out: Console, wait: bool) -> None:
    """Run the conductor to its next halt and exit with a code that says why it stopped."""
    from npu_deploy.machine import Halt
    from npu_deploy.store.medium import disk_full, is_disk_full

    run_id = conductor.run_id
    try:
        try:
            halt: Halt = conductor.run(wait=False)
            while wait and halt.reason in ("awaiting_human", "awaiting_pick"):
                at = waiting_on(conductor.state).id
                out.print(data(f"waiting at {at}: {halt.detail}. From another terminal: "
                               f"npu-deploy decide {run_id} approve | redirect TEXT | pick N | "
                               f"pause | abort [--checkpoint {at}]"))
                halt = conductor.run(wait=True)
        finally:
            conductor.close()
    except (DiskFull, OSError, sqlite3.Error) as e:
        if not isinstance(e, DiskFull) and not is_disk_full(e):
            raise
        # The store, or a file the run writes beside it: either way, resuming goes on.
        fail(str(disk_full(getattr(e, "filename", None) or db_path(), resume=run_id)))
    if halt.reason in ("finished", "failed"):
        sys.exit(0 if halt.detail == "PASS" else EXIT_FAILED)
    if halt.reason == "aborted":
        fail(f"run {run_id} was aborted", EXIT_FAILED)
    if halt.reason == "paused":
        out.print(data(f"run {run_id} is paused; `npu-deploy resume {run_id}` goes on"))
        sys.exit(0)
    detail = cut(halt.detail)           # an agent's words: `show RUN --json` has them all
    if halt.reason == "needs_human":
        fail(f"run {run_id} needs a person: {detail}; `npu-deploy decide {run_id} "
             "redirect TEXT` then `npu-deploy resume` to retry, or `decide abort`",
             EXIT_NEEDS_HUMAN)
    fail(f"run {run_id} stopped: {halt.reason} {detail}", EXIT_NEEDS_HUMAN)


def load_pipeline_or_fail(spec: str) -> Any:
    from npu_deploy.machine import load_pipeline

    try:
        return load_pipeline(spec)
    except ValueError as e:
        fail(str(e), EXIT_USAGE)


def _needs(check: Any, *args: Any) -> Any:
    """A check of deploy_request.py, its refusal one line on stderr."""
    try:
        return check(*args)
    except Refused as e:
        _refused(e)


def _refused(e: Refused) -> NoReturn:
    fail(str(e), EXIT_USAGE if e.problems[0].usage else EXIT_FAILED)


def _run_id(value: str | None) -> str | None:
    """--run-id, checked before any store is opened: a name no run id can have (a space,
    a trailing newline, 65 characters) is a usage error, not a run stored under it."""
    from npu_deploy.events import InvalidEvent
    from npu_deploy.store.rows import validate_run_id

    try:
        return None if value is None else validate_run_id(value)
    except InvalidEvent as e:
        raise click.BadParameter(str(e).removeprefix("run_id: ")) from None


def _phases(text: str) -> frozenset[int]:
    try:
        phases = frozenset(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        fail(f"--pause-at {text!r}: expected phase numbers like 3,5", EXIT_USAGE)
    bad = sorted(p for p in phases if p not in range(len(PHASE_NAMES)))
    if bad:
        fail(f"--pause-at: no phase {bad[0]}; phases are 0-{len(PHASE_NAMES) - 1}", EXIT_USAGE)
    return phases


@click.command("deploy")
@db_option
@click.argument("model")
@click.option("--headless", is_flag=True,
              help="Progress as text lines instead of the terminal UI.")
@click.option("--auto-approve", is_flag=True,
              help="Approve passing gates and pick the top debug direction without a person.")
@click.option("--pause-at", "pause_at", default="", metavar="PHASES",
              help="Comma-separated phases whose checkpoint waits for a person anyway.")
@click.option("--budget", type=click.IntRange(1, 50), default=3, show_default=True,
              help="Attempts of a phase before the run stops for a person.")
@click.option("--agent", type=click.Choice(AGENTS), default="autopilot",
              show_default=True,
              help="Who works the phases: the offline autopilot, or Claude through the "
                   "Anthropic API (needs ANTHROPIC_API_KEY).")
@click.option("--model", "claude_model", default=None, metavar="ID",
              help="Claude's model id with --agent claude (default: $NPU_DEPLOY_CLAUDE_MODEL, "
                   "else claude-sonnet-5-5).")
@click.option("--agent-budget", default="", metavar="LIMITS",
              help="Per phase attempt with --agent claude, e.g. turns=40,tokens=2e6,usd=5,"
                   "wall=1800 (seconds).")
@click.option("--sandbox-limits", default="", metavar="LIMITS",
              help="What one of Claude's commands may write, e.g. file=256M,workspace=2G,"
                   "tmp=256M (the defaults): one file, the run's workspace, its /tmp. "
                   "Recorded in run.started.")
@click.option("--pipeline", "pipeline_spec", default=None,
              help=f"module:function returning the agent, gates and debug matcher "
                   f"(default: {DEFAULT_PIPELINE}, or {CLAUDE_PIPELINE} with --agent claude).")
@click.option("--run-id", default=None, callback=lambda _c, _p, v: _run_id(v),
              help="Name the run (default: a new UUIDv7).")
@click.option("--seq-len", type=click.IntRange(*SEQ_LEN), default=DEFAULT_SEQ_LEN,
              show_default=True,
              help="Prefill length of the gates' long prompt and of the optimized plans.")
@click.option("--steps", type=click.IntRange(1, 256), default=32, show_default=True,
              help="Greedy tokens per prompt in the token-set gates.")
@click.option("--weights", type=click.Choice(["bf16", *WEIGHT_CHOICES]), default="bf16",
              show_default=True,
              help="bf16: every weight bf16. q4nx: the projections quantized into Q4NX and "
                   "decoded by the 4-bit kernel (proj_qmm). q4: a GGUF's own 4-bit blocks "
                   "(Q4_1, Q4_0), repacked. The run's model becomes MODEL@WEIGHTS; what "
                   "quantization costs is reported in phase 0.")
@click.option("--seed-fault", type=click.Choice(["gemm-tile", "bfp16-datapath"]), default=None,
              help="A drill: seed a known fault for the gates and debug skills to catch "
                   "(gemm-tile: a GEMM tile that does not divide N; bfp16-datapath: phase 3 "
                   "keeps BFP16 GEMMs whatever the answer).")
@click.option("--backend", type=click.Choice(BACKENDS), default="emulator",
              show_default=True,
              help="emulator: the NPU's numerics on the CPU, modeled times. xrt: a real XDNA 2 "
                   "NPU through mlir-air and pyxrt (needs both installed), measured times.")
@click.option("--air-objects", type=click.Path(file_okay=False, path_type=Path),
              envvar=AIR_OBJECTS_ENV, default=None, metavar="DIR",
              help="With --backend xrt: the micro-kernel objects the programs link (mm_*.o, "
                   "...), built with Peano from mlir-air's kernel sources "
                   "[$NPU_DEPLOY_AIR_OBJECTS].")
@click.option("--repeats", type=click.IntRange(1, 1000), default=None, metavar="N",
              help="With --backend xrt: measured runs of every profile, after a warm run "
                   "(default 5). Each figure is their median; a transform counts as faster "
                   "only when its slowest run beats the fastest without it.")
def deploy_cmd(model: str, headless: bool, auto_approve: bool, pause_at: str, budget: int,
               agent: str, claude_model: str | None, agent_budget: str, sandbox_limits: str,
               pipeline_spec: str | None, run_id: str | None, seq_len: int, steps: int,
               weights: str, seed_fault: str | None, backend: str, air_objects: Path | None,
               repeats: int | None) -> None:
    """Deploy MODEL through phases 0-7 as a new run in the store."""
    from npu_deploy.machine import Conductor

    if weights != "bf16" and split_spec(model)[1] is not None:
        raise click.UsageError(f"{model} names its weights already; drop --weights {weights} "
                               "or the @ suffix")
    model = with_weights(model, weights)
    request = DeployRequest(
        model, backend=backend, agent=agent, seq_len=seq_len, steps=steps,
        auto_approve=auto_approve, pause_at=_phases(pause_at), budget=budget,
        pipeline=pipeline_spec, claude_model=claude_model, agent_budget=agent_budget,
        sandbox_limits=sandbox_limits, seed_fault=seed_fault,
        air_objects=None if air_objects is None else str(air_objects), repeats=repeats)
    # before anything is stored; in the TUI the model is checked (and the pipeline loaded)
    # by its conductor's worker after the first frame: they import torch, seconds
    deployment = _needs(checked, request, headless)
    policy, config = deployment.policy(), deployment.config
    if not headless:
        _deploy_in_tui(model, policy, deployment.pipeline, config, run_id)
        return
    pipeline = load_pipeline_or_fail(deployment.pipeline)
    out = console()
    store = EventStore.open(db_path())
    conductor = Conductor.start(store, pipeline, policy, model=model, backend=backend,
                                code_version=code_version(), run_id=run_id,
                                config=config, on_event=_progress(out))
    out.print(data(f"run {conductor.run_id}: {model}, policy {policy.name}, store {db_path()}"))
    _drive(conductor, out, wait=True)


def _deploy_in_tui(model: str, policy: Any, pipeline_spec: str, config: dict[str, Any],
                   run_id: str | None) -> None:
    """The TUI, with the conductor in a worker thread of this process."""
    from npu_deploy.events import uuid7

    from .tui import ConductorDriver, needs_terminal, run_app

    needs_terminal("deploy without --headless")
    run_id = run_id or uuid7()          # a given one is checked as the option is read
    store = EventStore.open(db_path())
    taken = run_id in store.run_ids()
    store.close()
    if taken:
        fail(f"run {run_id} already exists; choose another --run-id", EXIT_USAGE)
    driver = ConductorDriver(db_path(), pipeline_spec, policy, model, config)
    run_app(run_id, live=True, driver=driver, drive="deploy")


@click.command("resume")
@db_option
@click.argument("run")
@click.option("--pipeline", "pipeline_spec", default=None,
              help="module:function (default: the one the run was started with).")
@click.option("--no-wait", is_flag=True, help="Stop instead of waiting for a person.")
@click.option("--adopt", is_flag=True,
              help="Go on with a run your key did not anchor (imported from another key's "
                   "store): your key vouches for it from then on.")
def resume_cmd(run: str, pipeline_spec: str | None, no_wait: bool, adopt: bool) -> None:
    """Go on with a run that crashed, was paused, or stopped for a person."""
    from npu_deploy.machine import RunEnded

    store = open_existing()
    run_id = store.resolve_run(run)
    out = console()
    try:
        conductor = resume_run(store, run_id, pipeline=pipeline_spec,
                               on_event=_progress(out), adopt=adopt)
    except Refused as e:
        _refused(e)
    except (RunLocked, Unanchored, RunEnded) as e:
        fail(str(e))
    out.print(data(f"run {run_id} resumed at v{conductor.state.version}"))
    _drive(conductor, out, wait=not no_wait)


@click.command("fork")
@db_option
@click.argument("run")
@click.option("--at", "at_version", type=click.IntRange(min=1), required=True,
              help="The last event (run version) of the source the fork keeps.")
@click.option("--note", default=None, help="Why: recorded in the fork's first event.")
def fork_cmd(run: str, at_version: int, note: str | None) -> None:
    """Start a new run from RUN's history up to --at (RUN itself is not changed)."""
    from npu_deploy.machine import fork

    store = open_existing()
    run_id = store.resolve_run(run)
    try:
        new = fork(store, run_id, at_version, note)
    except ValueError as e:
        fail(str(e))
    click.echo(new)
    click.echo(f"forked {run_id} at v{at_version} as {new}; `npu-deploy resume {new}` goes on",
               err=True)


def _waits(legal: Any) -> str:
    """What the run waits for now, in words."""
    waiting = legal.waiting
    return (f"it waits at {waiting.kind} {waiting.id} now" if waiting.id
            else "nothing waits for a decision now")


def _refusal(run_id: str, legal: Any, choice: str, checkpoint: str | None) -> str | None:
    """Why the run does not take this decision now (events/decisions.py's rule), or None;
    what the decision needs (an instruction, a direction number) is checked after, as usage."""
    if checkpoint is not None and checkpoint != legal.waiting.id:
        return f"run {run_id}: {checkpoint} is no longer open ({_waits(legal)}); nothing was left"
    if not legal.allows(choice):
        return f"run {run_id} {legal.refused[choice]}"
    return None


@click.command("decide")
@db_option
@click.argument("run")
@click.argument("decision", type=click.Choice(["approve", "redirect", "pick", "pause",
                                               "abort"]))
@click.argument("value", required=False)
@click.option("--override", is_flag=True,
              help="With approve: pass the phase although its gate failed (the independent "
                   "evaluator will then fail the run).")
@click.option("--checkpoint", "checkpoint", default=None, metavar="ID",
              help="The checkpoint (or debug proposal, or stopped phase) this answers, as "
                   "`show` and the waiting line print it: refused when it is no longer open.")
def decide_cmd(run: str, decision: str, value: str | None, override: bool,
               checkpoint: str | None) -> None:
    """Leave a decision for a run: approve | redirect TEXT | pick N | pause | abort.

    approve, redirect and pick answer what the run waits at now (or --checkpoint ID), and
    name it: the run's conductor (in another terminal, or at the next resume) records it
    once, and refuses it if that wait was answered in the meantime."""
    if override and decision != "approve":
        fail("--override goes with approve only", EXIT_USAGE)
    if checkpoint is not None and decision in ("pause", "abort"):
        fail(f"--checkpoint goes with approve, redirect or pick; {decision} is about the "
             "whole run", EXIT_USAGE)
    store = open_existing()
    run_id = store.resolve_run(run)
    choice = "override" if override else decision
    legal = open_decisions(store.fold(run_id))
    why_not = _refusal(run_id, legal, choice, checkpoint)
    if why_not is not None:
        fail(why_not)
    waiting = legal.waiting
    payload: dict[str, Any] = {"override": True} if override else {}
    if decision == "redirect":
        if not value:
            fail("redirect needs the instruction text: decide RUN redirect \"...\"", EXIT_USAGE)
        payload["instruction"] = value
    elif decision == "pick":
        if value is None or not value.isdigit() or not 1 <= int(value) <= len(legal.pick):
            fail(f"pick needs a direction number from 1 to {len(legal.pick)}", EXIT_USAGE)
        payload["direction_id"] = legal.pick[int(value) - 1]
    if decision in ("approve", "redirect", "pick"):
        payload.update(naming(waiting))

    def still_open() -> str | None:
        """Asked again under the store's write lock, as the command is left: the run may
        have moved on since it was folded above (another process approved, aborted or
        finished it), and a command left then would wait in an inbox nobody reads."""
        now = open_decisions(store.fold(run_id))
        why = _refusal(run_id, now, choice, checkpoint)
        if why is not None:
            return why if why.endswith("nothing was left") else f"{why}; nothing was left"
        if ("checkpoint_id" in payload or "proposal_id" in payload) \
                and now.waiting.id != waiting.id:
            return (f"run {run_id} moved on while your {decision} was being left: "
                    f"{waiting.id} is no longer open ({_waits(now)}); nothing was left")
        return None

    command_id = store.post_command(run_id, decision, payload, still_open=still_open)
    click.echo(f"{decision} left for run {run_id} (command {command_id}); its conductor "
               "records it once")
