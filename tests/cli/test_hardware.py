"""`npu-deploy validate-hardware` and `npu-deploy import-measurements`: the kit a person with
a Ryzen AI 300 machine runs, and the kernel times it brings back, through the real command
line.

This machine has no NPU: validate-hardware must stop at the doctor's checks and write
nothing. The whole kit runs on the simulated NPU of tests/fake_npu.py (`--npu-runtime
fake_npu:machine`, as a deployment's `npu_runtime`): pyxrt's protocol, each run computed
with the emulator's numerics, on a machine whose toolchain is all there. Its reports say
they were simulated, and import refuses them; the import tests take such a report as a Ryzen
AI 300 machine would write it (`on_npu`: the same report with the runtime pyxrt, sealed
again). No figure here is an NPU's.
"""

from __future__ import annotations

import json
import math
import platform
import socket
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from conftest import assert_one_error
from fake_npu import machine

from npu_deploy.cli import main
from npu_deploy.kernels.air_programs.air import emit_plan
from npu_deploy.kernels.definition.hardware import XDNA2
from npu_deploy.kernels.definition.specs import SPECS, prompt_prefill
from npu_deploy.kernels.measured.measured_here import ENV
from npu_deploy.kernels.npu_runtime.hardware_report import NPU_RUNTIME, check_report, seal
from npu_deploy.kernels.npu_runtime.needed_objects import plans_of
from npu_deploy.kernels.npu_runtime.npu_backend import alone
from npu_deploy.kernels.npu_runtime.toolchain import requirements
from npu_deploy.kernels.npu_runtime.xrt_runtime import XrtError
from npu_deploy.kernels.performance.model import device_s
from npu_deploy.kernels.plans.plan import config_key
from npu_deploy.pipeline.hardware_validation import model_plans
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import model_kernel_uses

MODEL, SEQ, REPEATS = "tiny-llama", 16, 2


def run_cli(*args: object) -> Result:
    result = CliRunner().invoke(main, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def validate(out: Path, runtime: str) -> tuple[Result, dict[str, Any]]:
    result = run_cli("validate-hardware", MODEL, "--seq-len", SEQ, "--repeats", REPEATS,
                     "--npu-runtime", runtime, "--out", out)
    return result, json.loads(out.read_text())


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, dict[str, Any]]:
    """The kit on the simulated NPU, where everything works."""
    return validate(tmp_path_factory.mktemp("kit") / "report.json", "fake_npu:machine")


class WrongSiluMul:
    """The emulator, except that silu_mul computes twice its result."""

    def __init__(self, emulator: Any) -> None:
        self.emulator = emulator

    def run(self, spec: Any, shape: Any, config: Any, inputs: Any, outputs: Any) -> None:
        self.emulator.run(spec, shape, config, inputs, outputs)
        if spec.name == "silu_mul":
            for t in outputs.values():
                t.mul_(2)


def faulty_machine(bench: Any) -> dict[str, Any]:
    """The simulated machine with two faults: its mlir-air cannot build a program of more
    than one launch (an ELF), and its NPU's silu_mul is wrong."""
    given = machine(bench)
    sim = given["runner"].xrt
    sim.emulator = WrongSiluMul(sim.emulator)
    build = given["compiler"]

    def compiler(program: Any) -> Any:
        if len(program.layouts) > 1:
            raise XrtError(f"mlir-air could not compile {program.function}: aircc failed")
        return build(program)
    return {**given, "compiler": compiler}


@pytest.fixture(scope="module")
def faulty(tmp_path_factory: pytest.TempPathFactory) -> tuple[Result, dict[str, Any]]:
    return validate(tmp_path_factory.mktemp("kit") / "report.json",
                    f"{__name__}:faulty_machine")


def on_npu(report: dict[str, Any]) -> dict[str, Any]:
    """The report as a Ryzen AI 300 machine would write it: run by pyxrt."""
    return seal({**report, "runtime": NPU_RUNTIME})


def write(path: Path, report: dict[str, Any]) -> Path:
    path.write_text(json.dumps(report))
    return path


# --- validate-hardware ------------------------------------------------------------------

