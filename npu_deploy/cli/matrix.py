"""`matrix` (deployments across hosts on Ray, gathered into this store) and `node` (this
host's key, and the head's keyring of the nodes it trusts)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from .options import db_option, db_path, json_option
from .output import EXIT_USAGE, console, fail
from .render import data

if TYPE_CHECKING:
    from rich.table import Table

    from npu_deploy.cluster.compare import Comparison


def _listed(values: tuple[str, ...]) -> tuple[str, ...]:
    """Repeated flags, each of which may also be a comma-separated list."""
    return tuple(v.strip() for value in values for v in value.split(",") if v.strip())


@click.group("matrix", invoke_without_command=True)
@db_option
@click.option("-f", "--file", "spec_file", type=click.Path(path_type=Path), default=None,
              metavar="SPEC.toml", help="The matrix as a TOML file (docs/cluster.md); flags "
              "given as well are refused.")
@click.option("--name", default=None, help="The matrix's name (default: m-DATE-TIME); run "
              "again under the same name, its unfinished cells resume.")
@click.option("--model", "models", multiple=True, help="A model (repeat, or a,b,c).")
@click.option("--seq-len", "seq_lens", multiple=True, help="A prompt length (repeat, or "
              "a,b,c); default 128.")
@click.option("--backend", "backends", multiple=True, help="emulator | xrt (repeat); "
              "default emulator.")
@click.option("--agent", "agents", multiple=True, help="autopilot | claude (repeat); default "
              "autopilot.")
@click.option("--steps", type=click.IntRange(1, 256), default=32, show_default=True,
              help="Greedy tokens per prompt in the token-set gates.")
@click.option("--pause-at", default="", metavar="PHASES", help="Phases whose checkpoint "
              "waits for a person (decide from the head: `npu-deploy decide RUN ...`); every "
              "other checkpoint is approved.")
@click.option("--address", default=None, envvar="RAY_ADDRESS", help="The Ray cluster "
              "(HEAD:6379, or auto) [$RAY_ADDRESS]; none: a Ray instance on this machine.")
@click.option("--npus", type=click.IntRange(1, 256), default=None, help="Without --address: "
              "how many cells run side by side here (default: one per core).")
@click.option("--retries", type=click.IntRange(0, 20), default=3, show_default=True,
              help="How many times a cell is run again after losing its node.")
@click.pass_context
def matrix_cmd(ctx: click.Context, spec_file: Path | None, name: str | None,
               models: tuple[str, ...], seq_lens: tuple[str, ...],
               backends: tuple[str, ...], agents: tuple[str, ...], steps: int, pause_at: str,
               address: str | None, npus: int | None, retries: int) -> None:
    """Run a matrix of deployments (models x prompt lengths x backends x agents) as Ray
    tasks, one per NPU host at a time, every run gathered into this store and verified."""
    if ctx.invoked_subcommand is not None:
        return
    from datetime import UTC, datetime

    from npu_deploy.cluster.spec import MatrixSpec, SpecRefused, from_toml

    flags = models or seq_lens or backends or agents or pause_at
    try:
        if spec_file is not None:
            if flags:
                fail("give the matrix as --file or as flags, not both", EXIT_USAGE)
            spec = from_toml(spec_file)
            if name:
                spec = MatrixSpec(**{**spec.__dict__, "name": name})
        else:
            lengths = _listed(seq_lens) or ("128",)
            if not all(s.isdigit() for s in lengths):
                fail(f"--seq-len {','.join(lengths)}: prompt lengths are numbers", EXIT_USAGE)
            spec = MatrixSpec(
                name=name or datetime.now(UTC).strftime("m-%Y%m%d-%H%M%S"),
                models=_listed(models), seq_lens=tuple(int(s) for s in lengths),
                backends=_listed(backends) or ("emulator",),
                agents=_listed(agents) or ("autopilot",), steps=steps,
                pause_at=_phases(pause_at))
        spec.check(with_model=True)
    except SpecRefused as e:
        fail(str(e), EXIT_USAGE)
    _run(spec, address, npus, retries)


def _phases(text: str) -> tuple[int, ...]:
    phases = _listed((text,))
    if not all(p.isdigit() for p in phases):
        fail(f"--pause-at {text!r}: expected phase numbers like 3,5", EXIT_USAGE)
    return tuple(int(p) for p in phases)


def _run(spec: object, address: str | None, npus: int | None, retries: int) -> None:
    import sys

    import ray

    from npu_deploy.cluster.driver import run_matrix, start_ray

    out = console()
    try:
        start_ray(address, npus)
    except (RuntimeError, ConnectionError, ValueError) as e:
        fail(f"cannot reach Ray at {address}: {str(e).splitlines()[0]}" if address
             else str(e))
    try:
        outcome = run_matrix(spec, db_path(), retries=retries,    # type: ignore[arg-type]
                             say=lambda line: out.print(data(line)))
    finally:
        ray.shutdown()
    rate = outcome.events / outcome.ingest_s if outcome.ingest_s else 0.0
    out.print(data(f"matrix {outcome.matrix}: {len(outcome.cells)} cells in "
                   f"{outcome.wall_s:.1f} s (measured on this machine's CPU); the head took "
                   f"in {outcome.events} events ({rate:.0f} events/s of its collector's time)"))
    sys.exit(outcome.exit_code)


# --- node keys ---------------------------------------------------------------------------

@click.group("node")
def node_cmd() -> None:
    """This host's node key, and the head's keyring of the nodes whose runs it takes."""


@node_cmd.command("key")
def node_key_cmd() -> None:
    """Print this host's node key (its public half), made on first use: enroll it on the
    head with `npu-deploy node enroll NAME KEY`."""
    from npu_deploy.store.nodes import node_key, node_key_path

    key = node_key(create=True)
    assert key is not None
    click.echo(key.public.hex())
    click.echo(f"node key {key.id} at {node_key_path()}", err=True)


@node_cmd.command("enroll")
@click.argument("name")
@click.argument("public_key")
def node_enroll_cmd(name: str, public_key: str) -> None:
    """Trust the node NAME, whose `npu-deploy node key` printed PUBLIC_KEY, on this head."""
    from npu_deploy.store.nodes import enroll, keyring_path, public_from_text

    node = enroll(name, public_from_text(public_key))
    click.echo(f"enrolled node {node.name} (key {node.id}) in {keyring_path()}")


@node_cmd.command("revoke")
@click.argument("name")
def node_revoke_cmd(name: str) -> None:
    """Stop trusting node NAME: nothing more is taken from its key, and runs it signed
    verify as UNANCHORED."""
    from npu_deploy.store.nodes import revoke

    node = revoke(name)
    click.echo(f"revoked node {node.name} (key {node.id}) at {node.revoked_ts}")


@node_cmd.command("list")
@json_option()
def node_list_cmd(as_json: bool) -> None:
    """The head's keyring: each node, its key id, and when it was enrolled or revoked."""
    import json

    from npu_deploy.store.nodes import load_keyring

    rows = [{"name": n.name, "key_id": n.id, "public_key": n.public.hex(),
             "enrolled": n.enrolled_ts, "revoked": n.revoked_ts}
            for n in load_keyring().nodes]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    for r in rows:
        click.echo(f"{r['name']}\t{r['key_id']}\tenrolled {r['enrolled']}"
                   + (f"\trevoked {r['revoked']}" if r["revoked"] else ""))


