"""Which decisions a run takes now (events/decisions.py), and everyone who asks it agreeing:
over every state a real run passes through (the conductor, the fake pipeline, a person's
approves, redirects, picks, overrides, a pause and an abort), the machine allows exactly the
decisions the rule allows, the CLI's `decide` refuses exactly what it refuses, and the TUI's
palette and decision dialog offer exactly what it allows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from npu_deploy.events import DeploymentState, Event, NewEvent, apply, validate_payload
from npu_deploy.events.decisions import CHOICES, naming, open_decisions, refusal, waiting_on
from npu_deploy.machine import Conductor, DeploymentMachine, IllegalTransition, Policy, resume
from npu_deploy.machine.machine import trigger_for
from npu_deploy.store import EventStore
from npu_deploy.store.writer import prepare

BUDGET = 2
FAULTS = "1:1,2:9,3:9,5:9"      # gates of the fake pipeline that fail (phase:times)


def walk(store: EventStore, pipeline: Any) -> str:
    """A run through every kind of wait and decision: phase 0 redirected at its checkpoint,
    1 failed once and picked, paused at its checkpoint and resumed, 2 stopped after its budget
    and redirected, 3 failed and overridden while its directions wait, 5 stopped and
    overridden, and an abort at phase 7's checkpoint."""
    c = Conductor.start(store, pipeline, Policy(budget=BUDGET), model="tiny", run_id="walk")
    paused_once = False
    for _ in range(40):              # about 20 halts; a refused decision would loop
        halt = c.run(wait=False)
        s = c.state
        k = s.current_phase
        ph = s.phases[k] if k is not None else None
        if halt.reason == "awaiting_human" and k == 0 and ph.attempts == 1:
            store.post_command("walk", "redirect", {"instruction": "once more"})
        elif halt.reason == "awaiting_human" and k == 1 and not paused_once:
            store.post_command("walk", "pause")
            paused_once = True
        elif halt.reason == "awaiting_human" and k == 7:
            store.post_command("walk", "abort")
        elif halt.reason == "awaiting_human":
            store.post_command("walk", "approve")
        elif halt.reason == "awaiting_pick" and k == 3:
            store.post_command("walk", "approve", {"override": True})
        elif halt.reason == "awaiting_pick":
            store.post_command("walk", "pick", {"direction_id": "bo"})
        elif halt.reason == "needs_human" and k == 2:
            store.post_command("walk", "redirect", {"instruction": "fix it"})
        elif halt.reason == "needs_human":
            store.post_command("walk", "approve", {"override": True})
        elif halt.reason == "paused":
            c.close()
            c = resume(store, "walk", pipeline)
        else:
            assert halt.reason == "aborted", halt
            c.close()
            return "walk"
    c.close()
    raise AssertionError(f"the walk did not end: {halt}")


@pytest.fixture(scope="module")
def walked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, list[Event]]]:
    import os

    from fake_pipeline import make

    db = tmp_path_factory.mktemp("decisions") / "runs.db"
    saved = os.environ.get("FAKE_FAIL")
    os.environ["FAKE_FAIL"] = FAULTS
    try:
        with EventStore.open(db) as store:
            run_id = walk(store, make())
            events = list(store.events(run_id))
    finally:
        if saved is None:
            os.environ.pop("FAKE_FAIL", None)
        else:
            os.environ["FAKE_FAIL"] = saved
    yield db, events


def states(events: list[Event]) -> list[DeploymentState]:
    out, s = [], DeploymentState()
    for e in events:
        s = apply(s, e)
        out.append(s)
    return out


def candidates(s: DeploymentState) -> list[tuple[dict[str, Any], int | None]]:
    """Decisions a person might leave now, right and wrong, each with the phase the
    conductor would record it for (and a few for another phase)."""
    k = s.current_phase
    ph = s.phases[k] if k is not None else None
    ids = [d["direction_id"] for d in ph.pending_directions] if ph is not None else []
    payloads: list[dict[str, Any]] = [
        {"decision": "approve"}, {"decision": "approve", "checkpoint_id": "p9.a9"},
        {"decision": "approve", "override": True},
        {"decision": "redirect", "instruction": "again"},
        {"decision": "redirect", "instruction": "again", "checkpoint_id": "p9.a9"},
        {"decision": "pick", "direction_id": "nope"}, {"decision": "pause"},
        {"decision": "abort"}, *({"decision": "pick", "direction_id": d} for d in ids)]
    if ph is not None and ph.pending_checkpoint:
        payloads.append({"decision": "approve", "checkpoint_id": ph.pending_checkpoint})
    other = None if k is None else (k + 1) % 8
    return [(p, k) for p in payloads] + [(p, other) for p in payloads[:4]]


