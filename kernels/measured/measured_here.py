"""Kernel times measured on an NPU by `npu-deploy validate-hardware`, added with `npu-deploy
import-measurements`: our own measured rows, kept apart from upstream's registry data
(kernels.measured.measurements) and never mixed with it.

They live in the user's data directory, `~/.local/share/npu-deploy/measured_here.json`
(`$NPU_DEPLOY_MEASUREMENTS` names another file), not in `kernels/data/`: those files are
upstream's registry as ingested (`kernels.measured.ingest` rewrites them), they ship inside the
package (read-only in a system install, replaced by the next upgrade), and a measurement
belongs to whoever made it, as the run store beside it does.

The file keeps each imported report's provenance once (host, date, runtime, tools and their
versions, machine, model, npu-deploy's version), under the report's digest, and each row
names its report. Importing a report again adds nothing and leaves the file as it was. A
kernel that failed Phase 1's checks (its numerics against the FP32 oracle, or a blocking
finding of the checker) is not imported: the time of a kernel that computes the wrong
thing is not a figure of that kernel.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from platformdirs import user_data_path

from ..npu_runtime.hardware_report import NPU_RUNTIME, ReportError, check_report
from ..plans.plan import config_key

ENV = "NPU_DEPLOY_MEASUREMENTS"
FORMAT_VERSION = 1
WHAT = ("kernel times measured on an NPU by `npu-deploy validate-hardware`, added by "
        "`npu-deploy import-measurements`; upstream's measurements are in kernels/data/")


class MeasuredDataError(ValueError):
    """The file of our measured rows cannot be read: what is wrong and what to do."""


def data_path() -> Path:
    """`$NPU_DEPLOY_MEASUREMENTS`, else measured_here.json in the user's data directory."""
    env = os.environ.get(ENV)
    return Path(env) if env else user_data_path("npu-deploy") / "measured_here.json"


def label(source: dict[str, Any]) -> str:
    """How a figure of ours says where it came from."""
    return f"measured on NPU (validate-hardware, {source['host']}, {source['date']})"


def load(path: Path | None = None) -> dict[str, Any]:
    """The file's contents; an empty table when there is no file yet."""
    path = path or data_path()
    if not path.exists():
        return {"what": WHAT, "format_version": FORMAT_VERSION, "reports": {}, "rows": []}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MeasuredDataError(f"{path} cannot be read ({e}); move it away and import "
                                "the reports again") from None
    if not isinstance(data, dict) or data.get("format_version") != FORMAT_VERSION \
            or not isinstance(data.get("reports"), dict) \
            or not isinstance(data.get("rows"), list):
        raise MeasuredDataError(f"{path} is not a file of measured rows of this npu-deploy "
                                f"(format {FORMAT_VERSION}); move it away and import the "
                                "reports again")
    return data


@dataclass(frozen=True)
class Imported:
    """What an import did: the rows it added, the kernels it left out (with why), or
    nothing because the report was imported before."""

    path: Path
    added: int
    skipped: tuple[str, ...]        # "kernel shape: the failed checks"
    already: bool = False


def provenance(report: dict[str, Any]) -> dict[str, Any]:
    """What a row of `report` says about where it came from."""
    return {"tool": "validate-hardware", "host": report["machine"]["hostname"],
            "date": report["created"][:10], "created": report["created"],
            "runtime": report["runtime"], "npu_deploy": report["npu_deploy"],
            "machine": report["machine"],
            "tools": {k: t.get("version") for k, t in report["tools"].items()},
            "model": report["model"]["spec"], "seq_len": report["seq_len"]}


def import_report(report: dict[str, Any], path: Path | None = None) -> Imported:
    """Add the passing kernel rows of a checked report (kernels.npu_runtime.hardware_report) to the
    file, tagged with its provenance. A report of a simulated NPU is refused."""
    check_report(report)
    if report["runtime"] != NPU_RUNTIME:
        raise ReportError(f"the report was made on a simulated NPU ({report['runtime']}), "
                         "not on an NPU: its times are not measurements; run `npu-deploy "
                         "validate-hardware` on a Ryzen AI 300 machine")
    path = path or data_path()
    data = load(path)
    digest = report["digest"]
    passed = [k for k in report["kernels"] if k["passed"]]
    skipped = tuple(f"{config_key(k['kernel'], k['shape'])}: {'; '.join(k['failed_checks'])}"
                    for k in report["kernels"] if not k["passed"])
    if digest in data["reports"]:
        return Imported(path, 0, skipped, already=True)
    data["reports"][digest] = provenance(report)
    for k in passed:
        data["rows"].append({"kernel": k["kernel"], "shape": k["shape"], "config": k["config"],
                             "seconds": k["seconds"], "runs_s": k["runs_s"],
                             "numerics": k["numerics"], "report": digest})
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    os.replace(partial, path)      # a reader sees the old file or the new one, never half
    return Imported(path, len(passed), skipped)


def rows_at(kernel: str, shape: dict[str, int], path: Path | None = None
            ) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Our rows of `kernel` at `shape`, each with its report's provenance, newest first."""
    data = load(path)
    found = [(row, data["reports"][row["report"]]) for row in data["rows"]
             if row["kernel"] == kernel and row["shape"] == dict(shape)]
    return sorted(found, key=lambda r: r[1]["created"], reverse=True)


__all__ = ["ENV", "Imported", "MeasuredDataError", "data_path", "import_report", "label",
           "load", "provenance", "rows_at"]