def test_here_it_stops_at_the_doctor_and_writes_nothing(cli, tmp_path: Path, monkeypatch,
                                                        measured_here: Path):
    monkeypatch.chdir(tmp_path)
    result = cli("validate-hardware", MODEL, "--out", tmp_path / "report.json")
    assert result.exit_code == 1
    doctor = [line for line in cli("doctor").stdout.splitlines() if line.startswith("missing")]
    assert doctor and result.stdout.splitlines() == doctor      # the doctor's own lines
    assert_one_error(result, "needs a Ryzen AI 300 machine", f"{len(doctor)} missing",
                     "`npu-deploy doctor`", "Nothing was run or written")
    assert list(tmp_path.iterdir()) == [] and not measured_here.exists()


def test_the_kit_on_a_simulated_npu_reports_every_field(simulated, tiny_models):
    result, report = simulated
    assert result.exit_code == 0, result.output
    assert "21 of 21 kernels passed Phase 1" in result.stdout and "block passed" in \
        result.stdout and "npu-deploy import-measurements" in result.stdout
    assert "compiled" in result.stderr and "validated" in result.stderr      # progress
    check_report(report)                  # the import's own checks: every field, the digest
    assert set(report) == {"schema", "schema_version", "created", "npu_deploy", "runtime",
                           "mode", "model", "seq_len", "repeats", "machine", "tools",
                           "control", "diagnosis", "programs", "kernels", "block",
                           "failures", "digest"}
    assert report["runtime"] == "fake_npu:machine" and report["failures"] == []
    assert report["mode"] == "full" and report["schema_version"] == 2
    # the control ran first, on the same simulated NPU, and passed: nothing to blame
    control = report["control"]
    assert control["passed"] and control["example"] == "programming_examples/silu_and_mul"
    assert "PASS!" in control["log"] and "simulated" in control["how"]
    assert report["diagnosis"]["verdict"] == "none"
    assert report["model"]["spec"] == MODEL and report["model"]["args"]["head_dim"] == 64
    m = report["machine"]
    assert m["hostname"] == socket.gethostname() and m["kernel"] == platform.release()
    assert m["cpu"] and m["os"] and m["python"] == platform.python_version()
    assert set(report["tools"]) == {r.key for r in requirements(None)}
    assert all(t["version"] == "simulated" and t["found"] for t in report["tools"].values())

    # every program of the prefill and decode plans, baseline and optimized: each distinct
    # program compiled once (every layer's dispatch runs it), the dispatches counted
    loaded = tiny_models[MODEL]
    dispatches = [p for _, plan in model_plans(MODEL, loaded, SEQ) for p in emit_plan(plan)]
    emitted = {p.digest: p for p in dispatches}
    programs = report["programs"]
    assert {p["digest"] for p in programs} == set(emitted)
    assert len(programs) == len(emitted) < len(dispatches)
    assert sum(p["programs"] for p in programs) == len(dispatches)
    assert all(p["structure"] == emitted[p["digest"]].function and p["log"] is None
               and p["ir"] is None for p in programs)
    assert all(p["compiled"] and p["compile_s"] >= 0 for p in programs)
    # each plan the kit builds brings a program of its own (the numerics retries' too)
    assert {p["plan"] for p in programs} == {name for name, _ in plans_of(MODEL, loaded.args,
                                                                           SEQ)}
    assert any(p["launches"] > 1 for p in programs)             # merged dispatches too

    # Phase 1: every (kernel, shape) of the model, numerics and a measured time each
    uses = model_kernel_uses(MODEL, loaded.args, SEQ, Recipe(), XDNA2)
    kernels = report["kernels"]
    assert sorted(config_key(k["kernel"], k["shape"]) for k in kernels) == sorted(uses)
    for k in kernels:
        assert k["passed"] and k["failed_checks"] == [] and k["rtol"] == 0.016
        assert len(k["runs_s"]) == REPEATS and all(t > 0 for t in k["runs_s"])
        assert min(k["runs_s"]) <= k["seconds"] <= max(k["runs_s"])
        # the simulated device's clock: a run lasts at least its modeled device time
        assert k["seconds"] >= device_s(alone(SPECS[k["kernel"]], k["shape"], k["config"]))
        assert k["host_write_s"] > 0 and k["host_read_s"] > 0
        assert k["numerics"] and all(o["within_frac"] == 1.0 and o["n_outside"] == 0
                                     for o in k["numerics"].values())

    # Phase 2: layer 0 against the FP32 oracle
    block = report["block"]
    assert block["passed"] and block["tokens"] == SEQ and len(block["runs_s"]) == REPEATS
    assert block["seconds"] > 0 and block["metrics"]["L0.ffn_residual"]["cosine"] > 0.99
    gating = {c["metric"] for c in block["checks"] if c["subject"] == "L0 block output"
              and c["gating"]}
    assert gating == {"cosine", "cosine_pos_min"}


