"""The performance report of a run, gathered from its log: the deployed recipe's profiles
(modeled on the emulator, measured again on the NPU on the xrt backend) against the
baselines, the gates, the transforms tried, the deployed prefill's
launches on the roofline, and where the deployment's own time went (phase by phase, measured
on this host's CPU). `pipeline.report.render` draws it."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

from npu_deploy.events import PHASE_NAMES, fold
from npu_deploy.events.describe import check_text, evidence_text, failing_checks
from npu_deploy.events.envelope import parse_ts
from npu_deploy.kernels.measured.figures import measured_figure
from npu_deploy.kernels.performance.model import DDR_ROOF, estimate
from npu_deploy.pipeline.report.render import KernelPoint, PhaseSpan, ReportData, render_report
from npu_deploy.pipeline.toolbox import stored_bf16
from npu_deploy.pipeline.workspace import Workspace


def report_plans(ws: Workspace) -> dict[str, tuple[Any, Any]]:
    """The four plans a report times: the deployed prefill and decode, and each without
    its mode's transforms (the baselines), as (mode, recipe)."""
    recipe, s = ws.recipe(), ws.settings
    pre, dec = s.prefill, s.decode
    return {"prefill_deployed": (pre, recipe),
            "prefill_baseline": (pre, replace(recipe, prefill_transforms=())),
            "decode_deployed": (dec, recipe),
            "decode_baseline": (dec, replace(recipe, decode_transforms=()))}


def report_data(ws: Workspace, measured: dict[str, float] | None = None) -> ReportData:
    """The report's figures. On the emulator the NPU times are modeled here; on the NPU
    they are `measured`: the totals of profiles recorded in the log (keys of
    `report_plans`), so that every figure has a recorded profile behind it."""
    store, run_id, s = ws.store, ws.run_id, ws.settings
    recipe, args = ws.recipe(), ws.loaded.args
    pre = s.prefill
    pre_plan = recipe.plan(s.model, args, pre, ws.hw)
    if s.measured:
        if measured is None:
            raise ValueError("a report of a run on the NPU takes its times from recorded "
                             "profiles (toolbox.profile of each of report_plans)")
        times, source = measured, "measured-npu"
    else:
        times = {key: estimate(r.plan(s.model, args, mode, ws.hw), ws.hw).total_s
                 for key, (mode, r) in report_plans(ws).items()}
        source = "modeled"
    # The roofline's points are launches: a measured dispatch may hold several, so the
    # points stay modeled (and say so) on the NPU too.
    per_launch = estimate(pre_plan, ws.hw)
    pre_deployed, pre_base = times["prefill_deployed"], times["prefill_baseline"]
    dec_deployed, dec_base = times["decode_deployed"], times["decode_baseline"]
    planned = {ln.label: ln for d in pre_plan.dispatches for ln in d.launches}
    kernels = []
    for step in per_launch.steps:
        for ln in step.launches:
            # upstream's standalone NPU2 time at this launch's shape, where it measured one
            it = planned.get(ln.label)
            upstream = None if it is None else measured_figure(it.spec, it.shape_dict)
            kernels.append(KernelPoint(
                ln.label, ln.kernel, ln.flops, ln.bytes, ln.seconds, per_launch.source,
                None if upstream is None else upstream.seconds,
                None if upstream is None else upstream.source))
    transforms, gates, answers = [], [], []
    events = list(store.events(run_id))
    retries = retry_rows(events)
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
            failing = failing_checks(p["checks"])
            worst = failing[0] if failing else _closest(p["checks"])
            gates.append({"phase": e.phase, "gate": p["gate"], "passed": p["passed"],
                          "attempts": e.attempt,
                          "worst": "" if worst is None else check_text(worst)})
    return ReportData(
        run_id=run_id, model=s.model, backend=s.backend, time_source=source,
        peak_flops=ws.hw.peak_flops, ddr_bw=DDR_ROOF,
        prefill={"baseline_s": pre_base, "deployed_s": pre_deployed,
                 "tokens": float(s.seq_len)},
        decode={"baseline_s": dec_base, "deployed_s": dec_deployed,
                "tokens_per_s": 1.0 / dec_deployed},
        transforms=transforms, gates=gates, kernels=kernels, phases=phase_spans(events),
        answers=answers, retries=retries, agreement=agreement_rows(ws, events))


