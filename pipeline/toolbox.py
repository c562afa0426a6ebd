"""The operations agents act through. Every call is a recorded step of the conductor
(`PhaseRun.step`): a `tool.requested` and a `tool.completed` event under an idempotency key,
so a resumed run gets the stored result instead of doing the work twice. Results are small
JSON; tensors, tables and plans go to content-addressed blobs named in the result.

Operations (their names are what the skill files say): build_oracle, list_kernels,
select_tiles, validate_kernel, run_block, run_model, choose_datapath, propose_transform,
apply_transform, undo_transform, profile, generate, emit_programs, load_skill,
record_lesson, record_experience.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import torch

from npu_deploy.events import progress
from npu_deploy.events.payloads import (
    ExperienceRecorded,
    LessonRecorded,
    ProfileRecorded,
    SkillLoaded,
)
from npu_deploy.kernels.definition.checker import check
from npu_deploy.kernels.definition.hardware import Hardware
from npu_deploy.kernels.definition.selection import select
from npu_deploy.kernels.definition.specs import (
    SPECS,
    Decode,
    KernelUse,
    Mode,
    Prefill,
    prompt_prefill,
)
from npu_deploy.kernels.emulation.validate import validate_kernel
from npu_deploy.kernels.performance.model import Profile
from npu_deploy.kernels.plans.plan import Dispatch, DispatchPlan, config_key
from npu_deploy.kernels.plans.transforms import TRANSFORMS, IllegalTransform
from npu_deploy.metrics.comparison import compare
from npu_deploy.metrics.tokens import Greedy, parted_at_tie, topk_check
from npu_deploy.models.config import ModelArgs
from npu_deploy.oracle import reference_of
from npu_deploy.oracle.bf16 import Bf16Run, against_bar, bf16_reference
from npu_deploy.oracle.prompts import Prompt
from npu_deploy.oracle.reference import golden_name
from npu_deploy.pipeline.check_reuse import checked_runs, counted
from npu_deploy.pipeline.deployed import DeployedModel, reference_greedy
from npu_deploy.pipeline.divergence import Diagnosis, diagnose
from npu_deploy.pipeline.recipe import Recipe
from npu_deploy.pipeline.workspace import (
    Workspace,
    blob_json,
    blob_tensors,
    read_json,
    read_tensors,
    workspace_of,
)
from npu_deploy.skills.catalog import load_catalog

# Plan tensor -> the oracle's op of the same layer (the block lens of phases 2 and 3).
BLOCK_TENSORS = {"n1": "attn_norm", "q": "q", "k": "k", "v": "v", "o": "attn", "attn": "o",
                 "h1": "attn_residual", "n2": "ffn_norm", "gate": "gate", "up": "up",
                 "act": "silu_mul", "ffn": "down"}


def mode_text(mode: Mode) -> str:
    return f"prefill L={mode.seq}" if isinstance(mode, Prefill) else f"decode p={mode.pos}"


def plan_json(plan: DispatchPlan) -> dict[str, Any]:
    """A plan as the optimization memory keeps it: its steps, names and kernels."""
    steps = []
    for s in plan.steps:
        if isinstance(s, Dispatch):
            steps.append({"dispatch": s.name,
                          "launches": [f"{ln.label}:{ln.kernel}" for ln in s.launches]})
        else:
            steps.append({"host": s.label})
    return {"summary": plan.summary, "history": list(plan.history), "steps": steps}


def profile_payload(profile: Profile, scope: str, tokens: int) -> dict[str, Any]:
    """A `profile.recorded` payload: per step, with its source (modeled on the emulator;
    measured on the NPU, where a dispatch also says its host buffer transfers, every entry
    is the median over the measured runs, and `runs` holds each run's total)."""
    entries = [{"name": s.name, "seconds": s.seconds,
                "kind": "dispatch" if s.where == "npu" else "host"} for s in profile.steps]
    if profile.source == "measured-npu":
        for entry, s in zip(entries, profile.steps, strict=True):
            if s.where == "npu":
                entry["transfer_s"] = s.host_transfer_s
    payload: dict[str, Any] = {"scope": scope, "source": profile.source,
                               "total_s": profile.total_s, "entries": entries, "tokens": tokens}
    if profile.runs:
        payload["runs"] = list(profile.runs)
    return payload


SOURCE_WORDS = {"modeled": "modeled", "measured-npu": "measured on the NPU"}


def spread_text(after: Profile, before: Profile) -> str:
    """How a comparison of two profiles was made, in words: modeled figures as they are,
    measured ones as the range of their runs."""
    if not after.runs:
        return SOURCE_WORDS[after.source]
    ms = 1e3
    return (f"{SOURCE_WORDS[after.source]}, {len(after.runs)} runs each: "
            f"{after.fastest_s * ms:.3f}-{after.slowest_s * ms:.3f} ms against "
            f"{before.fastest_s * ms:.3f}-{before.slowest_s * ms:.3f} ms")


def kernel_uses(ws: Workspace, recipe: Recipe) -> dict[str, dict[str, Any]]:
    """Every (kernel, shape) the deployment launches (`model_kernel_uses`)."""
    return model_kernel_uses(ws.settings.model, ws.loaded.args, ws.settings.seq_len, recipe,
                             ws.hw)


def model_kernel_uses(model: str, args: ModelArgs, seq_len: int, recipe: Recipe,
                      hw: Hardware) -> dict[str, dict[str, Any]]:
    """Every (kernel, shape) a model launches: those of the prefill plan a prompt of
    seq_len runs (padded: `prompt_prefill`) and of the decode plan at that position, keyed
    by config_key, with their roles."""
    uses: dict[str, dict[str, Any]] = {}
    for mode in (prompt_prefill(seq_len), Decode(seq_len)):
        for ln in recipe.baseline(model, args, mode, hw).launches():
            key = config_key(ln.kernel, ln.shape_dict)
            entry = uses.setdefault(key, {"kernel": ln.kernel, "shape": ln.shape_dict,
                                          "roles": [], "mode": mode_text(mode)})
            if ln.role not in entry["roles"]:
                entry["roles"].append(ln.role)
    return uses


def validation_summary(report: Any) -> dict[str, Any]:
    """The figures of a kernel validation, per output, JSON-safe."""
    out: dict[str, Any] = {"passed": report.passed, "atol": report.atol, "rtol": report.rtol,
                           "findings": [str(f) for f in report.findings], "outputs": {}}
    for name, c in report.metrics.items():
        out["outputs"][name] = {k: json_number(v) for k, v in (
            ("within_frac", c.within_frac), ("n_outside", c.n_outside),
            ("cosine", c.cosine), ("max_abs", c.max_abs), ("rel_l2", c.rel_l2),
            ("mean_rel_l1", c.mean_rel_l1), ("pearson", c.pearson))}
    return out


def json_number(v: float) -> float:
    """A metric as JSON holds it: NaN as -1, an infinity as +-1e300."""
    v = float(v)
    return v if math.isfinite(v) else (-1.0 if v != v else math.copysign(1e300, v))


def run_kernel(ws: Workspace, key: str, config: dict[str, Any], seed: int) -> Any:
    use = kernel_uses_cached(ws)[key]
    return validate_kernel(SPECS[use["kernel"]], use["shape"], config, ws.backend, seed=seed,
                           hw=ws.hw)


_USES: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}


