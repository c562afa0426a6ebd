"""Typed payloads of every event type, and their validation on append.

Each event type is a frozen dataclass registered under its dotted name. Writers build
these values (`PhaseEntered(name=...)`) and `NewEvent.of` turns one into an event; readers
get one back from a stored event with `event.typed(PhaseEntered)`. What is stored is the
value's JSON object (`to_dict`): every field, defaults included, exactly as when writers
built the dicts by hand. `validate_payload` checks a JSON payload against its class field
by field, fills in defaults, and refuses anything malformed with a message that names the
field; every append runs it. How a class checks a value (its compiled checker, its builder,
its blob references) is checking.py's: this module names the event types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Literal, Self

from .checking import BLOB_REF_RE as BLOB_REF_RE
from .checking import BlobRef as BlobRef
from .checking import RefFinder, builder_for, checker_for, plain, ref_finder
from .checking import blob_refs as blob_refs
from .envelope import (
    EVENT_ID_RE,
    HASH_RE,
    MAX_COUNT,
    RUN_ID_RE,
    TS_RE,
    Event,
    InvalidEvent,
    check_names,
    shown,
)

Verdict = Literal["PASS", "FAIL", "ABORTED", "NEEDS_HUMAN"]
Source = Literal["measured-npu", "measured-cpu", "modeled"]
Outcome = Literal["passed", "failed", "needs_human", "aborted"]
Decision = Literal["approve", "redirect", "pick", "pause", "abort"]

#: type name -> (payload class, current schema version)
EVENT_TYPES: dict[str, tuple[type[Payload], int]] = {}


class Payload:
    """What the payload class of every event type shares: the type's dotted name, and the
    JSON object a stored event holds."""

    event_type: ClassVar[str]

    def to_dict(self) -> dict[str, Any]:
        """The JSON object of this payload: every field (nested values as objects too)."""
        return plain(self)

    @classmethod
    def from_dict(cls, data: Any) -> Self:
        """The payload `data` holds, checked as an append checks it (`validate_payload`),
        with defaults for the fields it leaves out."""
        checked = checker_for(cls)(data, cls.event_type)
        built: Self = builder_for(cls)(checked)
        return built


def event_type(name: str, schema_version: int = 1):  # type: ignore[no-untyped-def]
    def register(cls: type[Payload]) -> type[Payload]:
        cls.event_type = name
        EVENT_TYPES[name] = (cls, schema_version)
        return cls
    return register


def payload_class(type_name: str) -> type[Payload]:
    """The payload class of an event type."""
    entry = EVENT_TYPES.get(type_name)
    if entry is None:
        known = ", ".join(sorted(EVENT_TYPES))
        raise InvalidEvent(f"type: unknown event type {type_name!r} (known: {known})")
    return entry[0]


# --- run lifecycle ---------------------------------------------------------

@event_type("run.started")
@dataclass(frozen=True)
class RunStarted(Payload):
    model: str
    backend: str
    agent: str
    code_version: str
    policy: str = "interactive"
    thresholds: dict[str, float] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)


@event_type("run.resumed")
@dataclass(frozen=True)
class RunResumed(Payload):
    from_version: int
    reason: str
    unfinished_step: str | None = None


@event_type("run.forked", schema_version=2)
@dataclass(frozen=True)
class RunForked(Payload):
    parent_run_id: str
    parent_version: int
    parent_hash: str
    model: str
    backend: str
    agent: str
    code_version: str
    policy: str = "interactive"
    note: str | None = None             # schema 2: why the fork was made
    config: dict[str, Any] = field(default_factory=dict)    # schema 2: the parent's config


@event_type("run.finished")
@dataclass(frozen=True)
class RunFinished(Payload):
    verdict: Verdict
    summary: str
    report: BlobRef | None = None


# --- phases ----------------------------------------------------------------

@event_type("phase.entered")
@dataclass(frozen=True)
class PhaseEntered(Payload):
    name: str
    instruction: str | None = None       # a person's redirect, for this attempt
    debug_direction: str | None = None   # the picked debug direction, if any


@event_type("phase.exited", schema_version=3)
@dataclass(frozen=True)
class PhaseExited(Payload):
    outcome: Outcome
    reason: str = ""
    # schema 2: where the phase's time went so far (measured on the CPU of the conductor's
    # host); schema 3: a person's waiting and the pauses, as the fold counts them
    wall_s: float = 0.0
    agent_s: float = 0.0
    backend_s: float = 0.0
    waiting_s: float = 0.0
    paused_s: float = 0.0


# --- the agent -------------------------------------------------------------

@event_type("agent.message")
@dataclass(frozen=True)
class AgentMessage(Payload):
    role: Literal["assistant", "user", "system"]
    text: str


@event_type("model.called", schema_version=3)
@dataclass(frozen=True)
class ModelCalled(Payload):
    model: str
    input_tokens: int
    output_tokens: int
    cost_usd: float
    stop_reason: str
    duration_s: float
    cache_read_tokens: int = 0    # added in schema 2, when prompt caching was counted
    cache_write_tokens: int = 0
    request_id: str | None = None  # added in schema 3: the provider's id of the request,
    request: str | None = None     # and blobs of what was sent (JSON, no credentials)
    response: str | None = None    # and of what came back (JSON)

    def check(self) -> None:
        for name in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens"):
            if getattr(self, name) < 0:
                raise InvalidEvent(f"model.called.{name}: must be >= 0")
        if self.cost_usd < 0:
            raise InvalidEvent("model.called.cost_usd: must be >= 0")


@event_type("tool.requested")
@dataclass(frozen=True)
class ToolRequested(Payload):
    call_id: str
    tool: str
    arguments: dict[str, Any] = field(default_factory=dict)


@event_type("tool.completed")
@dataclass(frozen=True)
class ToolCompleted(Payload):
    call_id: str
    tool: str
    ok: bool
    result: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0


@event_type("tool.abandoned")
@dataclass(frozen=True)
class ToolAbandoned(Payload):
    call_id: str
    tool: str
    reason: str


# --- gates, profiles, people -----------------------------------------------

@dataclass(frozen=True)
class GateCheck:
    """One metric of one subject (a kernel, a tensor, a layer) against its threshold."""

    subject: str
    metric: str
    value: float
    threshold: float
    comparison: Literal["<=", "<", ">=", ">", "=="]
    passed: bool
    gating: bool = True   # False: recorded as a lens, does not decide the gate
    message: str = ""     # what a person (and the debug matcher) should read about it

    def check(self) -> None:
        holds = comparison_holds(self.value, self.comparison, self.threshold)
        if holds != self.passed:
            raise InvalidEvent(
                f"gate check {self.subject}/{self.metric}: passed={self.passed} but "
                f"{self.value} {self.comparison} {self.threshold} is {holds}")


def comparison_holds(value: float, comparison: str, threshold: float) -> bool:
    """Whether `value comparison threshold` holds: what a gate check's `passed` says."""
    return {"<=": value <= threshold, "<": value < threshold, ">=": value >= threshold,
            ">": value > threshold, "==": value == threshold}[comparison]


