"""What the model reads: the system prompt of a phase (the rules, the orchestrator's and the
phase's skill, the catalog's other skills by name) and the first message of an attempt,
built from what the log says of the phase, or of what the attempt did when a full context
window restarts the conversation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from npu_deploy.events.describe import check_text, failing_checks
from npu_deploy.events.phases import PHASES
from npu_deploy.pipeline.workspace import Workspace
from npu_deploy.skills.catalog import load_catalog

ORCHESTRATOR = "deploy-new-llm"

PHASE_SKILLS = tuple(p.skill for p in PHASES)       # the phase table (events/phases.py)

RULES = """You are deploying a language model onto an AMD XDNA 2 NPU with npu-deploy. You work
one phase at a time through the tools; every call is recorded. When the phase's work is done,
end your turn: the harness then evaluates the phase's gate from what the tools stored. You
cannot pass a gate yourself. Files live in the run's workspace; oracle/ and gates/ are
read-only copies, and the gates read the store, not them. Ask before changing the skill
catalog (ask_approval). Be brief in text; act through tools."""


def system_prompt(phase: int) -> list[dict[str, Any]]:
    """The orchestrator's and the phase's skill and the catalog's other skills by name: the
    same text for every turn of the phase, with the cache mark."""
    catalog = load_catalog()
    own = {ORCHESTRATOR, PHASE_SKILLS[phase]}
    others = "\n".join(f"- {s.name}: {s.description}" for s in
                       sorted(catalog.skills.values(), key=lambda s: s.name)
                       if s.name not in own)
    text = (f"{RULES}\n\n# Skill: {ORCHESTRATOR}\n\n{catalog[ORCHESTRATOR].body}\n\n"
            f"# Skill: {PHASE_SKILLS[phase]}\n\n{catalog[PHASE_SKILLS[phase]].body}\n\n"
            f"# Other skills (load_skill NAME for the text)\n\n{others}\n")
    return [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]


def seed(run: Any, ws: Workspace, root: Path) -> str:
    """The first message of an attempt: what the log says of the phase."""
    state = run.conductor.state
    ph = state.phases[run.phase]
    lines = [f"Run {ws.run_id}: model {ws.settings.model}, prefill length "
             f"{ws.settings.seq_len}, {ws.settings.steps} greedy tokens per gate prompt.",
             f"Phase {run.phase} ({run.name}), attempt {run.attempt}. Workspace: {root}."]
    if ph.last_gate is not None:
        failing = failing_checks(ph.last_gate.checks)
        lines.append(f"The last gate of this phase ({ph.last_gate.gate}) "
                     f"{'passed' if ph.last_gate.passed else 'failed'}" +
                     (": " + "; ".join(check_text(c) for c in failing[:10])
                      if failing else "."))
    if run.instruction:
        # verbatim, and marked as the person's: it outranks the skills' defaults
        lines.append("From the person watching this deployment (their redirect of this "
                     f"phase, verbatim):\n<person>\n{run.instruction}\n</person>")
    if run.debug_direction:
        d = _picked(run)
        lines.append(f"The debug direction a person picked: {run.debug_direction}"
                     + (f" — {d['title']}: {d['rationale']}" if d else "")
                     + (f" (skill {d['skill']}; load it)" if d and d["skill"] not in
                        ("none", "agent") else ""))
    lines.append("Do the phase's work now.")
    return "\n".join(lines)


def _picked(run: Any) -> dict[str, Any] | None:
    found = None
    for e in run.conductor.store.events(run.conductor.run_id, phase=run.phase,
                                        types=("debug.proposed",)):
        for d in e.payload["directions"]:
            if d["direction_id"] == run.debug_direction:
                found = d
    return found


def reseed(run: Any, ws: Workspace, root: Path) -> str:
    """After a full context window: the seed and what this attempt did, from the log."""
    done = []
    for e in run.events("tool.completed"):
        p = e.payload
        text = json.dumps(p["result"], sort_keys=True)
        done.append(f"- {p['tool']} {'ok' if p['ok'] else 'FAILED'}: "
                    f"{text[:400]}{'…' if len(text) > 400 else ''}")
    return (seed(run, ws, root) + "\n\nThe conversation was restarted because the context "
            "window filled. What this attempt has done so far (from the log):\n"
            + "\n".join(done[-60:]))