def kernel_uses_cached(ws: Workspace) -> dict[str, dict[str, Any]]:
    key = (ws.settings.model, str(ws.settings.seq_len))
    if key not in _USES:
        _USES[key] = kernel_uses(ws, Recipe())
    return _USES[key]


def block_metrics(ws: Workspace, recipe: Recipe, goldens: dict[str, torch.Tensor]
                  ) -> dict[str, dict[str, float]]:
    """Layer 0 alone on the backend (a one-layer plan of the model, with the recipe's
    configurations) against the oracle's golden tensors, tensor by tensor."""
    model = block_model(ws.settings.model, ws.loaded, recipe, ws.backend, ws.hw)
    ids = ws.ids(ws.block_prompt())
    tensors = model.runner.run(model.prefill_plan(int(ids.shape[0])), ids).tensors
    return block_comparison(tensors, goldens)


def block_model(name: str, loaded: Any, recipe: Recipe, backend: Any, hw: Hardware
                ) -> DeployedModel:
    """The model's layer 0 alone, deployed with the recipe's configurations on `backend`:
    what phase 2 runs."""
    a, w = loaded.args, loaded.weights
    return DeployedModel(name, replace(a, n_layers=1), replace(w, layers=w.layers[:1]),
                         replace(recipe, prefill_transforms=()), backend, hw)


