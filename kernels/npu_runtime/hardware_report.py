"""The report `npu-deploy validate-hardware` writes, and the checks `npu-deploy
import-measurements` runs on it before it takes a figure from it.

A report is one self-contained JSON object: everything needed to judge its figures away
from the machine that made them.

- `schema`, `schema_version`: `npu-deploy/hardware-report`, 2; `created` (UTC, ISO 8601);
  `npu_deploy`, the version that wrote it; `runtime`, what ran the programs: `pyxrt` on an
  NPU, or the module:function of a simulated one; `mode`: `quick` or `full`.
- `model`: `spec` as given, `origin` of the weights, `args` (its shapes); `seq_len`, and
  `repeats` (timed runs of each kernel after its validation run).
- `machine`: `hostname`, `cpu`, `kernel` (the Linux release), `os`, `python`, `npu`.
- `tools`: per requirement of the real-NPU path (kernels.npu_runtime.toolchain), `what`, `found`,
  `version` (XRT, pyxrt, mlir-air, Peano, the driver and the NPU firmware, where they say).
- `control`: upstream's example run first (kernels.npu_runtime.control): `example`, `how`,
  `passed`, `seconds`, `log` (the end of its output); null when none ran. `diagnosis`:
  `verdict` (setup, ours, none, unknown) and `text`, what a failure means given the control.
- `programs`: per distinct program compiled: `plan`, `dispatch`, `function`, `digest`,
  `structure` (its function: its kernels and digest), `programs` (how many dispatches of
  the plans run it: every layer's), `launches`, `compiled`, `cached`, `compile_s`, and
  for one that failed to compile `log` (mlir-air's error with aircc's output) and `ir`
  (`program`, the source given to mlir-air's builder, and `air_mlir`, what aircc was given,
  when it got that far); null otherwise.
- `kernels`: per (kernel, shape) of Phase 1: `kernel`, `shape`, `config`, `roles`, `mode`,
  `seconds` (the median of `runs_s`, each a run from start to the end of its wait),
  `host_write_s`, `host_read_s`, `numerics` (per output: within_frac, max_abs, rel_l2,
  mean_rel_l1, pearson, ...), `atol`, `rtol`, `failed_checks`, `passed` (Phase 1's checks).
- `block`: layer 0 on the NPU against the FP32 oracle, Phase 2's checks: `tokens`,
  `dispatches`, `seconds`, `runs_s`, `one_time_s`, `metrics`, `checks`, `passed`; null if
  it could not run, or in the quick mode.
- `failures`: `program`, `stage` (control, emit, compile, run, numerics, block), `message`.
- `digest`: SHA-256 of the canonical JSON of every other field.

Version 1 (before the control, the mode and the compile logs) is still read: its kernel
rows are the same, and import-measurements takes them as it did.

The digest catches a report damaged or edited after it was written (a figure changed by
hand no longer matches it). It is a check against accidents, not a signature: whoever
edits the figures can recompute it.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

SCHEMA = "npu-deploy/hardware-report"
SCHEMA_VERSION = 2
#: the versions this npu-deploy reads: each one's fields are checked
READS = (1, 2)
STAGES = ("control", "emit", "compile", "run", "numerics", "block")
#: The runtime of a real NPU, as a report names it.
NPU_RUNTIME = "pyxrt"

AGAIN = "run `npu-deploy validate-hardware` again for a report you can import"


class ReportError(ValueError):
    """A report that cannot be imported: what is wrong with it and what to do."""


def digest_of(report: dict[str, Any]) -> str:
    """SHA-256 of the canonical JSON of the report without its digest."""
    body = {k: v for k, v in report.items() if k != "digest"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"))
                          .encode()).hexdigest()


def seal(report: dict[str, Any]) -> dict[str, Any]:
    """The report with its digest."""
    return {**{k: v for k, v in report.items() if k != "digest"},
            "digest": digest_of(report)}


def read_report(path: Path) -> dict[str, Any]:
    """The report in `path`, checked (`check_report`); a ReportError says what is wrong."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ReportError(f"{path} is not text: it is not a validate-hardware report") \
            from None
    except OSError as e:
        raise ReportError(f"{path} cannot be read ({e.strerror or e})") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportError(f"{path} is not valid JSON ({e.msg} at line {e.lineno}): it is "
                          f"damaged or not a report; {AGAIN}") from None
    try:
        check_report(data)
    except ReportError as e:
        raise ReportError(f"{path}: {e}") from None
    return data


# --- the checks -------------------------------------------------------------------------------

Check = Callable[[Any, str], None]


def _fail(where: str, problem: str) -> None:
    raise ReportError(f"{where} {problem}; the file was not written by validate-hardware as "
                      f"it is now: {AGAIN}")


def text(value: Any, where: str) -> None:
    if not isinstance(value, str):
        _fail(where, f"should be text, not {json.dumps(value)[:40]}")


def flag(value: Any, where: str) -> None:
    if not isinstance(value, bool):
        _fail(where, f"should be true or false, not {json.dumps(value)[:40]}")


