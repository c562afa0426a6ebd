"""The benchmark scripts still run (tiny sizes; the figures themselves are not judged here)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_store_bench_runs_end_to_end_and_labels_its_figures(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "store_bench.py"), "--single", "30",
         "--batch-events", "300", "--batch-size", "50", "--repeats", "1", "--polls", "50",
         "--dir", str(tmp_path), "--json", "--quiet"],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["source"] == "measured-cpu"
    assert set(report["stores"]) == {"ours", "raw", "es"}
    for store in report["stores"].values():
        assert store["single_eps_median"] > 0 and store["replay_eps_median"] > 0
    assert {t["target"] for t in report["targets"]} >= {
        "our durable single append >= 0.8x raw sqlite3", "idle tail poll < 50 us (median)"}
    assert list(tmp_path.iterdir()) == []   # its working directory is removed