def block_comparison(tensors: dict[str, torch.Tensor], goldens: dict[str, torch.Tensor]
                     ) -> dict[str, dict[str, float]]:
    """A one-layer prefill's tensors against the oracle's golden tensors of layer 0."""
    out = {}
    for ours, op in (*BLOCK_TENSORS.items(), ("x.1", "ffn_residual")):
        name = ours if ours.startswith("x.") else f"L0.{ours}"
        gold = goldens.get(golden_name(0, op))
        if name in tensors and gold is not None:
            c = compare(gold.float(), tensors[name].float().reshape(gold.shape))
            out[f"L0.{op}"] = {"cosine": c.cosine, "cosine_pos_min": c.cosine_pos_min,
                               "max_abs": c.max_abs, "rel_l2": c.rel_l2, "pearson": c.pearson}
    return out


def layer_lens(ws: Workspace, recipe: Recipe, goldens: dict[str, torch.Tensor]
               ) -> dict[str, float]:
    """Cosine of every layer's output (and the logits) of the deployed prefill against
    the oracle's, for the block prompt: where the error grows, layer by layer."""
    model = ws.deployed(replace(recipe, prefill_transforms=()))
    ids = ws.ids(ws.block_prompt())
    tensors = model.runner.run(model.prefill_plan(int(ids.shape[0])), ids).tensors
    n = ws.loaded.args.n_layers
    lens = {}
    for i in range(n):
        gold = goldens[golden_name(i, "ffn_residual")]
        lens[f"L{i}"] = compare(gold.float(), tensors[f"x.{i + 1}"].float()).cosine
    # the logits of the positions the plan computes (the last one, by default)
    gold = goldens[golden_name(n, "logits")].float()
    logits = tensors["logits"].float()
    gold = gold.reshape(-1, logits.shape[-1])[-logits.reshape(-1, logits.shape[-1]).shape[0]:]
    lens["logits"] = compare(gold, logits.reshape(gold.shape)).cosine
    return lens


def stored_bf16(ws: Workspace) -> dict[str, Bf16Run] | None:
    """The bf16 reference of the run's phase 0 (oracle/bf16.py), by prompt name; None when
    its oracle was built before phase 0 recorded one (the bar is then not known)."""
    r = ws.latest("answers", tool="build_oracle")
    if r is None or "bf16" not in r:
        return None
    return {n: Bf16Run.from_dict(d) for n, d in read_json(ws.store, r["bf16"]).items()}


def bar_reason(runs: list[dict[str, Any]], bf16: dict[str, Bf16Run] | None) -> str:
    """Why `token_checks`' runs fall behind the bf16 bar (`against_bar`), or "" (also when
    the run has no bar, or it lacks one of the prompts: the gate says so)."""
    if bf16 is None or any(r["prompt"] not in bf16 for r in runs):
        return ""
    return against_bar({r["prompt"]: (r["agreed"], r["steps"]) for r in runs}, bf16,
                       (r["prompt"] for r in runs if r.get("tie"))).reason()


