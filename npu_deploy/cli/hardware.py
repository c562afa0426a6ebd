"""The commands for a machine with an NPU: validate-hardware (one model's programs, kernels
and first block run on the NPU, after upstream's own example as a control, written as a
report; --quick: one program per kernel family) and import-measurements (a report's kernel
times added to the kernel data as measured here)."""

from __future__ import annotations

import importlib
import json
import socket
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from npu_deploy.deploy_request import code_version

from .kit import SEQ_LEN, needed_for
from .options import json_option, mlir_air_source_option
from .output import EXIT_FAILED, EXIT_USAGE, emit_json, fail


def _ready_or_fail(toolchain: list[Any]) -> None:
    """The doctor's line of every missing requirement, and one line that says why nothing
    was done; exit non-zero."""
    lacking = [r for r in toolchain if not r.ok]
    if not lacking:
        return
    for r in lacking:
        click.echo(r.line())
    fail(f"validate-hardware needs a Ryzen AI 300 machine (an XDNA 2 NPU) with the "
         f"{len(lacking)} missing requirement(s) above installed; `npu-deploy doctor` checks "
         "them. Nothing was run or written")


def _runtime_hook(spec: str) -> Any:
    module, _, function = spec.partition(":")
    try:
        return getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError, ValueError) as e:
        fail(f"--npu-runtime {spec}: {e}", EXIT_USAGE)


class RichSteps:
    """The session's progress as a rich bar per stage, its ETA modeled from upstream's
    per-ELF compile times until this machine's own come in (pipeline.hardware_kit.Eta), and
    the session's lines printed above it."""

    def __init__(self) -> None:
        from rich.console import Console

        self.console = Console(stderr=True)
        if not self.console.is_terminal:       # a log: 160 columns, not rich's 80
            self.console = Console(stderr=True, width=160)
        self.bar: Any = None
        self.eta: Any = None

    def begin(self, stage: str, total: int) -> None:
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
        )

        from npu_deploy.pipeline.hardware_kit import Eta

        self.end()
        self.eta = Eta(total)
        self.line(f"{stage}: {total} to compile, {self._eta()}")
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(),
                            MofNCompleteColumn(), TimeElapsedColumn(),
                            TextColumn("{task.fields[eta]}"), console=self.console)
        self.bar.start()
        self.task = self.bar.add_task(stage, total=total, eta=self._eta())

    def _eta(self) -> str:
        seconds, kind = self.eta.remaining()
        minutes, rest = divmod(round(seconds), 60)
        per = ("" if kind == "measured" else
               f": {self.eta.modeled_each_s:.0f} s a program, upstream's per-ELF mean")
        return f"ETA {minutes}:{rest:02d} ({kind}{per})"

    def advance(self, seconds: float) -> None:
        if self.bar is not None:
            self.eta.add(seconds)
            self.bar.update(self.task, advance=1, eta=self._eta())

    def end(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def line(self, text: str) -> None:
        if self.bar is not None:
            self.bar.console.print(text, markup=False, highlight=False)
        else:
            click.echo(text, err=True)


@click.command("validate-hardware")
@click.argument("model")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              metavar="REPORT.json",
              help="Where to write the report (default: hardware-report-HOST-TIME.json in "
                   "the current directory).")
@click.option("--quick", is_flag=True,
              help="Compile and run one program per kernel family (and compile one merged "
                   "program) instead of every program, kernel and the block: minutes, not "
                   "half an hour.")
@click.option("--seq-len", type=click.IntRange(8, 2048), default=SEQ_LEN, show_default=True,
              help="Prefill length: the plans' and kernels' shapes and the block's prompt.")
@click.option("--repeats", type=click.IntRange(1, 1000), default=5, show_default=True,
              help="Timed runs of each kernel and of the block, after the first.")
@click.option("--air-objects", "objects", type=str, default=None, metavar="DIR",
              envvar="NPU_DEPLOY_AIR_OBJECTS",
              help="The micro-kernel objects the programs link, as build-objects writes "
                   "them [$NPU_DEPLOY_AIR_OBJECTS, else build-objects' default].")
@mlir_air_source_option("its programming_examples/silu_and_mul is run first as the control")
@click.option("--npu-runtime", default=None, hidden=True, metavar="MODULE:FUNCTION",
              help="A simulated NPU instead of pyxrt and mlir-air (the tests' "
                   "fake_npu:machine); its reports cannot be imported.")
