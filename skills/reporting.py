"""The performance report of a run, gathered from its log: the deployed recipe's modeled
profiles against the baselines, the gates, the transforms tried, the deployed prefill's
launches on the roofline, and where the deployment's own time went (phase by phase, measured
on this host's CPU). `skills.report` draws it."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from events import PHASE_NAMES
from events.envelope import parse_ts
from kernels.perf import DDR_ROOF, estimate
from kernels.specs import Decode, Prefill

from .report import KernelPoint, PhaseSpan, ReportData, render_report
from .workspace import Workspace


def report_data(ws: Workspace) -> ReportData:
    store, run_id, s = ws.store, ws.run_id, ws.settings
    recipe, args = ws.recipe(), ws.loaded.args
    pre, dec = Prefill(s.seq_len), Decode(s.seq_len)
    pre_plan = recipe.plan(s.model, args, pre, ws.hw)
    pre_deployed = estimate(pre_plan, ws.hw)
    pre_base = estimate(replace(recipe, prefill_transforms=()).plan(s.model, args, pre, ws.hw),
                        ws.hw)
    dec_deployed = estimate(recipe.plan(s.model, args, dec, ws.hw), ws.hw)
    dec_base = estimate(replace(recipe, decode_transforms=()).plan(s.model, args, dec, ws.hw),
                        ws.hw)
    kernels = [KernelPoint(ln.label, ln.kernel, ln.flops, ln.bytes, ln.seconds,
                           pre_deployed.source)
               for step in pre_deployed.steps for ln in step.launches]
    transforms, gates, answers = [], [], []
    events = list(store.events(run_id))
    for e in events:
        p = e.payload
        if e.type == "tool.completed" and p["tool"] == "apply_transform":
            r = p["result"]
            transforms.append({"phase": e.phase, "transform": r["transform"], "kept": r["kept"],
                               "before_s": r["before_s"], "after_s": r.get("after_s"),
                               "reason": r["reason"]})
        elif e.type == "tool.completed" and p["tool"] == "generate":
            answers.append({"prompt": p["result"]["prompt"], "answer": p["result"]["answer"]})
        elif e.type == "gate.evaluated":
            failing = [c for c in p["checks"] if c.get("gating", True) and not c["passed"]]
            worst = failing[0] if failing else _closest(p["checks"])
            gates.append({"phase": e.phase, "gate": p["gate"], "passed": p["passed"],
                          "attempts": e.attempt,
                          "worst": "" if worst is None else
                          f"{worst['subject']}/{worst['metric']} = {worst['value']:.4g} "
                          f"(needs {worst['comparison']} {worst['threshold']:.4g})"})
    return ReportData(
        run_id=run_id, model=s.model, backend="emulator", time_source="modeled",
        peak_flops=ws.hw.peak_flops, ddr_bw=DDR_ROOF,
        prefill={"baseline_s": pre_base.total_s, "deployed_s": pre_deployed.total_s,
                 "tokens": float(s.seq_len)},
        decode={"baseline_s": dec_base.total_s, "deployed_s": dec_deployed.total_s,
                "tokens_per_s": 1.0 / dec_deployed.total_s},
        transforms=transforms, gates=gates, kernels=kernels, phases=phase_spans(events),
        answers=answers)


def _closest(checks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The gating check nearest its threshold (relative margin)."""
    gating = [c for c in checks if c.get("gating", True)]
    if not gating:
        return None
    return min(gating, key=lambda c: abs(c["value"] - c["threshold"])
               / max(abs(c["threshold"]), 1e-12))


def phase_spans(events: list[Any]) -> list[PhaseSpan]:
    """Each phase's span of the run (first entry to last exit), from the log; the current
    phase runs to the newest event."""
    if not events:
        return []
    t0 = parse_ts(events[0].ts)
    spans: dict[int, dict[str, Any]] = {}
    for e in events:
        if e.phase is None:
            continue
        sp = spans.setdefault(e.phase, {"start": parse_ts(e.ts), "end": parse_ts(e.ts),
                                        "agent": 0.0, "backend": 0.0, "attempts": 0,
                                        "outcome": "running"})
        sp["end"] = parse_ts(e.ts)
        sp["attempts"] = max(sp["attempts"], e.attempt or 0)
        if e.type == "phase.exited":
            sp["agent"] += e.payload["agent_s"]
            sp["backend"] += e.payload["backend_s"]
            sp["outcome"] = e.payload["outcome"]
    return [PhaseSpan(k, PHASE_NAMES[k], (sp["start"] - t0).total_seconds(),
                      (sp["end"] - sp["start"]).total_seconds(), sp["agent"], sp["backend"],
                      sp["attempts"], sp["outcome"]) for k, sp in sorted(spans.items())]


def render_to_blobs(ws: Workspace, data: ReportData) -> dict[str, str]:
    """The report's files, rendered and stored as blobs: file name -> blob reference."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = render_report(data, Path(tmp))
        return {p.name: ws.store.put_blob(p.read_bytes()) for p in paths.values()}