@event_type("gate.evaluated")
@dataclass(frozen=True)
class GateEvaluated(Payload):
    gate: str
    passed: bool
    checks: list[GateCheck]
    inputs: BlobRef | None = None

    def check(self) -> None:
        gating = [c for c in self.checks if c.gating]
        if not gating:
            raise InvalidEvent("gate.evaluated.checks: a gate needs at least one gating check")
        failed = [c for c in gating if not c.passed]
        if self.passed and failed:
            raise InvalidEvent(f"gate.evaluated.passed: true although {failed[0].subject}/"
                               f"{failed[0].metric} failed")
        if not self.passed and not failed:
            raise InvalidEvent("gate.evaluated.passed: false although every gating check passed")


@dataclass(frozen=True)
class ProfileEntry:
    name: str
    seconds: float
    kind: Literal["dispatch", "kernel", "host", "total"] = "dispatch"
    transfer_s: float | None = None     # of seconds: the host's buffer writes and reads


@event_type("profile.recorded")
@dataclass(frozen=True)
class ProfileRecorded(Payload):
    scope: Literal["prefill", "decode", "kernel", "end_to_end"]
    source: Source          # where the times come from: never present modeled as measured
    total_s: float
    entries: list[ProfileEntry] = field(default_factory=list)
    tokens: int | None = None
    runs: list[float] | None = None     # measured: each run's total (entries are medians)


@event_type("checkpoint.requested")
@dataclass(frozen=True)
class CheckpointRequested(Payload):
    checkpoint_id: str
    summary: str
    options: list[str] = field(default_factory=lambda: ["approve", "redirect", "pause", "abort"])


