"""The measured figures the kernel families are built on: `kernels/data/<name>.json`, each with
its provenance, and how they are read from upstream.

Two kinds of file. A family's file (`gemm_bf16.json`, `gelu.json`, ...) holds the tables of
one page of Xilinx/mlir-air's kernel registry (programming_examples/kernel_registry/details/),
as the page publishes them (its names, its units), with the repository, path and commit they
were ingested from, the month the page says they were measured, the page's tolerances and
the best figure its index (supported_kernels.md) lists. `python -m
npu_deploy.kernels.measured.ingest MIRROR` regenerates them from a clone of the repository; the
files are committed, since the clone is not there at run time. `calibration.json` holds the
figures of docs/hardware-facts.md the performance model is calibrated on
(kernels.performance.model).

A family declares its upstream page as a `Source`: the page's path and how to read it
(`markdown_tables` for the registry's markdown pages, `registry_json` for its
machine-readable JSON). Both readers know the registry's column vocabulary (`latency`,
`bandwidth`, `best config (herd_x/herd_y/tile_n)`, ...) and turn each cell into numbers
in the unit the page uses.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
UPSTREAM = "Xilinx/mlir-air"
REGISTRY = "programming_examples/kernel_registry"

Row = dict[str, Any]

#: The data files written by hand from upstream's prose or source (each row cites its file),
#: not ingested from a registry page: the calibration figures, the GEMM failures and the
#: micro-kernels' C signatures (kernels.measured.upstream_kernels).
CURATED = ("calibration", "gemm_failures", "upstream_kernels")


@functools.cache
def load(name: str) -> dict[str, Any]:
    """The data file kernels/data/<name>.json."""
    path = DATA_DIR / f"{name}.json"
    if not path.is_file():
        raise FileNotFoundError(f"no measured data {path}; regenerate it with "
                                "`python -m npu_deploy.kernels.measured.ingest MIRROR`")
    data: dict[str, Any] = json.loads(path.read_text())
    return data


def scaled(value: float | int | str, scale: str) -> float:
    """`value` times the power of ten `scale` ("1e9"), rounded once: the same float as the
    literal `{value}e9` would be (57.7 GB/s -> 57.7e9 exactly as written)."""
    return float(Decimal(str(value)) * Decimal(scale))


#: Units of the figures the tables carry, to base units (FLOP/s, bytes/s, seconds).
TO_BASE = {"GFLOP/s": "1e9", "GB/s": "1e9", "us": "1e-6", "ms": "1e-3", "s": "1"}


def best_rate(name: str) -> float:
    """The best throughput upstream's index lists for the page of `name`, in base units
    (bytes/s or FLOP/s). A range (FlashAttention's 1065-1131) gives its middle."""
    best = load(name)["index"]["best"]
    value = best["value"]
    if isinstance(value, list):
        return sum(scaled(v, TO_BASE[best["unit"]]) for v in value) / len(value)
    return scaled(value, TO_BASE[best["unit"]])


def table(name: str, table_name: str) -> list[Row]:
    """The rows of one table of a data file."""
    rows: list[Row] = load(name)["tables"][table_name]["rows"]
    return rows


def rows_at(name: str, table_name: str, row_key: Callable[[Row], tuple[Any, ...]],
            shape_key: Callable[[dict[str, int]], tuple[Any, ...]]
            ) -> Callable[[dict[str, int]], Row | None]:
    """A family's `measured` lookup: the row of table `table_name` of data file `name` whose
    `row_key` equals the shape's `shape_key` (the first, where several match)."""
    @functools.cache
    def index() -> dict[tuple[Any, ...], Row]:
        found: dict[tuple[Any, ...], Row] = {}
        for row in table(name, table_name):
            try:
                found.setdefault(row_key(row), row)
            except (KeyError, TypeError):
                continue
        return found
    return lambda shape: index().get(shape_key(shape))


def measured_seconds(name: str, row: Row, flops: float) -> float | None:
    """One launch's measured time in a row of data file `name`: its latency (a range gives
    its middle) or, for a GEMM row, its FLOPs over its GFLOP/s."""
    units = {}
    for t in load(name)["tables"].values():
        units.update(t["units"])
    for field, scale in (("latency", None), ("gflops", "GFLOP/s")):
        value = row.get(field)
        if value is None:
            continue
        mid = sum(value) / len(value) if isinstance(value, list) else value
        if field == "latency":
            return scaled(mid, TO_BASE[units.get("latency", "us")])
        return flops / scaled(mid, TO_BASE[str(scale)])
    return None


def provenance(name: str) -> str:
    """Where data file `name`'s figures come from, in one line."""
    src = load(name)["source"]
    where = src.get("path", src.get("document", ""))
    return (f"{src['repository']} {where} @ {str(src['commit'])[:12]} "
            f"({src['measured']})")


# --- where the figures come from ------------------------------------------------------------

@dataclass(frozen=True)
class TableSource:
    """One table of an upstream page: our name for it, the section (## heading) it sits
    under, its first header cell (a section may hold several tables), and what it measured."""

    name: str
    section: str
    first_header: str
    what: str


@dataclass(frozen=True)
class Source:
    """An upstream page of the kernel registry and how to read it: `extract(text)` gives
    the page's tables (`{name: {"what", "section", "units", "rows"}}`), its tolerance and
    when it was measured."""

    path: str                       # under programming_examples/kernel_registry/
    extract: Callable[[str], dict[str, Any]]


# --- reading cells ------------------------------------------------------------------------

_STATUS = {"✅": "pass", "⚠️": "caveat", "❌": "fail"}
_TIMES = {"µs": "us", "us": "us", "ms": "ms", "s": "s"}


def clean(cell: str) -> str:
    """A cell without markdown emphasis or code marks."""
    return cell.replace("**", "").replace("`", "").strip()


def number(text: str) -> int | float | list[int | float] | None:
    """'25.5' -> 25.5, '8' -> 8, '1065–1116' -> [1065, 1116], '—' -> None."""
    text = clean(text)
    if text in ("", "—", "-"):
        return None
    if "–" in text:
        return [_scalar(part) for part in text.split("–")]
    return _scalar(text)


def _scalar(text: str) -> int | float:
    text = text.strip().replace(",", "")
    return int(text) if re.fullmatch(r"-?\d+", text) else float(text)


def quantity(text: str) -> tuple[int | float | list[int | float] | None, str | None]:
    """'330 µs' -> (330, 'us'), '15.4–16.1 ms' -> ([15.4, 16.1], 'ms'), '24.1 GB/s' ->
    (24.1, 'GB/s'), '—' -> (None, None)."""
    text = clean(text)
    m = re.fullmatch(r"([\d.,–e+-]+)\s*(µs|us|ms|s|GB/s|GFLOP/s|GFLOPS)", text)
    if not m:
        try:
            return number(text), None
        except ValueError:          # not a figure: '❌ BD-exhausted'
            return None, None
    unit = _TIMES.get(m.group(2), "GFLOP/s" if m.group(2) == "GFLOPS" else m.group(2))
    return number(m.group(1)), unit


def status(text: str) -> tuple[str | None, str]:
    """'✅ Qwen3 prefill' -> ('pass', 'Qwen3 prefill')."""
    text = clean(text)
    for mark, word in _STATUS.items():
        if text.startswith(mark):
            return word, text[len(mark):].strip()
    return None, text


def sizes(text: str) -> list[int]:
    """'2048×8192×2048' or '8/2/4096' -> [2048, 8192, 2048] / [8, 2, 4096]."""
    return [int(p) for p in re.split(r"[×x/]", clean(text))]


# --- the registry's column vocabulary -------------------------------------------------------

#: Headers whose cells hold several numbers, and the fields they give.
_SPLIT = {"(M, K)": ("M", "K"), "(M, N)": ("M", "N"), "(M, K, N)": ("M", "K", "N"),
          "(M×K×N)": ("M", "K", "N"), "lq×lk": ("Lq", "Lk"), "dk/dv": ("dk", "dv"),
          "heads q/kv": ("heads", "kv_heads"), "herd": ("herd_x", "herd_y")}
#: Other header names, ours.
_RENAME = {"hx": "herd_x", "hy": "herd_y", "mean_rel_L1": "mean_rel_L1",
           "rel_err max": "rel_err_max", "abs_err max": "abs_err_max", "Used by": "used_by",
           "inner iters": "inner_iters", "(as 2-D)": "as_2d", "note": "note",
           "causal": "causal"}
#: Measured columns: the field, and the unit its cells carry (or the page's unit).
_MEASURED = {"latency": "latency", "best latency": "latency", "bandwidth": "bandwidth",
             "GFLOPS": "gflops", "GFLOP/s": "gflops", "GFLOP/s (2048 causal)": "gflops"}


def _field(header: str) -> str:
    return _RENAME.get(header, re.sub(r"\W+", "_", header).strip("_"))


def read_row(headers: list[str], cells: list[str], units: dict[str, str]) -> list[Row]:
    """One table row as records (a herd cell listing two herds, '2×8 / 1×8', gives one
    record each). `units` collects the unit of each measured field."""
    row: Row = {}
    alternatives: list[list[int]] = []
    for header, cell in zip(headers, cells, strict=True):
        text = clean(cell)
        configs = re.fullmatch(r"(.*?)\s*\(([\w/]+)\)", header)
        if header in _SPLIT:
            names = _SPLIT[header]
            if header == "herd" and " / " in text:       # '2×8 / 1×8': two herds
                alternatives = [sizes(t) for t in text.split(" / ")]
                continue
            values = sizes(text) if text not in ("", "—") else []
            row.update(zip(names, values, strict=True))
        elif header in _MEASURED:
            value, unit = quantity(text)
            name = _MEASURED[header]
            if value is None and unit is None and text not in ("", "—"):
                # a failed configuration: '❌ BD-exhausted'
                row["result"], row["note"] = status(text)
                continue
            row[name] = value
            if unit is not None or name == "gflops":
                units[name] = unit or "GFLOP/s"
        elif header == "Status":
            row["status"], note = status(text)
            if note:
                row["note"] = note
        elif header == "result":
            row["result"], rest = status(text)
            value, unit = quantity(rest.split(" ")[0] + " " + rest.split(" ")[1]) \
                if re.match(r"[\d.]+ GB/s", rest) else (None, None)
            if value is not None and unit is not None:
                row.setdefault("bandwidth", value)
                units["bandwidth"] = unit
                rest = rest.split("GB/s", 1)[1].strip()
            if rest.startswith("(") and rest.endswith(")"):
                rest = rest[1:-1]
            if rest:
                row["result_note"] = rest
        elif header == "causal":
            row["causal"] = text == "✓"
        elif header.startswith("speedup"):
            row["speedup"] = number(text.rstrip("×"))
        elif configs and "/" in configs.group(2):
            # 'best config (herd_x/herd_y/tile_n)' or 'tile (herd_m/tile_m/m_input)'
            names = tuple(_RENAME.get(n, n) for n in configs.group(2).split("/"))
            row.update(zip(names, sizes(text), strict=True))
        elif header in ("Used by", "note", "(as 2-D)"):
            row[_field(header)] = None if text in ("", "—") else text
        else:
            try:
                row[_field(header)] = number(text)
            except ValueError:
                row[_field(header)] = text
    if alternatives:
        return [{**row, "herd_x": x, "herd_y": y} for x, y in alternatives]
    return [row]


# --- markdown pages -----------------------------------------------------------------------

def _tables(text: str) -> list[tuple[str, list[str], list[list[str]]]]:
    """Every pipe table of a markdown page: (the ## section it is in, header cells, rows)."""
    out: list[tuple[str, list[str], list[list[str]]]] = []
    section, lines = "", text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("## "):
            section = line[3:].strip()
        if line.startswith("|") and i + 1 < len(lines) and re.match(r"\|[-| :]+\|$",
                                                                   lines[i + 1].strip()):
            header = _cells(line)
            rows = []
            i += 2
            while i < len(lines) and lines[i].startswith("|"):
                rows.append(_cells(lines[i]))
                i += 1
            out.append((section, header, rows))
            continue
        i += 1
    return out


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def measured_when(text: str) -> str:
    """'real NPU2 (RyzenAI-npu4), June 2026' from the page's scope note."""
    m = re.search(r"[Mm]easured on (real NPU2[^,]*), ([A-Z][a-z]+ \d{4})", text)
    if not m:
        raise ValueError("the page does not say when it was measured")
    return f"{m.group(1)}, {m.group(2)}"


def tolerance(text: str) -> dict[str, Any]:
    """The page's element-wise tolerance: its `| Output dtype | rtol | atol |` table."""
    for _, header, rows in _tables(text):
        if header[:1] == ["Output dtype"]:
            dtype, rtol, atol = (clean(c) for c in rows[0][:3])
            return {"dtype": dtype, "rtol": float(rtol), "atol": float(atol)}
    raise ValueError("the page has no tolerance table")


def markdown_tables(*wanted: TableSource) -> Callable[[str], dict[str, Any]]:
    """A reader of a registry detail page that takes the `wanted` tables."""
    def extract(text: str) -> dict[str, Any]:
        found = _tables(text)
        tables: dict[str, Any] = {}
        for want in wanted:
            match = [(h, rows) for section, h, rows in found
                     if section == want.section and h[0] == want.first_header]
            if len(match) != 1:
                raise ValueError(f"{len(match)} tables in section {want.section!r} start "
                                 f"with {want.first_header!r}, expected one")
            header, rows = match[0]
            units: dict[str, str] = {}
            records = [r for cells in rows for r in read_row(header, cells, units)]
            tables[want.name] = {"what": want.what, "section": want.section,
                                 "units": units, "rows": records}
        return {"measured": measured_when(text), "tolerance": tolerance(text),
                "tables": tables}
    return extract


def registry_json(what: str) -> Callable[[str], dict[str, Any]]:
    """A reader of the registry's machine-readable JSON (the GEMM pages): one record per
    shape and method, with its tile, herd ([herd_m, herd_n], upstream's order), GFLOP/s,
    mean_rel_L1, precision tier and whether it is the shape's best method of its tier."""
    def extract(text: str) -> dict[str, Any]:
        page = json.loads(text)
        rows = []
        for shape in page["shapes"]:
            best = shape.get("best", {})
            for method, m in shape["methods"].items():
                herd_m, herd_n = m.get("herd", page["herd"])
                rows.append({"M": shape["M"], "K": shape["K"], "N": shape["N"],
                             "method": method, **m["tile"], "herd_m": herd_m,
                             "herd_n": herd_n, "gflops": m["gflops"],
                             "mean_rel_L1": m["mean_rel_L1"], "tier": m["tier"],
                             "best": best.get(m["tier"]) == method,
                             "used_by": shape["used_by"]})
        month = page["measured"]
        return {"measured": f"real NPU2, {month}", "tolerance": None,
                "tables": {"shapes": {"what": what, "section": "shapes",
                                      "units": {"gflops": "GFLOP/s"}, "rows": rows}}}
    return extract


def index_best(index_text: str, page: str) -> dict[str, Any]:
    """The best measured figure supported_kernels.md lists for the detail page `page`:
    '**24.9 GB/s** (memory-bound, 2048×3072, herd 8)' -> value, unit, where."""
    for _, header, rows in _tables(index_text):
        if header[:2] != ["Kernel", "Detail"]:
            continue
        for cells in rows:
            if f"({page})" in cells[1]:
                m = re.fullmatch(r"\*\*(.+?)\*\*\s*\((.*)\)", cells[2].strip())
                if not m:
                    raise ValueError(f"cannot read the best figure {cells[2]!r}")
                value, unit = quantity(m.group(1))
                return {"kernel": clean(cells[0]), "value": value, "unit": unit,
                        "where": m.group(2)}
    raise ValueError(f"supported_kernels.md lists no row for {page}")
