"""What deployments learn: the lessons of a run.

Phase 6 reads its run's log: each failed gate followed by a debug pick and a passing retry is
a lesson (symptom, root cause, fix, target skill, the events it rests on). A lesson whose
failure no trigger of the target skill caught proposes a new trigger; it stays a draft until a
person approves it (`approve_lesson`), which writes the trigger to the user's skill overlay
and records `lesson.approved`. `lessons_markdown` renders them as lessons.md.
"""


from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from npu_deploy.events import NewEvent
from npu_deploy.events.describe import failing_checks
from npu_deploy.events.payloads import LessonApproved
from npu_deploy.skills.catalog import load_catalog
from npu_deploy.store import EventStore, RunWriter


def harvest_lessons(store: EventStore, run_id: str) -> list[dict[str, Any]]:
    """lesson.recorded payloads for each debug pick of the run that led to a passing gate."""
    catalog = load_catalog()
    events = list(store.events(run_id))
    lessons: list[dict[str, Any]] = []
    for i, e in enumerate(events):
        if e.type != "debug.proposed":
            continue
        pick = next((d for d in events[i + 1:] if d.type == "human.decision"
                     and d.phase == e.phase and d.payload["decision"] == "pick"), None)
        if pick is None:
            continue
        passed = next((g for g in events[i + 1:] if g.type == "gate.evaluated"
                       and g.phase == e.phase and g.payload["passed"]), None)
        if passed is None:
            continue
        chosen = next((d for d in e.payload["directions"]
                       if d["direction_id"] == pick.payload["direction_id"]), None)
        skill = chosen["skill"] if chosen else "none"
        gate = next(g for g in reversed(events[:i]) if g.type == "gate.evaluated")
        failing = failing_checks(gate.payload["checks"])
        lesson: dict[str, Any] = {
            "lesson_id": f"{run_id[:8]}-p{e.phase}-{len(lessons) + 1}",
            "symptom": e.payload["symptom"],
            "root_cause": (chosen or {}).get("title", "not identified by a skill"),
            "fix": f"retry of phase {e.phase} following {skill}: gate passed at attempt "
                   f"{passed.attempt}",
            "target_skill": skill,
            "event_refs": [gate.event_id, e.event_id, pick.event_id, passed.event_id],
            "draft": True, "proposes": None}
        if skill in catalog.skills and chosen is not None and chosen["score"] < 0.5 and failing:
            c = failing[0]
            lesson["proposes"] = {"kind": "trigger", "skill": skill, "trigger": {
                "id": f"learned-{re.sub(r'[^a-z0-9]+', '-', c['metric'].lower())}",
                "kind": "gate_metric", "metric": c["metric"],
                ("below" if c["comparison"] in (">=", ">") else "above"): c["threshold"],
                "weight": 0.5}}
        lessons.append(lesson)
    return lessons


def lessons_markdown(lessons: list[dict[str, Any]]) -> str:
    lines = ["# Lessons", ""]
    if not lessons:
        lines.append("No gate failed and was fixed in this run: nothing to learn.")
    for x in lessons:
        lines += [f"## {x['lesson_id']} ({'draft' if x['draft'] else 'approved'})", "",
                  f"- symptom: {x['symptom']}", f"- root cause: {x['root_cause']}",
                  f"- fix: {x['fix']}", f"- skill: {x['target_skill']}",
                  f"- events: {', '.join(r[:13] for r in x['event_refs'])}"]
        if x.get("proposes"):
            lines.append(f"- proposes: {x['proposes']['kind']} for {x['proposes']['skill']}: "
                         f"{x['proposes']['trigger']} (a person approves it: npu-deploy "
                         f"lessons approve RUN {x['lesson_id']})")
        lines.append("")
    return "\n".join(lines)


def approve_lesson(store: EventStore, run_id: str, lesson_id: str, overlay: Path,
                   author: str) -> Path:
    """Write the lesson's proposed trigger to the overlay catalog and record the approval
    in the run. Refuses a lesson that proposes nothing or was approved already."""
    lesson = next((e.payload for e in store.events(run_id, types=("lesson.recorded",))
                   if e.payload.get("lesson_id") == lesson_id), None)
    if lesson is None:
        raise KeyError(f"run {run_id} has no lesson {lesson_id}; `npu-deploy lessons {run_id}`"
                       " lists them")
    if any(e.payload["lesson_id"] == lesson_id
           for e in store.events(run_id, types=("lesson.approved",))):
        raise ValueError(f"lesson {lesson_id} is approved already")
    proposal = lesson.get("proposes")
    if not proposal:
        raise ValueError(f"lesson {lesson_id} proposes no catalog change; there is nothing "
                         "to approve")
    path = overlay / proposal["skill"] / "triggers.yaml"
    # The run's writer first: a run that is being written, or that does not verify, refuses
    # the approval before the catalog is changed.
    with RunWriter.attach(store, run_id) as w:
        path.parent.mkdir(parents=True, exist_ok=True)
        data = yaml.safe_load(path.read_text()) if path.exists() else None
        data = data or {"skill": proposal["skill"], "triggers": []}
        if not any(t["id"] == proposal["trigger"]["id"] for t in data["triggers"]):
            data["triggers"].append(proposal["trigger"])
        tmp = path.with_suffix(".tmp")
        tmp.write_text(yaml.safe_dump(data, sort_keys=False))
        tmp.replace(path)
        w.append(NewEvent.of(LessonApproved(lesson_id=lesson_id, author=author,
                                            applied_to=str(path)), actor="human"))
    return path