@event_type("human.decision", schema_version=2)
@dataclass(frozen=True)
class HumanDecision(Payload):
    decision: Decision
    command_id: str              # the inbox command this records, exactly once
    author: str = "human"
    checkpoint_id: str | None = None
    proposal_id: str | None = None
    instruction: str | None = None
    direction_id: str | None = None
    # Schema 2: an approve that passes a phase whose gate failed. Only an explicit
    # override may do that, so a stale approve can never pass a failed gate by accident.
    override: bool = False

    def check(self) -> None:
        if self.override and self.decision != "approve":
            raise InvalidEvent("human.decision.override: only an approve can override a gate")
        if self.decision == "redirect" and not self.instruction:
            raise InvalidEvent("human.decision.instruction: a redirect needs an instruction")
        if self.decision == "pick" and not self.direction_id:
            raise InvalidEvent("human.decision.direction_id: a pick needs a direction id")


@dataclass(frozen=True)
class RetryChange:
    """What a retry following a direction does differently from the attempt that failed.
    The gates are deterministic (seeded inputs, the NPU's arithmetic), so a retry that
    changes nothing fails again: the autopilot's policy picks only directions that carry
    one."""

    text: str                                       # in words: "L0.q_proj: tile_n 32 -> 64"
    # phase 1: kernel use (config_key) -> the tunables its next attempt runs with
    configs: dict[str, dict[str, Any]] = field(default_factory=dict)
    # phases 4 and 5: transforms taken out of the recipe and not tried again
    undo: list[str] = field(default_factory=list)
    # phase 3: recipe settings the next attempt runs with (gemm_datapath, attention_datapath,
    # lm_head_out: pipeline.divergence's change for a token the deployment answers wrongly)
    recipe: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class DebugDirection:
    direction_id: str
    skill: str
    title: str
    rationale: str
    score: float
    # schema 2 of debug.proposed: the triggers that fired, in words, and the change
    evidence: list[str] = field(default_factory=list)
    change: RetryChange | None = None


#: What a debug matcher proposes when no debug skill matches a failure and it knows nothing
#: a retry could change: for a person, who may have changed something outside the run.
RETRY_AS_IS = DebugDirection(direction_id="retry", skill="none",
                             title="retry the phase as it is",
                             rationale="no debug skill matched this failure", score=0.0)


#: The direction a matcher proposes when no debug skill matched but a retry can change
#: something (its `change`): it follows no skill.
CHANGE_ONLY = "change"
#: Direction ids that name no skill of the catalog.
SKILL_LESS = (RETRY_AS_IS.direction_id, CHANGE_ONLY)


@dataclass(frozen=True)
class FailedMetric:
    """One gating metric that failed, over every subject it failed on."""

    metric: str
    worst: float                 # the value furthest from the threshold
    threshold: float
    comparison: str
    subjects: list[str]          # the failing kernel uses, layers or prompts (the first few)
    count: int                   # how many subjects failed it
    detail: str = ""             # the checks' messages, e.g. the elements out of tolerance


@event_type("debug.proposed", schema_version=2)
@dataclass(frozen=True)
class DebugProposed(Payload):
    proposal_id: str
    symptom: str
    directions: list[DebugDirection]
    # schema 2: the failed metrics, and whether the failure repeats on the same inputs
    # (then a retry must change something; see RetryChange)
    evidence: list[FailedMetric] = field(default_factory=list)
    deterministic: bool = False


# --- skills and learning ---------------------------------------------------

@event_type("skill.loaded")
@dataclass(frozen=True)
class SkillLoaded(Payload):
    skill: str
    digest: str


@event_type("lesson.recorded", schema_version=2)
@dataclass(frozen=True)
class LessonRecorded(Payload):
    symptom: str
    root_cause: str
    fix: str
    target_skill: str
    event_refs: list[str] = field(default_factory=list)
    draft: bool = True    # a person approves before the catalog changes
    # schema 2: a lesson's id within its run, and what it proposes to change in the catalog
    # ({"kind": "trigger", "skill": ..., "trigger": {...}}), if anything
    lesson_id: str = ""
    proposes: dict[str, Any] | None = None


@event_type("lesson.approved")
@dataclass(frozen=True)
class LessonApproved(Payload):
    lesson_id: str
    author: str
    applied_to: str         # where the catalog change was written


