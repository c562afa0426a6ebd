"""Phase 7: the independent evaluator. A fresh process that opens the store read-only and
trusts nothing the run says about itself:

* the log: it verifies, anchored by this user's key (the chain, every blob it references,
  its snapshots and its runs row: `EventStore.verify`), or nothing is evaluated; every
  person's decision is the record of an inbox command signed by their key; and every
  phase that exited as passed did so after a passing gate and an approving decision of the
  same attempt;
* its own oracle: the FP32 reference's golden tensors and greedy runs, and the bf16
  reference (oracle/bf16.py), computed again and compared with what phase 0 stored;
* every gate of phases 0-6 re-run on the recipe the phase passed with, against its own
  oracle, and each must pass;
* its own profiles: the deployed plans re-estimated, and the report's figures compared.

    python -m npu_deploy.pipeline.evaluator STORE RUN [--json]

prints the evaluation (JSON with --json, markdown otherwise); exit 0 on PASS, 1 on FAIL,
2 when the run cannot be evaluated at all.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from typing import Any

import click

from npu_deploy.events import progress
from npu_deploy.events.describe import check_text, gate_figures
from npu_deploy.events.payloads import GateEvaluated, HumanDecision, PhaseExited
from npu_deploy.oracle import reference_of
from npu_deploy.oracle.bf16 import Bf16Run, bf16_reference
from npu_deploy.pipeline.check_reuse import counted, signature
from npu_deploy.pipeline.deployed import reference_greedy
from npu_deploy.pipeline.gates.block import block_checks
from npu_deploy.pipeline.gates.common import check, time_word
from npu_deploy.pipeline.gates.kernels import kernel_checks
from npu_deploy.pipeline.gates.model import model_checks
from npu_deploy.pipeline.gates.oracle import oracle_checks
from npu_deploy.pipeline.gates.runner import report_check
from npu_deploy.pipeline.gates.speed import speed_check
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.toolbox import stored_bf16
from npu_deploy.pipeline.workspace import Workspace, read_json
from npu_deploy.store import EventStore, StoreError


def recipes_at_gates(ws: Workspace) -> dict[int, Recipe]:
    """The recipe each phase's last passing gate was evaluated on."""
    current: str | None = None
    at: dict[int, Recipe] = {}
    for e in ws.store.events(ws.run_id):
        p = e.payload
        if e.type == "tool.completed" and p["ok"] and "recipe" in p["result"]:
            current = p["result"]["recipe"]
        elif e.type == "gate.evaluated" and p["passed"] and e.phase is not None:
            at[e.phase] = (Recipe() if current is None
                           else Recipe.from_json(ws.store.get_blob(current)))
    return at


def log_checks(ws: Workspace) -> list[dict[str, Any]]:
    report = ws.store.verify(ws.run_id)
    checks = [check("log", "hash_chain_intact", 1 if report.ok else 0, 1, ">=",
                    message=report.problem or ""),
              check("log", "anchored_by_this_users_key", 1 if report.trusted else 0, 1, ">=",
                    message=report.unanchored or "")]
    # Every person's decision is the record of their inbox command, signed by their key: one
    # appended without one (through the writer, by code that holds the key) counts for nothing.
    unbacked = ws.store.unbacked_decisions(ws.run_id)
    checks += [check(f"decision v{v}", "decision_has_its_command_or_policy", 0, 1, ">=",
                     message=why) for v, why in sorted(unbacked.items())]
    gate_ok: set[tuple[int, int]] = set()
    approved: set[tuple[int, int]] = set()
    for e in ws.store.events(ws.run_id):
        key = (e.phase or 0, e.attempt or 0)
        if e.type == "gate.evaluated" and e.typed(GateEvaluated).passed:
            gate_ok.add(key)
        elif e.type == "human.decision" and e.typed(HumanDecision).decision == "approve" \
                and e.run_version not in unbacked:
            approved.add(key)
        elif e.type == "phase.exited" and e.typed(PhaseExited).outcome == "passed":
            checks.append(check(f"phase {e.phase} attempt {e.attempt}",
                                "exit_after_passing_gate_and_decision",
                                1 if key in gate_ok and key in approved else 0, 1, ">="))
    return checks