def test_a_failing_program_or_kernel_is_recorded_and_the_rest_goes_on(faulty, tiny_models):
    result, report = faulty
    assert result.exit_code == 1
    assert "failure(s)" in result.stdout and "report written to" in result.stdout
    check_report(report)
    programs, failures = report["programs"], report["failures"]
    merged = {p["function"] for p in programs if p["launches"] > 1}
    assert merged and {p["function"] for p in programs if not p["compiled"]} == merged
    compile_failures = [f for f in failures if f["stage"] == "compile"]
    assert {f["program"] for f in compile_failures} == merged
    assert all("aircc failed" in f["message"] for f in compile_failures)
    # each failed compile keeps mlir-air's log and the program it was given
    emitted = {p.digest: p for _, plan in model_plans(MODEL, tiny_models[MODEL], SEQ)
               for p in emit_plan(plan)}
    for p in programs:
        if p["compiled"]:
            assert p["log"] is None and p["ir"] is None
            continue
        assert "XrtError: mlir-air could not compile" in p["log"] and "aircc failed" in \
            p["log"]
        assert p["ir"]["program"] == emitted[p["digest"]].source
        assert p["ir"]["air_mlir"] is None             # the simulated build wrote none
    # its silu_mul is wrong, and so upstream's silu_and_mul fails too: the setup's fault
    assert not report["control"]["passed"] and "failed." in report["control"]["log"]
    assert [f["stage"] for f in failures][0] == "control"
    assert report["diagnosis"]["verdict"] == "setup"
    assert "verdict: your setup" in result.stdout
    # every kernel still ran; silu_mul's numerics failed Phase 1's checks, the rest passed
    kernels = report["kernels"]
    assert len(kernels) == 21        # no gemm_fp32: the prefill LM head is a GEMV
    wrong = [k for k in kernels if not k["passed"]]
    assert {k["kernel"] for k in wrong} == {"silu_mul"}
    assert all(any("within_frac" in c for c in k["failed_checks"]) for k in wrong)
    numerics = [f for f in failures if f["stage"] == "numerics"]
    assert {f["program"] for f in numerics if f["program"].startswith("silu_mul")}
    assert report["block"] is not None                         # and the block ran


def rmsnorm_broken_machine(bench: Any) -> dict[str, Any]:
    """The simulated machine, whose mlir-air cannot build our RMSNorm programs (and only
    those): upstream's example still passes there."""
    given = machine(bench)
    build = given["compiler"]

    def compiler(program: Any) -> Any:
        if any(layout.kernel == "rmsnorm" for layout in program.layouts):
            raise XrtError(f"mlir-air could not compile {program.function}: aircc "
                           "compilation failed:\nerror: 'aie.dma_bd' op exceeds the buffer")
        return build(program)
    return {**given, "compiler": compiler}


def quick(out: Path, runtime: str, model: str = MODEL) -> tuple[Result, dict[str, Any]]:
    result = run_cli("validate-hardware", model, "--quick", "--seq-len", SEQ, "--repeats",
                     REPEATS, "--npu-runtime", runtime, "--out", out)
    return result, json.loads(out.read_text())


def families(model: str, args: Any) -> set[str]:
    """The NPU kernel families the model launches."""
    uses = model_kernel_uses(model, args, SEQ, Recipe(), XDNA2)
    return {u["kernel"] for u in uses.values() if SPECS[u["kernel"]].where == "npu"}


