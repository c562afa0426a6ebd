"""The commands over models: models (the catalog), oracle (Phase 0 against Hugging Face)."""

from __future__ import annotations

import sys
from typing import Any

import click
from rich.table import Table

from .options import json_option
from .output import EXIT_FAILED, console, emit_json
from .render import data


@click.command("models")
@json_option("Print JSON instead of a table.")
def models_cmd(as_json: bool) -> None:
    """List the bundled model and the target models (shapes, for planning)."""
    from npu_deploy.models import CATALOG
    from npu_deploy.models.random_models import DEPLOYABLE, ORACLE_ONLY

    rows = [(e, e.args) for e in CATALOG.values()]
    if as_json:
        emit_json([{"name": e.name, "hub_id": e.hub_id, "kind": e.kind, "note": e.note,
                    "format": _format(a), "params": a.n_params(), "features": a.features(),
                    **a.as_dict()}
                   for e, a in rows])
        return
    table = Table(title="models (shapes from the public configs; only the bundled one has "
                  "weights here)", title_justify="left")
    for col in ("name", "kind", "weights", "arch", "layers", "hidden", "heads q/kv",
                "head_dim", "ffn", "vocab", "params", "features"):
        table.add_column(col, justify="right" if col in (
            "layers", "hidden", "head_dim", "ffn", "vocab", "params") else "left")
    for e, a in rows:
        table.add_row(e.name, e.kind, _format(a), a.arch, str(a.n_layers), str(a.hidden),
                      f"{a.n_heads}/{a.n_kv_heads}", str(a.head_dim), str(a.ffn), str(a.vocab),
                      f"{a.n_params() / 1e9:.2f}B" if a.n_params() >= 1e9
                      else f"{a.n_params() / 1e6:.0f}M", ", ".join(a.features()))
    console().print(table)
    oracle_only = ("; for the FP32 oracle only (`npu-deploy oracle`; no NPU kernels for "
                   f"them yet): {', '.join(ORACLE_ONLY)}") if ORACLE_ONLY else ""
    click.echo("Also loadable: a Hugging Face directory, a .gguf file, a model in the local "
               f"Hugging Face cache, and the random test models {', '.join(DEPLOYABLE)}"
               f"{oracle_only}.")


def _format(args: Any) -> str:
    """The weight format a catalog entry deploys: bf16, or its 4-bit format."""
    return "bf16" if args.weights is None else str(args.weights.format)


@click.command("oracle")
@click.argument("model")
@click.option("--prompt", "prompts", multiple=True, metavar="TEXT",
              help="Check these prompts instead of the canonical set (repeatable).")
@click.option("--seq-len", type=click.IntRange(1, 2048), default=128, show_default=True,
              help="Length of the canonical prefill-length prompt.")
@click.option("--steps", type=click.IntRange(1, 1024), default=32, show_default=True,
              help="Greedy decode steps both sides must agree on.")
@json_option("Print the gate result as JSON.")
def oracle_cmd(model: str, prompts: tuple[str, ...], seq_len: int, steps: int,
               as_json: bool) -> None:
    """Build the FP32 oracle of MODEL and run the Phase-0 gate against Hugging Face.

    MODEL is smollm2-135m (bundled), a Hugging Face directory, a .gguf file, a
    model in the local Hugging Face cache, or a random test model.
    """
    from npu_deploy.models.loading import load_model
    from npu_deploy.oracle.prompts import Prompt, canonical_prompts
    from npu_deploy.pipeline.gates.oracle import phase0_gate

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
        out.print(data(f"model   {report.model}: {report.origin}"))   # a path: data
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
    from npu_deploy.models import CATALOG, model_args, resolve
    from npu_deploy.models.config import read_config

    if model in CATALOG:
        return f"{model} (catalog, {CATALOG[model].hub_id})", CATALOG[model].args
    source = resolve(model)
    path = source.directory / "config.json"
    return f"{model} ({source.origin})", model_args(read_config(path), str(path))