def machine_allows(s: DeploymentState, payload: dict[str, Any], phase: int | None) -> bool:
    full = validate_payload("human.decision", {**payload, "command_id": "c1"})
    try:
        trigger = trigger_for("human.decision", full, phase)
    except IllegalTransition:               # a phase decision without a phase
        return False
    return trigger is not None and DeploymentMachine(BUDGET, at=s).allows(trigger, s, full,
                                                                          phase)


def resumed(s: DeploymentState) -> DeploymentState:
    """`s` after its run.resumed: where a paused run reads its inbox."""
    event = prepare(NewEvent("run.resumed", {"from_version": s.version, "reason": "paused"}),
                    run_id=s.run_id, run_version=s.version + 1, prev_hash=s.last_hash)
    return apply(s, event)


def test_the_walk_passes_through_every_kind_of_wait(walked):
    _, events = walked
    seen = {(waiting_on(s).kind, s.status) for s in states(events)}
    assert {("checkpoint", "running"), ("proposal", "running"), ("stopped", "needs_human"),
            ("checkpoint", "paused"), ("none", "running"), ("none", "aborted")} <= seen
    kinds = {(e.payload["decision"], bool(e.payload.get("override")))
             for e in events if e.type == "human.decision"}
    assert kinds == {("approve", False), ("approve", True), ("redirect", False),
                     ("pick", False), ("pause", False), ("abort", False)}


EXPECTED = {   # (what waits, run status) -> what a person may decide
    ("checkpoint", "running"): ("approve", "redirect", "pause", "abort"),
    ("checkpoint", "paused"): ("approve", "redirect", "abort"),
    ("proposal", "running"): ("pick", "override", "pause", "abort"),
    ("stopped", "needs_human"): ("redirect", "override", "pause", "abort"),
    ("none", "running"): ("pause", "abort"),
    ("none", "aborted"): (),
}


def test_what_each_wait_takes(walked):
    _, events = walked
    for s in states(events):
        waiting = waiting_on(s)
        answered = waiting.kind == "stopped" and s.phases[waiting.phase].decision is not None
        want = ("pause", "abort") if answered else EXPECTED[waiting.kind, s.status]
        assert open_decisions(s).choices == want, s.version
    at = next(s for s in states(events) if waiting_on(s).kind == "checkpoint")
    k, cid = at.current_phase, waiting_on(at).id
    assert refusal(at, {"decision": "approve", "checkpoint_id": cid}, k) is None
    assert refusal(at, {"decision": "approve", "checkpoint_id": "p9.a1"}, k) == \
        f"waits at checkpoint {cid}; p9.a1 is no longer open"
    assert refusal(at, {"decision": "approve"}, k + 1) == \
        f"waits for a decision on phase {k}, not phase {k + 1}"
    assert "only with an instruction" in refusal(at, {"decision": "redirect"}, k)
    assert refusal(at, {"decision": "approve", "override": True}, k).startswith(
        "has no failed gate waiting for a person")
    proposal = next(s for s in states(events) if waiting_on(s).kind == "proposal")
    k = proposal.current_phase
    assert open_decisions(proposal).pick == ("tile", "bo")
    assert refusal(proposal, {"decision": "pick", "direction_id": "x"}, k) == \
        f"has no debug direction 'x' to pick (phase {k} proposed tile, bo)"
    assert refusal(proposal, {"decision": "approve"}, k).startswith(
        "is not waiting at a checkpoint")


@pytest.mark.slow         # every state of the walk by every choice: ~15 s
def test_the_machine_allows_exactly_what_the_rule_allows(walked):
    _, events = walked
    checked = 0
    for s in states(events):
        for payload, phase in candidates(s):
            legal = refusal(s, payload, phase) is None
            if s.status == "paused" and payload["decision"] != "pause":
                # a paused run reads its inbox after run.resumed
                assert legal == machine_allows(resumed(s), payload, phase), (s, payload)
            else:
                assert legal == machine_allows(s, payload, phase), (s.version, payload, phase)
            checked += legal
    assert checked > 50


def test_open_decisions_is_the_rule_asked_for_each_choice(walked):
    _, events = walked
    for s in states(events):
        legal = open_decisions(s)
        k = s.current_phase
        assert legal.allows("approve") == (refusal(s, {"decision": "approve"}, k) is None)
        assert legal.allows("override") == (
            refusal(s, {"decision": "approve", "override": True}, k) is None)
        assert legal.allows("redirect") == (
            refusal(s, {"decision": "redirect", "instruction": "x"}, k) is None)
        assert set(legal.pick) == {d["direction_id"] for d in (
            s.phases[k].pending_directions if k is not None else ())
            if refusal(s, {"decision": "pick", "direction_id": d["direction_id"]}, k) is None}
        assert set(legal.choices) | set(legal.refused) == set(CHOICES)
        assert not set(legal.choices) & set(legal.refused)


