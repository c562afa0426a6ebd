"""The Claude agent: our own tool-use loop over the Anthropic Messages API, working a phase
through the same toolbox and under the same gates as the autopilot.

One conversation per phase attempt. It is seeded with the orchestrator's and the phase's
skill (the frozen system prompt), the catalog's other skills by name and description, and
what the log says of the phase (the last gate, a person's instruction, the picked debug
direction). Each turn is one `messages.create` call recorded through `PhaseRun.exchange`:
a `model.called` event with the usage (cache reads and writes too), cost, stop reason,
request id and latency, and blobs of the request and the response. Every tool the model
asks for is a recorded step (`tool.requested` / `tool.completed`), so a resumed run reads
the model's replies and the tools' results back from the log and neither calls nor pays
for anything twice.

Stop reasons: tool_use runs every requested tool and answers in one turn (a failure as
`is_error`); end_turn hands the phase to the harness's gate; pause_turn sends the turn back;
max_tokens asks the model to go on (an unfinished tool call is dropped); refusal and any
spent budget stop the phase for a person; a full context window starts a new conversation
seeded from the log.

The API key comes from ANTHROPIC_API_KEY and goes nowhere else: not into an event, a blob,
or an error message (`scrub`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from npu_deploy.events.phases import PHASES
from npu_deploy.kernels.specs import Decode, Mode, Prefill
from npu_deploy.kernels.transforms import IllegalTransform
from npu_deploy.machine import NeedsHuman, Pipeline, ToolFailed
from npu_deploy.machine.conductor import run_config
from npu_deploy.pipeline.gates import gates
from npu_deploy.pipeline.toolbox import Toolbox
from npu_deploy.pipeline.workspace import Workspace, blob_json, read_json, workspace_of
from npu_deploy.skills.catalog import load_catalog
from npu_deploy.skills.matcher import SkillMatcher

KEY_ENV = "ANTHROPIC_API_KEY"
MODEL_ENV = "NPU_DEPLOY_CLAUDE_MODEL"
PRICE_ENV = "NPU_DEPLOY_CLAUDE_PRICE"
DEFAULT_MODEL = "claude-sonnet-5-5"
ORCHESTRATOR = "deploy-new-llm"
RESULT_CHARS = 20_000        # a tool result longer than this reaches the model cut
READ_CHARS = 60_000          # read_file returns at most this much at once


# --- prices and budgets -----------------------------------------------------------------

@dataclass(frozen=True)
class Price:
    """USD per million tokens: input, output, 5-minute cache write, cache read."""

    input: float
    output: float
    cache_write: float
    cache_read: float

    def cost(self, usage: dict[str, int]) -> float:
        return (usage["input_tokens"] * self.input + usage["output_tokens"] * self.output
                + usage["cache_write_tokens"] * self.cache_write
                + usage["cache_read_tokens"] * self.cache_read) / 1e6


#: Anthropic's list prices (platform.claude.com/docs/en/about-claude/pricing, read
#: 2026-11). A model not listed needs NPU_DEPLOY_CLAUDE_PRICE="in,out,cache_write,cache_read".
PRICES = {
    "claude-fable-5-1": Price(10.0, 50.0, 12.5, 0.25),
    "claude-opus-5-5": Price(4.0, 20.0, 5.0, 0.20),
    "claude-sonnet-5-5": Price(2.0, 10.0, 2.5, 0.10),
    "claude-sonnet-5": Price(2.0, 10.0, 2.5, 0.20),
    "claude-opus-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-8": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-7": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-6": Price(5.0, 25.0, 6.25, 0.50),
    "claude-opus-4-5": Price(5.0, 25.0, 6.25, 0.50),
    "claude-sonnet-4-6": Price(3.0, 15.0, 3.75, 0.30),
    "claude-sonnet-4-5": Price(3.0, 15.0, 3.75, 0.30),
    "claude-haiku-4-5": Price(1.0, 5.0, 1.25, 0.10),
}


def price_of(model: str, env: Mapping[str, str] | None = None) -> Price:
    override = (os.environ if env is None else env).get(PRICE_ENV)
    if override:
        try:
            figures = [float(x) for x in override.split(",")]
            if len(figures) != 4 or min(figures) < 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"{PRICE_ENV}={override!r}: expected four USD-per-million-token "
                             "figures: input,output,cache_write,cache_read") from None
        return Price(*figures)
    base = re.sub(r"-\d{8}$", "", model)          # a dated snapshot costs what its alias does
    if base not in PRICES:
        raise ValueError(f"no list price known for model {model!r}; set {PRICE_ENV}="
                         "input,output,cache_write,cache_read (USD per million tokens)")
    return PRICES[base]


@dataclass(frozen=True)
class Budget:
    """What one phase attempt may spend before it stops for a person. `wall_s` counts the
    seconds of the attempt's model calls and tool steps (a pause is not counted)."""

    turns: int = 60
    tokens: int = 4_000_000
    usd: float = 10.0
    wall_s: float = 3600.0

    @classmethod
    def parse(cls, text: str) -> Budget:
        """"turns=40,tokens=2e6,usd=5,wall=1800" (any subset)."""
        names = {"turns": "turns", "tokens": "tokens", "usd": "usd", "wall": "wall_s"}
        values: dict[str, Any] = {}
        for item in filter(None, (t.strip() for t in text.split(","))):
            name, _, value = item.partition("=")
            if name not in names:
                raise ValueError(f"agent budget {item!r}: expected turns=, tokens=, usd= or "
                                 "wall= (seconds)")
            try:
                number = float(value)
            except ValueError:
                raise ValueError(f"agent budget {item!r}: {value!r} is not a number") from None
            if number <= 0:
                raise ValueError(f"agent budget {item!r}: must be > 0")
            values[names[name]] = int(number) if name in ("turns", "tokens") else number
        return cls(**values)