def divergence(ws: Workspace, prompt: str, agreed: int) -> Diagnosis | None:
    """`pipeline.divergence`'s diagnosis of the run's recipe on `prompt`, whose greedy run
    shares `agreed` leading tokens with the oracle's: the step where it parts replayed, each
    kernel family in FP32, each supported change priced, guarding the first tokens the bf16
    bar protects. None when the run has no oracle or no bf16 reference."""
    bf16 = stored_bf16(ws)
    answers = ws.latest("answers", tool="build_oracle")
    if bf16 is None or answers is None:
        return None
    stored = read_json(ws.store, answers["answers"])
    oracle = Greedy.from_dict(stored[prompt]).tokens
    prompts = {q.name: q for q in ws.prompts()}
    guards = tuple((name, ws.ids(prompts[name]), Greedy.from_dict(stored[name]).tokens[0])
                   for name, run in bf16.items() if run.keeps_first_token and name in prompts
                   and name in stored and Greedy.from_dict(stored[name]).tokens)
    return diagnose(ws.settings.model, ws.loaded, ws.recipe(), ws.hw, prompt,
                    ws.ids(prompts[prompt]), oracle, min(agreed, len(oracle) - 1),
                    ws.settings.steps, (ws.settings.prefill, ws.settings.decode),
                    ws.loaded.tokenizer.decode, guards, ws.runner)