@event_type("experience.recorded", schema_version=2)
@dataclass(frozen=True)
class ExperienceRecorded(Payload):
    topic: str
    summary: str
    outcome: Literal["worked", "failed"]
    evidence: list[str] = field(default_factory=list)
    # schema 2: a plan transform tried, for the optimization memory
    transform: str | None = None
    model: str | None = None
    shape: str | None = None            # e.g. "prefill L=128"
    speedup: float | None = None        # time before / time after (None: not applicable)
    source: Source | None = None        # where the two times came from
    plan_before: BlobRef | None = None
    plan_after: BlobRef | None = None


@event_type("error")
@dataclass(frozen=True)
class ErrorRaised(Payload):
    kind: str
    message: str
    detail: str | None = None
    recoverable: bool = False


# --- validation ------------------------------------------------------------


def validate_payload(type_name: str, payload: Any) -> dict[str, Any]:
    """Check a payload against its event type; return it with defaults filled in."""
    result: dict[str, Any] = checker_for(payload_class(type_name))(payload, type_name)
    return result


def check_event(event: Event) -> None:
    """Every envelope field of a sealed event, as it will be stored: the one check that both
    the writer (after sealing, store/writer.py) and an import (for each line it reads,
    store/transfer.py) apply, naming the first bad field. The payload is checked against
    its type's schema by `validate_payload`, which both call too."""
    for name, value in (("event_id", event.event_id), ("run_id", event.run_id),
                        ("type", event.type), ("actor", event.actor), ("ts", event.ts),
                        ("payload_json", event.payload_json), ("prev_hash", event.prev_hash),
                        ("hash", event.hash)):
        if type(value) is not str:
            raise InvalidEvent(f"{name}: {shown(value)} must be a string")
    for name, number in (("run_version", event.run_version),
                         ("schema_version", event.schema_version)):
        if type(number) is not int or not 1 <= number <= MAX_COUNT:
            raise InvalidEvent(f"{name}: {shown(number)} must be an integer from 1 to "
                               f"{MAX_COUNT}")
    if not EVENT_ID_RE.match(event.event_id):
        raise InvalidEvent(f"event_id: {shown(event.event_id)} is not an event id (a UUID "
                           "in lowercase hex, as npu-deploy writes them)")
    if not RUN_ID_RE.match(event.run_id):
        raise InvalidEvent(f"run_id: {shown(event.run_id)} must be 1-64 letters, digits, "
                           "'.', '_' or '-'")
    if event.type not in EVENT_TYPES:
        raise InvalidEvent(f"type: {shown(event.type)} is no event type this npu-deploy "
                           "knows; upgrade it if a newer one wrote the event")
    current = EVENT_TYPES[event.type][1]
    if event.schema_version > current:
        raise InvalidEvent(f"schema_version: {event.type} schema {event.schema_version} is "
                           f"newer than this npu-deploy's ({current}); upgrade it")
    check_ts("ts", event.ts)
    for name, value in (("prev_hash", event.prev_hash), ("hash", event.hash)):
        if not HASH_RE.match(value):
            raise InvalidEvent(f"{name}: {shown(value)} is not a SHA-256 (64 lowercase hex "
                               "digits)")
    check_names(event.actor, event.phase, event.attempt, event.causation_id,
                event.correlation_id, event.idempotency_key)


def check_ts(name: str, ts: Any) -> None:
    """A time as npu-deploy stores every one (an event's, an inbox command's): UTC, written
    as 2026-11-21T05:12:58.123456Z, and a date on the calendar."""
    if type(ts) is not str or not TS_RE.match(ts):
        raise InvalidEvent(f"{name}: {shown(ts)} is not a UTC time written as "
                           "2026-11-21T05:12:58.123456Z")
    try:   # the calendar (month 13, February 30); the pattern fixed the form
        datetime.fromisoformat(ts)
    except ValueError:
        raise InvalidEvent(f"{name}: {shown(ts)} is no date on the calendar") from None


def current_schema_version(type_name: str) -> int:
    return EVENT_TYPES[type_name][1]


def declared_blob_refs(type_name: str, payload: Any) -> set[str]:
    """The blob references a payload's schema declares (its `BlobRef` fields): the blobs
    the run cannot be read without, which an export must carry. A string elsewhere that
    merely looks like one (a skill's digest in `skill.loaded`) is not a reference."""
    finder = _ref_finders.get(payload_class(type_name))
    if finder is None:
        finder = _ref_finders[payload_class(type_name)] = ref_finder(payload_class(type_name))
    found: set[str] = set()
    finder(payload, found)
    return found


_ref_finders: dict[type, RefFinder] = {}