# --- matrix compare (issue 41): what changed since last time ---------------------------

@matrix_cmd.command("compare")
@db_option
@click.argument("a")
@click.argument("b")
@click.option("--markdown", "markdown_file", type=click.Path(path_type=Path, dir_okay=False),
              default=None, metavar="FILE", help="Write the table as Markdown to FILE too.")
@click.option("--json", "json_file", type=click.Path(path_type=Path, dir_okay=False),
              default=None, metavar="FILE", help="Write the comparison as JSON to FILE too.")
def matrix_compare_cmd(a: str, b: str, markdown_file: Path | None,
                       json_file: Path | None) -> None:
    """Compare matrix B with matrix A of this store, cell by cell: verdicts, each phase's
    gate values and the prefill/decode times (modeled, or measured on the NPU), side by
    side, each regression of B marked (docs/cluster.md says how). Exits 0 with none, 1
    with any (for CI), 2 when the store holds no matrix of that name."""
    import json
    import sys

    from npu_deploy.cluster.compare import UnknownMatrix, compare, to_markdown

    from .options import open_readonly

    for flag, target in (("--markdown", markdown_file), ("--json", json_file)):
        if target is not None and not target.parent.is_dir():
            fail(f"{flag} {target}: no folder {target.parent}; create it or name a file in "
                 "an existing one", EXIT_USAGE)
    with open_readonly() as store:
        try:
            result = compare(store, a, b)
        except UnknownMatrix as e:
            fail(str(e), EXIT_USAGE)
    console().print(_comparison_table(result))
    if markdown_file is not None:
        markdown_file.write_text(to_markdown(result), encoding="utf-8")
    if json_file is not None:
        json_file.write_text(json.dumps(result.to_dict(), indent=2, sort_keys=True) + "\n",
                             encoding="utf-8")
    sys.exit(1 if result.regressions else 0)


def _comparison_table(result: Comparison) -> Table:
    """The comparison as a Rich table: every figure and name through `data` (never markup:
    a model named with [brackets] prints as named), a section per cell."""
    from rich.table import Table

    from npu_deploy.cluster.compare import MARK

    table = Table(title=data(result.headline, limit=None))
    for column in ("cell", "what", "A", "B", "regression"):
        table.add_column(column, overflow="fold")
    for cell in result.cells:
        label = cell.cell.label + (f" (only in {cell.only_in})" if cell.only_in else "")
        for i, row in enumerate(cell.rows):
            mark = data(f"{MARK}: {row.regression}", "bold red", None) if row.regression \
                else data("")
            table.add_row(data(label if i == 0 else "", limit=None), data(row.what),
                          data(row.a, limit=None), data(row.b, limit=None), mark,
                          end_section=i == len(cell.rows) - 1)
    return table