@dataclass(frozen=True)
class Spent:
    turns: int = 0
    tokens: int = 0
    usd: float = 0.0
    wall_s: float = 0.0

    def over(self, b: Budget) -> str | None:
        figures = (f"turns {self.turns}/{b.turns}, tokens {self.tokens:,}/{b.tokens:,}, "
                   f"${self.usd:.2f}/${b.usd:.2f}, {self.wall_s:.0f}/{b.wall_s:.0f} s")
        for name, used, limit in (("turns", self.turns, b.turns),
                                  ("tokens", self.tokens, b.tokens),
                                  ("dollars", self.usd, b.usd),
                                  ("wall clock", self.wall_s, b.wall_s)):
            if used >= limit:
                return f"the attempt spent its {name} budget ({figures})"
        return None


def spent(run: Any) -> Spent:
    """What this attempt has spent, from its events (the same on a resumed run)."""
    s = Spent()
    for e in run.events("model.called", "tool.completed"):
        p = e.payload
        if e.type == "model.called":
            s = Spent(s.turns + 1, s.tokens + p["input_tokens"] + p["output_tokens"]
                      + p["cache_read_tokens"] + p["cache_write_tokens"],
                      s.usd + p["cost_usd"], s.wall_s + p["duration_s"])
        else:
            s = Spent(s.turns, s.tokens, s.usd, s.wall_s + p["duration_s"])
    return s


@dataclass(frozen=True)
class ClaudeConfig:
    """The agent's settings, from the run's configuration ("claude" in run.started)."""

    model: str = DEFAULT_MODEL
    max_tokens: int = 8192
    budget: Budget = field(default_factory=Budget)
    max_retries: int = 4
    command_timeout_s: float = 600.0

    @classmethod
    def of(cls, config: dict[str, Any]) -> ClaudeConfig:
        c = dict(config.get("claude") or {})
        budget = Budget(**c["budget"]) if c.get("budget") else Budget()
        return cls(str(c.get("model", DEFAULT_MODEL)), int(c.get("max_tokens", 8192)), budget,
                   int(c.get("max_retries", 4)), float(c.get("command_timeout_s", 600.0)))

    def to_config(self) -> dict[str, Any]:
        b = self.budget
        return {"model": self.model, "max_tokens": self.max_tokens,
                "max_retries": self.max_retries, "command_timeout_s": self.command_timeout_s,
                "budget": {"turns": b.turns, "tokens": b.tokens, "usd": b.usd,
                           "wall_s": b.wall_s}}