def count(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        _fail(where, f"should be a whole number >= 1, not {json.dumps(value)[:40]}")


def finite(value: Any, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) \
            or not math.isfinite(value):
        _fail(where, f"should be a finite number, not {value!r}")


def seconds(value: Any, where: str) -> None:
    """A measured time: finite and positive."""
    finite(value, where)
    if value <= 0:
        _fail(where, f"should be a time > 0 s, not {value!r}")


def duration(value: Any, where: str) -> None:
    """A time that may be zero (a cached compile, no host transfer)."""
    finite(value, where)
    if value < 0:
        _fail(where, f"should be a time >= 0 s, not {value!r}")


def anything(value: Any, where: str) -> None:
    """Free-form JSON (a config, an argument table); its numbers still finite."""
    if isinstance(value, float):
        finite(value, where)
    elif isinstance(value, dict):
        for k, v in value.items():
            anything(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            anything(v, f"{where}[{i}]")


def optional(check: Check) -> Check:
    def maybe(value: Any, where: str) -> None:
        if value is not None:
            check(value, where)
    return maybe


def each(check: Check) -> Check:
    def every(value: Any, where: str) -> None:
        if not isinstance(value, list):
            _fail(where, "should be a list")
        for i, v in enumerate(value):
            check(v, f"{where}[{i}]")
    return every


def mapping(check: Check) -> Check:
    """An object of any keys, each value checked."""
    def every(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            _fail(where, "should be an object")
        for k, v in value.items():
            check(v, f"{where}.{k}")
    return every


def fields(table: dict[str, Check]) -> Check:
    """An object with every field of `table` (others are allowed), each checked."""
    def record(value: Any, where: str) -> None:
        if not isinstance(value, dict):
            _fail(where, "should be an object")
        for name, check in table.items():
            if name not in value:
                _fail(where, f"has no field {name!r}")
            check(value[name], f"{where}.{name}".lstrip("."))
    return record


def one_of(*allowed: str) -> Check:
    def choice(value: Any, where: str) -> None:
        if value not in allowed:
            _fail(where, f"should be one of {', '.join(allowed)}, not {value!r}")
    return choice


def sizes(value: Any, where: str) -> None:
    mapping(count)(value, where)


TOOL = fields({"what": text, "found": optional(text), "version": optional(text)})
PROGRAM_V1 = {"plan": text, "dispatch": text, "function": text, "digest": text,
              "launches": count, "compiled": flag, "cached": flag,
              "compile_s": optional(duration)}
PROGRAM = fields({**PROGRAM_V1, "structure": text, "programs": count, "log": optional(text),
                  "ir": optional(fields({"program": text, "air_mlir": optional(text)}))})
KERNEL = fields({"kernel": text, "shape": sizes, "config": anything, "roles": each(text),
                 "mode": text, "seconds": seconds, "runs_s": each(seconds),
                 "host_write_s": duration, "host_read_s": duration,
                 "numerics": mapping(mapping(finite)), "atol": finite, "rtol": finite,
                 "failed_checks": each(text), "passed": flag})
BLOCK = fields({"tokens": count, "dispatches": count, "seconds": seconds,
                "runs_s": each(seconds), "one_time_s": duration,
                "metrics": mapping(mapping(finite)), "checks": each(anything), "passed": flag})
FAILURE = fields({"program": text, "stage": one_of(*STAGES), "message": text})
CONTROL = fields({"example": text, "how": text, "passed": flag, "seconds": duration,
                  "log": text})
DIAGNOSIS = fields({"verdict": one_of("setup", "ours", "none", "unknown"), "text": text})
COMMON = {
    "created": text, "npu_deploy": text, "runtime": text,
    "model": fields({"spec": text, "origin": text, "args": anything}),
    "seq_len": count, "repeats": count,
    "machine": fields({"hostname": text, "cpu": text, "kernel": text, "os": text,
                       "python": text, "npu": optional(text)}),
    "tools": mapping(TOOL), "kernels": each(KERNEL), "block": optional(BLOCK),
    "failures": each(FAILURE),
}
#: each version's fields
REPORTS = {
    1: fields({**COMMON, "programs": each(fields(PROGRAM_V1))}),
    2: fields({**COMMON, "mode": one_of("quick", "full"), "control": optional(CONTROL),
               "diagnosis": DIAGNOSIS, "programs": each(PROGRAM)}),
}


def check_report(data: Any) -> None:
    """Raise ReportError, naming the first problem, unless `data` is a whole, unchanged
    report of this schema: its schema and version, then its digest, then every field."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ReportError(f"this is not a validate-hardware report (no \"schema\": "
                          f"\"{SCHEMA}\"); {AGAIN}")
    version = data.get("schema_version")
    if version not in READS or isinstance(version, bool):
        raise ReportError(f"the report is of schema version {version!r}, this npu-deploy "
                          f"reads versions {', '.join(map(str, READS))}: import it with the "
                          f"npu-deploy that wrote it ({data.get('npu_deploy', 'unknown')}), "
                          f"or {AGAIN}")
    if not isinstance(data.get("digest"), str):
        raise ReportError(f"the report has no digest; {AGAIN}")
    if data["digest"] != digest_of(data):
        raise ReportError(f"the report changed after validate-hardware wrote it (its "
                          f"digest does not match its content); {AGAIN}")
    REPORTS[version](data, "")


__all__ = ["NPU_RUNTIME", "READS", "SCHEMA", "SCHEMA_VERSION", "STAGES", "ReportError",
           "check_report", "digest_of", "read_report", "seal"]