def test_quick_compiles_and_runs_one_program_per_kernel_family(tmp_path: Path, tiny_models):
    result, report = quick(tmp_path / "report.json", "fake_npu:machine")
    assert result.exit_code == 0, result.output
    check_report(report)
    assert report["mode"] == "quick" and report["block"] is None
    assert report["control"]["passed"] and report["diagnosis"]["verdict"] == "none"
    kinds = families(MODEL, tiny_models[MODEL].args)
    kernels, programs = report["kernels"], report["programs"]
    assert sorted(k["kernel"] for k in kernels) == sorted(kinds)       # one of each
    alone_rows = [p for p in programs if p["plan"] == "kernel alone"]
    assert len(alone_rows) == len(kinds) and all(p["launches"] == 1 for p in alone_rows)
    merged = [p for p in programs if p["plan"] == "prefill optimized"]
    assert len(merged) == 1 and merged[0]["launches"] > 1             # an ELF too
    assert len(programs) == len(kinds) + 1 and all(p["compiled"] for p in programs)
    assert "the block was not run (--quick)" in result.stdout
    assert "ETA" in result.stderr and "(modeled: 38 s a program" in result.stderr


def test_quick_runs_the_4bit_kernel_of_a_q4nx_model_from_its_blocks(tmp_path: Path):
    """`validate-hardware tiny-llama-q4@q4nx --quick`: the decode's proj_qmm is compiled and
    run like every other family, the simulated device reading its Q4NX blocks from the
    buffer (the fields the emulator keeps beside them never reach the device)."""
    result, report = quick(tmp_path / "report.json", "fake_npu:machine", "tiny-llama-q4@q4nx")
    assert result.exit_code == 0, result.output
    check_report(report)
    rows = {k["kernel"]: k for k in report["kernels"]}
    assert "proj_qmm" in rows and rows["proj_qmm"]["passed"], rows.get("proj_qmm")
    assert "gemv" in rows          # the bf16 LM head


@pytest.mark.slow          # the whole kit on the simulated NPU: about 20 s
def test_the_kit_runs_a_4bit_model_whose_k_is_padded(tmp_path: Path):
    """`validate-hardware tiny-llama@q4nx`: every kernel of the model alone on the simulated
    NPU, proj_qmm at its padded K = 256 (hidden 128) among them, and layer 0's prefill (bf16
    GEMMs on the de-quantized weights) against the FP32 oracle of those weights."""
    result = run_cli("validate-hardware", "tiny-llama@q4nx", "--seq-len", SEQ, "--repeats",
                     REPEATS, "--npu-runtime", "fake_npu:machine", "--out",
                     tmp_path / "report.json")
    report = json.loads((tmp_path / "report.json").read_text())
    assert result.exit_code == 0, result.output
    check_report(report)
    qmm = [k for k in report["kernels"] if k["kernel"] == "proj_qmm"]
    assert qmm and all(k["passed"] for k in qmm)
    assert {k["shape"]["K"] for k in qmm} == {256}
    assert report["block"]["passed"] and report["model"]["spec"] == "tiny-llama@q4nx"


def test_only_our_program_failing_is_ours_and_keeps_its_log_and_ir(tmp_path: Path):
    result, report = quick(tmp_path / "report.json", f"{__name__}:rmsnorm_broken_machine")
    assert result.exit_code == 1
    check_report(report)
    assert report["control"]["passed"]
    failed = [p for p in report["programs"] if not p["compiled"]]
    assert failed and all("rmsnorm" in p["ir"]["program"] for p in failed)
    assert all("aircc compilation failed:\nerror: 'aie.dma_bd' op" in p["log"]
               for p in failed)
    assert {f["stage"] for f in report["failures"]} == {"compile"}
    assert report["diagnosis"]["verdict"] == "ours"
    assert "verdict: our program(s): upstream's programming_examples/silu_and_mul passed" \
        in result.stdout