def model_from_env(option: str | None, env: Mapping[str, str] | None = None) -> str:
    """--model, else $NPU_DEPLOY_CLAUDE_MODEL, else the default."""
    return option or (os.environ if env is None else env).get(MODEL_ENV) or DEFAULT_MODEL


def scrub(text: str, env: Mapping[str, str] | None = None) -> str:
    """`text` without the API key (nor anything shaped like an Anthropic key)."""
    key = (os.environ if env is None else env).get(KEY_ENV)
    if key:
        text = text.replace(key, "[ANTHROPIC_API_KEY]")
    return re.sub(r"sk-ant-[A-Za-z0-9_\-]{8,}", "[ANTHROPIC_API_KEY]", text)


# --- the run's workspace on disk ---------------------------------------------------------

PROTECTED = ("oracle", "gates")      # copies of the oracle's outputs and of the gates


class Refused(PermissionError):
    """A file or command outside what the agent may touch."""


def prepare(ws: Workspace, root: Path, answers: dict[str, Any] | None) -> None:
    """The directory, with read-only copies of the gates' code and thresholds and, once
    phase 0 built it, of the oracle's answers. The gates read the store, never these
    copies: changing them could fool nobody, and the file tools refuse to."""
    root.mkdir(parents=True, exist_ok=True)
    from npu_deploy.pipeline import gates as gates_package
    files = {root / "gates" / source.name: source.read_text()
             for source in sorted(Path(gates_package.__file__).parent.glob("*.py"))}
    if answers is not None:
        files[root / "oracle" / "answers.json"] = json.dumps(answers, indent=1,
                                                              sort_keys=True)
    for path, text in files.items():
        if path.exists():
            continue
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        path.chmod(0o444)
    for name in PROTECTED:
        if (root / name).is_dir():
            (root / name).chmod(0o555)