def validate_hardware_cmd(model: str, out: Path | None, quick: bool, seq_len: int,
                          repeats: int, objects: str | None, mlir_air: Path | None,
                          npu_runtime: str | None) -> None:
    """Run MODEL on this machine's NPU and write a self-contained report: every program of
    its prefill and decode plans compiled (one per structure: the layers' programs differ
    only in their names), every kernel validated against the FP32 reference and timed,
    layer 0 run against the FP32 oracle, with the machine, the tools and their versions,
    and every failure with aircc's log and the program's IR.

    First it checks what `npu-deploy doctor` checks, and stops there, writing nothing, on
    a machine without an XDNA 2 NPU and its tools. Then it runs upstream's own
    silu_and_mul example (from --mlir-air-source) as a control: if that fails too, the
    setup is at fault; if only ours fail, our programs are. A failing program or kernel is
    recorded and the rest goes on; the exit code is 1 when anything failed.

    Then add the report's kernel times to the kernel data with:

    \b
        npu-deploy import-measurements REPORT.json
    """
    from npu_deploy.kernels.npu_runtime.aie_objects import default_objects_dir
    from npu_deploy.kernels.npu_runtime.control import upstream_control
    from npu_deploy.kernels.npu_runtime.hardware_report import NPU_RUNTIME
    from npu_deploy.kernels.npu_runtime.npu_backend import NpuBackend
    from npu_deploy.kernels.npu_runtime.toolchain import requirements
    from npu_deploy.models.loading import load_model
    from npu_deploy.pipeline.hardware_validation import Bench, validate_hardware
    from npu_deploy.pipeline.workspace import air_cache_dir

    out = out or Path(f"hardware-report-{socket.gethostname()}-"
                      f"{datetime.now().strftime('%Y%m%d-%H%M%S')}.json")
    if not out.parent.resolve().is_dir():
        fail(f"--out {out}: {out.parent} is not a directory", EXIT_USAGE)
    hook = None if npu_runtime is None else _runtime_hook(npu_runtime)
    folder = Path(objects) if objects else default_objects_dir()
    toolchain = None
    control = None
    if hook is None:                       # before anything is loaded or written
        needed = set(needed_for([model], seq_len)) if any(folder.glob("*.o")) else None
        toolchain = requirements(str(folder), needed=needed)
        _ready_or_fail(toolchain)
        peano = next(r.found for r in toolchain if r.key == "peano")
        control = None if mlir_air is None else upstream_control(mlir_air, str(peano))
    loaded = load_model(model)
    steps = RichSteps()
    with tempfile.TemporaryDirectory(prefix="npu-deploy-validate-") as scratch:
        given: dict[str, Any] = {}
        if hook is not None:               # a simulated machine says what it has
            given = dict(hook(Bench(loaded, Path(scratch))))
            toolchain = given.pop("toolchain")
            control = given.pop("control", None)
            _ready_or_fail(toolchain)
        backend = NpuBackend(cache=Path(scratch) / "cache" if hook else air_cache_dir(),
                             objects=folder, **given)
        try:
            report = validate_hardware(
                model, loaded, backend, toolchain=toolchain or [], seq_len=seq_len,
                repeats=repeats, runtime=npu_runtime or NPU_RUNTIME,
                code_version=code_version(), quick=quick, control=control, steps=steps,
                progress=steps.line)
        finally:
            steps.end()
            backend.close()
    out.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    _summary(report, out)


def _summary(report: dict[str, Any], out: Path) -> None:
    programs, kernels, block = report["programs"], report["kernels"], report["block"]
    control = report["control"]
    click.echo(f"{report['mode']} run: "
               + ("no control ran; " if control is None else
                  f"the control (upstream's {control['example']}) "
                  f"{'passed' if control['passed'] else 'FAILED'}; ")
               + f"{sum(p['compiled'] for p in programs)} of {len(programs)} programs "
               f"compiled; {sum(k['passed'] for k in kernels)} of {len(kernels)} kernels "
               "passed Phase 1 on the NPU; the block "
               + ("was not run (--quick)" if report["mode"] == "quick" else
                  "did not run" if block is None else "passed" if block["passed"]
                  else "failed Phase 2's checks"))
    click.echo(f"verdict: {report['diagnosis']['text']}")
    click.echo(f"report written to {out}; `npu-deploy import-measurements {out}` adds its "
               "kernel times to the kernel data")
    if report["failures"]:
        click.echo(f"{len(report['failures'])} failure(s), each with its program and stage "
                   "in the report's \"failures\"")
        sys.exit(EXIT_FAILED)


@click.command("import-measurements")
@click.argument("report", type=click.Path(dir_okay=False, path_type=Path))
@json_option("Print what was imported as JSON.")
def import_measurements_cmd(report: Path, as_json: bool) -> None:
    """Add the kernel times of a validate-hardware REPORT to the kernel data, as rows
    measured on NPU by validate-hardware on its host and date, beside upstream's and never
    mixed with them.

    The report is checked first: its schema and version, its digest, every field, every
    time finite and positive; a report that fails a check changes nothing. Kernels that
    failed Phase 1's checks are left out, and said so. Importing a report twice adds
    nothing. The rows go to ~/.local/share/npu-deploy/measured_here.json
    ($NPU_DEPLOY_MEASUREMENTS), and `npu-deploy kernels MODEL` shows them.
    """
    from npu_deploy.kernels.measured.measured_here import (
        MeasuredDataError,
        import_report,
        label,
        provenance,
    )
    from npu_deploy.kernels.npu_runtime.hardware_report import ReportError, read_report

    try:
        data = read_report(report)
        done = import_report(data)
    except (ReportError, MeasuredDataError) as e:
        fail(str(e) if str(e).startswith(str(report)) else f"{report}: {e}")
    source = label(provenance(data))
    if as_json:
        emit_json({"report": str(report), "digest": data["digest"], "into": str(done.path),
                   "source": source, "added": done.added, "already": done.already,
                   "skipped": list(done.skipped)})
        return
    if done.already:
        click.echo(f"{report} was imported before (digest {data['digest'][:12]}): "
                   f"{done.path} is unchanged")
        return
    click.echo(f"added {done.added} kernel time(s) {source} to {done.path}")
    if done.skipped:
        click.echo(f"left out {len(done.skipped)} kernel(s) that failed Phase 1's checks "
                   "(numerics against the FP32 reference, or a blocking finding): a time of "
                   "a kernel that computes the wrong thing is no figure of it")
        for line in done.skipped:
            click.echo(f"  {line}")