def test_the_tui_offers_exactly_what_the_rule_allows(walked):
    from npu_deploy.tui.screens.decision import DecisionDialog
    from npu_deploy.tui.screens.run import RunScreen

    titles = {"Approve phase": "approve", "Redirect phase": "redirect",
              "Pick a debug direction": "pick", "Override the failed gate": "override",
              "Pause the run": "pause", "Abort the run": "abort"}
    _, events = walked
    for s in states(events):
        screen = RunScreen("walk", live=True)
        screen.head_state, screen.cursor = s, s.version
        offered = []
        for command in screen.decision_commands():
            offered.append(next(v for t, v in titles.items() if command.title.startswith(t)))
        legal = open_decisions(s).choices
        assert tuple(offered) == legal, (s.version, offered, legal)
        if open_decisions(s).decides_a_phase:
            dialog = DecisionDialog("walk", s)
            assert dialog.choices() == legal      # pause and abort too, one key each


CLI_DECISIONS = (("approve",), ("approve", "--override"), ("redirect", "do it again"),
                 ("pick", "1"), ("pick", "2"), ("pause",), ("abort",))


def cli_payload(s: DeploymentState, args: tuple[str, ...]) -> tuple[dict[str, Any], bool]:
    """The payload `decide` would leave for `args`, and whether it names a real direction."""
    decision, rest = args[0], args[1:]
    if "--override" in rest:
        return {"decision": "approve", "override": True}, True
    if decision == "redirect":
        return {"decision": "redirect", "instruction": rest[0]}, True
    if decision == "pick":
        k = s.current_phase
        directions = s.phases[k].pending_directions if k is not None else ()
        n = int(rest[0])
        if n > len(directions):
            return {"decision": "pick", "direction_id": "nope"}, False
        return {"decision": "pick", "direction_id": directions[n - 1]["direction_id"]}, True
    return {"decision": decision}, True


def test_the_cli_refuses_exactly_what_the_rule_refuses(walked, cli):
    from npu_deploy.machine import fork

    db, events = walked
    # one state of each kind the walk went through: its first version
    first: dict[tuple[Any, ...], int] = {}
    for s in states(events):
        k = s.current_phase
        kind = (s.status, waiting_on(s).kind, s.phases[k].status if k is not None else None,
                open_decisions(s).choices)
        first.setdefault(kind, s.version)
    assert len(first) >= 8
    with EventStore.open(db) as store:
        forks = {v: fork(store, "walk", v) for v in first.values()}
    for v, run_id in forks.items():
        for args in CLI_DECISIONS:
            with EventStore.open(db) as store:
                s = store.fold(run_id)          # `decide` reads the log, never the inbox
                before = store.pending_commands(run_id)
            payload, real = cli_payload(s, args)
            legal = real and refusal(s, payload, s.current_phase) is None
            result = cli("--db", db, "decide", run_id, *args)
            assert (result.exit_code == 0) == legal, (v, args, result.stderr)
            with EventStore.open(db) as store:
                left = store.pending_commands(run_id)[len(before):]
            # what it leaves is the decision the rule allowed, and nothing when it refuses
            # and names what it answers (events/decisions.py naming)
            if payload["decision"] in ("approve", "redirect", "pick"):
                payload = {**payload, **naming(waiting_on(s))}
            assert [{"decision": c["kind"], **c["payload"]} for c in left] == \
                ([payload] if legal else [])


# --- the rule on its own ------------------------------------------------------------------

def test_a_paused_run_takes_a_decision_after_it_resumes(store, fake):
    """A pause and an approve in the inbox together: the approve is not refused while the
    run is paused; it is recorded when the run resumes."""
    pipeline = fake()
    c = Conductor.start(store, pipeline, Policy(), model="tiny")
    assert c.run(wait=False).reason == "awaiting_human"
    store.post_command(c.run_id, "pause")
    store.post_command(c.run_id, "approve")
    assert c.run(wait=False).reason == "paused"
    c.close()
    assert not [e for e in store.events(c.run_id) if e.type == "error"]
    assert [cmd["kind"] for cmd in store.pending_commands(c.run_id)] == ["approve"]
    assert open_decisions(store.fold(c.run_id)).allows("approve")
    c = resume(store, c.run_id, pipeline)
    assert c.run(wait=False).reason == "awaiting_human" and c.state.current_phase == 1
    c.close()
    assert not store.pending_commands(c.run_id)


def test_a_refused_command_is_recorded_with_the_rules_reason(store, fake):
    c = Conductor.start(store, fake(), Policy(), model="tiny")
    assert c.run(wait=False).reason == "awaiting_human"
    store.post_command(c.run_id, "pick", {"direction_id": "tile"})
    c.run(wait=False)
    c.close()
    [error] = [e for e in store.events(c.run_id) if e.type == "error"]
    assert error.payload["message"] == "pick refused: the run has no debug directions to pick from"
