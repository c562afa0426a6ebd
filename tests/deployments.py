"""What a whole deployment must have done, checked on its stored events: shared by the
tests that deploy (tests/agents/test_defaults_pass.py through `deploy`, tests/cluster/
test_ray_matrix.py through a matrix on Ray)."""

from __future__ import annotations

import json

from npu_deploy.store import EventStore

#: The tiny deployments tests/cluster/test_ray_matrix.py's undisturbed matrix makes through
#: Ray, checked there as test_defaults_pass checks its own (the whole toolbox worked through,
#: every gate at its first attempt): test_defaults_pass's ONE_EACH leaves them out.
BY_MATRIX = (("tiny-llama", 16),)


def worked_through_the_toolbox(store: EventStore, events: list) -> None:
    """What a whole deployment records: every phase worked through the toolbox as steps
    with their skills; phases 4 and 5 kept only faster transforms, each try an experience;
    modeled profiles; the evaluator's full report stored with its gate."""
    loaded = {e.payload["skill"] for e in events if e.type == "skill.loaded"}
    assert {"deploy-new-llm", "phase-0-cpu-oracle", "phase-7-independent-evaluation"} <= loaded
    tools = {e.payload["tool"] for e in events if e.type == "tool.completed"}
    assert {"build_oracle", "select_tiles", "validate_kernel", "run_block", "run_model",
            "apply_transform", "profile", "generate", "emit_programs", "write_report"} <= tools
    tried = [e.payload["result"] for e in events if e.type == "tool.completed"
             and e.payload["tool"] == "apply_transform"]
    assert any(r["kept"] for r in tried)
    assert all(r["after_s"] < r["before_s"] for r in tried if r["kept"])
    experiences = [e.payload for e in events if e.type == "experience.recorded"]
    assert len(experiences) == len(tried)
    assert all(x["source"] == "modeled" and x["plan_before"].startswith("sha256:")
               for x in experiences)
    profiles = [e.payload for e in events if e.type == "profile.recorded"]
    assert profiles and all(p["source"] == "modeled" for p in profiles)
    evaluated = [e for e in events if e.type == "gate.evaluated" and e.phase == 7][-1]
    report = json.loads(store.get_blob(evaluated.payload["inputs"]))
    assert report["verdict"] == "PASS" and "Independent evaluation" in report["markdown"]
    assert events[-1].type == "run.finished" and events[-1].payload["verdict"] == "PASS"


def first_attempts_or_the_bars_fix(gates: dict[int, list[bool]], numerics: list[dict]) -> None:
    """Every gate passes on its first attempt, except that phase 3 may fail the bf16 bar and
    pass after the greedy-divergence skill's change of the recipe's numerics (one per failed
    attempt): on random weights, whose logits are all near ties, bf16 logits tie tokens the
    oracle ranks apart (tiny-llama-mha at 100 tokens: "prefill-100" at token 10, and FP32
    logits keep it). A tie bf16 cannot represent at all is not held against the deployment
    (docs/design.md#phase-3-full-model)."""
    assert {p: v for p, v in gates.items() if p != 3} == {p: [True] for p in range(8) if p != 3}
    assert gates[3][-1] and not any(gates[3][:-1]) and len(numerics) == len(gates[3]) - 1
