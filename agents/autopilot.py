"""The autopilot: a deterministic, offline agent that performs the eight phases through the
toolbox, following the skill catalog. It needs no network and no API key.

It decides what the skills tell it to decide, and nothing else: the numerics of the recipe
(phase 3: where the chat answer falls behind Hugging Face's own bf16 run, the
greedy-divergence skill's change: a matmul datapath, or FP32 logits),
which transforms to try and in what order (phases 4 and 5: the skill's order, reordered by
the optimization memory), and, after a failed gate, what the picked debug skill says to do.
It never evaluates a gate: it hands each phase to the harness.

`pipeline()` (the default of `npu-deploy deploy`) is the autopilot with the real gates and
the catalog's trigger matcher.

Seeded faults (drills, `deploy --seed-fault`): `gemm-tile` makes phase 1 pick, for one GEMM,
a tile_n x herd_n that does not divide N, the mistake that corrupts the output silently
(docs/hardware-facts.md#gemm-tiling-and-herds), until a retry changes that GEMM's
configuration. The gate must catch it, and the debug direction's change
(pipeline.retry_changes) must repair it. `bfp16-datapath` makes phase 3 keep the BFP16
GEMM datapath without looking at the chat answer (the skill is not run before the gate): on
a model whose answers it moves earlier off the oracle's than Hugging Face's own bf16 run
does, the phase-3 gate's bf16 bar (pipeline/gates/model.py) must fail it.

No blind retries: the gates are deterministic, so after a failed gate the autopilot retries
only with the change the picked direction names (other kernel configurations, a transform
undone), and says so answering the pick; with nothing left to change the conductor's policy
stops for a person.
"""

from __future__ import annotations

from typing import Any

from npu_deploy.agents.instructions import Instruction, parse, tile_overrides
from npu_deploy.events.payloads import (
    CHANGE_ONLY,
    SKILL_LESS,
    ExperienceRecorded,
    LessonRecorded,
)
from npu_deploy.events.phases import PHASES
from npu_deploy.kernels.definition.specs import SPECS, Mode, Prefill
from npu_deploy.kernels.plans.optimize import DECODE_ORDER, PREFILL_ORDER
from npu_deploy.machine import NeedsHuman, Pipeline
from npu_deploy.oracle.prompts import CAPITAL_QUESTION
from npu_deploy.pipeline.gates import gates
from npu_deploy.pipeline.report.write import write_report
from npu_deploy.pipeline.retry_changes import retry_change
from npu_deploy.pipeline.toolbox import (
    SOURCE_WORDS,
    Toolbox,
    kernel_uses_cached,
    mode_text,
    stored_bf16,
)
from npu_deploy.pipeline.workspace import Workspace
from npu_deploy.skills.experience import transform_order
from npu_deploy.skills.lessons import harvest_lessons
from npu_deploy.skills.matcher import SkillMatcher

PHASE_SKILLS = tuple(p.skill for p in PHASES)       # the phase table (events/phases.py)
FAULTS = ("gemm-tile", "bfp16-datapath")


