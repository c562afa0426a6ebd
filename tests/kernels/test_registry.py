"""The kernel registry: each family is one unit declared in its module, nothing outside the
family modules decides by a kernel's name, the measured figures are data with provenance
that upstream's pages regenerate, and docs/kernels.md is what the registry renders."""

from __future__ import annotations

import ast
import contextlib
import copy
import io
import json
import math

import pytest
from cogapp import Cog
from paths import MIRROR, ROOT

from npu_deploy.kernels.definition import kernels_md
from npu_deploy.kernels.definition.registry import FAMILIES, SPECS
from npu_deploy.kernels.measured import measurements
from npu_deploy.kernels.measured.ingest import Mirror, dumps, ingest
from npu_deploy.kernels.measured.measurements import CURATED, DATA_DIR, best_rate, load, read_row
from npu_deploy.kernels.performance.calibration_set import CALIBRATION
from npu_deploy.kernels.performance.model import PerfParams

#: Where package code lives (the folders linked under npu_deploy/, and the CLI).
PACKAGES = ["events", "store", "machine", "models", "oracle", "metrics", "kernels", "skills",
            "pipeline", "agents", "npu_tui", "npu_deploy/cli"]
#: Where a kernel's name may decide something: its own module and the registry.
FAMILY_HOMES = ("kernels/families/", "kernels/definition/registry.py")
#: The kernel names, and the fragments code has matched them by (startswith("gemm"),
#: "attention" in name).
NAMES = set(FAMILIES) | {"gemm", "attention", "gelu"}


# --- no branch on a kernel's name outside the families ---------------------------------------

def name_branches(source: str) -> list[int]:
    """The lines of `source` that decide by a kernel's name: a comparison, a membership
    test, a startswith/endswith or a set against a name literal, or a dict display keyed
    by two names or more."""
    def is_name(node: ast.AST) -> bool:
        return isinstance(node, ast.Constant) and node.value in NAMES

    def names_in(node: ast.AST) -> bool:
        if isinstance(node, ast.Tuple | ast.List | ast.Set):
            return any(is_name(e) for e in node.elts)
        return is_name(node)

    lines = set()
    for node in ast.walk(ast.parse(source)):
        hit = False
        if isinstance(node, ast.Compare):
            hit = names_in(node.left) or any(names_in(c) for c in node.comparators)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in ("startswith", "endswith") and node.args:
            hit = names_in(node.args[0])
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id == "frozenset" and node.args:
            hit = names_in(node.args[0])
        elif isinstance(node, ast.Dict):
            hit = sum(1 for k in node.keys if k is not None and is_name(k)) >= 2
        elif isinstance(node, ast.Set):
            hit = names_in(node)
        if hit:
            lines.add(node.lineno)
    return sorted(lines)


def test_the_rule_sees_a_branch_on_a_kernel_name():
    assert name_branches('if spec.name == "gemm_bf16":\n    pass\n') == [1]
    assert name_branches('x = kernel.startswith("gemm")\ny = name in ("gemv", "rope")\n') \
        == [1, 2]
    assert name_branches('T = {"add": 1, "rmsnorm": 2}\nOWN = frozenset({"flash_attention"})\n') \
        == [1, 2]
    assert name_branches('use("attn_norm", "rmsnorm", rows=L)\nif op == "transpose": pass\n') \
        == []


def test_no_package_code_outside_the_families_branches_on_a_kernel_name():
    places = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith(FAMILY_HOMES):
                continue
            places += [f"{rel}:{line}" for line in name_branches(path.read_text())]
    assert places == [], "declare it in the kernel's family (kernels/families/) instead"


# --- every family is whole ----------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_declares_what_the_machinery_asks_of_it(name):
    f = FAMILIES[name]
    assert SPECS[name] is f.spec and f.name == name
    if f.spec.where == "npu":
        assert f.check and f.candidates and f.numerics and f.cost and f.program, name
        assert f.rules, "the checker's rules, one line each, for docs/kernels.md"
        assert f.host is None
    else:
        assert f.host is not None and f.check is None and f.program is None
    if f.cost is not None:
        # every coefficient its cost reads has a calibrated value, and a family with a page
        # of its own is fitted on what that page measured
        assert f.cost.floor(PerfParams()) > 0
        assert all(PerfParams().coefficient(name) > 0 for name, _ in f.cost.coefficients)
        if f.cost.rate_key is not None:
            assert PerfParams().tile_bw(f.cost.rate_key) > 0
        if f.source is not None:
            assert f.cost.fitted_on is not None and f.cost.fitted_on(), name
    if f.data is not None:
        data = load(f.data)
        assert data["source"]["repository"] == "Xilinx/mlir-air"
        assert data["source"]["commit"] and data["source"]["measured"]
        assert all(t["rows"] for t in data["tables"].values())
    if f.source is not None:
        assert f.data is not None and load(f.data)["family"] == name


def test_each_data_file_is_owned_by_one_family():
    owners = [f.data for f in FAMILIES.values() if f.source is not None]
    files = sorted(p.stem for p in DATA_DIR.glob("*.json"))
    # deployments.json (upstream's LLM deployments, kernels.measured.upstream_llm_pages) belongs to
    # no family
    assert sorted(owners) == sorted(set(owners)) \
        == [s for s in files if s not in (*CURATED, "deployments")]


