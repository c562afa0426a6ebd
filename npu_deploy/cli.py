"""The `npu-deploy` command line: a thin layer over the library packages.

Every failure the user can cause (a bad path, a foreign or damaged file, an
unknown run, a tampered log) ends as one line on stderr and a non-zero exit.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.table import Table

from npu_deploy.events import PHASE_NAMES, InvalidEvent, describe
from npu_deploy.oracle import OracleError
from npu_deploy.store import (
    EventStore,
    StoreError,
    default_db_path,
    export_run,
    import_run,
    read_export,
)

F = TypeVar("F", bound=Callable[..., Any])

EXIT_FAILED = 1   # the command ran and found a problem (bad input, broken chain)
EXIT_USAGE = 2    # a wrong flag or argument


def code_version() -> str:
    try:
        return version("npu-deploy")
    except PackageNotFoundError:
        return "0+unknown"


def fail(message: str, code: int = EXIT_FAILED) -> NoReturn:
    click.echo(f"npu-deploy: error: {message}", err=True)
    sys.exit(code)


class CLI(click.Group):
    """Turns every error, click's usage errors included, into one line and an exit code."""

    def main(self, *args: Any, **kwargs: Any) -> Any:  # type: ignore[override]
        kwargs["standalone_mode"] = False
        try:
            code = super().main(*args, **kwargs)
        except click.UsageError as e:
            where = e.ctx.command_path if e.ctx else "npu-deploy"
            fail(f"{e.format_message()} (see `{where} --help`)", EXIT_USAGE)
        except click.ClickException as e:
            fail(e.format_message(), e.exit_code)
        except click.Abort:
            fail("interrupted", 130)
        sys.exit(code or 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (StoreError, InvalidEvent, OracleError) as e:
            fail(str(e))
        except sqlite3.DatabaseError as e:
            fail(f"the store could not be read ({e}); check the file with "
                 "`npu-deploy verify --all`")
        except OSError as e:
            fail(f"{e.strerror or e}: {e.filename or ''}".rstrip(": "))


def db_option(f: F) -> F:
    """`--db` on every command (and on the group), with NPU_DEPLOY_DB as fallback."""
    def remember(ctx: click.Context, _param: click.Parameter, value: Path | None) -> None:
        if value is not None:
            ctx.ensure_object(dict)["db"] = value
    return click.option(
        # No click-side checks: the store says in one line what is wrong with the path.
        "--db", type=click.Path(path_type=Path, readable=False), expose_value=False,
        callback=remember, is_eager=True,
        help="Store file (default: $NPU_DEPLOY_DB, else ~/.local/share/npu-deploy/runs.db).",
    )(f)


def db_path() -> Path:
    ctx = click.get_current_context()
    for c in (ctx, *([ctx.parent] if ctx.parent else [])):
        if c.obj and c.obj.get("db"):
            return Path(c.obj["db"])
    return default_db_path()


def open_readonly() -> EventStore:
    return EventStore.open(db_path(), readonly=True)


def console() -> Console:
    """Rich output at the terminal's width; 160 columns when piped (not rich's 80)."""
    return Console() if sys.stdout.isatty() else Console(width=160)


def emit_json(value: Any) -> None:
    click.echo(json.dumps(value, indent=2, sort_keys=True, default=str))


@click.group(cls=CLI, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(code_version(), prog_name="npu-deploy")
@db_option
def main() -> None:
    """Deploy LLMs onto spatial NPUs through eight gated, event-sourced phases.

    Every action of a deployment is an event in an append-only, hash-chained
    SQLite log; these commands list, inspect, verify and move runs.
    """


@main.command("runs")
@db_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def runs_cmd(as_json: bool) -> None:
    """List the runs in the store."""
    path = db_path()
    if not path.exists():
        if as_json:
            emit_json([])
        else:
            click.echo(f"no runs yet (no store at {path})")
        return
    with open_readonly() as store:
        runs = store.runs()
    if as_json:
        emit_json([r.__dict__ for r in runs])
        return
    if not runs:
        click.echo(f"no runs in {path}")
        return
    table = Table(title=f"runs in {path}", title_justify="left")
    for col in ("run", "model", "started (UTC)", "phase", "status", "verdict", "events",
                "tokens", "cost"):
        table.add_column(col, justify="right" if col in ("events", "tokens", "cost") else "left",
                         no_wrap=col in ("run", "started (UTC)"))
    for r in runs:
        phase = "-" if r.phase_reached is None else str(r.phase_reached)
        table.add_row(r.run_id, r.model, r.created_ts[:16].replace("T", " "), phase, r.status,
                      r.verdict or "-", str(r.events), f"{r.input_tokens + r.output_tokens:,}",
                      f"${r.cost_usd:.2f}")
    console().print(table)


@main.command("show")
@db_option
@click.argument("run")
@click.option("--events", "last", type=click.IntRange(min=0), default=20, show_default=True,
              help="How many of the newest events to list.")
@click.option("--json", "as_json", is_flag=True, help="Print the folded state and events as JSON.")
def show_cmd(run: str, last: int, as_json: bool) -> None:
    """Show one run: its folded state, phases and newest events (RUN may be a prefix)."""
    with open_readonly() as store:
        run_id = store.resolve_run(run)
        report = store.verify(run_id)
        state = report.state or store.fold(run_id, use_snapshots=False)
        status = store.live_status(run_id, state.status)
        events = list(store.events(run_id, after_version=max(0, state.version - last)))
    if as_json:
        emit_json({"state": {**state.to_dict(), "wall_time_s": state.wall_time_s,
                             "live_status": status},
                   "verified": report.ok, "events": [e.to_dict() for e in events]})
        if not report.ok:
            fail(f"{report.line()}; what is shown is not to be trusted")
        return
    out = console()
    t = state.totals
    out.print(f"[bold]{run_id}[/]  {state.model} on {state.backend}, agent {state.agent}, "
                  f"policy {state.policy}")
    out.print(f"status {status}   verdict {state.verdict or '-'}   "
                  f"events {state.version}   wall {state.wall_time_s:.1f} s   "
                  f"model calls {t.model_calls}   tokens in {t.input_tokens:,} out "
                  f"{t.output_tokens:,} cache read {t.cache_read_tokens:,} write "
                  f"{t.cache_write_tokens:,}   cost ${t.cost_usd:.4f} (list prices)   "
                  f"tool calls {t.tool_calls}   errors {t.errors}")
    phases = Table(title="phases", title_justify="left")
    for col in ("#", "phase", "status", "attempts", "last gate", "wall s"):
        phases.add_column(col)
    for p in state.phases:
        gate = p.last_gate
        phases.add_row(str(p.phase), PHASE_NAMES[p.phase], p.status, str(p.attempts),
                       "-" if gate is None else f"{gate.gate} {'PASS' if gate.passed else 'FAIL'}",
                       f"{p.wall_time_s:.1f}")
    out.print(phases)
    listing = Table(title=f"newest {len(events)} events", title_justify="left")
    for col in ("v", "time (UTC)", "type", "phase", "actor", "summary"):
        listing.add_column(col, overflow="fold")
    for e in events:
        listing.add_row(str(e.run_version), e.ts[11:23], e.type,
                        "-" if e.phase is None else str(e.phase), e.actor, describe(e))
    out.print(listing)
    if not report.ok:
        fail(f"{report.line()}; what is shown above is not to be trusted")


@main.command("verify")
@db_option
@click.argument("run", required=False)
@click.option("--all", "all_runs", is_flag=True, help="Verify every run in the store.")
@click.option("--json", "as_json", is_flag=True, help="Print the reports as JSON.")
def verify_cmd(run: str | None, all_runs: bool, as_json: bool) -> None:
    """Prove a run's hash chain untouched; name the first bad event if not."""
    if bool(run) == all_runs:
        raise click.UsageError("give a RUN id or --all")
    path = db_path()
    if all_runs and not path.exists():
        click.echo(f"no runs to verify (no store at {path})")
        return
    with open_readonly() as store:
        structural = store.integrity_problem()
        if structural:
            raise StoreError(f"{path} is damaged ({structural}); restore it from a copy or "
                             "an export")
        run_ids = store.run_ids() if all_runs else [store.resolve_run(run or "")]
        reports = [store.verify(r, fold=False) for r in run_ids]
    if as_json:
        emit_json([{k: v for k, v in r.__dict__.items() if k != "state"} for r in reports])
    else:
        if not reports:
            click.echo(f"no runs in {path}")
        for r in reports:
            click.echo(r.line(), err=not r.ok)
    if not all(r.ok for r in reports):
        sys.exit(EXIT_FAILED)


@main.command("export")
@db_option
@click.argument("run")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="The JSONL file to write (events, then the blobs they reference).")
def export_cmd(run: str, output: Path) -> None:
    """Write a verified run and its blobs to one JSONL file."""
    with open_readonly() as store:
        header = export_run(store, run, output)
    click.echo(f"exported {header['run_id']}: {header['events']} events, {header['blobs']} "
               f"blobs, head {header['head_hash'][:16]} -> {output}")


@main.command("import")
@db_option
@click.argument("file", type=click.Path(path_type=Path, readable=False))
def import_cmd(file: Path) -> None:
    """Add a run from an export file to the store, after checking every link."""
    exported = read_export(file)   # checked whole before the store is opened or created
    path = db_path()
    with EventStore.open(path) as store:
        result = import_run(store, exported)
    if result.already_present:
        click.echo(f"{result.run_id} is already in {path} with the same head; nothing written")
    else:
        click.echo(f"imported {result.run_id}: {result.events} events, {result.blobs} blobs "
                   f"into {path}")


@main.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def models_cmd(as_json: bool) -> None:
    """List the bundled model and the target models (shapes, for planning)."""
    from npu_deploy.oracle import CATALOG

    rows = [(e, e.args) for e in CATALOG.values()]
    if as_json:
        emit_json([{"name": e.name, "hub_id": e.hub_id, "kind": e.kind, "note": e.note,
                    "params": a.n_params(), "features": a.features(), **a.as_dict()}
                   for e, a in rows])
        return
    table = Table(title="models (shapes from the public configs; only the bundled one has "
                  "weights here)", title_justify="left")
    for col in ("name", "kind", "arch", "layers", "hidden", "heads q/kv", "head_dim", "ffn",
                "vocab", "params", "features"):
        table.add_column(col, justify="right" if col in (
            "layers", "hidden", "head_dim", "ffn", "vocab", "params") else "left")
    for e, a in rows:
        table.add_row(e.name, e.kind, a.arch, str(a.n_layers), str(a.hidden),
                      f"{a.n_heads}/{a.n_kv_heads}", str(a.head_dim), str(a.ffn), str(a.vocab),
                      f"{a.n_params() / 1e9:.2f}B" if a.n_params() >= 1e9
                      else f"{a.n_params() / 1e6:.0f}M", ", ".join(a.features()))
    console().print(table)
    click.echo("Also loadable: a Hugging Face directory, a .gguf file, a model in the local "
               "Hugging Face cache, and the random test models tiny-llama, tiny-llama-mha, "
               "tiny-qwen2, tiny-qwen3.")


@main.command("oracle")
@click.argument("model")
@click.option("--prompt", "prompts", multiple=True, metavar="TEXT",
              help="Check these prompts instead of the canonical set (repeatable).")
@click.option("--seq-len", type=click.IntRange(1, 2048), default=128, show_default=True,
              help="Length of the canonical prefill-length prompt.")
@click.option("--steps", type=click.IntRange(1, 1024), default=32, show_default=True,
              help="Greedy decode steps both sides must agree on.")
@click.option("--json", "as_json", is_flag=True, help="Print the gate result as JSON.")
def oracle_cmd(model: str, prompts: tuple[str, ...], seq_len: int, steps: int,
               as_json: bool) -> None:
    """Build the FP32 oracle of MODEL and run the Phase-0 gate against Hugging Face.

    MODEL is smollm2-135m (bundled), a Hugging Face directory, a .gguf file, a
    model in the local Hugging Face cache, or a random test model.
    """
    from npu_deploy.oracle.gate import phase0_gate
    from npu_deploy.oracle.loading import load_model
    from npu_deploy.oracle.prompts import Prompt, canonical_prompts

    loaded = load_model(model)
    chat = bool(getattr(loaded.tokenizer, "chat_template", None))
    chosen = ([Prompt(f"prompt{i + 1}", text) for i, text in enumerate(prompts)] if prompts
              else canonical_prompts(seq_len, chat=chat))
    report = phase0_gate(loaded, chosen, steps=steps)
    verdict = "PASS" if report.passed else "FAIL"
    if as_json:
        emit_json({"model": report.model, "origin": report.origin, "source": "measured-cpu",
                   "verdict": verdict, **report.gate_payload(),
                   "results": [r.__dict__ for r in report.results]})
    else:
        a = loaded.args
        out = console()
        out.print(f"model   {report.model}: {report.origin}")
        out.print(f"        {a.arch}, {a.n_layers} layers, hidden {a.hidden}, heads "
                  f"{a.n_heads}/{a.n_kv_heads}, head_dim {a.head_dim}, ffn {a.ffn}, vocab "
                  f"{a.vocab}; {', '.join(a.features())}")
        table = Table(title=f"Phase-0 gate: FP32 reference vs Hugging Face (computed on the "
                      f"CPU); logits rel L2 <= {report.rel_tol:g}, {steps} greedy tokens "
                      "identical", title_justify="left")
        for col in ("prompt", "tokens", "prefill rel L2", "decode rel L2 (worst)",
                    "greedy identical", "max |diff|", "cosine", "result"):
            table.add_column(col, justify="left" if col in ("prompt", "result") else "right")
        for r in report.results:
            table.add_row(r.prompt, str(r.tokens), f"{r.prefill_rel_l2:.2e}",
                          f"{r.decode_rel_l2:.2e}", f"{r.steps_identical}/{r.steps}",
                          f"{r.prefill_max_abs:.2e}", f"{r.prefill_cosine:.8f}",
                          "PASS" if r.passed(report.rel_tol) else "FAIL")
        out.print(table)
        first = report.results[0]
        out.print(f"reference greedy on {first.prompt!r}: {first.ours_text!r}", markup=False)
        out.print(f"gate {verdict}")
    if not report.passed:
        sys.exit(EXIT_FAILED)


def model_shape(model: str) -> tuple[str, Any]:
    """(description, ModelArgs) of a catalog name or of any loadable model's config."""
    from npu_deploy.oracle import CATALOG, model_args, resolve
    from npu_deploy.oracle.config import read_config

    if model in CATALOG:
        return f"{model} (catalog, {CATALOG[model].hub_id})", CATALOG[model].args
    source = resolve(model)
    path = source.directory / "config.json"
    return f"{model} ({source.origin})", model_args(read_config(path), str(path))


@main.command("kernels")
@click.argument("model")
@click.option("--seq-len", type=click.IntRange(1, 2048), default=2048, show_default=True,
              help="Prefill length L.")
@click.option("--decode", "decode_pos", type=click.IntRange(min=0), default=None,
              help="Show one decode step at this position instead of the prefill.")
@click.option("--hw", "hw_name", type=click.Choice(["xdna2", "xdna1"]), default="xdna2",
              show_default=True, help="The NPU to check the configurations against.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def kernels_cmd(model: str, seq_len: int, decode_pos: int | None, hw_name: str,
                as_json: bool) -> None:
    """Every kernel MODEL needs, the tile configuration chosen for it, and its findings.

    MODEL is a name from `npu-deploy models` (shapes only) or any loadable model.
    """
    from npu_deploy.kernels import HARDWARE, Decode, Prefill, model_kernels
    from npu_deploy.kernels.selection import select_all

    hw = HARDWARE[hw_name]
    described, args = model_shape(model)
    mode = Decode(decode_pos) if decode_pos is not None else Prefill(seq_len)
    selections = select_all(model_kernels(args, mode), hw)
    if as_json:
        emit_json([{"kernel": x.use.spec.name, "where": x.use.spec.where, "roles": x.roles,
                    "shape": x.use.shape, "config": x.config, "usage": x.usage,
                    "valid": x.valid, "wasted_fraction": x.wasted_fraction,
                    "findings": [f.__dict__ for f in x.findings]} for x in selections])
        return
    out = console()
    out.print(f"{described}, {mode}, on {hw.name}")
    table = Table(title_justify="left", title="kernels (configurations checked against the "
                  "hardware model; nothing here ran on an NPU)")
    for col in ("kernel", "roles", "shape", "config", "tiles", "L1 KiB", "L2 KiB", "findings"):
        table.add_column(col, justify="right" if col in ("tiles", "L1 KiB", "L2 KiB") else "left")
    for x in selections:
        config = " ".join(f"{k}={v}" for k, v in x.config.items())
        findings = "; ".join(f.message for f in x.findings) or "-"
        table.add_row(x.use.spec.name + (" (cpu)" if x.use.spec.where == "cpu" else ""),
                      ", ".join(x.roles), x.use.shape_text(), config or "-",
                      str(x.usage.get("tiles", 0)),
                      f"{x.usage.get('l1_bytes', 0) / 1024:.1f}",
                      f"{x.usage.get('l2_bytes', 0) / 1024:.0f}", findings)
    out.print(table)
    invalid = [x for x in selections if not x.valid]
    if invalid:
        out.print(f"{len(invalid)} kernel(s) have no configuration that fits {hw.name}")
        sys.exit(EXIT_FAILED)


@main.command("plan")
@click.argument("model")
@click.option("--mode", type=click.Choice(["prefill", "decode"]), default="prefill",
              show_default=True, help="A prefill of --seq-len tokens, or one decode step.")
@click.option("--seq-len", type=click.IntRange(1, 2048), default=2048, show_default=True,
              help="Prefill length L (and, for decode, the default position).")
@click.option("--pos", type=click.IntRange(min=0), default=None,
              help="Decode position p (default: --seq-len).")
@click.option("--optimize", is_flag=True,
              help="Apply the plan transforms one at a time, keeping the faster plans.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@click.option("--emit-air", "emit_air", type=click.Path(file_okay=False, path_type=Path),
              default=None, metavar="DIR",
              help="Also write the MLIR-AIR program of every dispatch to DIR (one .py each).")
def plan_cmd(model: str, mode: str, seq_len: int, pos: int | None, optimize: bool,
             as_json: bool, emit_air: Path | None) -> None:
    """The dispatch plan of MODEL, its modeled profile on XDNA 2, and (with --optimize) the
    transforms that make it faster.

    Every time is modeled: the performance model is calibrated on the Llama-3.2-1B figures
    measured on NPU2 (NPU_FACTS.md); nothing here ran on an NPU.
    """
    from npu_deploy.kernels import XDNA2
    from npu_deploy.kernels.optimize import optimize as run_optimize
    from npu_deploy.kernels.perf import estimate
    from npu_deploy.kernels.plan import baseline_plan
    from npu_deploy.kernels.specs import Decode, Prefill

    described, args = model_shape(model)
    step_mode = Prefill(seq_len) if mode == "prefill" else Decode(seq_len if pos is None
                                                                   else pos)
    try:
        plan = baseline_plan(model, args, step_mode, XDNA2)
    except NotImplementedError as e:
        fail(f"{model}: {e}; this model cannot be planned yet", EXIT_USAGE)
    attempts: tuple = ()
    if optimize:
        result = run_optimize(plan, XDNA2)
        plan, profile, attempts = result.plan, result.profile, result.attempts
    else:
        profile = estimate(plan, XDNA2)
    if emit_air is not None:
        from npu_deploy.kernels.air import EmitError, emit_plan, write_programs
        try:
            written = write_programs(emit_plan(plan, XDNA2), emit_air)
        except (EmitError, OSError) as e:
            fail(f"--emit-air {emit_air}: {e}", EXIT_USAGE)
        if not as_json:
            click.echo(f"{len(written)} MLIR-AIR programs written to {emit_air}", err=True)
    if as_json:
        emit_json(_plan_json(described, plan, profile, attempts))
        return
    _print_plan(described, plan, profile, attempts)


def _plan_json(described: str, plan: Any, profile: Any, attempts: Any) -> dict[str, Any]:
    from npu_deploy.kernels import XDNA2
    from npu_deploy.kernels.plan import Dispatch

    steps = []
    for step, prof in zip(plan.steps, profile.steps, strict=True):
        row: dict[str, Any] = {"name": prof.name, "where": prof.where,
                               "modeled_s": prof.seconds, "device_s": prof.device_s,
                               "python_s": prof.python_s,
                               "host_transfer_s": prof.host_transfer_s,
                               "host_bytes": prof.host_bytes}
        if isinstance(step, Dispatch):
            row["launches"] = [{"kernel": ln.kernel, "role": ln.role, "layer": ln.layer,
                                "shape": ln.shape_dict, "config": ln.config_dict,
                                "bindings": [{"operand": b.operand, "tensor": b.tensor,
                                              "kind": b.kind, "layout": b.layout,
                                              "rows": b.rows} for b in ln.bindings],
                                "modeled_s": lp.seconds, "flops": lp.flops, "bytes": lp.bytes,
                                "achieved_flops": lp.achieved_flops,
                                "achieved_bytes_per_s": lp.achieved_bw,
                                "roofline_fraction": lp.roofline_fraction(XDNA2),
                                "bound": lp.bound}
                               for ln, lp in zip(step.launches, prof.launches, strict=True)]
        else:
            row["op"] = step.op
        steps.append(row)
    return {"model": described, "mode": str(plan.mode), "source": profile.source,
            "calibration": profile.calibration, "transforms": list(plan.history),
            "lm_head": plan.lm_head, "total_s": profile.total_s,
            "one_time_s": profile.one_time_s, "tokens_per_s": profile.tokens_per_s,
            "eta": profile.eta, "dispatches": len(plan.dispatches), "steps": steps,
            "attempts": [{"transform": a.transform, "skill": a.skill, "before_s": a.before_s,
                          "after_s": a.after_s, "kept": a.kept, "reason": a.reason}
                         for a in attempts]}


def _print_plan(described: str, plan: Any, profile: Any, attempts: Any) -> None:
    from npu_deploy.kernels import XDNA2
    from npu_deploy.kernels.specs import Prefill

    out = console()
    out.print(f"{described}, {plan.mode}, on {XDNA2.name}")
    out.print("Every time below is modeled: the performance model is calibrated on the "
              "Llama-3.2-1B figures measured on NPU2 (NPU_FACTS.md). Nothing ran on an NPU.")
    if attempts:
        t = Table(title="transforms, in the order tried (modeled)", title_justify="left")
        for col in ("transform", "skill", "before ms", "after ms", "speed-up", "kept"):
            t.add_column(col, justify="right" if "ms" in col or col == "speed-up" else "left")
        for a in attempts:
            after = "-" if a.after_s is None else f"{a.after_s * 1e3:.1f}"
            speed = "-" if a.speedup is None else f"{a.speedup:.2f}x"
            t.add_row(a.transform, a.skill, f"{a.before_s * 1e3:.1f}", after, speed,
                      "yes" if a.kept else a.reason)
        out.print(t)
    t = Table(title="steps of layer 0 and outside the layers (the other layers repeat "
              "layer 0)", title_justify="left")
    for col in ("step", "where", "launches", "synced MB", "modeled ms"):
        t.add_column(col, justify="left" if col in ("step", "where") else "right")
    for step, prof in zip(plan.steps, profile.steps, strict=True):
        if getattr(step, "layer", None) not in (None, 0) or (
                hasattr(step, "launches") and step.launches[0].layer not in (None, 0)):
            continue
        n = len(step.launches) if hasattr(step, "launches") else 0
        t.add_row(prof.name, prof.where, str(n) if n else "-",
                  f"{prof.host_bytes / 1e6:.1f}", f"{prof.seconds * 1e3:.3f}")
    out.print(t)
    k = Table(title="kernels of layer 0 and outside the layers against the roofline "
              f"({XDNA2.peak_flops / 1e12:.0f} TFLOP/s, 58 GB/s DDR), modeled",
              title_justify="left")
    for col in ("launch", "kernel", "modeled ms", "GFLOP/s", "GB/s", "of roofline", "bound"):
        k.add_column(col, justify="left" if col in ("launch", "kernel", "bound") else "right")
    for prof in profile.steps:
        for lp in prof.launches:
            if lp.label.startswith("L") and not lp.label.startswith("L0."):
                continue
            k.add_row(lp.label, lp.kernel, f"{lp.seconds * 1e3:.3f}",
                      f"{lp.achieved_flops / 1e9:.0f}", f"{lp.achieved_bw / 1e9:.1f}",
                      f"{lp.roofline_fraction(XDNA2):.0%}", lp.bound)
    out.print(k)
    kind = "TTFT" if isinstance(plan.mode, Prefill) else "per token"
    out.print(f"{plan.summary}")
    out.print(f"modeled {kind}: {profile.total_s * 1e3:.1f} ms"
              + (f" (incl. {profile.one_time_s * 1e3:.1f} ms writing static weights once)"
                 if isinstance(plan.mode, Prefill) else
                 f", {profile.tokens_per_s:.1f} tokens/s")
              + f"; eta {profile.eta:.2f} (1.00 = the measured Llama-3.2-1B deployment)")


from . import deploy as _deploy  # noqa: E402,F401 - registers deploy, decide, resume, fork
from . import serve as _serve  # noqa: E402,F401 - registers generate, chat, report, lessons
from . import tui_commands as _tui  # noqa: E402,F401 - registers tui, attach, replay

if __name__ == "__main__":
    main()