class Autopilot:
    name = "autopilot"

    def work(self, run: Any) -> None:
        tb = Toolbox(run)
        if run.phase == 0:
            tb.load_skill("deploy-new-llm")
        tb.load_skill(PHASE_SKILLS[run.phase])
        if run.debug_direction and run.debug_direction not in SKILL_LESS:
            tb.load_skill(run.debug_direction)
            run.say(f"retrying phase {run.phase} following {run.debug_direction}")
        self.instruction: Instruction | None = None
        if run.instruction:
            understood = parse(run.instruction, run.phase)
            if isinstance(understood, Instruction):
                self.instruction = understood
                run.say(f"following the person's instruction {run.instruction!r}: "
                        f"{understood.text()}", answering=_answered(run))
        getattr(self, f"phase{run.phase}")(run, tb)

    def refuses(self, phase: int, instruction: str) -> str | None:
        """Why the autopilot cannot follow `instruction` at `phase` (agents/instructions.py
        lists what it can), or None."""
        understood = parse(instruction, phase)
        return understood if isinstance(understood, str) else None

    # --- 0: the oracle -------------------------------------------------------------------

    def phase0(self, run: Any, tb: Toolbox) -> None:
        r = tb.build_oracle()
        run.say(f"oracle built: {r['tensors']} golden tensors, greedy runs of "
                f"{', '.join(r['prompts'])}")

    # --- 1: kernels ----------------------------------------------------------------------

    def phase1(self, run: Any, tb: Toolbox) -> None:
        tb.list_kernels()
        overrides = {}
        if tb.ws.settings.fault == "gemm-tile":
            # the drill's wrong choice stays until a retry changes that kernel's configuration
            overrides = seeded_gemm_fault(tb.ws)
        # a person's tile instruction first; a debug direction picked after it changes the
        # kernel uses it names on top (the later decision wins: the instruction's setting for
        # them may be what failed, and a retry must change what failed)
        ins, seed = self.instruction, 0
        if ins is not None and ins.kind == "tile":
            told = tile_overrides(ins, kernel_uses_cached(tb.ws))
            if isinstance(told, str):
                raise NeedsHuman(f"cannot follow the instruction: {told}")
            overrides = {k: {**overrides.get(k, {}), **v} for k, v in
                         {**overrides, **told}.items()}
            run.say(f"configurations set by the person: {sorted(told)} "
                    f"{ins.tunable} = {ins.value}")
        elif ins is not None and ins.kind == "seed":
            seed = ins.seed
        change = run.debug_change
        if change and change["configs"]:
            # the retry's configurations: the next valid ones in selection's ranking, which
            # the checker has cleared of indivisible tiles
            overrides = {**overrides, **change["configs"]}
            run.say(f"retrying with other configurations, {_as_picked(run)}: "
                    f"{change['text']}", answering=_answered(run))
        sel = tb.select_tiles(overrides)
        bad = []
        for key in sorted(kernel_uses_cached(tb.ws)):
            r = tb.validate_kernel(key, seed)
            if not r["passed"]:
                bad.append(key)
        if bad:
            run.say(f"{len(bad)} kernel(s) fail my own validation: {', '.join(bad)}; the gate "
                    "will say why")
        else:
            run.say(f"{sel['configs']} kernel configurations validated on the backend")

    # --- 2: one block ----------------------------------------------------------------------

    def phase2(self, run: Any, tb: Toolbox) -> None:
        m = tb.run_block()["metrics"]["L0.ffn_residual"]
        run.say(f"layer 0 output: cosine {m['cosine']:.6f}, worst position "
                f"{m['cosine_pos_min']:.6f}")

    # --- 3: the whole model ----------------------------------------------------------------

    def phase3(self, run: Any, tb: Toolbox) -> None:
        change = run.debug_change
        if change and change.get("recipe"):
            # the retry's change: the one pipeline.divergence replayed and priced for the
            # token the deployment answered wrongly
            tb.set_numerics(change["recipe"], change["text"])
            run.say(f"retrying {_as_picked(run)}: {change['text']}", answering=_answered(run))
        lens = tb.layer_lens()["cosine"]
        worst = min(lens, key=lens.get)
        run.say(f"layer lens: worst {worst} cosine {lens[worst]:.6f}")
        chat = [p for p in tb.ws.prompts() if p.chat]
        if not chat:
            return
        if tb.ws.settings.fault == "bfp16-datapath":
            run.say("drill: keeping the BFP16 GEMM datapath without checking the answer")
            return
        # The greedy-divergence skill, before the gate: the chat answer is what a user reads
        # first, so where it falls behind Hugging Face's bf16 run the skill's change is
        # taken now (the gate still holds every prompt to the bar, and a retry takes the
        # skill's change for whichever falls behind there).
        name = chat[0].name
        bar = (stored_bf16(tb.ws) or {}).get(name)
        tried: list[dict[str, str]] = []
        while True:
            ours = tb.run_model(name)
            if bar is None or ours["agreed"] >= bar.agreed or ours["tie"]:
                run.say(f"the chat answer agrees with the oracle for {ours['agreed']} tokens"
                        + ("" if bar is None else f" (Hugging Face in bf16: {bar.agreed})")
                        + (": it parts at a tie bf16 cannot represent" if ours["tie"]
                           and ours["agreed"] < (bar.agreed if bar else 0) else ""))
                return
            found = tb.find_numerics_change(name, ours["agreed"])
            if found["chosen"] is None or found["chosen"] in tried:
                run.say(f"the chat answer parts from the oracle at token {ours['agreed']} "
                        f"(Hugging Face in bf16: {bar.agreed}) and no change the hardware "
                        "supports brings it back: the gate holds it to the bar")
                return
            tried.append(found["chosen"])
            tb.set_numerics(found["chosen"], found["words"])
            run.say(f"the chat answer parts from the oracle at token {ours['agreed']} "
                    f"(Hugging Face in bf16: {bar.agreed}): {found['words']}")

    # --- 4 and 5: optimization -------------------------------------------------------------

    def phase4(self, run: Any, tb: Toolbox) -> None:
        self._optimize(run, tb, tb.ws.settings.prefill, PREFILL_ORDER)

    def phase5(self, run: Any, tb: Toolbox) -> None:
        self._optimize(run, tb, tb.ws.settings.decode, DECODE_ORDER)

    def _optimize(self, run: Any, tb: Toolbox, mode: Mode, base: tuple[str, ...]) -> None:
        scope = "prefill" if isinstance(mode, Prefill) else "decode"
        order, why = transform_order(tb.ws.store, base, scope, exclude_run=tb.ws.run_id)
        change = run.debug_change
        if change and change["undo"]:
            for name in change["undo"]:
                tb.undo_transform(name, mode)
            order = [t for t in order if t not in change["undo"]]
            run.say(f"retrying {_as_picked(run)}: {change['text']}",
                    answering=_answered(run))
        ins = self.instruction
        if ins is not None and ins.kind == "skip" and ins.transform in order:
            order = [t for t in order if t != ins.transform]
            run.say(f"not trying {ins.transform}: the person said to skip it")
        run.say("transform order from the optimization memory: " +
                "; ".join(f"{t} ({why[t]})" for t in order))
        start = tb.profile(mode, scope)["total_s"]
        for name in tb.propose_transform(mode, order)["candidates"]:
            tb.load_skill(TRANSFORM_SKILLS[name])
            r = tb.apply_transform(name, mode)
            speedup = r["before_s"] / r["after_s"] if r.get("after_s") else None
            tb.record_experience(ExperienceRecorded(
                topic=f"{name} on {tb.ws.settings.model}",
                summary=r["reason"], outcome="worked" if r["kept"] else "failed",
                evidence=[k for k in ("plan_before", "plan_after") if r.get(k)],
                transform=name, model=tb.ws.settings.model, shape=mode_text(mode),
                speedup=speedup, source=r["source"], plan_before=r["plan_before"],
                plan_after=r.get("plan_after")))
        end = tb.profile(mode, scope)
        run.say(f"{scope}: {start * 1e3:.2f} ms -> {end['total_s'] * 1e3:.2f} ms "
                f"{SOURCE_WORDS[end['source']]} ({start / end['total_s']:.2f}x)")

    # --- 6: the runner, the report, the lessons --------------------------------------------

    def phase6(self, run: Any, tb: Toolbox) -> None:
        chat = any(p.chat for p in tb.ws.prompts())
        answer = tb.generate(CAPITAL_QUESTION if chat else "The capital of France is")
        run.say(f"the runner answers: {answer['answer']!r}")
        air = tb.emit_programs()
        run.say(f"MLIR-AIR programs written to {air['directory']}: "
                f"{air['prefill']['programs']} for the {air['prefill']['dispatches']} prefill "
                f"dispatches and {air['decode']['programs']} for the "
                f"{air['decode']['dispatches']} decode dispatches, each built once and run "
                "by every layer")
        write_report(run, tb)
        for lesson in harvest_lessons(tb.ws.store, tb.ws.run_id):
            tb.record_lesson(LessonRecorded.from_dict(lesson))

    # --- 7: the evaluator ------------------------------------------------------------------

    def phase7(self, run: Any, tb: Toolbox) -> None:
        run.say("handing the run to the independent evaluator: a fresh process that reads "
                "the store read-only and re-runs every gate")