def evaluate(ws: Workspace) -> dict[str, Any]:
    checks = log_checks(ws)
    recipes = recipes_at_gates(ws)
    missing = [k for k in range(7) if k not in recipes]
    if missing:
        checks.append(check("run", "phases_passed_before_evaluation", 7 - len(missing), 7,
                            ">=", message=f"no passing gate for phase(s) {missing}"))
        return _result(checks, ws)
    with progress.stage("independent check", len(EVALUATION_PARTS)):
        checks += _evaluate(ws, recipes)
    return _result(checks, ws)


#: The evaluator's parts, in order, as the watcher counts them.
EVALUATION_PARTS = ("own oracle", "phase 0", "phase 1 kernels", "phase 2 block",
                    "phases 3-6 tokens", "speed", "report")


def _evaluate(ws: Workspace, recipes: dict[int, Recipe]) -> list[dict[str, Any]]:
    """The checks of a run whose phases 0-6 passed, part by part."""
    checks: list[dict[str, Any]] = []
    # Its own oracle, compared with what phase 0 stored.
    ref = reference_of(ws.loaded)
    goldens = ref.capture(ws.ids(ws.block_prompt()))
    answers = {p.name: reference_greedy(ref, ws.ids(p), ws.settings.steps).to_dict()
               for p in counted(ws.prompts(), ws.settings.steps, "own greedy runs")}
    stored = ws.latest("answers", tool="build_oracle")
    stored_answers = read_json(ws.store, stored["answers"]) if stored else {}
    for name, a in answers.items():
        same = stored_answers.get(name, {}).get("tokens") == a["tokens"]
        checks.append(check(name, "stored_oracle_run_reproduced", 1 if same else 0, 1, ">="))
    bf16 = own_bf16(ws, answers)
    checks += bf16_reproduced(stored_bf16(ws), bf16)
    progress.advance()
    checks += _tagged(0, oracle_checks(ws, answers))
    progress.advance()
    checks += _tagged(1, kernel_checks(ws, recipes[1]))
    progress.advance()
    checks += _tagged(2, block_checks(ws, recipes[2], goldens))
    progress.advance()
    # one check per arithmetic signature: recipes that differ by transforms that leave
    # every plan's arithmetic as it was share the evaluator's own check (check_reuse)
    seen: dict[str, list[dict[str, Any]]] = {}
    for k in (3, 4, 5, 6):
        key = signature(ws, recipes[k], answers)[0]
        if key not in seen:
            seen[key] = model_checks(ws, recipes[k], answers, bf16)[0]
        checks += _tagged(k, seen[key])
    progress.advance()
    pre, dec = ws.settings.prefill, ws.settings.decode
    checks += _tagged(4, [speed_check(ws, recipes[4], pre)])
    checks += _tagged(5, [speed_check(ws, replace(recipes[5]), dec)])
    progress.advance()
    report = ws.latest("report_data", tool="write_report")
    if report is None:
        checks.append(check("report", "written", 0, 1, ">="))
    else:
        data = read_json(ws.store, report["report_data"])
        for mode, name in ((pre, "prefill"), (dec, "decode")):
            checks.append(report_check(ws, recipes[6], mode, name,
                                       float(data[name]["deployed_s"]),
                                       f"report {name} ({time_word(ws)})"))
    progress.advance()
    return checks