@pytest.mark.slow          # the bundled model, loaded and run on the emulator: ~40 s
def test_quick_on_the_bundled_model_compiles_at_most_a_dozen_programs(tmp_path: Path, smollm2):
    """The acceptance run: `npu-deploy validate-hardware smollm2-135m --quick --npu-runtime
    fake_npu:machine`: the control ran, then at most twelve programs were compiled (not the
    plans' 1,059 dispatches), every NPU kernel family of the model among them."""
    result, report = quick(tmp_path / "report.json", "fake_npu:machine", "smollm2-135m")
    assert result.exit_code == 0, result.output
    programs = report["programs"]
    assert len(programs) <= 12 and all(p["compiled"] for p in programs)
    assert report["control"] is not None and report["control"]["passed"]
    assert "control  passed" in result.stderr
    kinds = families("smollm2-135m", smollm2.args)
    # no gemm_fp32 among them: the prefill's LM head is a GEMV, as upstream's
    assert {k["kernel"] for k in report["kernels"]} == kinds and len(kinds) == 8


# --- import-measurements ----------------------------------------------------------------

@pytest.fixture
def data_file(tmp_path: Path, monkeypatch) -> Path:
    path = tmp_path / "data" / "measured_here.json"
    monkeypatch.setenv(ENV, str(path))
    return path


def label(report: dict[str, Any]) -> str:
    return (f"measured on NPU (validate-hardware, {report['machine']['hostname']}, "
            f"{report['created'][:10]})")


def test_import_adds_the_passing_rows_with_their_provenance_once(cli, tmp_path: Path,
                                                                 data_file: Path, faulty):
    report = on_npu(faulty[1])
    path = write(tmp_path / "report.json", report)
    result = cli("import-measurements", path)
    assert result.exit_code == 0, result.output
    passed = [k for k in report["kernels"] if k["passed"]]
    wrong = [k for k in report["kernels"] if not k["passed"]]     # silu_mul, both shapes
    lines = result.stdout.splitlines()
    assert lines[0] == f"added {len(passed)} kernel time(s) {label(report)} to {data_file}"
    assert f"left out {len(wrong)} kernel(s) that failed Phase 1's checks" in lines[1]
    assert len(lines) == 2 + len(wrong) and all(
        line.strip().startswith("silu_mul rows=") and "within_frac" in line
        for line in lines[2:])
    data = json.loads(data_file.read_text())
    assert len(data["rows"]) == len(passed)
    assert all(r["report"] == report["digest"] for r in data["rows"])
    assert [(r["kernel"], r["shape"], r["config"], r["seconds"]) for r in data["rows"]] == \
        [(k["kernel"], k["shape"], k["config"], k["seconds"]) for k in passed]
    source = data["reports"][report["digest"]]
    assert source["host"] == socket.gethostname() and source["date"] == report["created"][:10]
    assert source["runtime"] == NPU_RUNTIME and source["tools"]["xrt"] == "simulated"
    assert source["tool"] == "validate-hardware" and source["model"] == MODEL
    # again: nothing added, the file byte for byte as it was
    before = data_file.read_bytes()
    again = cli("import-measurements", path)
    assert again.exit_code == 0 and "was imported before" in again.stdout
    assert data_file.read_bytes() == before
    as_json = json.loads(cli("import-measurements", path, "--json").stdout)
    assert as_json["already"] and as_json["added"] == 0 and as_json["source"] == label(report)


def test_imported_rows_show_up_in_kernels_with_their_provenance(cli, tmp_path: Path,
                                                                data_file: Path, simulated):
    before = cli("kernels", MODEL, "--seq-len", SEQ)
    assert "nothing ran on an NPU here" in before.stdout and "(here)" not in before.stdout
    report = on_npu(simulated[1])
    cli("import-measurements", write(tmp_path / "report.json", report))
    ours = {config_key(k["kernel"], k["shape"]): k for k in report["kernels"]}
    shown = 0
    # validate-hardware measures the shapes a deployment runs: a prompt of SEQ tokens padded
    # to a multiple of 128 (prompt_prefill), and the decode step at position SEQ
    padded = prompt_prefill(SEQ).seq
    for flags in (("--seq-len", padded), ("--seq-len", SEQ, "--decode", SEQ)):
        rows = json.loads(cli("kernels", MODEL, *flags, "--json").stdout)
        for row in rows:
            mine = ours.get(config_key(row["kernel"], row["shape"]))
            here = row["measured_here"]
            if mine is None:
                assert here is None
                continue
            shown += 1
            assert here == {"seconds": mine["seconds"], "config": mine["config"],
                            "same_config": True, "source": label(report)}
            upstream = row["measured_npu"]          # upstream's figures stay upstream's
            assert upstream is None or "validate-hardware" not in upstream["source"]
    assert shown >= 15
    table = cli("kernels", MODEL, "--seq-len", padded).stdout
    assert "measured us" in table and "(here)" in table
    assert f"[1] {label(report)}" in table and "nothing ran on an NPU here" not in table


