"""The options several commands share, declared once: `--db` (the store), `--json`, and
the kit's `--mlir-air-source`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

if TYPE_CHECKING:
    from npu_deploy.store import EventStore

F = TypeVar("F", bound=Callable[..., Any])


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


def json_option(help: str = "Print JSON instead of a table.") -> Callable[[F], F]:
    """`--json` on every listing, passed to the command as `as_json`."""
    return click.option("--json", "as_json", is_flag=True, help=help)


def mlir_air_source_option(what: str) -> Callable[[F], F]:
    """`--mlir-air-source DIR` (a checkout of mlir-air), passed as `mlir_air`; `what` says
    what the command takes from it."""
    return click.option("--mlir-air-source", "mlir_air", default=None, metavar="DIR",
                        envvar="NPU_DEPLOY_MLIR_AIR_SOURCE",
                        type=click.Path(file_okay=False, path_type=Path),
                        help=f"A checkout of mlir-air: {what} [$NPU_DEPLOY_MLIR_AIR_SOURCE].")


def db_path() -> Path:
    ctx = click.get_current_context()
    for c in (ctx, *([ctx.parent] if ctx.parent else [])):
        if c.obj and c.obj.get("db"):
            return Path(c.obj["db"])
    from npu_deploy.store.locations import default_db_path

    return default_db_path()


def open_readonly() -> EventStore:
    from npu_deploy.store.eventstore import EventStore

    return EventStore.open(db_path(), readonly=True)


def open_existing() -> EventStore:
    """The store, for writing, refused in one line when there is none: a command about a
    run (resume, fork, decide) creates no store on its way to saying there is no such run."""
    from npu_deploy.store.eventstore import EventStore

    return EventStore.open(db_path(), create=False)