# --- the data agree with the calibration set -------------------------------------------------

def test_the_calibration_set_is_what_the_upstream_pages_measured():
    """The calibration figures (calibration.json, docs/hardware-facts.md) are the ingested pages'
    own: each kernel row is
    its page's best figure; the projections are rows of the GEMM and GEMV tables."""
    cal = load("calibration")
    for row in cal["kernels"]["rows"]:
        best = load(row["kernel"])["index"]["best"]
        assert (best["value"], best["unit"]) == (row["value"], row["unit"]), row["kernel"]
    for out, name in (("bf16_out", "gemm_bf16"), ("fp32_out", "gemm_fp32")):
        for row in cal["gemm_projections"]["rows"]:
            measured = [r["gflops"] for r in measurements.table(name, "shapes")
                        if (r["M"], r["K"], r["N"]) == (row["M"], row["K"], row["N"])
                        and r["tier"] == "high" and r["best"]]
            assert measured == [row[out]], (name, row)
    gemv = {(r["M"], r["K"]): r["gflops"] for r in measurements.table("gemv", "shapes")}
    for row in cal["gemv_projections"]["rows"]:
        assert gemv[row["M"], row["K"]] == row["gflops"]
    # the model's rates: a range gives its middle, in base units
    rates = dict(CALIBRATION.rates)
    assert rates["flash_attention"] == (1065e9 + 1131e9) / 2 == best_rate("flash_attention")
    assert rates["add"] == 57.7e9


# --- reading upstream's pages ----------------------------------------------------------------

def test_the_markdown_reader_takes_upstreams_cells_as_numbers_in_their_units():
    units: dict[str, str] = {}
    rows = read_row(["herd", "tiles", "latency", "bandwidth", "result"],
                    ["2×8 / 1×8", "—", "—", "—", "❌ `herd_y > 4` (only 4 AIE rows)"], units)
    assert [(r["herd_x"], r["herd_y"]) for r in rows] == [(2, 8), (1, 8)]
    assert rows[0]["result"] == "fail" and rows[0]["latency"] is None
    (row,) = read_row(["herd", "tiles", "result"], ["8×4", "32", "❌ does not place (32 tiles)"],
                      {})
    assert row["result_note"] == "does not place (32 tiles)"
    (row,) = read_row(["herd", "tiles", "result"], ["8×1", "8", "✅ **43.4 GB/s** (best)"], {})
    assert (row["result"], row["bandwidth"], row["result_note"]) == ("pass", 43.4, "best")
    (row,) = read_row(["lq×lk", "latency", "GFLOP/s", "causal", "Status"],
                      ["2048×2048", "15.4–16.1 ms", "**1065–1116**", "✓", "✅ llama"], units)
    assert row == {"Lq": 2048, "Lk": 2048, "latency": [15.4, 16.1], "gflops": [1065, 1116],
                   "causal": True, "status": "pass", "note": "llama"}
    assert units == {"latency": "ms", "gflops": "GFLOP/s"}
    (row,) = read_row(["best config (herd_x/herd_y/tile_n)", "bandwidth"],
                      ["8/2/4096", "**27.0 GB/s**"], units)
    assert row == {"herd_x": 8, "herd_y": 2, "tile_n": 4096, "bandwidth": 27.0}


@pytest.mark.skipif(not MIRROR.is_dir(), reason="no clone of Xilinx/mlir-air on this machine")
def test_the_ingest_regenerates_the_committed_data_from_upstream():
    mirror = Mirror(MIRROR, load("gemm_bf16")["source"]["commit"])
    for name, data in ingest(mirror).items():
        assert dumps(data) == (DATA_DIR / f"{name}.json").read_text(), name


def test_the_data_files_are_written_as_the_ingest_writes_them():
    for path in DATA_DIR.glob("*.json"):
        assert dumps(json.loads(path.read_text())) == path.read_text(), path.name


# --- docs/kernels.md ------------------------------------------------------------------------

def cog_check() -> int:
    with contextlib.redirect_stdout(io.StringIO()):
        status: int = Cog().main(["cog", "--check", str(ROOT / "docs" / "kernels.md")])
    return status


def test_docs_kernels_md_is_what_the_registry_and_the_data_render():
    assert cog_check() == 0, "docs/kernels.md is stale: run `make docs`"
    text = (ROOT / "docs" / "kernels.md").read_text()
    for name, f in FAMILIES.items():
        assert f"## {name}\n" in text
        assert all(rule in text for rule in f.rules)


def test_docs_kernels_md_goes_stale_when_a_measured_figure_changes(monkeypatch):
    original = kernels_md.load

    def changed(name: str) -> dict:
        data = original(name)
        if name != "add":
            return data
        data = copy.deepcopy(data)
        data["tables"]["shapes"]["rows"][0]["bandwidth"] = math.pi
        return data

    monkeypatch.setattr(kernels_md, "load", changed)
    assert cog_check() != 0
