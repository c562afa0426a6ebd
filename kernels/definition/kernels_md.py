"""The kernel registry for people: the markdown of docs/kernels.md, generated from the families
(`kernels.definition.registry`) and their measured data (`kernels/data/*.json`), as upstream's
registry generates its tables from its JSON. `make docs` writes it (cog); a test fails when the
committed file differs from what this renders."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from ..measured.measurements import load
from .family import KernelFamily, KernelSpec, Numerics, Operand
from .registry import FAMILIES

_DTYPE = {1: "i8", 2: "bf16", 4: "fp32"}


def markdown() -> str:
    """The whole generated part of docs/kernels.md."""
    parts = [_index(), *(_family(f) for f in FAMILIES.values()), _calibration()]
    return "\n".join(parts)


# --- the index -------------------------------------------------------------------------------

def _index() -> str:
    rows = [["kernel", "runs on", "computes", "best measured (upstream's index)"]]
    for f in FAMILIES.values():
        best = _best(f)
        rows.append([f"[`{f.name}`](#{f.name})", f.spec.where.upper(), f.spec.summary, best])
    return _table(rows) + "\n"


def _best(f: KernelFamily) -> str:
    if f.data is None:
        return "—"
    best = load(f.data)["index"]["best"]
    shared = "" if f.source is not None else f" (of `{f.data}`)"
    return f"{_value(best['value'])} {best['unit']}{shared}"


# --- one family ----------------------------------------------------------------------------

def _family(f: KernelFamily) -> str:
    spec = f.spec
    out = [f"## {f.name}", "", f"{spec.summary}.", ""]
    facts = [["", ""],
             ["runs on", "the NPU" if spec.where == "npu" else "the host (CPU)"],
             ["dims", ", ".join(spec.dims)],
             ["operands", "; ".join(_operand(o, names) for o, names in _operands(spec))]]
    if spec.tunables:
        facts.append(["tunables (defaults)",
                      ", ".join(f"{k}={v}" for k, v in spec.tunables.items())])
    if f.numerics is not None:
        facts.append(["Phase-1 atol", _atol(f.numerics) + " (rtol 1.6e-2)"])
    if f.cost is not None:
        rate = f" (per-tile rate `{f.cost.rate_key}`)" if f.cost.rate_key else ""
        fitted = ", ".join(f"`{name}`" for name, _ in f.cost.coefficients)
        facts.append(["cost of a launch", _doc(f.cost.work) + rate
                      + (f"; fitted: {fitted}" if fitted else "")
                      + f"; in a deployment, the {f.cost.in_elf} derate"])
    if f.host is not None:
        facts.append(["cost on the host", _doc(f.host.seconds)])
    facts.append(["MLIR-AIR program", "yes" if f.program is not None else "none"])
    notes = _plan_notes(f)
    if notes:
        facts.append(["in a plan", "; ".join(notes)])
    out += [_table(facts), ""]
    if f.rules:
        out += ["Checker rules:", "", *(f"- {rule}" for rule in f.rules), ""]
    out += _measured(f)
    return "\n".join(out)


def _atol(n: Numerics) -> str:
    """'0.136', or '0.136; method direct: 0.362' for a family whose tiers differ."""
    text = f"{n.atol:.3g}"
    if n.atol_by is not None:
        key, atols = n.atol_by
        text += "".join(f"; {key} {value}: {atol:.3g}" for value, atol in atols.items())
    return text


def _plan_notes(f: KernelFamily) -> list[str]:
    notes = []
    if f.own_elf:
        notes.append("runs alone in its dispatch (its own ELF)")
    if f.program_layout is not None:
        notes.append("compiled for one operand layout: align_layouts follows it")
    if f.layout_follows_output:
        notes.append("works in its output's layout")
    if f.host_alternative:
        notes.append(f"can run on the host as `{f.host_alternative}`")
    if f.head_first_alone:
        notes.append(f"alone, {', '.join(f.head_first_alone)} are head-first")
    if f.transposed_weight:
        notes.append(f"reads its weight `{f.transposed_weight}` as W^T [K, N]")
    for dim, key in f.runtime_dims:
        notes.append(f"built for config `{key}` (one program up to it), {dim} read at run "
                     "time")
    return notes


def _doc(fn: Any) -> str:
    return " ".join((fn.__doc__ or "").split())


class _Symbolic(dict):
    """A shape whose every dim is a distinct prime times 2^13: operand dims map back to dim
    names, and a dim that is one of them divided by a power of two (a block count) to that."""

    def __missing__(self, key: str) -> int:
        self[key] = _PRIMES[len(self)] << 13
        return self[key]


_PRIMES = [1009, 1013, 1019, 1021, 1031, 1033, 1039, 1049, 1051, 1061]


def _operands(spec: KernelSpec) -> Iterator[tuple[Operand, list[str]]]:
    shape = _Symbolic()
    for d in spec.dims:
        _ = shape[d]                                  # the dims first, in order
    ops = spec.operands(shape)
    for o in ops:
        yield o, [_dim_name(d, shape) for d in o.dims]


def _dim_name(d: int, shape: dict[str, int]) -> str:
    """A dim as the shape's name for it, or a multiple of that name over a power of two (a
    block count, a packed row: M/32, 67K/128), or the number."""
    for name, v in shape.items():
        n = next((n for n in range(14) if d and (d << n) % v == 0), None)
        if n is not None and (d << n) // v <= 1024:
            a = (d << n) // v
            return f"{a if a > 1 else ''}{name}{f'/{1 << n}' if n else ''}"
    return str(d)


def _operand(o: Operand, dims: list[str]) -> str:
    return f"{o.name} [{', '.join(dims)}] {_DTYPE[o.elem_bytes]} {o.role}"


# --- measured rows ---------------------------------------------------------------------------

def _measured(f: KernelFamily) -> list[str]:
    if f.data is None:
        return ["Measured: nothing of its own (no upstream page measures it).", ""]
    data = load(f.data)
    src = data["source"]
    if f.source is None:
        return [f"Measured: no page of its own; its figures are those of "
                f"[`{f.data}`](#{f.data}).", ""]
    out = [f"Measured on {src['measured']}, from {src['repository']} "
           f"`{src['path']}` at {src['commit'][:12]} ({src['commit_date']}); best in the "
           f"registry's index: {_value(data['index']['best']['value'])} "
           f"{data['index']['best']['unit']} ({data['index']['best']['where']}).", ""]
    tol = data.get("tolerance")
    if tol:
        out += [f"Upstream's tolerance: rtol {tol['rtol']:g}, atol {tol['atol']:g} "
                f"({tol['dtype']} out).", ""]
    for name, table in data["tables"].items():
        out += [f"*{name}*: {table['what']}.", "", _rows(table), ""]
    return out


def _rows(table: dict[str, Any]) -> str:
    rows: list[dict[str, Any]] = table["rows"]
    units: dict[str, str] = table.get("units", {})
    columns = list(dict.fromkeys(itertools.chain.from_iterable(rows)))
    header = [f"{c} ({units[c]})" if c in units else c for c in columns]
    return _table([header, *([_value(r.get(c)) for c in columns] for r in rows)])


def _value(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "✓" if v else "✗"
    if isinstance(v, list):
        return "–".join(_value(x) for x in v)
    if isinstance(v, float):
        return f"{v:g}"
    return str(v).replace("|", "\\|")


# --- the calibration set ---------------------------------------------------------------------

def _calibration() -> str:
    data = load("calibration")
    src = data["source"]
    out = ["## The performance model's calibration set", "",
           f"{data['about']} Source: {src['document']}, measured on {src['measured']} "
           f"({src['repository']} `{src['kernels_from']}`; the deployment from "
           f"`{src['deployment_from']}`).", ""]
    for name in ("kernels", "gemm_projections", "gemv_projections"):
        table = data[name]
        out += [f"*{name}*: {table['what']}.", "", _rows(table), ""]
    dep = data["deployment"]
    out += [f"*deployment*: {dep['what']}: TTFT {dep['ttft_s']} s, decode {dep['decode_ms']} "
            f"ms/token; IRON baseline {dep['iron_prefill_s']} s and {dep['iron_decode_ms']} "
            "ms/token.", ""]
    for name in ("prefill_dispatches", "decode_dispatches"):
        out += [f"*{name}* ({dep[name]['what']}):", "", _rows(dep[name]), ""]
    sweeps = data["kernel_sweeps"]
    out += [f"*kernel_sweeps*: {sweeps['what']}", "",
            _table([["kernel", "shape", "configuration", "measured", "from"]]
                   + [[r["kernel"], _pairs(r["shape"]), _pairs(r["config"]),
                       f"{_value(r['value'])} {r['unit']}",
                       f"{r['source'].rsplit('/', 1)[-1]}: {r['where']}"
                       + (f" ({r['derived']})" if "derived" in r else "")]
                      for r in sweeps["rows"]]), ""]
    configs = data["deployment_configs"]
    out += [f"*deployment_configs*: {configs['what']}.", "",
            _table([["mode", "kernel", "shape", "configuration"]]
                   + [[mode, k, "any", _pairs(v)]
                      for mode, kernels in configs["by_kernel"].items()
                      for k, v in kernels.items()]
                   + [["both", r["kernel"], _pairs(r["shape"]), _pairs(r["config"])]
                      for r in configs["by_shape"]]), ""]
    out += [f"Assumed: {data['assumed']['why']}.", ""]
    return "\n".join(out)


def _pairs(d: dict[str, Any]) -> str:
    return " ".join(f"{k}={_value(v)}" for k, v in d.items())


def _table(rows: list[list[str]]) -> str:
    head, *body = rows
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in body]
    return "\n".join(lines)
