"""What the model may call: every tool with its description and the JSON schema it sees,
the handlers (the toolbox's steps, the workspace's files and commands, debug directions,
a request for a person's approval), and one call run as a recorded step whose failure
goes back to the model as an error."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import regex

from npu_deploy.agents.claude.config import ClaudeConfig, scrub
from npu_deploy.agents.claude.sandbox import (
    READ_CHARS,
    RESULT_CHARS,
    Files,
    hidden_paths,
    run_command,
)
from npu_deploy.kernels.definition.specs import Mode
from npu_deploy.kernels.plans.transforms import IllegalTransform
from npu_deploy.machine import NeedsHuman, ToolFailed
from npu_deploy.pipeline.report.write import write_report
from npu_deploy.pipeline.toolbox import Toolbox
from npu_deploy.pipeline.workspace import blob_json
from npu_deploy.skills.catalog import load_catalog
from npu_deploy.skills.matcher import whole_words

#: What a tool may raise for a bad request: recorded as a failed step, told to the model.
TOOL_ERRORS: tuple[type[Exception], ...] = (
    KeyError, ValueError, LookupError, TypeError, OSError, IllegalTransform, re.error,
    regex.error)


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
        settings = self.tb.ws.settings
        if name == "prefill":
            return settings.prefill
        if name == "decode":
            return settings.decode
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
                        "title": whole_words(str(d["title"])),
                        "rationale": str(d["rationale"]),
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
                         lambda c, a: write_report(c.run, c.tb)),
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
    "run_command": Tool("Run a shell command in the workspace, in a sandbox: only the "
                        "workspace is writable (not oracle/ or gates/), no network, a "
                        "minimal environment; killed at the timeout or past 1 MB of output; "
                        "files, the workspace and /tmp have size limits (the result's "
                        "'limit' says when one stopped a write).",
                        {"command": STR, "timeout_s": {"type": "number"}}, ("command",),
                        lambda c, a: c.step("run_command", a, lambda: run_command(
                            str(a["command"]), c.files.root,
                            min(float(a.get("timeout_s", c.config.command_timeout_s)),
                                c.config.command_timeout_s),
                            hidden=hidden_paths(c.tb.ws.store.path),
                            limits=c.config.sandbox), idempotent=False)),
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


def tool_schemas() -> list[dict[str, Any]]:
    """The tool list, sorted and frozen: identical bytes in every request (prompt caching),
    with the cache mark on the last one."""
    tools = [TOOLS[name].schema(name) for name in sorted(TOOLS)]
    tools[-1] = {**tools[-1], "cache_control": {"type": "ephemeral"}}
    return tools


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
