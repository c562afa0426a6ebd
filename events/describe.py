"""One-line, human-readable summaries of events (for listings and the TUI)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .envelope import Event


def _gate(p: dict[str, Any]) -> str:
    checks = p["checks"]
    failed = [c for c in checks if c.get("gating", True) and not c["passed"]]
    verdict = "PASS" if p["passed"] else f"FAIL ({len(failed)} of {len(checks)} checks)"
    return f"{p['gate']}: {verdict}"


_SUMMARIES: dict[str, Callable[[dict[str, Any]], str]] = {
    "run.started": lambda p: f"{p['model']} on {p['backend']}, agent {p['agent']}",
    "run.forked": lambda p: f"from {p['parent_run_id']} at v{p['parent_version']}",
    "run.resumed": lambda p: f"from v{p['from_version']}: {p['reason']}",
    "run.finished": lambda p: f"{p['verdict']}: {p['summary']}",
    "phase.entered": lambda p: p["name"],
    "phase.exited": lambda p: f"{p['outcome']} {p['reason']}".strip(),
    "agent.message": lambda p: f"{p['role']}: {p['text']}",
    "model.called": lambda p: (f"{p['model']} in {p['input_tokens']} out {p['output_tokens']} "
                               f"${p['cost_usd']:.4f} ({p['stop_reason']})"),
    "tool.requested": lambda p: f"{p['tool']} [{p['call_id']}]",
    "tool.completed": lambda p: f"{p['tool']} [{p['call_id']}] {'ok' if p['ok'] else 'failed'}",
    "tool.abandoned": lambda p: f"{p['tool']} [{p['call_id']}]: {p['reason']}",
    "gate.evaluated": _gate,
    "profile.recorded": lambda p: f"{p['scope']} {p['total_s'] * 1e3:.2f} ms ({p['source']})",
    "checkpoint.requested": lambda p: p["summary"],
    "human.decision": lambda p: " ".join(
        str(x) for x in (p["decision"], "OVERRIDING THE FAILED GATE" if p.get("override")
                         else None, p.get("direction_id"), p.get("instruction")) if x),
    "debug.proposed": lambda p: f"{p['symptom']}: {len(p['directions'])} directions",
    "skill.loaded": lambda p: p["skill"],
    "lesson.recorded": lambda p: f"{p['symptom']} -> {p['target_skill']}",
    "lesson.approved": lambda p: f"{p['lesson_id']} by {p['author']} -> {p['applied_to']}",
    "experience.recorded": lambda p: f"{p['topic']}: {p['outcome']}",
    "error": lambda p: f"{p['kind']}: {p['message']}",
}


def describe(event: Event, width: int = 120) -> str:
    summary = _SUMMARIES.get(event.type)
    try:
        text = summary(event.payload) if summary else ""
    except (KeyError, TypeError):
        text = ""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"