class Files:
    """read / list / grep / write / edit inside one directory, paths resolved with their
    symlinks; writes to the protected folders are refused."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def resolve(self, path: str, *, write: bool = False) -> Path:
        target = (self.root / path).resolve()
        if target != self.root and not target.is_relative_to(self.root):
            raise Refused(f"{path}: outside the run's workspace {self.root}; refused")
        rel = target.relative_to(self.root)
        if write and (not rel.parts or rel.parts[0] in PROTECTED):
            raise Refused(f"{path}: {'/'.join(rel.parts[:1]) or '.'} is protected (the "
                          "oracle's outputs and the gates); refused")
        return target

    def read(self, path: str, offset: int = 0, limit: int = READ_CHARS) -> dict[str, Any]:
        text = self.resolve(path).read_text(errors="replace")
        part = text[offset:offset + min(limit, READ_CHARS)]
        return {"path": path, "text": part, "offset": offset, "chars": len(text),
                "more": offset + len(part) < len(text)}

    def list(self, path: str = ".") -> dict[str, Any]:
        base = self.resolve(path)
        entries = sorted(str(p.relative_to(self.root)) + ("/" if p.is_dir() else "")
                         for p in base.rglob("*"))
        return {"path": path, "entries": entries[:2000], "count": len(entries)}

    def grep(self, pattern: str, path: str = ".") -> dict[str, Any]:
        regex = re.compile(pattern)
        base = self.resolve(path)
        hits = []
        for p in sorted([base] if base.is_file() else base.rglob("*")):
            if not p.is_file():
                continue
            for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1):
                if regex.search(line):
                    hits.append(f"{p.relative_to(self.root)}:{n}: {line[:300]}")
        return {"pattern": pattern, "hits": hits[:500], "count": len(hits)}

    def write(self, path: str, content: str) -> dict[str, Any]:
        target = self.resolve(path, write=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        return {"path": path, "chars": len(content)}

    def edit(self, path: str, old: str, new: str) -> dict[str, Any]:
        target = self.resolve(path, write=True)
        text = target.read_text()
        count = text.count(old)
        if count != 1:
            raise ValueError(f"{path}: the text to replace occurs {count} times; it must "
                             "occur exactly once")
        target.write_text(text.replace(old, new, 1))
        return {"path": path, "chars": len(text) - len(old) + len(new)}


def run_command(command: str, cwd: Path, timeout_s: float) -> dict[str, Any]:
    """A shell command in the workspace with a minimal environment (no API keys). At the
    timeout the whole process group is killed."""
    env = {"PATH": os.pathsep.join([str(Path(sys.executable).parent), "/usr/bin", "/bin"]),
           "HOME": str(cwd), "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1"}
    proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout_s)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        timed_out = True
    text = out.decode(errors="replace")
    return {"command": command, "exit_code": proc.returncode, "timed_out": timed_out,
            "output": text[-RESULT_CHARS:], "output_chars": len(text)}


# --- the tools -----------------------------------------------------------------------------

#: What a tool may raise for a bad request: recorded as a failed step, told to the model.
TOOL_ERRORS: tuple[type[Exception], ...] = (
    KeyError, ValueError, LookupError, TypeError, OSError, IllegalTransform, re.error)


@dataclass(frozen=True)
class Tool:
    description: str
    properties: dict[str, Any]
    required: tuple[str, ...]
    run: Callable[[Context, dict[str, Any]], dict[str, Any]]

    def schema(self, name: str) -> dict[str, Any]:
        return {"name": name, "description": self.description,
                "input_schema": {"type": "object", "properties": self.properties,
                                 "required": list(self.required)}}


class Context:
    """What the tools act on: the attempt (its recorded steps), the toolbox, the files."""

    def __init__(self, run: Any, files: Files, config: ClaudeConfig) -> None:
        self.run, self.files, self.config = run, files, config
        self.tb = Toolbox(_Expecting(run))

    def step(self, tool: str, args: dict[str, Any], fn: Callable[[], dict[str, Any]], *,
             idempotent: bool = True) -> dict[str, Any]:
        return self.run.step(tool, args, fn, idempotent=idempotent, expected=TOOL_ERRORS)

    def mode(self, name: str) -> Mode:
        seq = self.tb.ws.settings.seq_len
        if name == "prefill":
            return Prefill(seq)
        if name == "decode":
            return Decode(seq)
        raise ValueError(f"mode {name!r}: expected prefill or decode")


class _Expecting:
    """A PhaseRun whose steps record the errors a model's bad request causes."""

    def __init__(self, run: Any) -> None:
        self._run = run

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)

    def step(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self._run.step(*args, expected=TOOL_ERRORS, **kwargs)


STR = {"type": "string"}
MODE = {"type": "string", "enum": ["prefill", "decode"]}


def _skill(c: Context, a: dict[str, Any]) -> dict[str, Any]:
    result = c.tb.load_skill(str(a["name"]))
    return {**result, "body": load_catalog()[result["skill"]].body}


def _directions(c: Context, a: dict[str, Any]) -> dict[str, Any]:
    def work() -> dict[str, Any]:
        out = []
        for i, d in enumerate(a["directions"], 1):
            out.append({"direction_id": f"agent-{i}", "skill": str(d.get("skill") or "agent"),
                        "title": str(d["title"])[:120], "rationale": str(d["rationale"]),
                        "score": float(d.get("score", 0.5))})
        if not out:
            raise ValueError("propose at least one direction")
        return {"directions": out}
    return c.step("propose_debug_directions", {"directions": a.get("directions")}, work)


def _approval(c: Context, a: dict[str, Any]) -> dict[str, Any]:
    def work() -> dict[str, Any]:
        proposal = {"skill": str(a["skill"]), "change": str(a["change"]),
                    "content": str(a.get("content", ""))}
        return {"skill": proposal["skill"], "change": proposal["change"],
                "proposal": blob_json(c.tb.store, proposal)}
    r = c.step("ask_approval", {"skill": a.get("skill"), "change": a.get("change")}, work)
    raise NeedsHuman(f"the agent asks to change the skill catalog ({r['skill']}): "
                     f"{r['change']} (proposal blob {r['proposal'][:12]}); redirect the phase "
                     "with your answer")


TOOLS: dict[str, Tool] = {
    "build_oracle": Tool("Phase 0: run the FP32 reference; store its golden tensors for the "
                         "block prompt and its greedy answers to every canonical prompt.",
                         {}, (), lambda c, a: c.tb.build_oracle()),
    "list_kernels": Tool("Every (kernel, shape) the deployment launches, by config key.",
                         {}, (), lambda c, a: c.tb.list_kernels()),
    "select_tiles": Tool("Choose a tile configuration for every kernel use (the selection's, "
                         "or yours per config key in overrides) with the hardware checker's "
                         "findings. Starts the recipe.",
                         {"overrides": {"type": "object"}}, (),
                         lambda c, a: c.tb.select_tiles(a.get("overrides") or None)),
    "validate_kernel": Tool("Run one kernel use on the backend against its FP32 reference.",
                            {"kernel": STR, "seed": {"type": "integer"}}, ("kernel",),
                            lambda c, a: c.tb.validate_kernel(str(a["kernel"]),
                                                              int(a.get("seed", 0)))),
    "run_block": Tool("Layer 0 alone on the backend against the oracle's tensors.", {}, (),
                      lambda c, a: c.tb.run_block()),
    "run_model": Tool("The deployed model's greedy run of one canonical prompt against the "
                      "oracle's.", {"prompt": STR}, ("prompt",),
                      lambda c, a: c.tb.run_model(str(a["prompt"]))),
    "layer_lens": Tool("Cosine of every layer's output against the oracle's.", {}, (),
                       lambda c, a: c.tb.layer_lens()),
    "choose_datapath": Tool("The GEMM datapath of prefill: bfp16 (fast) or bf16 (exact MMA).",
                            {"datapath": {"type": "string", "enum": ["bf16", "bfp16"]},
                             "why": STR}, ("datapath", "why"),
                            lambda c, a: c.tb.choose_datapath(str(a["datapath"]),
                                                              str(a["why"]))),
    "profile": Tool("The profile of the recipe's plan (prefill or decode): modeled on the "
                    "emulator backend, measured on the NPU on the xrt backend.",
                    {"mode": MODE}, ("mode",),
                    lambda c, a: c.tb.profile(c.mode(str(a["mode"])))),
    "propose_transform": Tool("The transforms still to try, in your order.",
                              {"mode": MODE, "order": {"type": "array", "items": STR}},
                              ("mode", "order"),
                              lambda c, a: c.tb.propose_transform(c.mode(str(a["mode"])),
                                                                  list(a["order"]))),
    "apply_transform": Tool("Try one plan transform: kept only if legal, faster (modeled; "
                            "on the NPU its slowest measured run beats the fastest before) "
                            "and the phase-3 token-set check still passes.",
                            {"transform": STR, "mode": MODE}, ("transform", "mode"),
                            lambda c, a: c.tb.apply_transform(str(a["transform"]),
                                                              c.mode(str(a["mode"])))),
    "generate": Tool("The deployed runner's answer to a chat message.",
                     {"text": STR, "max_tokens": {"type": "integer"}}, ("text",),
                     lambda c, a: c.tb.generate(str(a["text"]), int(a.get("max_tokens", 32)))),
    "emit_programs": Tool("Phase 6: the MLIR-AIR program of every dispatch of the final "
                          "plans, written to air/prefill and air/decode of the workspace.",
                          {}, (), lambda c, a: c.tb.emit_programs()),
    "write_report": Tool("Phase 6: the performance report and lessons, as blobs.", {}, (),
                         lambda c, a: _write_report(c)),
    "load_skill": Tool("Load a skill of the catalog by name; returns its text.",
                       {"name": STR}, ("name",), _skill),
    "read_file": Tool("Read a file of the workspace.",
                      {"path": STR, "offset": {"type": "integer"}, "limit": {"type": "integer"}},
                      ("path",),
                      lambda c, a: c.step("read_file", a, lambda: c.files.read(
                          str(a["path"]), int(a.get("offset", 0)),
                          int(a.get("limit", READ_CHARS))))),
    "list_files": Tool("List the files under a folder of the workspace.", {"path": STR}, (),
                       lambda c, a: c.step("list_files", a, lambda: c.files.list(
                           str(a.get("path", "."))))),
    "grep": Tool("Lines matching a regular expression, in a file or folder of the workspace.",
                 {"pattern": STR, "path": STR}, ("pattern",),
                 lambda c, a: c.step("grep", a, lambda: c.files.grep(
                     str(a["pattern"]), str(a.get("path", "."))))),
    "write_file": Tool("Write a file of the workspace (not under oracle/ or gates/).",
                       {"path": STR, "content": STR}, ("path", "content"),
                       lambda c, a: c.step("write_file", {"path": a.get("path"),
                                                          "chars": len(str(a.get("content")))},
                                           lambda: c.files.write(str(a["path"]),
                                                                 str(a["content"])))),
    "edit_file": Tool("Replace text that occurs exactly once in a file of the workspace.",
                      {"path": STR, "old": STR, "new": STR}, ("path", "old", "new"),
                      lambda c, a: c.step("edit_file", a, lambda: c.files.edit(
                          str(a["path"]), str(a["old"]), str(a["new"])), idempotent=False)),
    "run_command": Tool("Run a shell command in the workspace (minimal environment, killed "
                        "at the timeout).",
                        {"command": STR, "timeout_s": {"type": "number"}}, ("command",),
                        lambda c, a: c.step("run_command", a, lambda: run_command(
                            str(a["command"]), c.files.root,
                            min(float(a.get("timeout_s", c.config.command_timeout_s)),
                                c.config.command_timeout_s)), idempotent=False)),
    "propose_debug_directions": Tool(
        "When you expect the gate to fail and know why: directions a person can pick for "
        "the next attempt, each a title and a rationale (and a skill, if one applies).",
        {"directions": {"type": "array", "items": {"type": "object", "properties": {
            "title": STR, "rationale": STR, "skill": STR, "score": {"type": "number"}},
            "required": ["title", "rationale"]}}}, ("directions",), _directions),
    "ask_approval": Tool("Ask a person before anything that changes the skill catalog. The "
                         "phase stops until they answer.",
                         {"skill": STR, "change": STR, "content": STR}, ("skill", "change"),
                         _approval),
}


def _write_report(c: Context) -> dict[str, Any]:
    from npu_deploy.agents.autopilot import write_report
    return write_report(c.run, c.tb)


def tool_schemas() -> list[dict[str, Any]]:
    """The tool list, sorted and frozen: identical bytes in every request (prompt caching),
    with the cache mark on the last one."""
    tools = [TOOLS[name].schema(name) for name in sorted(TOOLS)]
    tools[-1] = {**tools[-1], "cache_control": {"type": "ephemeral"}}
    return tools


# --- the prompt ------------------------------------------------------------------------

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
        failing = [c for c in ph.last_gate.checks if c.get("gating", True) and not c["passed"]]
        lines.append(f"The last gate of this phase ({ph.last_gate.gate}) "
                     f"{'passed' if ph.last_gate.passed else 'failed'}" +
                     (": " + "; ".join(f"{c['subject']} {c['metric']} = {c['value']:.4g} "
                                       f"(needs {c['comparison']} {c['threshold']:.4g})"
                                       for c in failing[:10]) if failing else "."))
    if run.instruction:
        lines.append(f"A person's instruction for this attempt: {run.instruction}")
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


# --- the loop --------------------------------------------------------------------------

class Conversation:
    def __init__(self, first: str) -> None:
        self.messages: list[dict[str, Any]] = [{"role": "user", "content": first}]
        self.sent = 0              # messages already recorded in an earlier request blob

    def assistant(self, blocks: list[dict[str, Any]]) -> None:
        if blocks:
            self.messages.append({"role": "assistant", "content": blocks})

    def user(self, content: list[dict[str, Any]]) -> None:
        self.messages.append({"role": "user", "content": content})

    def for_request(self) -> list[dict[str, Any]]:
        """The messages with the moving cache mark on the newest tool result."""
        out = list(self.messages)
        last = out[-1]
        if isinstance(last["content"], list) and last["content"] \
                and last["content"][-1].get("type") == "tool_result":
            blocks = list(last["content"])
            blocks[-1] = {**blocks[-1], "cache_control": {"type": "ephemeral"}}
            out[-1] = {**last, "content": blocks}
        return out


def sendable(block: dict[str, Any]) -> dict[str, Any]:
    """A response block as it goes back in the next request."""
    if block.get("type") == "text":
        return {"type": "text", "text": block["text"]}
    if block.get("type") == "tool_use":
        return {"type": "tool_use", "id": block["id"], "name": block["name"],
                "input": block.get("input") or {}}
    return {k: v for k, v in block.items() if v is not None}


def context_overflow(e: Exception) -> bool:
    text = str(e).lower()
    return getattr(e, "status_code", None) == 400 and (
        "prompt is too long" in text or "context window" in text or "context_length" in text)


class ClaudeAgent:
    """The conductor's Agent for `--agent claude`."""

    name = "claude"

    def __init__(self, client: Any = None, env: Mapping[str, str] | None = None) -> None:
        self._client = client
        self.env: Mapping[str, str] = os.environ if env is None else env

    def client(self, config: ClaudeConfig) -> Any:
        if self._client is None:
            import anthropic

            key = self.env.get(KEY_ENV)
            if not key:
                raise NeedsHuman(f"{KEY_ENV} is not set: export it and resume the run")
            self._client = anthropic.Anthropic(api_key=key, max_retries=config.max_retries)
        return self._client

    def work(self, run: Any) -> None:
        ws = workspace_of(run)
        config = ClaudeConfig.of(run_config(ws.store, ws.run_id))
        price = price_of(config.model, self.env)
        root = ws.directory
        oracle = ws.latest("answers", tool="build_oracle")
        prepare(ws, root, read_json(ws.store, oracle["answers"]) if oracle else None)
        ctx = Context(run, Files(root), config)
        system, tools = system_prompt(run.phase), tool_schemas()
        conv = Conversation(seed(run, ws, root))
        while True:
            event = run.exchange(partial(self._call, run, ws, config, price, system, tools,
                                         conv))
            if event.type == "error":
                if event.payload["kind"] == "context_window_exceeded":
                    conv = Conversation(reseed(run, ws, root))
                    continue
                raise NeedsHuman(f"the Anthropic API failed: {event.payload['message']}")
            conv.sent = len(conv.messages)
            response = read_json(ws.store, event.payload["response"])
            stop = event.payload["stop_reason"]
            blocks = [sendable(b) for b in response.get("content", [])]
            for b in blocks:
                if b.get("type") == "text" and b["text"].strip():
                    run.say(b["text"].strip())
            if stop == "tool_use":
                conv.assistant(blocks)
                conv.user(self._run_tools(ctx, [b for b in blocks if b["type"] == "tool_use"]))
            elif stop in ("end_turn", "stop_sequence"):
                return
            elif stop == "pause_turn":
                conv.assistant(blocks)
            elif stop == "max_tokens":
                conv.assistant([b for b in blocks if b.get("type") != "tool_use"])
                conv.user([{"type": "text", "text": "Your reply was cut off at the output "
                            "limit. Go on from there, in smaller steps."}])
            elif stop == "refusal":
                said = " ".join(b["text"] for b in blocks if b.get("type") == "text")
                raise NeedsHuman(f"Claude declined to go on with phase {run.phase} (stop "
                                 f"reason refusal){': ' + said[:300] if said else ''}")
            elif stop == "model_context_window_exceeded":
                conv = Conversation(reseed(run, ws, root))
            else:
                raise NeedsHuman(f"Claude stopped with an unknown stop reason {stop!r}")

    def _run_tools(self, ctx: Context, calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Every requested tool, in order; all the results go back in one turn."""
        results = []
        for call in calls:
            ok, content = run_tool(ctx, call["name"], dict(call.get("input") or {}))
            results.append({"type": "tool_result", "tool_use_id": call["id"],
                            "content": content, **({} if ok else {"is_error": True})})
        return results

    def _call(self, run: Any, ws: Workspace, config: ClaudeConfig, price: Price,
              system: list[dict[str, Any]], tools: list[dict[str, Any]],
              conv: Conversation) -> tuple[str, dict[str, Any]]:
        """One request (only when the log has no reply for this turn yet)."""
        import anthropic

        over = spent(run).over(config.budget)
        if over is not None:
            raise NeedsHuman(f"phase {run.phase} attempt {run.attempt}: {over}")

        messages = conv.for_request()
        request = {"model": config.model, "max_tokens": config.max_tokens,
                   "system": blob_json(ws.store, system), "tools": blob_json(ws.store, tools),
                   "messages_before": conv.sent, "new_messages": messages[conv.sent:]}
        t0 = time.perf_counter()
        try:
            message = self.client(config).messages.create(
                model=config.model, max_tokens=config.max_tokens, system=system,
                tools=tools, messages=messages)
        except anthropic.APIError as e:
            kind = "context_window_exceeded" if context_overflow(e) else "api_error"
            status = getattr(e, "status_code", None)
            return "error", {"kind": kind, "recoverable": True,
                             "message": scrub(f"{type(e).__name__}"
                                              f"{f' (HTTP {status})' if status else ''}: {e}",
                                              self.env),
                             "detail": f"request blob {blob_json(ws.store, request)}; after "
                                       f"{time.perf_counter() - t0:.1f} s and "
                                       f"{config.max_retries} retries"}
        duration = time.perf_counter() - t0
        u = message.usage
        usage = {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                 "cache_write_tokens": u.cache_creation_input_tokens or 0,
                 "cache_read_tokens": u.cache_read_input_tokens or 0}
        return "model.called", {
            "model": message.model, **usage, "cost_usd": price.cost(usage),
            "stop_reason": str(message.stop_reason), "duration_s": duration,
            "request_id": getattr(message, "_request_id", None),
            "request": blob_json(ws.store, request),
            "response": ws.store.put_blob(scrub(message.to_json(), self.env).encode())}


def run_tool(ctx: Context, name: str, args: dict[str, Any]) -> tuple[bool, str]:
    """One tool call: (ok, what goes back to the model). A failure is recorded as a failed
    step even when it happened before the tool's own step (a bad argument, no such tool)."""
    try:
        if name not in TOOLS:
            raise KeyError(f"no tool {name!r}")
        result = TOOLS[name].run(ctx, args)
    except ToolFailed as e:
        return False, scrub(str(e))
    except TOOL_ERRORS as e:
        error = e

        def fail() -> dict[str, Any]:
            raise error
        try:
            ctx.step(name, args, fail)
        except ToolFailed as recorded:
            return False, scrub(str(recorded))
        raise AssertionError("unreachable: the step re-raises") from None
    text = json.dumps(result, sort_keys=True, default=str)
    if len(text) > RESULT_CHARS:
        text = text[:RESULT_CHARS] + f"… ({len(text):,} characters; ask for less)"
    return True, text


# --- debug directions: the catalog's and the agent's -----------------------------------

class AgentDirections(SkillMatcher):
    """The catalog's debug skills for a failed gate, and the directions the agent proposed
    during the attempt (propose_debug_directions), best first."""

    def propose(self, run: Any, gate: dict[str, Any]) -> list[dict[str, Any]]:
        catalog = [d for d in super().propose(run, gate) if d["direction_id"] != "retry"]
        own: list[dict[str, Any]] = []
        c = run.conductor
        for e in c.store.events(c.run_id, phase=run.phase, types=("tool.completed",)):
            if e.attempt == run.attempt and e.payload["tool"] == "propose_debug_directions" \
                    and e.payload["ok"]:
                own = list(e.payload["result"]["directions"])
        ranked = sorted(catalog + own, key=lambda d: -d["score"])
        return ranked or super().propose(run, gate)


def pipeline() -> Pipeline:
    return Pipeline(ClaudeAgent(), gates(), AgentDirections())