def agreement_rows(ws: Workspace, events: list[Any]) -> list[dict[str, object]]:
    """Per canonical prompt, the newest phase 3-6 gate's greedy agreement with the oracle
    beside the bf16 reference's (None where the run recorded none)."""
    gate = next((e.payload for e in reversed(events) if e.type == "gate.evaluated"
                 and e.phase in (3, 4, 5, 6)), None)
    if gate is None:
        return []
    bf16 = stored_bf16(ws) or {}
    return [{"prompt": c["subject"], "deployed": int(c["value"]),
             "bf16": bf16[c["subject"]].agreed if c["subject"] in bf16 else None,
             "steps": int(c["threshold"])}
            for c in gate["checks"] if c["metric"] == "greedy_tokens_agreed"]


def retry_rows(events: list[Any]) -> list[dict[str, Any]]:
    """Each failed gate's proposal: its evidence, the direction picked, and what the retry
    changed (or that it stopped for a person)."""
    rows: dict[tuple[int | None, int | None], dict[str, Any]] = {}
    for e in events:
        p = e.payload
        if e.type == "debug.proposed":
            rows[(e.phase, e.attempt)] = {
                "phase": e.phase, "attempt": e.attempt,
                "evidence": "; ".join(evidence_text(m) for m in p.get("evidence", ())),
                "directions": {d["direction_id"]: d for d in p["directions"]}, "next": ""}
        elif e.type == "human.decision" and p["decision"] == "pick" \
                and (e.phase, e.attempt) in rows:
            row = rows[(e.phase, e.attempt)]
            d = row["directions"].get(p["direction_id"], {})
            change = d.get("change")
            row["next"] = (f"{p['direction_id']}: " +
                           (change["text"] if change else "no change named"))
        elif e.type == "phase.exited" and p["outcome"] == "needs_human" \
                and (e.phase, e.attempt) in rows and not rows[(e.phase, e.attempt)]["next"]:
            rows[(e.phase, e.attempt)]["next"] = "stopped for a person"
    return [{k: v for k, v in r.items() if k != "directions"} for r in rows.values()]


def _closest(checks: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The gating check nearest its threshold (relative margin)."""
    gating = [c for c in checks if c.get("gating", True)]
    if not gating:
        return None
    return min(gating, key=lambda c: abs(c["value"] - c["threshold"])
               / max(abs(c["threshold"]), 1e-12))


def phase_spans(events: list[Any]) -> list[PhaseSpan]:
    """Each phase's span of the run (first entry to last exit), from the log; the current
    phase runs to the newest event. Where its time went is the fold's (events/state.py)."""
    if not events:
        return []
    folded = fold(events).phases
    t0 = parse_ts(events[0].ts)
    spans: dict[int, dict[str, Any]] = {}
    for e in events:
        if e.phase is None:
            continue
        sp = spans.setdefault(e.phase, {"start": parse_ts(e.ts), "end": parse_ts(e.ts),
                                        "attempts": 0, "outcome": "running"})
        sp["end"] = parse_ts(e.ts)
        sp["attempts"] = max(sp["attempts"], e.attempt or 0)
        if e.type == "phase.exited":
            sp["outcome"] = e.payload["outcome"]
    return [PhaseSpan(k, PHASE_NAMES[k], (sp["start"] - t0).total_seconds(),
                      (sp["end"] - sp["start"]).total_seconds(), folded[k].agent_time_s,
                      folded[k].backend_time_s, sp["attempts"], sp["outcome"],
                      waiting_s=folded[k].waiting_time_s, paused_s=folded[k].paused_time_s)
            for k, sp in sorted(spans.items())]


def render_to_blobs(ws: Workspace, data: ReportData) -> dict[str, str]:
    """The report's files, rendered and stored as blobs: file name -> blob reference."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = render_report(data, Path(tmp))
        return {p.name: ws.store.put_blob(p.read_bytes()) for p in paths.values()}
