"""The commands over the hardware: kernels (configurations checked against XDNA 2), plan
(dispatch plans, their modeled profile, their transforms and programs)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
from rich.markup import escape
from rich.table import Table

from .models import model_shape
from .options import json_option
from .output import EXIT_FAILED, EXIT_USAGE, console, emit_json, fail
from .render import data

#: The longest prefill these commands plan (--seq-len); a decode step's position (the
#: tokens already in its KV cache) is bounded the same way, and by the model's own context.
MAX_SEQ_LEN = 2048


def decode_at(model: str, args: Any, pos: int, context: int | None = None) -> Any:
    """The decode step at `pos`, refused past the model's context (max_position_embeddings):
    a position the model was never trained to see has no plan worth modelling. `context`:
    the positions its decode programs are built for (`Decode.context`), at least pos + 1."""
    from npu_deploy.kernels.definition.specs import Decode

    if pos >= args.max_positions:
        fail(f"position {pos} is past {model}'s context ({args.max_positions} positions, "
             f"0-{args.max_positions - 1}); choose a smaller one", EXIT_USAGE)
    if context is not None and not pos < context <= args.max_positions:
        fail(f"--context {context} must hold position {pos} (at least {pos + 1}) and at most "
             f"{model}'s {args.max_positions} positions; choose one in between", EXIT_USAGE)
    return Decode(pos, context)


@click.command("kernels")
@click.argument("model")
@click.option("--seq-len", type=click.IntRange(1, MAX_SEQ_LEN), default=MAX_SEQ_LEN,
              show_default=True,
              help="Prefill length L.")
@click.option("--decode", "decode_pos", type=click.IntRange(0, MAX_SEQ_LEN), default=None,
              help="Show one decode step at this position instead of the prefill.")
@click.option("--hw", "hw_name", type=click.Choice(["xdna2", "xdna1"]), default="xdna2",
              show_default=True, help="The NPU to check the configurations against.")
@json_option("Print JSON instead of a table.")
def kernels_cmd(model: str, seq_len: int, decode_pos: int | None, hw_name: str,
                as_json: bool) -> None:
    """Every kernel MODEL needs, the tile configuration chosen for it, and its findings.

    MODEL is a name from `npu-deploy models` (shapes only) or any loadable model.
    """
    from npu_deploy.kernels import HARDWARE, XDNA2, Prefill, model_kernels
    from npu_deploy.kernels.definition.selection import select_all
    from npu_deploy.kernels.measured.figures import KernelFigures, kernel_figures
    from npu_deploy.kernels.measured.measured_here import MeasuredDataError

    hw = HARDWARE[hw_name]
    described, args = model_shape(model)
    mode = decode_at(model, args, decode_pos) if decode_pos is not None else Prefill(seq_len)
    try:
        uses = model_kernels(args, mode)
    except NotImplementedError as e:
        fail(f"{model}: {e}; this model cannot be planned yet", EXIT_USAGE)
    selections = select_all(uses, hw)
    try:
        figures = [kernel_figures(x) if hw == XDNA2 else KernelFigures(None)
                   for x in selections]
    except MeasuredDataError as e:
        fail(str(e))
    if as_json:
        emit_json([{"kernel": x.use.spec.name, "where": x.use.spec.where, "roles": x.roles,
                    "shape": x.use.shape, "config": x.config, "config_source": x.source,
                    "usage": x.usage, "valid": x.valid, "wasted_fraction": x.wasted_fraction,
                    "findings": [f.__dict__ for f in x.findings],
                    "modeled_s": fig.modeled_s,
                    "measured_npu": None if fig.measured_s is None else {
                        "seconds": fig.measured_s, "config": fig.measured_config,
                        "same_config": fig.same_config, "source": fig.source},
                    "measured_here": None if fig.here is None else {
                        "seconds": fig.here.seconds, "config": fig.here.config,
                        "same_config": fig.here_same_config, "source": fig.here.source}}
                   for x, fig in zip(selections, figures, strict=True)])
        return
    out = console()
    out.print(data(f"{described}, {mode}, on {hw.name}"))
    from npu_deploy.kernels.plans.plan import weights_note

    note = weights_note(args)
    if note:
        out.print(note, highlight=False)
    here = any(fig.here is not None for fig in figures)
    table = Table(title_justify="left", title="kernels (configurations checked against the "
                  "hardware model; measured = upstream's NPU2 figure at this shape, "
                  + ("here = measured on NPU by validate-hardware, imported; " if here else "")
                  + "modeled = cost model"
                  + ("" if here else "; nothing ran on an NPU here")
                  + ")")
    numeric = ("tiles", "L1 KiB", "L2 KiB", "modeled us", "measured us (NPU2)",
               *(("measured us (here)",) if here else ()))
    for col in ("kernel", "roles", "shape", "config", *numeric, "findings"):
        table.add_column(col, justify="right" if col in numeric else "left")
    notes: dict[str, int] = {}       # what a figure's mark says -> the mark

    def cell(seconds: float | None, note: str | None, config: dict[str, Any] | None,
             same: bool) -> str:
        if seconds is None or note is None:
            return "-"
        mark = notes.setdefault(note, len(notes) + 1)
        text = f"{seconds * 1e6:.1f} [{mark}]"
        if not same and config:
            text += " at " + " ".join(f"{k}={v}" for k, v in config.items())
        return text

    for x, fig in zip(selections, figures, strict=True):
        config = " ".join(f"{k}={v}" for k, v in x.config.items())
        if x.source == "measured":
            config += " [measured config]"
        findings = "; ".join(f.message for f in x.findings) or "-"
        measured = cell(fig.measured_s, fig.source and f"measured on NPU2: {fig.source}",
                        fig.measured_config, fig.same_config)
        row = [escape(x.use.spec.name) + (" (cpu)" if x.use.spec.where == "cpu" else ""),
               ", ".join(x.roles), x.use.shape_text(), escape(config or "-"),
               str(x.usage.get("tiles", 0)), f"{x.usage.get('l1_bytes', 0) / 1024:.1f}",
               f"{x.usage.get('l2_bytes', 0) / 1024:.0f}",
               "-" if fig.modeled_s is None else f"{fig.modeled_s * 1e6:.1f}", escape(measured)]
        if here:
            ours = fig.here
            row.append("-" if ours is None else escape(cell(
                ours.seconds, ours.source, ours.config, fig.here_same_config)))
        table.add_row(*row, escape(findings))
    out.print(table)
    for note, mark in notes.items():
        out.print(f"[{mark}] {escape(note)}", highlight=False)
    invalid = [x for x in selections if not x.valid]
    if invalid:
        out.print(f"{len(invalid)} kernel(s) have no configuration that fits {hw.name}")
        sys.exit(EXIT_FAILED)


@click.command("plan")
@click.argument("model")
@click.option("--mode", type=click.Choice(["prefill", "decode"]), default="prefill",
              show_default=True, help="A prefill of --seq-len tokens, or one decode step.")
@click.option("--seq-len", type=click.IntRange(1, MAX_SEQ_LEN), default=MAX_SEQ_LEN,
              show_default=True,
              help="Prefill length L (and, for decode, the default position).")
@click.option("--pos", type=click.IntRange(0, MAX_SEQ_LEN), default=None,
              help="Decode position p (default: --seq-len).")
@click.option("--context", type=click.IntRange(1, None), default=None,
              help="Decode: the positions its programs are built for, one build for every "
                   "step up to it (default: the step's own length).")
@click.option("--optimize", is_flag=True,
              help="Apply the plan transforms one at a time, keeping the faster plans.")
@click.option("--lm-head-out", type=click.Choice(["bf16", "f32"]), default="bf16",
              show_default=True,
              help="The GEMV LM head's logits: bf16 (upstream's mv.cc) or f32 (our variant "
                   "without the cast); f32 also prints the modeled cost against bf16.")
@click.option("--attention-datapath", type=click.Choice(["bfp16", "bf16"]), default="bfp16",
              show_default=True,
              help="Prefill FlashAttention's matmuls: bfp16 (upstream's BFP16-emulated build) "
                   "or bf16 (the native 4x8x8 MMA, our own build); bf16 also prints the "
                   "modeled cost against bfp16.")
@json_option("Print JSON instead of tables.")
@click.option("--emit-air", "emit_air", type=click.Path(file_okay=False, path_type=Path),
              default=None, metavar="DIR",
              help="Also write the MLIR-AIR program of every dispatch to DIR (one .py each).")
@click.option("--check", "check_air", is_flag=True,
              help="Verify every MLIR-AIR program (bounds, channels, externs, L1/L2, "
                   "coverage) against a stand-in of mlir-air's builder; exit 1 on any "
                   "violation. With --emit-air, also writes DIR/verify.json.")
def plan_cmd(model: str, mode: str, seq_len: int, pos: int | None, context: int | None,
             optimize: bool, lm_head_out: str, attention_datapath: str, as_json: bool,
             emit_air: Path | None, check_air: bool) -> None:
    """The dispatch plan of MODEL, its modeled profile on XDNA 2, and (with --optimize) the
    transforms that make it faster.

    Every time is modeled: the performance model is calibrated on the Llama-3.2-1B figures
    measured on NPU2 (docs/hardware-facts.md#reference-deployment); nothing here ran on an
    NPU.
    """
    from npu_deploy.kernels import XDNA2
    from npu_deploy.kernels.definition.specs import Prefill
    from npu_deploy.kernels.performance.model import estimate
    from npu_deploy.kernels.plans.optimize import optimize as run_optimize
    from npu_deploy.kernels.plans.plan import baseline_plan

    described, args = model_shape(model)
    step_mode = Prefill(seq_len) if mode == "prefill" else decode_at(
        model, args, seq_len if pos is None else pos, context)
    def planned(out: str, attention: str = attention_datapath) -> tuple[Any, Any, tuple]:
        try:
            plan = baseline_plan(model, args, step_mode, XDNA2, lm_head_out=out,  # type: ignore[arg-type]
                                 attention_datapath=attention)  # type: ignore[arg-type]
        except NotImplementedError as e:
            fail(f"{model}: {e}; this model cannot be planned yet", EXIT_USAGE)
        if optimize:
            result = run_optimize(plan, XDNA2)
            return result.plan, result.profile, result.attempts
        return plan, estimate(plan, XDNA2), ()

    plan, profile, attempts = planned(lm_head_out)
    head_cost = None
    if lm_head_out != "bf16":       # what the FP32 logits cost against upstream's bf16
        head_cost = (planned("bf16")[1].total_s, profile.total_s)
    attention_cost = None
    if attention_datapath != "bfp16":   # what the native bf16 matmuls cost against BFP16
        attention_cost = (planned(lm_head_out, "bfp16")[1].total_s, profile.total_s)
    verdict = None
    if emit_air is not None or check_air:
        from npu_deploy.kernels.air_programs.air import EmitError, plan_programs, write_programs
        from npu_deploy.kernels.air_programs.air_verify import check_programs
        try:
            emitted = plan_programs(plan, XDNA2)
            # one build per distinct program: the dispatches that share one share its file
            programs = [ps[0] for ps in emitted.distinct.values()]
            if emit_air is not None:
                write_programs(programs, emit_air)
        except (EmitError, OSError) as e:
            fail(f"--emit-air {emit_air}: {e}", EXIT_USAGE)
        if emit_air is not None and not as_json:
            click.echo(f"{len(programs)} distinct MLIR-AIR programs for "
                       f"{len(emitted.programs)} dispatches written to {emit_air} (a process "
                       f"keeps {XDNA2.hw_contexts} loaded at once)", err=True)
        if check_air:
            verdict = check_programs(programs, XDNA2)
            if emit_air is not None:
                (emit_air / "verify.json").write_text(json.dumps(verdict.as_json(), indent=1))
    if as_json:
        out = _plan_json(described, plan, profile, attempts)
        if verdict is not None:
            out["air_check"] = verdict.as_json()
        if head_cost is not None:
            out["lm_head_out"] = {"out": lm_head_out, "bf16_total_s": head_cost[0],
                                  "total_s": head_cost[1]}
        if attention_cost is not None:
            out["attention_datapath"] = {"datapath": attention_datapath,
                                         "bfp16_total_s": attention_cost[0],
                                         "total_s": attention_cost[1]}
        emit_json(out)
    else:
        _print_plan(described, plan, profile, attempts)
        if head_cost is not None:
            bf16_s, ours_s = head_cost
            click.echo(f"LM head writing {lm_head_out} logits: {ours_s * 1e3:.3f} ms against "
                       f"{bf16_s * 1e3:.3f} ms with bf16 logits ({(ours_s - bf16_s) * 1e6:+.1f} "
                       "us, modeled; the FP32 GEMV is ours and unmeasured)")
        if attention_cost is not None:
            bfp16_s, ours_s = attention_cost
            click.echo(f"FlashAttention on the {attention_datapath} datapath: "
                       f"{ours_s * 1e3:.3f} ms against {bfp16_s * 1e3:.3f} ms with upstream's "
                       f"BFP16 build ({(ours_s - bfp16_s) * 1e6:+.1f} us, modeled; the native "
                       "bf16 build is ours and unmeasured)")
        if verdict is not None:
            _print_verdict(verdict)
    if verdict is not None and verdict.clean < len(verdict.results):
        sys.exit(EXIT_FAILED)


def _print_verdict(verdict: Any) -> None:
    """One line for the programs, one per failing check with its first violation."""
    n = len(verdict.results)
    click.echo(f"MLIR-AIR programs: {verdict.clean} of {n} clean (verified against a stand-in "
               "of mlir-air's builder; nothing was compiled)")
    for check, failing in verdict.by_check().items():
        if failing:
            first = next(v for _, found in verdict.results for v in found if v.check == check)
            click.echo(f"  {check}: {failing} program(s), e.g. {first.line()}")


def _plan_json(described: str, plan: Any, profile: Any, attempts: Any) -> dict[str, Any]:
    from npu_deploy.kernels import XDNA2
    from npu_deploy.kernels.plans.plan import Dispatch, weights_note

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
            row["reason"] = step.reason
        steps.append(row)
    return {"model": described, "mode": str(plan.mode), "source": profile.source,
            "weights": weights_note(plan.args), "calibration": profile.calibration,
            "transforms": list(plan.history),
            "lm_head": plan.lm_head, "total_s": profile.total_s,
            "one_time_s": profile.one_time_s, "tokens_per_s": profile.tokens_per_s,
            "eta": profile.eta, "dispatches": len(plan.dispatches),
            "programs": _programs_needed(plan), "steps": steps,
            "attempts": [{"transform": a.transform, "skill": a.skill, "before_s": a.before_s,
                          "after_s": a.after_s, "kept": a.kept, "reason": a.reason}
                         for a in attempts]}


def _programs_needed(plan: Any) -> dict[str, Any]:
    """The distinct programs the plan's dispatches need (each built once, every layer
    running it), against the contexts a process keeps loaded."""
    from npu_deploy.kernels import XDNA2
    from npu_deploy.kernels.air_programs.air import EmitError, plan_programs

    try:
        programs = plan_programs(plan, XDNA2)
    except EmitError as e:
        return {"distinct": None, "contexts": XDNA2.hw_contexts, "error": str(e)}
    return {"distinct": len(programs.distinct), "contexts": XDNA2.hw_contexts,
            "multi_launch": len(programs.multi_launch()),
            "largest_buffer_bytes": programs.largest_buffer()[0]}


def _print_plan(described: str, plan: Any, profile: Any, attempts: Any) -> None:
    from npu_deploy.kernels import XDNA2
    from npu_deploy.kernels.definition.specs import PROMPT_ALIGN, Prefill, prompt_prefill
    from npu_deploy.kernels.plans.plan import weights_note

    out = console()
    out.print(data(f"{described}, {plan.mode}, on {XDNA2.name}"))
    note = weights_note(plan.args)
    if note:
        out.print(note, highlight=False)
    out.print("Every time below is modeled: the performance model is calibrated on the "
              "Llama-3.2-1B figures measured on NPU2 "
              "(docs/hardware-facts.md#reference-deployment). Nothing ran on an NPU.")
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
    need = _programs_needed(plan)
    if need["distinct"] is None:
        out.print(f"programs: none can be emitted ({escape(need['error'])})", highlight=False)
    else:
        out.print(f"programs: {need['distinct']} distinct for {len(plan.dispatches)} "
                  f"dispatches, each built once and run by every layer; a process keeps "
                  f"{need['contexts']} loaded"
                  + ("" if need["distinct"] <= need["contexts"] else
                     " (more are reloaded as needed, least recently used first)"))
    if isinstance(plan.mode, Prefill) and prompt_prefill(plan.mode.seq) != plan.mode:
        padded = prompt_prefill(plan.mode.seq).seq
        out.print(f"a deployment runs a prompt of {plan.mode.seq} tokens padded to {padded} "
                  f"(a multiple of {PROMPT_ALIGN}): its plan is --seq-len {padded}",
                  highlight=False)
    fallbacks: dict[str, list[str]] = {}    # why a step left the NPU -> the steps
    for h in plan.host_steps:
        if h.reason:
            fallbacks.setdefault(h.reason, []).append(h.label)
    for reason, labels in fallbacks.items():
        where = labels[0] if len(labels) == 1 else f"{labels[0]} .. {labels[-1]}"
        out.print(f"on the CPU instead of the NPU ({len(labels)} step(s), {escape(where)}): "
                  f"{escape(reason)}", highlight=False)
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
    out.print(data(f"{plan.summary}"))
    out.print(f"modeled {kind}: {profile.total_s * 1e3:.1f} ms"
              + (f" (incl. {profile.one_time_s * 1e3:.1f} ms writing static weights once)"
                 if isinstance(plan.mode, Prefill) else
                 f", {profile.tokens_per_s:.1f} tokens/s")
              + f"; eta {profile.eta:.2f} (1.00 = the measured Llama-3.2-1B deployment)")


@click.command("doctor")
@click.option("--air-objects", "objects", type=str, default=None, metavar="DIR",
              envvar="NPU_DEPLOY_AIR_OBJECTS",
              help="The micro-kernel objects' directory to check (default: "
                   "$NPU_DEPLOY_AIR_OBJECTS, else where build-objects writes).")
@click.option("--model", "models", multiple=True, metavar="MODEL",
              help="Check the objects against this model's plans (repeatable; default: the "
                   "models build-objects built them for, else smollm2-135m).")
@click.option("--seq-len", type=click.IntRange(8, MAX_SEQ_LEN), default=None,
              help="The prefill length of those plans (default: build-objects', else 128).")
@json_option("Print JSON instead of lines.")
def doctor_cmd(objects: str | None, models: tuple[str, ...], seq_len: int | None,
               as_json: bool) -> None:
    """Whether this machine can run deployments on a real NPU (`--backend xrt`): each
    requirement found (and where) or missing (and the fix), one line each. Exit 0 only
    when every one is present.

    Beyond presence it checks that the NPU is XDNA 2 (an XDNA 1 NPU runs none of these
    programs), the NPU firmware for this device and its version, mlir-aie's aie_api
    headers, and that the objects folder holds objects, each an ELF built for aie2p, and
    every object the plans link.
    """
    from npu_deploy.kernels.npu_runtime.aie_objects import default_objects_dir, read_manifest
    from npu_deploy.kernels.npu_runtime.toolchain import requirements

    from .kit import BUNDLED, SEQ_LEN, needed_for

    directory = Path(objects) if objects else default_objects_dir()
    needed = None
    if directory.is_dir() and any(directory.glob("*.o")):      # else nothing to match
        manifest = read_manifest(directory) or {}
        chosen = list(models) or list(manifest.get("models") or [BUNDLED])
        needed = set(needed_for(chosen, seq_len or manifest.get("seq_len") or SEQ_LEN))
    found = requirements(str(directory), needed=needed)
    if as_json:
        emit_json([{"key": r.key, "what": r.what, "found": r.found, "version": r.version,
                    "problem": r.problem, "fix": r.fix} for r in found])
    else:
        for r in found:
            click.echo(r.line())
        lacking = [r for r in found if not r.ok]
        click.echo(f"{len(found) - len(lacking)} of {len(found)} present" + (
            "; deployments here use --backend emulator (the default)" if lacking else
            "; --backend xrt can run"))
    if any(not r.ok for r in found):
        sys.exit(EXIT_FAILED)
