"""The skill catalog (issue 7, first part): the Agent Skills format, the triggers, and the
matcher that turns a failure into ranked debug directions."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from npu_deploy.skills import CATALOG_DIR, Symptoms, load_catalog, match, validate
from npu_deploy.skills.matcher import TITLE_CHARS, SkillMatcher, title_of, whole_words

PHASES = ["phase-0-cpu-oracle", "phase-1-kernel-validation", "phase-2-single-block",
          "phase-3-full-model", "phase-4-prefill-optimization", "phase-5-decode-optimization",
          "phase-6-finalize-and-learn", "phase-7-independent-evaluation"]
OPTIMIZATION = ["layout-alignment", "buffer-object-reuse", "last-token-lm-head",
                "decode-attention-on-cpu", "multi-kernel-merging"]
DEBUG = ["runtime-hang-timeout", "buffer-object-corruption", "routing-congestion-merge-blockers",
         "silent-gemm-corruption", "flash-attention-head-dim-128", "greedy-divergence"]

# docs/hardware-facts.md#known-failure-symptoms, as the errors or gate checks a run would record.
SYMPTOMS = {
    "output all zeros after merging kernels": Symptoms(
        errors=("after merging kernels the output is all zeros",)),
    "NaN or stale on later calls": Symptoms(
        errors=("correct on first call, NaN on later calls: stale buffer",)),
    "cosine ~0.02 for one GEMM": Symptoms(checks=(
        {"subject": "L0.q_proj gemm", "metric": "cosine", "value": 0.02, "threshold": 0.99,
         "comparison": ">=", "passed": False},
        {"subject": "L0.k_proj gemm", "metric": "cosine", "value": 0.9999, "threshold": 0.99,
         "comparison": ">=", "passed": True})),
    "Repeat count exceeds": Symptoms(errors=("Repeat count exceeds [0:255]",)),
    "BD pool exhausted": Symptoms(
        errors=("Allocator exhausted available buffer descriptor IDs",)),
    "L2 capacity exceeded": Symptoms(errors=("L2 capacity exceeded",)),
    "FlashAttention hang at head_dim 128": Symptoms(
        errors=("run failed: ERT_CMD_STATE_TIMEOUT",), context={"head_dim": 128}),
    "FlashAttention NaN from mismatched sizes": Symptoms(
        errors=("kernel object compiled for (Lq, Lk, head_dim)=(1024, 1024, 64) launched at "
                "(2048, 2048, 64): NaN or garbage output",)),
    "partially written buffers after a timeout": Symptoms(
        errors=("a run returned partially written buffers after a timeout",)),
    "device dead until power cycle": Symptoms(
        errors=("device dead until power cycle: two processes opened hardware contexts",)),
    "out of channels": Symptoms(errors=("compile error: out of channels",)),
    # issue 37: the deployment loses the first answer token the bf16 reference keeps
    "first answer token lost": Symptoms(errors=(
        "capital first_token_vs_bf16 the deployment answers another first token than the "
        "oracle, where Hugging Face's bf16 run keeps it",)),
}


def test_the_catalog_is_valid_and_complete():
    assert validate() == []
    catalog = load_catalog()
    assert set(catalog.skills) == {"deploy-new-llm", *PHASES, *OPTIMIZATION, *DEBUG}
    assert [catalog[p].phase for p in PHASES] == list(range(8))
    for name in OPTIMIZATION + DEBUG:
        assert catalog[name].triggers, name


def test_the_transforms_name_optimization_skills_of_the_catalog():
    from npu_deploy.kernels.plans.transforms import TRANSFORMS

    catalog = load_catalog()
    for t in TRANSFORMS.values():
        assert catalog[t.skill].kind == "optimization", t.name


@pytest.mark.parametrize("symptom", sorted(SYMPTOMS))
def test_every_symptom_of_npu_facts_is_matched_by_a_debug_skill(symptom):
    ranked = match(load_catalog(), SYMPTOMS[symptom])
    assert ranked, f"no debug skill matches {symptom!r}"


@pytest.mark.parametrize("symptom,skill", [
    ("cosine ~0.02 for one GEMM", "silent-gemm-corruption"),
    ("FlashAttention hang at head_dim 128", "flash-attention-head-dim-128"),
    ("BD pool exhausted", "routing-congestion-merge-blockers"),
    ("NaN or stale on later calls", "buffer-object-corruption"),
    ("device dead until power cycle", "runtime-hang-timeout"),
])
def test_the_matcher_ranks_the_skill_that_fits_first(symptom, skill):
    assert match(load_catalog(), SYMPTOMS[symptom])[0][0].name == skill


def test_an_isolated_gemm_failure_differs_from_a_whole_gate_failure():
    bad = {"metric": "cosine", "value": 0.02, "threshold": 0.99, "comparison": ">=",
           "passed": False}
    isolated = Symptoms(checks=({**bad, "subject": "L0.q_proj gemm"},
                                {**bad, "subject": "L0.k_proj gemm", "value": 0.9999,
                                 "passed": True}))
    everywhere = Symptoms(checks=({**bad, "subject": "L0.q_proj gemm"},
                                  {**bad, "subject": "L0.k_proj gemm"}))
    names = lambda s: [skill.name for skill, _, _ in match(load_catalog(), s)]  # noqa: E731
    assert "silent-gemm-corruption" in names(isolated)
    isolated_ids = {i for skill, _, ids in match(load_catalog(), isolated) for i in ids
                    if skill.name == "silent-gemm-corruption"}
    everywhere_ids = {i for skill, _, ids in match(load_catalog(), everywhere) for i in ids
                      if skill.name == "silent-gemm-corruption"}
    assert isolated_ids - everywhere_ids                  # the isolated trigger fires only once


def test_nothing_matches_a_failure_no_skill_knows():
    assert match(load_catalog(), Symptoms(errors=("the moon is made of cheese",))) == []
    directions = SkillMatcher().propose(None, {"checks": []})
    assert directions[0].direction_id == "retry"


# --- the validator finds each broken rule ------------------------------------------------

@pytest.fixture
def broken(tmp_path):
    root = tmp_path / "catalog"
    shutil.copytree(CATALOG_DIR, root)

    def edit(skill: str, old: str, new: str, file: str = "SKILL.md") -> Path:
        path = root / skill / file
        text = path.read_text()
        assert old in text, (skill, old)
        path.write_text(text.replace(old, new, 1))
        return root
    return root, edit


def test_validator_catches_a_bad_name_and_a_name_that_differs_from_its_folder(broken):
    root, edit = broken
    edit("layout-alignment", "name: layout-alignment", "name: Layout-Alignment")
    edit("phase-2-single-block", "name: phase-2-single-block", "name: phase-two")
    problems = "\n".join(validate(root))
    assert "layout-alignment/SKILL.md: name 'Layout-Alignment' must be" in problems
    assert "name 'phase-two' differs from its folder 'phase-2-single-block'" in problems


def test_validator_catches_descriptions_keys_and_sections(broken):
    root, edit = broken
    text = (root / "silent-gemm-corruption" / "SKILL.md").read_text()
    desc_line = next(line for line in text.splitlines() if line.startswith("description:"))
    edit("silent-gemm-corruption", desc_line, "description: " + "x" * 1100 + "\nfavourite: 1")
    edit("phase-0-cpu-oracle", "## The gate", "## A gate")
    problems = "\n".join(validate(root))
    assert "description has 1100 characters, over 1024" in problems
    assert "unknown front-matter key 'favourite'" in problems
    assert "phase-0-cpu-oracle/SKILL.md: the body lacks the section '## The gate'" in problems


def test_validator_catches_missing_triggers_and_bad_patterns(broken):
    root, edit = broken
    (root / "buffer-object-corruption" / "triggers.yaml").unlink()
    text = (root / "runtime-hang-timeout" / "triggers.yaml").read_text()
    pattern = next(line for line in text.splitlines() if "pattern:" in line)
    edit("runtime-hang-timeout", pattern, '    pattern: "(unclosed"', "triggers.yaml")
    problems = "\n".join(validate(root))
    assert "buffer-object-corruption/triggers.yaml: a debug skill needs triggers" in problems
    assert "pattern does not compile" in problems


def test_validator_catches_a_skill_the_orchestrator_names_but_the_catalog_lacks(broken):
    root, _ = broken
    shutil.rmtree(root / "multi-kernel-merging")
    problems = validate(root)
    assert any("names `multi-kernel-merging`, which is not in the catalog" in p
               for p in problems)


def test_validator_catches_phase_skills_that_differ_from_the_phase_table(broken):
    root, edit = broken
    edit("phase-3-full-model", "phase: 3", "phase: 4")
    problems = "\n".join(validate(root))
    assert "('phase-3-full-model', 4)" in problems and "not the phase table's" in problems


# --- a seeded fault through the conductor ----------------------------------------------------

def test_a_seeded_gemm_fault_proposes_the_matching_skill_and_the_pick_passes(tmp_path):
    from npu_deploy.events.payloads import GateCheck, GateEvaluated
    from npu_deploy.machine import Conductor, Pipeline, Policy
    from npu_deploy.store import EventStore

    class Agent:
        name = "seeded"

        def work(self, run):
            run.step("select_tiles", {"kernel": "gemm_bf16"}, lambda: {
                "tile_n": 128 if run.debug_direction == "silent-gemm-corruption" else 96})

    class Gate:
        def evaluate(self, run):
            run.step("read_tiles", {}, lambda: {"tile_n": 0})
            fixed = run.debug_direction == "silent-gemm-corruption"
            q = 0.9999 if fixed or run.phase != 1 else 0.02
            return GateEvaluated(gate="kernels", passed=q >= 0.99, checks=[
                GateCheck(subject="L0.q_proj gemm", metric="cosine", value=q,
                          threshold=0.99, comparison=">=", passed=q >= 0.99),
                GateCheck(subject="L0.k_proj gemm", metric="cosine", value=0.9999,
                          threshold=0.99, comparison=">=", passed=True)])

    with EventStore.open(tmp_path / "runs.db") as store:
        pipeline = Pipeline(Agent(), {k: Gate() for k in range(8)}, SkillMatcher())
        c = Conductor.start(store, pipeline, Policy(auto_approve=True), model="tiny")
        assert c.run().reason == "finished"
        c.close()
        events = list(store.events(c.run_id))
    proposed = [e for e in events if e.type == "debug.proposed"]
    assert len(proposed) == 1 and proposed[0].phase == 1
    assert proposed[0].payload["directions"][0]["skill"] == "silent-gemm-corruption"
    gate_steps = [e for e in events if e.type == "tool.requested"
                  and e.payload["tool"] == "read_tiles"]
    assert gate_steps and all(e.actor == "harness" and ".gate.s" in e.idempotency_key
                              for e in gate_steps)
    retry = [e for e in events if e.type == "phase.entered" and e.phase == 1][-1]
    assert retry.attempt == 2 and retry.payload["debug_direction"] == "silent-gemm-corruption"


def test_every_debug_direction_title_is_whole_words():
    """A direction's title is its skill's first clause, never cut inside a word (the first
    sentence cut at 120 characters read "... because N" or "... the res")."""
    for skill in load_catalog().of_kind("debug"):
        title = title_of(skill.description)
        assert len(title) <= TITLE_CHARS
        assert skill.description.startswith(title.removesuffix(" …"))
        rest = skill.description[len(title.removesuffix(" …")):]
        assert rest[:1] in (" ", ",", ";", "."), (title, rest[:20])
    assert title_of(load_catalog()["silent-gemm-corruption"].description) \
        == "Diagnoses a GEMM whose output is silently wrong"
    for limit in range(3, 40):
        said = whole_words("re-select the tile configuration of flash_attention", limit)
        assert len(said) <= limit and (said.endswith(" …") or said.startswith("re-select the"))
    assert whole_words("re-select the tile configuration", 20) == "re-select the …"