TRANSFORM_SKILLS = {"align_layouts": "layout-alignment", "reuse_buffers": "buffer-object-reuse",
                    "last_token_lm_head": "last-token-lm-head",
                    "decode_attention_on_cpu": "decode-attention-on-cpu",
                    "merge_dispatches": "multi-kernel-merging"}


def seeded_gemm_fault(ws: Workspace) -> dict[str, dict[str, Any]]:
    """The drill's wrong choice: for the first prefill GEMM, tile_n x herd_n that does not
    divide N (tile_n 32 on as many columns as leave a remainder)."""
    for key, use in sorted(kernel_uses_cached(ws).items()):
        # a GEMM: a kernel tiled along N over herd columns (the bf16-out ones sort first)
        if {"tile_n", "herd_n"} <= SPECS[use["kernel"]].tunables.keys():
            n = use["shape"]["N"]
            herd = next((h for h in range(8, 0, -1) if n % (32 * h)), None)
            if herd is not None:
                return {key: {"tile_n": 32, "herd_n": herd}}
    raise ValueError("the gemm-tile drill needs a GEMM whose N is not a multiple of 32 x "
                     "some herd width from 1 to 8")


def _as_picked(run: Any) -> str:
    """Whose word a retry's change follows: the picked debug direction's, or, when no debug
    skill matched, the proposal's own change."""
    if run.debug_direction == CHANGE_ONLY:
        return "as the proposal says (no debug skill matched the failure)"
    return f"as the debug direction {run.debug_direction} says"


def _answered(run: Any) -> str | None:
    """The id of the decision (a pick) this attempt follows, for its message's causation."""
    decision = run.decision()
    return decision.event_id if decision is not None else None


def pipeline() -> Pipeline:
    return Pipeline(Autopilot(), gates(), SkillMatcher(changes=retry_change))

