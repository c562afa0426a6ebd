"""Regenerate the measured data files (kernels/data/<family>.json, deployments.json) from
Xilinx/mlir-air.

    python -m npu_deploy.kernels.measured.ingest MIRROR [--rev REV] [--out DIR]

MIRROR is a clone of https://github.com/Xilinx/mlir-air, bare or with a work tree. For
every kernel family that declares an upstream `Source` (kernels/families/), the page is
read at REV (default HEAD) with `git show`, its tables are taken as the family's reader
says, its best figure from the registry's index (supported_kernels.md), and the file is
written with the repository, path, commit and date it came from. `deployments.json` holds
upstream's LLM deployments (programming_examples/llms), read by kernels.measured.upstream_llm_pages.
The output is deterministic: ingesting the same commit twice writes the same bytes, so a diff
of the data files is a diff of upstream's measurements.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..definition.registry import FAMILIES
from .measurements import DATA_DIR, REGISTRY, UPSTREAM, index_best
from .upstream_llm_pages import LLMS, NOTES, SUMMARY, deployment_records

INDEX = "supported_kernels.md"


class Mirror:
    """A clone of the upstream repository, read at one revision."""

    def __init__(self, path: Path, rev: str = "HEAD") -> None:
        self.git_dir = path / ".git" if (path / ".git").exists() else path
        commit, date = self._git("log", "-1", "--format=%H %cs", rev).split()
        self.commit, self.date = commit, date

    def _git(self, *args: str) -> str:
        done = subprocess.run(["git", f"--git-dir={self.git_dir}", *args], capture_output=True,
                              text=True)
        if done.returncode != 0:
            raise SystemExit(f"git {' '.join(args)} failed in {self.git_dir}: "
                             f"{done.stderr.strip()}")
        return done.stdout

    def read(self, path: str) -> str:
        return self._git("show", f"{self.commit}:{path}")


def ingest(mirror: Mirror) -> dict[str, dict[str, Any]]:
    """Every family's data file, by file name (without .json)."""
    index = mirror.read(f"{REGISTRY}/{INDEX}")
    out: dict[str, dict[str, Any]] = {}
    for family in FAMILIES.values():
        source = family.source
        if source is None:
            continue
        name = family.data or family.name
        path = f"{REGISTRY}/{source.path}"
        page = source.extract(mirror.read(path))
        out[name] = {
            "family": family.name,
            "source": {"repository": UPSTREAM, "path": path, "commit": mirror.commit,
                       "commit_date": mirror.date, "measured": page["measured"]},
            "index": {"path": f"{REGISTRY}/{INDEX}",
                      "best": index_best(index, str(Path(source.path).with_suffix(".md")))},
            "tolerance": page["tolerance"],
            "tables": page["tables"],
        }
    return out


def ingest_deployments(mirror: Mirror) -> dict[str, Any]:
    """deployments.json: upstream's LLM deployments of the nine target models, each row with
    the file it came from (kernels.measured.upstream_llm_pages)."""
    return {
        "about": "Upstream's bf16 deployments of the nine target models on NPU2: the ELFs "
                 "(dispatches) per layer of prefill and decode with the launches of our plans "
                 "each holds, why upstream split where it did, what runs on the CPU, and the "
                 "end-to-end and per-ELF figures its pages report. For judging our dispatch "
                 "plans and performance model; nothing is fitted to them but Llama-3.2-1B's "
                 "(kernels/data/calibration.json).",
        "source": {"repository": UPSTREAM, "path": LLMS, "commit": mirror.commit,
                   "commit_date": mirror.date, "summary": SUMMARY,
                   "measured": "real NPU2 (AIE2P), bf16, seq_len 2048, `make profile "
                               "N_TOKENS=32`, 2026-06"},
        "notes": list(NOTES),
        "models": deployment_records(mirror.read),
    }


def dumps(data: dict[str, Any]) -> str:
    """JSON with one table row per line (the tables stay readable in a diff)."""
    def encode(value: Any, depth: int) -> str:
        pad, inner = " " * depth, " " * (depth + 1)
        if isinstance(value, dict) and value:
            items = [f"{inner}{json.dumps(k)}: {encode(v, depth + 1)}" for k, v in value.items()]
            return "{\n" + ",\n".join(items) + f"\n{pad}}}"
        if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            rows = [inner + json.dumps(v, ensure_ascii=False) for v in value]
            return "[\n" + ",\n".join(rows) + f"\n{pad}]"
        return json.dumps(value, ensure_ascii=False)
    return encode(data, 0) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m npu_deploy.kernels.measured.ingest",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("mirror", type=Path, help="a clone of Xilinx/mlir-air (bare or not)")
    parser.add_argument("--rev", default="HEAD", help="the revision to read (default HEAD)")
    parser.add_argument("--out", type=Path, default=DATA_DIR, help="where to write")
    args = parser.parse_args(argv)
    mirror = Mirror(args.mirror, args.rev)
    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in ingest(mirror).items():
        path = args.out / f"{name}.json"
        path.write_text(dumps(data))
        rows = sum(len(t["rows"]) for t in data["tables"].values())
        print(f"{path}: {rows} rows from {data['source']['path']} at {mirror.commit[:12]}")
    deployments = ingest_deployments(mirror)
    path = args.out / "deployments.json"
    path.write_text(dumps(deployments))
    print(f"{path}: {len(deployments['models'])} models from {LLMS} at {mirror.commit[:12]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
