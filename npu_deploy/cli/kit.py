"""The chip owner's kit, first step: build-objects (every AIE micro-kernel object the
programs link, compiled with Peano), and what it shares with doctor and validate-hardware:
the objects a model's plans link."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from .options import json_option, mlir_air_source_option
from .output import EXIT_FAILED, EXIT_USAGE, emit_json, fail

#: the prefill length build-objects, doctor and validate-hardware plan at unless told:
#: validate-hardware's default (a decode attention object is sized by it)
SEQ_LEN = 128
#: the bundled model: what doctor checks the objects against when nothing says which
BUNDLED = "smollm2-135m"


def needed_for(models: list[str], seq_len: int) -> dict[str, Any]:
    """Object -> its NeededObject, over every model's plans (kernels.npu_runtime.needed_objects);
    one line and exit 1 on a model that cannot be planned, or an object name two models
    compile two ways."""
    from npu_deploy.kernels.npu_runtime.needed_objects import RecipeConflict, needed_objects

    from .models import model_shape

    found: dict[str, Any] = {}
    for model in models:
        try:
            _, args = model_shape(model)
            objects = needed_objects(model, args, seq_len)
        except NotImplementedError as e:
            fail(f"{model}: {e}; this model cannot be planned yet", EXIT_USAGE)
        except RecipeConflict as e:
            fail(f"{e}; an object of other sizes needs a name of its own")
        for obj, need in objects.items():
            if obj in found and found[obj].source != need.source:
                fail(f"{obj} is compiled as {need.source.recipe()} for {model} and as "
                     f"{found[obj].source.recipe()} for another model; an object of other "
                     "sizes needs a name of its own")
            found.setdefault(obj, need)
    return found


def _catalog() -> list[str]:
    from npu_deploy.models import CATALOG
    return list(CATALOG)


@click.command("build-objects")
@click.argument("models", nargs=-1, metavar="[MODEL]...")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              metavar="DIR", help="Where to write the objects and manifest.json (default: "
              "$NPU_DEPLOY_AIR_OBJECTS, else ~/.local/share/npu-deploy/air-objects).")
@mlir_air_source_option("its programming_examples/ hold the kernel sources")
@click.option("--seq-len", type=click.IntRange(8, 2048), default=SEQ_LEN, show_default=True,
              help="The prefill length (and decode position) the plans are made at, as "
                   "validate-hardware's --seq-len.")
@click.option("--jobs", "-j", type=click.IntRange(1, 64), default=None,
              help="Objects compiled at once (default: the CPU count, at most 8).")
@json_option("Print what was built as JSON.")
def build_objects_cmd(models: tuple[str, ...], out: Path | None, mlir_air: Path | None,
                      seq_len: int, jobs: int | None, as_json: bool) -> None:
    """Compile every AIE micro-kernel object the programs of MODEL link (default: every
    model of the catalog) with Peano, for XDNA 2 (aie2p), into DIR with a manifest.

    The objects are those of every program of each model's prefill and decode plans,
    baseline and optimized, and of each kernel run alone: what validate-hardware and a
    deployment link. The flags are upstream's (mlir-air's LLM pipelines compile their
    kernels the same way); the sources are mlir-air's, from --mlir-air-source, and
    npu-deploy's own. An object already built from the same inputs is skipped.
    """
    from npu_deploy.kernels.npu_runtime.aie_objects import aie_include_dir, default_objects_dir
    from npu_deploy.kernels.npu_runtime.peano_build import (
        BuildError,
        build_objects,
        find_compiler,
        locate_sources,
    )

    out = out or default_objects_dir()
    if mlir_air is not None and not (mlir_air / "programming_examples").is_dir():
        fail(f"--mlir-air-source {mlir_air}: no programming_examples/ there; give a "
             "checkout of github.com/Xilinx/mlir-air", EXIT_USAGE)
    try:
        cc = find_compiler(aie_include_dir()[0])       # before anything is planned
    except BuildError as e:
        fail(str(e))
    chosen = list(models) or _catalog()
    needed = needed_for(chosen, seq_len)
    recipes = {obj: need.source for obj, need in needed.items()}
    try:
        locate_sources(recipes, mlir_air)
    except BuildError as e:
        fail(str(e))
    if not as_json:
        click.echo(f"{len(recipes)} object(s) for {', '.join(chosen)} at --seq-len {seq_len}, "
                   f"with {cc.clang} ({cc.version}) into {out}", err=True)

    def report(built: Any) -> None:
        if as_json:
            return
        if built.status == "built":
            click.echo(f"built    {built.obj} ({built.seconds:.1f} s)", err=True)
        elif built.status == "skipped":
            click.echo(f"skipped  {built.obj} (built before from the same inputs)", err=True)
        else:
            click.echo(f"FAILED   {built.obj}: {built.message}", err=True)

    try:
        results = build_objects(recipes, out, cc, mlir_air,
                                jobs=jobs or min(8, os.cpu_count() or 1),
                                models=tuple(chosen), seq_len=seq_len, done=report)
    except BuildError as e:
        fail(str(e))
    count = {s: sum(b.status == s for b in results) for s in ("built", "skipped", "failed")}
    if as_json:
        emit_json({"out": str(out), "manifest": str(out / "manifest.json"),
                   "peano": cc.version, "models": chosen, "seq_len": seq_len, **count,
                   "objects": [{"object": b.obj, "status": b.status, "seconds": b.seconds,
                                "message": b.message,
                                "kernels": list(needed[b.obj].kernels)} for b in results]})
    else:
        click.echo(f"{count['built']} built, {count['skipped']} skipped (unchanged), "
                   f"{count['failed']} failed; manifest: {out / 'manifest.json'}")
    if count["failed"]:
        fail(f"{count['failed']} object(s) did not compile (each named above with Peano's "
             "error); fix the toolchain or the checkout and run build-objects again",
             EXIT_FAILED)