def mutated(report: dict[str, Any], change: Any, reseal: bool = True) -> dict[str, Any]:
    copy = json.loads(json.dumps(report))
    change(copy)
    return seal(copy) if reseal else copy


def _set(path: str, value: Any) -> Any:
    def change(report: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = report
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        target[int(last) if last.isdigit() else last] = value
    return change


REFUSED = {
    "truncated": (lambda r: json.dumps(r)[:300], "is not valid JSON"),
    "not a report": (lambda r: '{"hello": 1}', "not a validate-hardware report"),
    "a time edited by hand": (
        lambda r: json.dumps(mutated(r, _set("kernels.0.seconds", 1e-9), reseal=False)),
        "changed after validate-hardware wrote it"),
    "a NaN time": (lambda r: json.dumps(mutated(r, _set("kernels.0.seconds", math.nan))),
                   "kernels[0].seconds should be a finite number, not nan"),
    "a negative time": (lambda r: json.dumps(mutated(r, _set("kernels.3.runs_s.1", -1e-6))),
                        "kernels[3].runs_s[1] should be a time > 0 s"),
    "an infinite time": (lambda r: json.dumps(mutated(r, _set("block.seconds", math.inf))),
                         "block.seconds should be a finite number, not inf"),
    "no machine": (lambda r: json.dumps(mutated(r, lambda x: x.pop("machine"))),
                   "has no field 'machine'"),
    "an unknown stage": (
        lambda r: json.dumps(mutated(r, lambda x: x["failures"].append(
            {"program": "p", "stage": "guess", "message": "m"}))),
        "failures[0].stage should be one of control, emit, compile"),
    "another schema version": (
        lambda r: json.dumps(mutated(r, _set("schema_version", 3))),
        "schema version 3, this npu-deploy reads versions 1, 2"),
    "a version 2 report without its control": (
        lambda r: json.dumps(mutated(r, lambda x: x.pop("control"))),
        "has no field 'control'"),
    "a failed compile without its log": (
        lambda r: json.dumps(mutated(r, _set("programs.0.log", 7))),
        "programs[0].log should be text"),
    "simulated": (lambda r: json.dumps(seal({**r, "runtime": "fake_npu:machine"})),
                  "made on a simulated NPU (fake_npu:machine)"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_report_that_fails_a_check_changes_nothing(cli, tmp_path: Path, data_file: Path,
                                                     simulated, case: str):
    report = on_npu(simulated[1])
    first = {**report, "created": "2026-01-01T00:00:00+00:00"}
    cli("import-measurements", write(tmp_path / "first.json", seal(first)))
    before = data_file.read_bytes()
    text, says = REFUSED[case]
    bad = tmp_path / "bad.json"
    bad.write_text(text(report))
    result = cli("import-measurements", bad)
    line = assert_one_error(result, str(bad), says)
    assert "run `npu-deploy validate-hardware`" in line     # what to do
    assert data_file.read_bytes() == before


def as_version_1(report: dict[str, Any]) -> dict[str, Any]:
    """The report as validate-hardware wrote it before the control and the compile logs."""
    old = {k: v for k, v in report.items() if k not in ("mode", "control", "diagnosis")}
    keep = ("plan", "dispatch", "function", "digest", "launches", "compiled", "cached",
            "compile_s")
    old["programs"] = [{k: p[k] for k in keep} for p in report["programs"]]
    old["failures"] = [f for f in report["failures"] if f["stage"] != "control"]
    return seal({**old, "schema_version": 1})


def test_a_version_1_report_still_imports(cli, tmp_path: Path, data_file: Path, simulated):
    report = as_version_1(on_npu(simulated[1]))
    check_report(report)
    result = cli("import-measurements", write(tmp_path / "old.json", report))
    assert result.exit_code == 0, result.output
    assert f"added {len(report['kernels'])} kernel time(s)" in result.stdout
