"""The commands over stored runs: runs, show, verify, export, import."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from npu_deploy.events.describe import printable

from .options import db_option, db_path, json_option, open_readonly
from .output import EXIT_FAILED, EXIT_UNANCHORED, console, emit_json, fail

#: `runs`'s columns, left to right.
RUNS_COLUMNS = ("run", "model", "started (UTC)", "phase", "status", "verdict", "events",
                "tokens", "cost")


@click.command("runs")
@db_option
@json_option("Print JSON instead of a table.")
def runs_cmd(as_json: bool) -> None:
    """List the runs in the store."""
    from npu_deploy.store.files import no_store_at, nothing_at
    from npu_deploy.store.medium import wal_holds_pages

    path = db_path()
    # A lone -wal, a loop of links: open_readonly says what it is.
    if nothing_at(path) and not wal_holds_pages(path):
        if as_json:
            emit_json([])
        else:
            click.echo(f"no runs yet ({no_store_at(path)})")
        return
    with open_readonly() as store:
        runs = store.runs()
    if as_json:
        emit_json([r.__dict__ for r in runs])
        return
    if not runs:
        click.echo(f"no runs in {path}")
        return
    # One line per run, in columns (tabulate): a Rich table measures and wraps every cell
    # and took 12 s for 10,000 runs. A run id and a model name are what someone typed:
    # shown through `printable`, their control and invisible characters escaped.
    from tabulate import tabulate

    rows = [(printable(r.run_id, None), printable(r.model, None),
             r.created_ts[:16].replace("T", " "),
             "-" if r.phase_reached is None else str(r.phase_reached), r.status,
             r.verdict or "-", str(r.events), f"{r.input_tokens + r.output_tokens:,}",
             f"${r.cost_usd:.2f}") for r in runs]
    click.echo(f"runs in {printable(str(path), None)}\n")
    click.echo(tabulate(rows, headers=RUNS_COLUMNS, tablefmt="simple", disable_numparse=True,
                        colalign=("left",) * 6 + ("right",) * 3))


@click.command("show")
@db_option
@click.argument("run")
@click.option("--events", "last", type=click.IntRange(min=0), default=20, show_default=True,
              help="How many of the newest events to list.")
@json_option("Print the folded state and events as JSON.")
def show_cmd(run: str, last: int, as_json: bool) -> None:
    """Show one run: its folded state, phases and newest events (RUN may be a prefix)."""
    from rich.table import Table
    from rich.text import Text

    from npu_deploy.events import PHASE_NAMES
    from npu_deploy.events.describe import SHOWN_CHARS, view

    from .render import data, summary

    with open_readonly() as store:
        run_id = store.resolve_run(run)
        report = store.verify(run_id)
        state = report.state or store.fold(run_id, use_snapshots=False)
        status = store.live_status(run_id, state.status)
        events = list(store.events(run_id, after_version=max(0, state.version - last)))
    if as_json:
        emit_json({"state": {**state.to_dict(), "wall_time_s": state.wall_time_s,
                             "live_status": status},
                   "verified": report.trusted, "verify_status": report.status,
                   "events": [e.to_dict() for e in events]})
        if not report.ok:
            fail(f"{report.line()}; what is shown is not to be trusted")
        return
    out = console()
    t = state.totals
    # What a run holds is data (a model name, a policy): Text, never markup.
    out.print(Text.assemble(data(run_id, "bold"), "  ", data(
        f"{state.model} on {state.backend}, agent {state.agent}, policy {state.policy}")))
    out.print(Text(f"status {status}   verdict {state.verdict or '-'}   "
                   f"events {state.version}   wall {state.wall_time_s:.1f} s   "
                   f"model calls {t.model_calls}   tokens in {t.input_tokens:,} out "
                   f"{t.output_tokens:,} cache read {t.cache_read_tokens:,} write "
                   f"{t.cache_write_tokens:,}   cost ${t.cost_usd:.4f} (list prices)   "
                   f"tool calls {t.tool_calls}   errors {t.errors}"))
    phases = Table(title="phases", title_justify="left")
    # "own s" is the wall less a person's waiting and the pauses: the phase's speed
    for col in ("#", "phase", "status", "attempts", "last gate", "wall s", "own s",
                "agent s", "backend s", "waiting s", "paused s"):
        phases.add_column(col)
    for p in state.phases:
        gate = p.last_gate
        phases.add_row(str(p.phase), PHASE_NAMES[p.phase], p.status, str(p.attempts),
                       "-" if gate is None else Text.assemble(   # a gate's name is data
                           data(f"{gate.gate} "),
                           ("PASS", "green") if gate.passed else ("FAIL", "red")),
                       *(f"{t:.1f}" for t in (p.wall_time_s, p.work_time_s,
                                              *p.times[1:])))
    out.print(phases)
    listing = Table(title=f"newest {len(events)} events", title_justify="left")
    for col in ("v", "time (UTC)", "type", "phase", "actor", "summary"):
        listing.add_column(col, overflow="fold")
    views = [view(e) for e in events]
    for e, v in zip(events, views, strict=True):
        listing.add_row(str(e.run_version), e.ts[11:23], e.type,
                        "-" if e.phase is None else str(e.phase), e.actor, summary(v))
    out.print(listing)
    if any(v.cut for v in views):
        out.print(Text(f"long text is cut at {SHOWN_CHARS:,} characters here; `npu-deploy show "
                       f"{run_id} --json` prints all of it", style="dim"))
    if not report.ok:
        fail(f"{report.line()}; what is shown above is not to be trusted")
    if not report.anchored:
        click.echo(report.line(), err=True)


@click.command("verify")
@db_option
@click.argument("run", required=False)
@click.option("--all", "all_runs", is_flag=True, help="Verify every run in the store.")
@json_option("Print the reports as JSON.")
def verify_cmd(run: str | None, all_runs: bool, as_json: bool) -> None:
    """Check a run: its hash chain, the blobs and snapshots it uses, its runs row, and the
    anchor your key made over them (docs/event-log.md). OK only when anchored by your key;
    UNANCHORED (exit 4) when intact but the key that wrote it is not here; BROKEN (exit 1)
    names what was changed."""
    if bool(run) == all_runs:
        raise click.UsageError("give a RUN id or --all")
    from npu_deploy.store.files import no_store_at, nothing_at
    from npu_deploy.store.medium import wal_holds_pages

    path = db_path()
    if all_runs and nothing_at(path) and not wal_holds_pages(path):
        click.echo(f"no runs to verify ({no_store_at(path)})")
        return
    from npu_deploy.store import StoreError

    with open_readonly() as store:
        structural = store.integrity_problem()
        if structural:
            raise StoreError(f"{path} is damaged ({structural}); restore it from a copy or "
                             "an export")
        run_ids = store.run_ids() if all_runs else [store.resolve_run(run or "")]
        reports = [store.verify(r, fold=False) for r in run_ids]
    if as_json:
        emit_json([{**{k: v for k, v in r.__dict__.items() if k != "state"},
                    "status": r.status} for r in reports])
    else:
        if not reports:
            click.echo(f"no runs in {path}")
        for r in reports:
            click.echo(r.line(), err=not r.ok)
    if not all(r.ok for r in reports):
        sys.exit(EXIT_FAILED)
    if not all(r.anchored for r in reports):
        sys.exit(EXIT_UNANCHORED)


@click.command("export")
@db_option
@click.argument("run")
@click.option("-o", "--output", type=click.Path(path_type=Path), required=True,
              help="The JSONL file to write (events, then the blobs they reference).")
def export_cmd(run: str, output: Path) -> None:
    """Write a verified run and its blobs to one JSONL file."""
    from npu_deploy.store import export_run

    with open_readonly() as store:
        header = export_run(store, run, output)
    click.echo(f"exported {header['run_id']}: {header['events']} events, {header['blobs']} "
               f"blobs, {header['commands']} inbox commands (those its decisions recorded), "
               f"head {header['head_hash'][:16]} -> {output}")


@click.command("import")
@db_option
@click.argument("file", type=click.Path(path_type=Path, readable=False))
def import_cmd(file: Path) -> None:
    """Add a run from an export file to the store, after checking every link."""
    from npu_deploy.store import EventStore, import_run, read_export

    exported = read_export(file)   # checked whole before the store is opened or created
    path = db_path()
    with EventStore.open(path) as store:
        result = import_run(store, exported)
    if result.already_present:
        click.echo(f"{result.run_id} is already in {path} with the same head; "
                   + (f"added the {result.commands} inbox commands its decisions recorded, "
                      "which the export it came in lacked" if result.commands
                      else "nothing written"))
    else:
        click.echo(f"imported {result.run_id}: {result.events} events, {result.blobs} blobs, "
                   f"{result.commands} inbox commands into {path}")