class Toolbox:
    """The operations, bound to one attempt of one phase."""

    def __init__(self, run: Any) -> None:
        self.run = run
        self.ws = workspace_of(run)

    @property
    def store(self) -> Any:
        return self.ws.store

    # --- phase 0 ---------------------------------------------------------------------

    def build_oracle(self) -> dict[str, Any]:
        """The FP32 reference's golden tensors for the block prompt and its greedy runs of
        every canonical prompt."""
        ws = self.ws

        def work() -> dict[str, Any]:
            ref = reference_of(ws.loaded)
            ids = ws.ids(ws.block_prompt())
            with progress.stage("golden tensors", 1):
                goldens = ref.capture(ids)
                progress.advance()
            answers = {p.name: reference_greedy(ref, ws.ids(p), ws.settings.steps).to_dict()
                       for p in counted(ws.prompts(), ws.settings.steps, "greedy runs")}
            bf16 = bf16_reference(ws.loaded, ((p, ws.ids(p)) for p in counted(
                ws.prompts(), ws.settings.steps, "bf16 reference runs")), answers)
            return {"goldens": blob_tensors(self.store, goldens),
                    "answers": blob_json(self.store, answers), "tensors": len(goldens),
                    "prompts": sorted(answers),
                    "bf16": blob_json(self.store, {n: r.to_dict() for n, r in bf16.items()}),
                    "bf16_agreed": {n: r.agreed for n, r in sorted(bf16.items())}}
        return self.run.step("build_oracle", {"model": ws.settings.model,
                                              "seq_len": ws.settings.seq_len,
                                              "steps": ws.settings.steps}, work)

    def goldens(self) -> dict[str, torch.Tensor]:
        r = self.ws.latest("goldens", tool="build_oracle")
        if r is None:
            raise LookupError("no oracle in this run: phase 0 builds it")
        return read_tensors(self.store, r["goldens"])

    def answers(self) -> dict[str, Any]:
        r = self.ws.latest("answers", tool="build_oracle")
        if r is None:
            raise LookupError("no oracle in this run: phase 0 builds it")
        return dict(read_json(self.store, r["answers"]))

    def bf16_reference(self) -> dict[str, Bf16Run] | None:
        """The bf16 reference phase 0 recorded (`stored_bf16`), or None in a run whose
        phase 0 predates it."""
        return stored_bf16(self.ws)

    # --- phase 1 ---------------------------------------------------------------------

    def list_kernels(self) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            uses = kernel_uses_cached(self.ws)
            return {"kernels": sorted(uses), "count": len(uses)}
        return self.run.step("list_kernels", {"seq_len": self.ws.settings.seq_len}, work)

    def select_tiles(self, overrides: dict[str, dict[str, Any]] | None = None,
                     ) -> dict[str, Any]:
        """A configuration for every kernel use: the selection's, or the agent's own
        (`overrides`), each with the checker's findings. Starts the recipe."""
        ws = self.ws

        def work() -> dict[str, Any]:
            configs, findings = {}, {}
            for key, u in kernel_uses_cached(ws).items():
                sel = select(KernelUse(u["roles"][0], SPECS[u["kernel"]], u["shape"]), ws.hw)
                config = {**sel.config, **(overrides or {}).get(key, {})}
                configs[key] = config
                found = check(SPECS[u["kernel"]], u["shape"], config, ws.hw)
                if found:
                    findings[key] = [str(f) for f in found]
            recipe = replace(ws.recipe(), configs=configs)
            return {"recipe": ws.put_recipe(recipe), "configs": len(configs),
                    "findings": findings}
        return self.run.step("select_tiles", {"overrides": overrides or {}}, work)

    def validate_kernel(self, key: str, seed: int = 0) -> dict[str, Any]:
        ws = self.ws

        def work() -> dict[str, Any]:
            config = ws.recipe().configs[key]
            return {"kernel": key, **validation_summary(run_kernel(ws, key, config, seed))}
        return self.run.step("validate_kernel", {"kernel": key, "seed": seed}, work,
                             backend=True)

    # --- phases 2 and 3 --------------------------------------------------------------

    def run_block(self) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            return {"metrics": block_metrics(self.ws, self.ws.recipe(), self.goldens())}
        return self.run.step("run_block", {"layer": 0}, work, backend=True)

    def run_model(self, prompt: str) -> dict[str, Any]:
        """The deployed model's greedy run of one canonical prompt against the oracle's."""
        ws = self.ws

        def work() -> dict[str, Any]:
            p = next(p for p in ws.prompts() if p.name == prompt)
            ref = Greedy.from_dict(self.answers()[prompt])
            with progress.stage(f"greedy run of {prompt}", ws.settings.steps, "token"):
                ours = ws.deployed(ws.recipe()).generate(ws.ids(p), ws.settings.steps,
                                                         follow=ref.tokens)
            tc = topk_check(ours, ref)
            return {"prompt": prompt, "agreed": tc.agreed, "steps": tc.steps,
                    "passed": tc.passed, "tie": parted_at_tie(tc, ref),
                    "text": ws.loaded.tokenizer.decode(ours.tokens)}
        return self.run.step("run_model", {"prompt": prompt,
                                           "datapath": ws.recipe().gemm_datapath}, work,
                             backend=True)

    def layer_lens(self) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            return {"cosine": layer_lens(self.ws, self.ws.recipe(), self.goldens())}
        return self.run.step("run_model", {"prompt": self.ws.block_prompt().name,
                                           "lens": "layers"}, work, backend=True)

    def choose_datapath(self, datapath: str, why: str) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            recipe = replace(self.ws.recipe(), gemm_datapath=datapath)
            return {"recipe": self.ws.put_recipe(recipe), "datapath": datapath}
        return self.run.step("choose_datapath", {"datapath": datapath, "why": why}, work)

    def find_numerics_change(self, prompt: str, agreed: int) -> dict[str, Any]:
        """The greedy-divergence skill on `prompt`, whose greedy run keeps `agreed` of the
        oracle's tokens (pipeline.divergence): the change that brings the oracle's token
        back (None: none the hardware supports does) and the evidence in words."""
        def work() -> dict[str, Any]:
            d = divergence(self.ws, prompt, agreed)
            if d is None:
                return {"chosen": None, "words": "no oracle or bf16 reference recorded"}
            return {"chosen": d.chosen, "words": d.words}
        r = self.ws.recipe()
        numerics = {"gemm_datapath": r.gemm_datapath, "lm_head_out": r.lm_head_out,
                    "attention_datapath": r.attention_datapath}
        return self.run.step("find_numerics_change", {"prompt": prompt, "agreed": agreed,
                                                      "numerics": numerics}, work, backend=True)

    def set_numerics(self, settings: dict[str, str], why: str) -> dict[str, Any]:
        """The recipe with `settings` (gemm_datapath, attention_datapath, lm_head_out: a
        phase-3 retry's change, pipeline.divergence), recorded with why."""
        def work() -> dict[str, Any]:
            recipe = self.ws.recipe().with_settings(settings)
            return {"recipe": self.ws.put_recipe(recipe), "settings": dict(settings)}
        return self.run.step("set_numerics", {"settings": dict(settings), "why": why}, work)

    # --- phases 4 and 5 --------------------------------------------------------------

    def profile(self, mode: Mode, scope: str | None = None, *,
                recipe: Recipe | None = None) -> dict[str, Any]:
        """The profile of the recipe's plan for `mode` (modeled on the emulator, measured on
        the NPU), recorded as a profile."""
        ws = self.ws
        recipe = recipe or ws.recipe()

        def work() -> dict[str, Any]:
            plan = recipe.plan(ws.settings.model, ws.loaded.args, mode, ws.hw)
            prof = ws.time(plan)
            return {"total_s": prof.total_s, "source": prof.source, "mode": mode_text(mode),
                    "dispatches": len(plan.dispatches), "summary": plan.summary,
                    "payload": profile_payload(prof, scope or _scope(mode), _tokens(mode))}
        result = self.run.step("profile", {"mode": mode_text(mode),
                                           "transforms": list(recipe.transforms(mode))}, work,
                               backend=ws.settings.measured)
        self.run.record(ProfileRecorded.from_dict(result["payload"]))
        return result

    def propose_transform(self, mode: Mode, order: list[str]) -> dict[str, Any]:
        """The transforms to try on the `mode` plan, in the order given (the agent's, from
        the optimization memory), without those the recipe already has."""
        def work() -> dict[str, Any]:
            have = set(self.ws.recipe().transforms(mode))
            return {"candidates": [t for t in order if t in TRANSFORMS and t not in have]}
        return self.run.step("propose_transform", {"mode": mode_text(mode), "order": order},
                             work)

    def apply_transform(self, name: str, mode: Mode) -> dict[str, Any]:
        """Try one transform on the recipe's `mode` plan: is it legal, is it faster (modeled;
        measured on the NPU, beyond the run-to-run spread), and do the phase-3 token-set
        check and the bf16 bar still hold? Kept only if all three; the recipe changes only
        then."""
        ws = self.ws

        def work() -> dict[str, Any]:
            before_recipe = ws.recipe()
            model, args = ws.settings.model, ws.loaded.args
            before = before_recipe.plan(model, args, mode, ws.hw)
            timed = ws.time(before)
            t_before = timed.total_s
            result: dict[str, Any] = {"transform": name, "skill": TRANSFORMS[name].skill,
                                      "mode": mode_text(mode), "before_s": t_before,
                                      "source": timed.source,
                                      "plan_before": blob_json(self.store, plan_json(before))}
            try:
                after = TRANSFORMS[name].apply(before)
            except IllegalTransform as e:
                return {**result, "kept": False, "after_s": None, "reason": str(e)}
            timed_after = ws.time(after)
            result.update(after_s=timed_after.total_s,
                          plan_after=blob_json(self.store, plan_json(after)))
            if timed.runs:
                result.update(before_runs=list(timed.runs), after_runs=list(timed_after.runs))
            if not timed_after.faster_than(timed):
                return {**result, "kept": False, "reason": "not faster (" + spread_text(
                    timed_after, timed) + ")"}
            candidate = before_recipe.with_transform(mode, name)
            # reused, with its proof, when an earlier check ran the same arithmetic
            checks, proof = checked_runs(ws, candidate, self.answers())
            result["check_proof"] = proof
            failed = [c["prompt"] for c in checks if not c["passed"]]
            if failed:
                return {**result, "kept": False, "checks": checks,
                        "reason": "the phase-3 token-set check fails on " + ", ".join(failed)}
            behind = bar_reason(checks, stored_bf16(ws))
            if behind:
                return {**result, "kept": False, "checks": checks,
                        "reason": f"the phase-3 bf16 bar fails: {behind}"}
            reused = " (reused: the same arithmetic signature)" if "reused_from" in proof \
                else ""
            return {**result, "kept": True, "checks": checks, "reason": "faster and the "
                    f"phase-3 check passes{reused}", "recipe": ws.put_recipe(candidate)}
        return self.run.step("apply_transform", {"transform": name, "mode": mode_text(mode)},
                             work, backend=True)

    def undo_transform(self, name: str, mode: Mode) -> dict[str, Any]:
        """Take transform `name` out of the recipe's `mode` plan (a retry's change after a
        failed optimization gate)."""
        def work() -> dict[str, Any]:
            recipe = self.ws.recipe()
            if name not in recipe.transforms(mode):
                return {"transform": name, "undone": False}
            return {"transform": name, "undone": True,
                    "recipe": self.ws.put_recipe(recipe.without_transform(mode, name))}
        return self.run.step("undo_transform", {"transform": name, "mode": mode_text(mode)},
                             work)

    # --- phase 6 ---------------------------------------------------------------------

    def generate(self, text: str, max_tokens: int = 32) -> dict[str, Any]:
        """The deployed runner's answer to a chat message."""
        ws = self.ws

        def work() -> dict[str, Any]:
            chat = bool(getattr(ws.loaded.tokenizer, "chat_template", None))
            ids = ws.ids(Prompt("ask", text, chat=chat))
            with progress.stage("answer", max_tokens, "token"):
                out = ws.deployed(ws.recipe()).generate(ids, max_tokens,
                                                        stop=stop_tokens(ws))
            return {"prompt": text, "answer": ws.loaded.tokenizer.decode(
                out.tokens, skip_special_tokens=True).strip(), "tokens": len(out.tokens)}
        return self.run.step("generate", {"prompt": text, "max_tokens": max_tokens}, work,
                             backend=True)

    def emit_programs(self) -> dict[str, Any]:
        """The MLIR-AIR program of every dispatch of the deployed prefill and decode plans:
        each source a blob, and a file in the run's directory (air/prefill, air/decode),
        ready for mlir-air's XRT backend."""
        from npu_deploy.kernels.air_programs.air import plan_programs, write_programs

        ws = self.ws

        def work() -> dict[str, Any]:
            recipe = ws.recipe()
            listing: dict[str, Any] = {}
            out: dict[str, Any] = {"directory": str(ws.directory / "air")}
            for mode in (ws.settings.prefill, ws.settings.decode):
                plan = recipe.plan(ws.settings.model, ws.loaded.args, mode, ws.hw)
                emitted = plan_programs(plan, ws.hw)
                programs = list(emitted.programs)
                written = write_programs(programs, ws.directory / "air" / _scope(mode))
                for entry, program in zip(written, programs, strict=True):
                    entry["source"] = self.store.put_blob(program.source.encode())
                listing[_scope(mode)] = {"summary": plan.summary, "programs": written}
                # distinct programs: what is built and loaded (one per kernel structure,
                # every layer's dispatch running it on its own buffers)
                out[_scope(mode)] = {"programs": len(emitted.distinct),
                                     "dispatches": len(programs),
                                     "contexts": ws.hw.hw_contexts,
                                     "launches": sum(len(p.layouts) for p in programs),
                                     "objects": sorted({o for p in programs for o in p.objects})}
            out["programs"] = blob_json(self.store, listing)
            return out
        return self.run.step("emit_programs", {"recipe": ws.put_recipe(ws.recipe())}, work)

    # --- skills and memory -----------------------------------------------------------

    def load_skill(self, name: str) -> dict[str, Any]:
        def work() -> dict[str, Any]:
            skill = load_catalog()[name]
            return {"skill": name, "digest": skill.digest, "kind": skill.kind}
        result = self.run.step("load_skill", {"skill": name}, work)
        self.run.record(SkillLoaded(skill=name, digest=result["digest"]))
        return result

    def record_experience(self, experience: ExperienceRecorded) -> None:
        self.run.record(experience)

    def record_lesson(self, lesson: LessonRecorded) -> None:
        self.run.record(lesson)


def stop_tokens(ws: Workspace) -> set[int]:
    tok = ws.loaded.tokenizer
    ids = {tok.eos_token_id} if tok.eos_token_id is not None else set()
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    if isinstance(im_end, int) and im_end != tok.unk_token_id:
        ids.add(im_end)
    return {int(i) for i in ids}


def _scope(mode: Mode) -> str:
    return "prefill" if isinstance(mode, Prefill) else "decode"


def _tokens(mode: Mode) -> int:
    return mode.seq if isinstance(mode, Prefill) else 1

