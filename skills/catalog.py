"""The skill catalog: Agent Skills folders (`<name>/SKILL.md`, and `triggers.yaml` beside
the debug and optimization skills), their validator, and the matcher that ranks debug
skills against a failure.

Format rules checked by `validate` (Agent Skills, agentskills.io):
* every skill is a folder with a SKILL.md that starts with YAML front matter;
* `name`: 1-64 characters of lowercase letters, digits and single hyphens, not at either
  end, equal to the folder's name;
* `description`: a non-empty string of at most 1024 characters;
* only the known front-matter keys (name, description, license, compatibility (<= 500
  characters), metadata, allowed-tools).
Rules of this catalog on top: the body has the sections "When to use", "Steps", "The gate"
and "Common mistakes"; every debug and optimization skill has triggers that parse, at
least two for a debug skill, one of them on error text or a gate metric; every skill
the orchestrator names in backticks exists; and the phase skills are the phase table's
(events/phases.py), each with its phase number.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from npu_deploy.events.phases import PHASES

CATALOG_DIR = Path(__file__).resolve().parent / "catalog"
ORCHESTRATOR = "deploy-new-llm"
NAME_RE = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
FRONT_MATTER_KEYS = {"name", "description", "license", "compatibility", "metadata",
                     "allowed-tools"}
SECTIONS = ("## When to use", "## Steps", "## The gate", "## Common mistakes")
KINDS = ("orchestrator", "phase", "optimization", "debug")
TRIGGER_KINDS = ("error_text", "gate_metric", "context")


class CatalogError(ValueError):
    """A skill file that cannot be read at all."""


@dataclass(frozen=True)
class Trigger:
    id: str
    kind: str
    weight: float
    pattern: str | None = None          # error_text
    metric: str | None = None           # gate_metric
    below: float | None = None
    above: float | None = None
    subject: str | None = None
    isolated: bool = False
    key: str | None = None              # context
    at_least: float | None = None
    at_most: float | None = None
    equals: Any = None


@dataclass(frozen=True)
class Skill:
    name: str
    description: str
    kind: str
    body: str
    path: Path
    front: dict[str, Any] = field(default_factory=dict)
    triggers: tuple[Trigger, ...] = ()

    @property
    def digest(self) -> str:
        """sha256 of the SKILL.md an agent read: which version of the skill it followed."""
        import hashlib
        return "sha256:" + hashlib.sha256((self.path / "SKILL.md").read_bytes()).hexdigest()

    @property
    def phase(self) -> int | None:
        value = (self.front.get("metadata") or {}).get("phase")
        return None if value is None else int(value)


def _front_matter(path: Path) -> tuple[dict[str, Any], str]:
    text = path.read_text(encoding="utf-8")
    if not text.startswith("---\n"):
        raise CatalogError(f"{path}: SKILL.md must start with YAML front matter ('---')")
    end = text.find("\n---", 4)
    if end < 0:
        raise CatalogError(f"{path}: the front matter is not closed with '---'")
    try:
        front = yaml.safe_load(text[4:end]) or {}
    except yaml.YAMLError as e:
        raise CatalogError(f"{path}: the front matter is not YAML ({e})") from None
    if not isinstance(front, dict):
        raise CatalogError(f"{path}: the front matter must be a mapping")
    return front, text[end + 4:]


def _triggers(path: Path) -> tuple[Trigger, ...]:
    if not path.exists():
        return ()
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as e:
        raise CatalogError(f"{path}: not YAML ({e})") from None
    out = []
    for i, t in enumerate(data.get("triggers") or []):
        known = {f for f in Trigger.__dataclass_fields__}
        unknown = set(t) - known
        if unknown:
            raise CatalogError(f"{path}: trigger {i}: unknown field {sorted(unknown)[0]!r}")
        try:
            out.append(Trigger(**{**t, "weight": float(t.get("weight", 1.0))}))
        except TypeError as e:
            raise CatalogError(f"{path}: trigger {i}: {e}") from None
    return tuple(out)


def load_skill(folder: Path) -> Skill:
    front, body = _front_matter(folder / "SKILL.md")
    kind = str((front.get("metadata") or {}).get("kind", ""))
    return Skill(name=str(front.get("name", "")), description=str(front.get("description", "")),
                 kind=kind, body=body, path=folder, front=front,
                 triggers=_triggers(folder / "triggers.yaml"))


@dataclass(frozen=True)
class Catalog:
    skills: dict[str, Skill]

    def of_kind(self, kind: str) -> list[Skill]:
        return [s for s in self.skills.values() if s.kind == kind]

    def __getitem__(self, name: str) -> Skill:
        return self.skills[name]


def overlay_dir(store_path: Path) -> Path:
    """Where the triggers approved from a store's lessons live: next to the store file, the
    same folder whatever path (a symbolic link) reached it."""
    return Path(store_path).resolve().parent / "skills"


def load_catalog(root: Path = CATALOG_DIR, overlay: Path | None = None) -> Catalog:
    """The catalog under `root`; with `overlay`, the triggers a person approved from lessons
    (overlay/<skill>/triggers.yaml) are added to their skills."""
    skills = {}
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        if not (folder / "SKILL.md").exists():
            continue
        skill = load_skill(folder)
        learned = overlay / folder.name / "triggers.yaml" if overlay else None
        if learned is not None and learned.exists():
            skill = replace(skill, triggers=skill.triggers + _triggers(learned))
        skills[folder.name] = skill
    return Catalog(skills)


# --- validation ---------------------------------------------------------------------------

def validate(root: Path = CATALOG_DIR) -> list[str]:
    """Every rule a catalog breaks, one line each; [] when it is valid."""
    problems: list[str] = []
    folders = sorted(p for p in root.iterdir() if p.is_dir())
    skills: dict[str, Skill] = {}
    for folder in folders:
        where = f"{folder.name}/SKILL.md"
        if not (folder / "SKILL.md").exists():
            problems.append(f"{folder.name}: no SKILL.md")
            continue
        try:
            skill = load_skill(folder)
        except CatalogError as e:
            problems.append(str(e))
            continue
        skills[folder.name] = skill
        problems += [f"{where}: {p}" for p in _front_problems(skill, folder.name)]
        problems += [f"{where}: {p}" for p in _body_problems(skill)]
        problems += [f"{folder.name}/triggers.yaml: {p}" for p in _trigger_problems(skill)]
    orchestrator = skills.get(ORCHESTRATOR)
    if orchestrator is None:
        problems.append(f"the orchestrator {ORCHESTRATOR} is missing")
    else:
        for name in sorted(set(re.findall(r"`([a-z0-9]+(?:-[a-z0-9]+)+)`", orchestrator.body))):
            if name not in skills:
                problems.append(f"{ORCHESTRATOR}/SKILL.md names `{name}`, which is not in the "
                                "catalog")
        phases = {s.name: s.phase for s in skills.values() if s.kind == "phase"}
        table = {p.skill: p.number for p in PHASES}
        if phases != table:
            problems.append(f"the phase skills are {sorted(phases.items())}, not the phase "
                            f"table's {sorted(table.items())}")
    return problems


def _front_problems(skill: Skill, folder: str) -> Iterable[str]:
    name, desc = skill.front.get("name"), skill.front.get("description")
    if not isinstance(name, str) or not 1 <= len(name) <= 64 or not NAME_RE.match(name):
        yield (f"name {name!r} must be 1-64 lowercase letters, digits and single hyphens, "
               "not starting or ending with a hyphen")
    elif name != folder:
        yield f"name {name!r} differs from its folder {folder!r}"
    if not isinstance(desc, str) or not desc.strip():
        yield "description is missing or empty"
    elif len(desc) > 1024:
        yield f"description has {len(desc)} characters, over 1024"
    for key in sorted(set(skill.front) - FRONT_MATTER_KEYS):
        yield f"unknown front-matter key {key!r} (known: {', '.join(sorted(FRONT_MATTER_KEYS))})"
    compat = skill.front.get("compatibility")
    if isinstance(compat, str) and len(compat) > 500:
        yield f"compatibility has {len(compat)} characters, over 500"
    if skill.kind not in KINDS:
        yield f"metadata.kind {skill.kind!r} is not one of {', '.join(KINDS)}"


def _body_problems(skill: Skill) -> Iterable[str]:
    at = -1
    for section in SECTIONS:
        found = skill.body.find(section)
        if found < 0:
            yield f"the body lacks the section {section!r}"
        elif found < at:
            yield f"the section {section!r} is out of order"
        at = max(at, found)


def _trigger_problems(skill: Skill) -> Iterable[str]:
    if skill.kind not in ("debug", "optimization"):
        return
    if not skill.triggers:
        yield f"a {skill.kind} skill needs triggers"
        return
    data = yaml.safe_load((skill.path / "triggers.yaml").read_text(encoding="utf-8")) or {}
    if data.get("skill") != skill.name:
        yield f"skill: {data.get('skill')!r} differs from {skill.name!r}"
    ids = [t.id for t in skill.triggers]
    if len(ids) != len(set(ids)):
        yield "trigger ids repeat"
    for t in skill.triggers:
        if t.kind not in TRIGGER_KINDS:
            yield f"{t.id}: kind {t.kind!r} is not one of {', '.join(TRIGGER_KINDS)}"
        if not 0 < t.weight <= 1:
            yield f"{t.id}: weight {t.weight} is not in (0, 1]"
        if t.kind == "error_text":
            try:
                re.compile(t.pattern or "")
            except re.error as e:
                yield f"{t.id}: pattern does not compile ({e})"
            if not t.pattern:
                yield f"{t.id}: an error_text trigger needs a pattern"
        if t.kind == "gate_metric" and (t.metric is None or (t.below is None) == (t.above is None)):
            yield f"{t.id}: a gate_metric trigger needs a metric and exactly one of below/above"
        if t.kind == "context" and (t.key is None or all(
                v is None for v in (t.at_least, t.at_most, t.equals))):
            yield f"{t.id}: a context trigger needs a key and at_least, at_most or equals"
    if skill.kind == "debug":
        strong = [t for t in skill.triggers if t.kind in ("error_text", "gate_metric")]
        if len(skill.triggers) < 2 or not strong:
            yield "a debug skill needs two or more triggers, one on error text or a gate metric"
