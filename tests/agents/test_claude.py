"""The Claude agent, offline: the real `anthropic` client on an `httpx2.MockTransport` that
replays scripted conversations, driving the real conductor, toolbox and gates on a tiny
random model in a real store. Plus one live test against the API, skipped without a key."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

import anthropic
import httpx2
import pytest
from conftest import assert_one_error

from npu_deploy.agents.claude import (
    PRICES,
    Budget,
    ClaudeAgent,
    ClaudeConfig,
    pipeline,
)
from npu_deploy.machine import Conductor, Policy, resume
from npu_deploy.pipeline.workspace import workspace_dir
from npu_deploy.store import EventStore

KEY = "sk-ant-api03-planted-key-0123456789abcdefXYZ"
MODEL = "claude-sonnet-5-5"
#: a short prompt and few greedy steps: what is checked here is the agent loop, not the numerics
FAST = {"seq_len": 32, "steps": 8}


def message(*blocks: dict[str, Any], stop: str = "end_turn", n: int = 0,
            usage: dict[str, int] | None = None) -> dict[str, Any]:
    return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": MODEL,
            "content": list(blocks), "stop_reason": stop, "stop_sequence": None,
            "usage": usage or {"input_tokens": 1000, "output_tokens": 100,
                               "cache_creation_input_tokens": 2000,
                               "cache_read_input_tokens": 3000}}


def text(t: str) -> dict[str, Any]:
    return {"type": "text", "text": t}


def use(name: str, i: int, **args: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": f"toolu_{i}", "name": name, "input": args}


class Script:
    """The API's side: each request gets the next reply (a Message dict, or a (status,
    body) pair for an error); every request body is kept."""

    def __init__(self, *replies: Any) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self.raw: list[bytes] = []
        self.headers: list[dict[str, str]] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.raw.append(request.content)
        self.requests.append(json.loads(request.content))
        self.headers.append(dict(request.headers))
        if not self.replies:
            raise AssertionError("the agent made more requests than the script has replies")
        reply = self.replies.pop(0)
        if isinstance(reply, tuple):
            status, body = reply
            return httpx2.Response(status, json=body,
                                   headers={"retry-after-ms": "5", "request-id": "req_err"})
        return httpx2.Response(200, json=reply,
                               headers={"request-id": f"req_{len(self.requests)}"})

    def client(self, max_retries: int = 2) -> anthropic.Anthropic:
        return anthropic.Anthropic(api_key=KEY, max_retries=max_retries,
                                   http_client=httpx2.Client(
                                       transport=httpx2.MockTransport(self)))


def claude_pipeline(script: Script, max_retries: int = 2) -> Any:
    p = pipeline()
    p.agent = ClaudeAgent(script.client(max_retries), env={"ANTHROPIC_API_KEY": KEY})
    return p


def start(store: EventStore, script: Script, *, budget: Budget | None = None,
          max_retries: int = 2, on_event: Callable[[Any], None] | None = None,
          run_id: str | None = None) -> Conductor:
    config = ClaudeConfig(model=MODEL, budget=budget or Budget(), max_retries=max_retries,
                          command_timeout_s=2.0)
    return Conductor.start(store, claude_pipeline(script, max_retries), Policy(),
                           model="tiny-llama-mha",
                           config={**FAST, "pipeline": "npu_deploy.agents.claude:pipeline",
                                   "claude": config.to_config()},
                           on_event=on_event, run_id=run_id)


def run_phase0(store: EventStore, script: Script, **kw: Any) -> tuple[str, Any, list[Any]]:
    c = start(store, script, **kw)
    try:
        halt = c.run(wait=False)
    finally:
        c.close()
    return c.run_id, halt, list(store.events(c.run_id))


def of(events: list[Any], type_: str) -> list[Any]:
    return [e for e in events if e.type == type_]


def last_user_blocks(request: dict[str, Any]) -> list[dict[str, Any]]:
    content = request["messages"][-1]["content"]
    return content if isinstance(content, list) else [text(content)]


# --- a phase through tool calls --------------------------------------------------------------

@pytest.mark.slow         # 8 s on 2 busy cores: out of the fast core
def test_a_phase_completed_through_tool_calls(store):
    script = Script(message(text("Building the oracle."), use("build_oracle", 1),
                            stop="tool_use", n=1),
                    message(text("The oracle is stored; over to the gate."), n=2))
    run_id, halt, events = run_phase0(store, script)
    # the gate of phase 0 (the harness's) passed on what the tool stored
    assert halt.reason == "awaiting_human", halt
    gate = of(events, "gate.evaluated")
    assert len(gate) == 1 and gate[0].phase == 0 and gate[0].payload["passed"]
    calls = of(events, "model.called")
    assert [c.payload["stop_reason"] for c in calls] == ["tool_use", "end_turn"]
    first = calls[0].payload
    assert first["request_id"] == "req_1" and first["model"] == MODEL
    assert (first["input_tokens"], first["output_tokens"], first["cache_write_tokens"],
            first["cache_read_tokens"]) == (1000, 100, 2000, 3000)
    price = PRICES[MODEL]
    assert first["cost_usd"] == pytest.approx((1000 * price.input + 100 * price.output
                                               + 2000 * price.cache_write
                                               + 3000 * price.cache_read) / 1e6)
    # the response and the request are blobs; the tool ran as a recorded step
    assert json.loads(store.get_blob(first["response"]))["content"][1]["name"] == "build_oracle"
    done = [e for e in of(events, "tool.completed") if e.payload["tool"] == "build_oracle"]
    assert len(done) == 1 and done[0].payload["ok"] and done[0].actor == "agent"
    assert "Building the oracle." in [e.payload["text"] for e in of(events, "agent.message")]
    # totals fold from the events
    totals = store.fold(run_id).totals
    assert totals.model_calls == 2 and totals.cache_read_tokens == 6000
    assert totals.cost_usd == pytest.approx(2 * first["cost_usd"])
    # the tool result went back in one user turn, with the moving cache mark
    second = script.requests[1]
    result = last_user_blocks(second)
    assert [b["type"] for b in result] == ["tool_result"]
    assert result[0]["tool_use_id"] == "toolu_1" and "is_error" not in result[0]
    assert result[0]["cache_control"] == {"type": "ephemeral"}
    assert "cache_control" not in json.dumps(second["messages"][:-1])


def test_the_system_prompt_and_tools_are_the_same_bytes_every_turn(store):
    script = Script(message(use("list_files", 1), stop="tool_use", n=1),
                    message(use("build_oracle", 2), stop="tool_use", n=2),
                    message(text("done"), n=3))
    run_phase0(store, script)
    assert len(script.requests) == 3

    def part(raw: bytes, key: str) -> bytes:
        body = json.loads(raw)
        return json.dumps(body[key], sort_keys=False).encode()
    assert len({part(r, "system") for r in script.raw}) == 1
    assert len({part(r, "tools") for r in script.raw}) == 1
    # ... and sorted, with one cache mark on the last tool and one on the system prompt
    tools = script.requests[0]["tools"]
    assert [t["name"] for t in tools] == sorted(t["name"] for t in tools)
    assert [("cache_control" in t) for t in tools] == [False] * (len(tools) - 1) + [True]
    assert script.requests[0]["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "phase-0-cpu-oracle" in script.requests[0]["system"][0]["text"]
    seed = script.requests[0]["messages"][0]["content"]
    assert "Phase 0 (build CPU oracle), attempt 1" in seed


def test_a_tool_error_goes_back_as_is_error_and_is_logged(store):
    script = Script(message(use("build_oracle", 1), use("validate_kernel", 2, kernel="nope"),
                            use("profile", 3, mode="sideways"), use("no_such_tool", 4),
                            stop="tool_use", n=1),
                    message(text("noted"), n=2))
    _, halt, events = run_phase0(store, script)
    results = last_user_blocks(script.requests[1])
    assert [r["tool_use_id"] for r in results] == ["toolu_1", "toolu_2", "toolu_3", "toolu_4"]
    assert [r.get("is_error", False) for r in results] == [False, True, True, True]
    assert "KeyError" in results[1]["content"] and "nope" in results[1]["content"]
    assert "sideways" in results[2]["content"] and "no_such_tool" in results[3]["content"]
    failed = [e.payload for e in of(events, "tool.completed") if not e.payload["ok"]]
    assert [p["tool"] for p in failed] == ["validate_kernel", "profile", "no_such_tool"]
    # every request has its completion: nothing is left for a resume to redo
    requested = {e.payload["call_id"] for e in of(events, "tool.requested")}
    completed = {e.payload["call_id"] for e in of(events, "tool.completed")}
    assert requested == completed
    assert halt.reason == "awaiting_human"        # the oracle was built: the gate passed


@pytest.mark.slow         # 11 s on 2 busy cores: out of the fast core
def test_an_overloaded_api_is_retried_then_succeeds(store):
    script = Script((529, {"type": "error", "error": {"type": "overloaded_error",
                                                      "message": "Overloaded"}}),
                    message(use("build_oracle", 1), stop="tool_use", n=1),
                    message(text("done"), n=2))
    _, halt, events = run_phase0(store, script)
    assert len(script.requests) == 3 and halt.reason == "awaiting_human"
    assert len(of(events, "model.called")) == 2 and not of(events, "error")


def test_an_api_that_keeps_failing_is_an_error_event_then_a_person(store, db_path):
    body = {"type": "error", "error": {"type": "api_error",
                                       "message": f"internal error for key {KEY}"}}
    script = Script((500, body), (500, body))
    run_id, halt, events = run_phase0(store, script, max_retries=1)
    errors = of(events, "error")
    assert len(errors) == 1 and errors[0].payload["kind"] == "api_error"
    assert "HTTP 500" in errors[0].payload["message"]
    assert KEY not in errors[0].payload["message"] and "[ANTHROPIC_API_KEY]" in \
        errors[0].payload["message"]
    exited = of(events, "phase.exited")[-1].payload
    assert exited["outcome"] == "needs_human" and "Anthropic API failed" in exited["reason"]
    assert halt.reason == "needs_human"


def test_max_tokens_drops_the_cut_tool_call_and_asks_to_go_on(store):
    script = Script(message(text("I will build"), use("build_oracle", 1), stop="max_tokens",
                            n=1),
                    message(use("build_oracle", 2), stop="tool_use", n=2),
                    message(text("done"), n=3))
    _, halt, events = run_phase0(store, script)
    second = script.requests[1]["messages"]
    assert second[-2] == {"role": "assistant", "content": [text("I will build")]}
    assert "cut off" in second[-1]["content"][0]["text"]
    assert len([e for e in of(events, "tool.completed")
                if e.payload["tool"] == "build_oracle"]) == 1
    assert halt.reason == "awaiting_human"


def test_a_refusal_stops_the_phase_for_a_person(store):
    script = Script(message(text("I can't help with that."), stop="refusal", n=1))
    _, halt, events = run_phase0(store, script)
    exited = of(events, "phase.exited")[-1].payload
    assert exited["outcome"] == "needs_human" and "refusal" in exited["reason"]
    assert halt.reason == "needs_human" and not of(events, "gate.evaluated")


def test_a_spent_budget_stops_the_phase_with_the_figures(store):
    script = Script(message(use("list_files", 1), stop="tool_use", n=1))
    _, halt, events = run_phase0(store, script, budget=Budget(turns=1))
    reason = of(events, "phase.exited")[-1].payload["reason"]
    assert "turns budget" in reason and "turns 1/1" in reason and "$" in reason
    assert len(script.requests) == 1 and halt.reason == "needs_human"


@pytest.mark.slow         # 8 s on 2 busy cores: out of the fast core
def test_a_full_context_window_starts_over_from_the_log(store):
    script = Script(message(use("build_oracle", 1), stop="tool_use", n=1),
                    (400, {"type": "error", "error": {
                        "type": "invalid_request_error",
                        "message": "prompt is too long: 250000 tokens > 200000 maximum"}}),
                    message(text("done"), n=3))
    _, halt, events = run_phase0(store, script)
    assert [e.payload["kind"] for e in of(events, "error")] == ["context_window_exceeded"]
    fresh = script.requests[2]["messages"]
    assert len(fresh) == 1 and "context window filled" in fresh[0]["content"]
    assert "build_oracle ok" in fresh[0]["content"]
    assert halt.reason == "awaiting_human"


def test_the_agents_debug_directions_join_the_catalogs_when_the_gate_fails(store):
    script = Script(message(use("propose_debug_directions", 1, directions=[
        {"title": "rebuild the oracle with float64 norms", "rationale": "the RMSNorm eps "
         "differs", "score": 0.9}]), stop="tool_use", n=1),
        message(text("I did not build the oracle; the gate will fail."), n=2))
    _, halt, events = run_phase0(store, script)
    assert not of(events, "gate.evaluated")[0].payload["passed"]
    directions = of(events, "debug.proposed")[0].payload["directions"]
    assert directions[0]["direction_id"] == "agent-1" and directions[0]["score"] == 0.9
    assert directions[0]["title"] == "rebuild the oracle with float64 norms"
    assert halt.reason == "awaiting_pick"


def test_asking_to_change_the_catalog_stops_for_a_person(store):
    script = Script(message(use("ask_approval", 1, skill="layout-alignment",
                                change="add a trigger for head_dim 96",
                                content="- id: hd96"), stop="tool_use", n=1))
    _, halt, events = run_phase0(store, script)
    exited = of(events, "phase.exited")[-1].payload
    assert exited["outcome"] == "needs_human" and "layout-alignment" in exited["reason"]
    asked = [e.payload["result"] for e in of(events, "tool.completed")
             if e.payload["tool"] == "ask_approval"][0]
    assert json.loads(store.get_blob(asked["proposal"]))["content"] == "- id: hd96"
    assert halt.reason == "needs_human" and len(script.requests) == 1


@pytest.mark.slow         # 9 s on 2 busy cores: out of the fast core
def test_pause_turn_sends_the_turn_back_and_the_context_stop_reason_starts_over(store):
    script = Script(message(text("searching"), stop="pause_turn", n=1),
                    message(use("build_oracle", 1), stop="tool_use", n=2),
                    message(stop="model_context_window_exceeded", n=3),
                    message(text("done"), n=4))
    _, halt, events = run_phase0(store, script)
    second = script.requests[1]["messages"]
    assert second[-1] == {"role": "assistant", "content": [text("searching")]}
    fresh = script.requests[3]["messages"]
    assert len(fresh) == 1 and "build_oracle ok" in fresh[0]["content"]
    assert [e.payload["stop_reason"] for e in of(events, "model.called")] == [
        "pause_turn", "tool_use", "model_context_window_exceeded", "end_turn"]
    assert halt.reason == "awaiting_human"


# --- the workspace -------------------------------------------------------------------------

def test_the_workspace_refuses_escapes_and_protected_paths(store, db_path, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("not yours")
    script = Script(message(use("read_file", 1, path="../../secret.txt"),
                            use("read_file", 2, path="link/secret.txt"),
                            use("write_file", 3, path="gates/model.py", content="PASS"),
                            use("edit_file", 4, path="gates/model.py", old="def", new="x"),
                            use("write_file", 5, path="notes/plan.md", content="# plan"),
                            use("read_file", 6, path="notes/plan.md"),
                            use("grep", 7, pattern="^# plan", path="notes"),
                            use("run_command", 8, command="env; cat notes/plan.md"),
                            stop="tool_use", n=1),
                    message(text("done"), n=2))

    root = workspace_dir(db_path, "escape")          # a symlink out of the workspace
    root.mkdir(parents=True)
    (root / "link").symlink_to(tmp_path)
    _, _, events = run_phase0(store, script, run_id="escape")
    results = last_user_blocks(script.requests[1])
    for r in results[:4]:
        assert r.get("is_error") and "refused" in r["content"], r
    assert "outside the run's workspace" in results[0]["content"]
    assert "outside the run's workspace" in results[1]["content"]      # via the symlink
    assert "protected" in results[2]["content"] and "protected" in results[3]["content"]
    assert [r.get("is_error", False) for r in results[4:]] == [False] * 4
    assert "# plan" in json.loads(results[5]["content"])["text"]
    assert json.loads(results[6]["content"])["count"] == 1
    command = json.loads(results[7]["content"])
    assert command["exit_code"] == 0 and "# plan" in command["output"]
    assert "ANTHROPIC" not in command["output"] and KEY not in command["output"]
    assert "not yours" not in json.dumps(results)
    refused = [e for e in of(events, "tool.completed") if not e.payload["ok"]]
    assert len(refused) == 4 and all("refused" in e.payload["result"]["error"]
                                     for e in refused)
    gates_copy = workspace_dir(db_path, events[0].run_id) / "gates" / "model.py"
    assert "def " in gates_copy.read_text()


def test_a_command_past_its_timeout_is_killed_with_its_children(store):
    script = Script(message(use("run_command", 1, command="sleep 30 & sleep 30; echo late",
                                timeout_s=1), stop="tool_use", n=1),
                    message(text("done"), n=2))
    t0 = time.monotonic()
    run_phase0(store, script)
    result = json.loads(last_user_blocks(script.requests[1])[0]["content"])
    assert result["timed_out"] and "late" not in result["output"]
    assert time.monotonic() - t0 < 25


# --- resume and the key -----------------------------------------------------------------

class Crash(Exception):
    pass


def test_a_resumed_run_does_not_reissue_logged_calls(store):
    first = Script(message(text("Building."), use("build_oracle", 1), stop="tool_use", n=1),
                   message(text("never sent"), n=2))

    def crash(e: Any) -> None:
        if e.type == "tool.completed" and e.payload["tool"] == "build_oracle":
            raise Crash("the process died here")
    c = start(store, first, on_event=crash)
    with pytest.raises(Crash):
        c.run(wait=False)
    c.close()
    assert len(first.requests) == 1
    second = Script(message(text("The oracle is there; done."), n=2))
    p = claude_pipeline(second)
    c2 = resume(store, c.run_id, p)
    try:
        halt = c2.run(wait=False)
    finally:
        c2.close()
    events = list(store.events(c.run_id))
    # one new request only: the first turn's reply and the tool's result came from the log
    assert len(second.requests) == 1 and halt.reason == "awaiting_human"
    assert len(of(events, "model.called")) == 2
    assert len([e for e in of(events, "tool.completed")
                if e.payload["tool"] == "build_oracle"]) == 1
    assert [e.payload["text"] for e in of(events, "agent.message")].count("Building.") == 1
    # the conversation it went on from is the one the first process had
    resumed = second.requests[0]["messages"]
    assert resumed[1]["content"][1] == {"type": "tool_use", "id": "toolu_1",
                                        "name": "build_oracle", "input": {}}
    assert resumed[2]["content"][0]["tool_use_id"] == "toolu_1"


@pytest.mark.slow         # 6 s on 2 busy cores: out of the fast core
def test_the_api_key_is_nowhere_in_the_store(db_path, tmp_path):
    body = {"type": "error", "error": {"type": "api_error", "message": f"echo {KEY}"}}
    with EventStore.open(db_path) as store:
        script = Script(message(text(f"the header said {KEY}"), use("build_oracle", 1),
                                use("run_command", 2, command="env"), stop="tool_use", n=1),
                        (500, body), (500, body))
        run_phase0(store, script, max_retries=1)
        assert KEY in " ".join(script.headers[0].values())     # sent, as it must be
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path


# --- the command line ----------------------------------------------------------------------

def test_deploy_with_claude_and_no_key_fails_before_any_run(cli, db_path):
    r = cli("--db", db_path, "deploy", "tiny-llama-mha", "--agent", "claude", "--headless",
            env={"ANTHROPIC_API_KEY": None})
    assert_one_error(r, "ANTHROPIC_API_KEY")
    assert not db_path.exists()


def test_resuming_a_claude_run_without_the_key_fails_and_changes_nothing(cli, store, db_path):
    script = Script(message(text("no"), stop="refusal", n=1))
    run_id, halt, events = run_phase0(store, script)
    assert halt.reason == "needs_human"
    r = cli("--db", db_path, "resume", run_id, env={"ANTHROPIC_API_KEY": None})
    assert_one_error(r, "ANTHROPIC_API_KEY", "resuming it")
    assert [e.hash for e in store.events(run_id)] == [e.hash for e in events]


@pytest.mark.parametrize("args, needle", [
    (["--model", "claude-unknown-9"], "no list price known"),
    (["--agent-budget", "turns=0"], "must be > 0"),
    (["--agent-budget", "dollars=3"], "expected turns="),
])
def test_deploy_with_claude_refuses_bad_settings_in_one_line(cli, db_path, args, needle):
    r = cli("--db", db_path, "deploy", "tiny-llama-mha", "--agent", "claude", "--headless",
            *args, env={"ANTHROPIC_API_KEY": KEY})
    assert KEY not in assert_one_error(r, needle)
    assert not db_path.exists()


# --- live -------------------------------------------------------------------------------

@pytest.mark.live
@pytest.mark.skipif(not os.environ.get("ANTHROPIC_API_KEY"),
                    reason="needs ANTHROPIC_API_KEY and the network (a live Claude call)")
def test_live_claude_builds_the_oracle(store):
    config = ClaudeConfig(budget=Budget(turns=8, usd=1.0))
    c = Conductor.start(store, pipeline(), Policy(), model="tiny-llama-mha",
                        config={**FAST, "claude": config.to_config()})
    try:
        halt = c.run(wait=False)
    finally:
        c.close()
    events = list(store.events(c.run_id))
    assert of(events, "model.called") and halt.reason in ("awaiting_human", "needs_human")


def test_a_redirect_reaches_claude_verbatim_marked_as_the_persons(store):
    """Phase 0 passes; a person redirects it; the next attempt's first turn carries the
    instruction word for word, marked as the person's, and an event answers the decision."""
    said = "Use the chat template; keep the\nBOS token. {not a format string}"
    script = Script(message(text("Building the oracle."), use("build_oracle", 1),
                            stop="tool_use", n=1),
                    message(text("done"), n=2),
                    message(text("Following the person."), n=3))
    c = start(store, script)
    try:
        assert c.run(wait=False).reason == "awaiting_human"
        store.post_command(c.run_id, "redirect", {"instruction": said})
        c.run(wait=False)
    finally:
        c.close()
    first_turn = script.requests[2]["messages"][0]["content"]
    body = first_turn if isinstance(first_turn, str) else \
        "".join(b.get("text", "") for b in first_turn)
    assert "From the person watching this deployment" in body
    assert f"<person>\n{said}\n</person>" in body
    events = list(store.events(c.run_id))
    (decision,) = [e for e in events if e.type == "human.decision"]
    answers = [e for e in events if e.causation_id == decision.event_id]
    assert answers and answers[0].type == "agent.message" and said in answers[0].payload["text"]