def own_bf16(ws: Workspace, answers: dict[str, Any]) -> dict[str, Bf16Run] | None:
    """The evaluator's own bf16 reference (oracle/bf16.py) against its own oracle's runs;
    None for a run whose phase 0 recorded none (its gates held it to no bf16 bar, and
    neither does the evaluator)."""
    if stored_bf16(ws) is None:
        return None
    prompts = counted(ws.prompts(), ws.settings.steps, "own bf16 reference runs")
    return bf16_reference(ws.loaded, ((p, ws.ids(p)) for p in prompts), answers)


def bf16_reproduced(stored: dict[str, Bf16Run] | None, own: dict[str, Bf16Run] | None
                    ) -> list[dict[str, Any]]:
    """Phase 0's bf16 reference against the evaluator's own, prompt by prompt."""
    if stored is None or own is None:
        return [check("run", "bf16_reference_recorded", 0, 1, ">=", gating=False,
                      message="phase 0 of this run recorded no bf16 reference (it predates "
                      "it): no gate held the deployment to the bf16 bar")]
    return [check(name, "stored_bf16_reference_reproduced",
                  1 if name in stored and stored[name] == r else 0, 1, ">=")
            for name, r in own.items()]


def _tagged(phase: int, checks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**c, "subject": f"phase {phase}: {c['subject']}"} for c in checks]


def _result(checks: list[dict[str, Any]], ws: Workspace) -> dict[str, Any]:
    passed = all(c["passed"] for c in checks if c["gating"])
    return {"verdict": "PASS" if passed else "FAIL", "checks": checks,
            "markdown": markdown(passed, checks, ws.settings.measured)}


def markdown(passed: bool, checks: list[dict[str, Any]], measured: bool = False) -> str:
    gating = [c for c in checks if c["gating"]]
    failed = [c for c in gating if not c["passed"]]
    lines = ["# Independent evaluation", "",
             f"Verdict: **{'PASS' if passed else 'FAIL'}**: {len(gating) - len(failed)} of "
             f"{len(gating)} gating checks hold, recomputed in a separate process from the "
             "stored inputs with its own oracle. " + ("Times were measured again on the NPU."
                                                       if measured else
                                                       "Times are modeled (performance model)."),
             ""]
    if failed:
        lines += ["## Failed", ""] + [f"- {check_text(c)} {c.get('message', '')}"
                                      for c in failed] + [""]
    lines += ["## Checks", "", "| subject | metric | value | needs | |", "|---|---|---|---|---|"]
    for c in checks:
        value, threshold = gate_figures(c["value"], c["threshold"])
        lines.append(f"| {c['subject']} | {c['metric']} | {value} | {c['comparison']} "
                     f"{threshold} | {'ok' if c['passed'] else 'FAIL'}"
                     f"{'' if c['gating'] else ' (lens)'} |")
    return "\n".join(lines) + "\n"


@click.command()
@click.argument("store_path", type=click.Path(exists=True, dir_okay=False))
@click.argument("run_id")
@click.option("--json", "as_json", is_flag=True)
def main(store_path: str, run_id: str, as_json: bool) -> None:
    try:
        store = EventStore.open(store_path, readonly=True)
        ws = Workspace(store, store.resolve_run(run_id))
        # Nothing of the run is trusted before its chain, blobs and snapshots verify,
        # anchored by this user's key: a forged decision or an edited recipe ends here.
        report = store.verify(ws.run_id, fold=False)
        if not report.trusted:
            raise StoreError(f"the run is not evaluated: {report.line()}")
    except Exception as e:  # noqa: BLE001 - one line, whatever broke
        click.echo(f"error: cannot evaluate {run_id} in {store_path}: {e}", err=True)
        sys.exit(2)
    try:
        result = evaluate(ws)
    except StoreError as e:   # a blob unreadable since the check: still one line
        click.echo(f"error: cannot evaluate {run_id} in {store_path}: {e}", err=True)
        sys.exit(2)
    click.echo(json.dumps(result) if as_json else result["markdown"])
    sys.exit(0 if result["verdict"] == "PASS" else 1)


if __name__ == "__main__":
    main()
