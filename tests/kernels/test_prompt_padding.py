"""A prompt runs padded to the length its prefill is built for (issue 36): the answer is the
prompt's, bit for bit, and prompts of nearby lengths share one plan and its programs."""

from __future__ import annotations

import pytest
import torch

from npu_deploy.kernels import XDNA2
from npu_deploy.kernels.air_programs.air import plan_programs
from npu_deploy.kernels.definition.specs import PROMPT_ALIGN, Decode, Prefill, prompt_prefill
from npu_deploy.kernels.emulation.emulator import EmulatorBackend
from npu_deploy.kernels.emulation.numerics import BFP16EBS8
from npu_deploy.kernels.plans.optimize import optimize
from npu_deploy.kernels.plans.plan import baseline_plan
from npu_deploy.kernels.plans.plan_runner import PlanRunner
from npu_deploy.metrics.comparison import compare
from npu_deploy.models import CATALOG
from npu_deploy.pipeline.deployed import DeployedModel
from npu_deploy.pipeline.recipe import Recipe

TINY = ["tiny-llama", "tiny-qwen2-hd128", "tiny-qwen3"]


def test_a_prompt_runs_as_the_prefill_of_its_length_rounded_up():
    assert [prompt_prefill(n).seq for n in (1, 37, 128, 129, 300, 2048)] == \
        [128, 128, 128, 256, 384, 2048]
    assert PROMPT_ALIGN == 128
    with pytest.raises(ValueError, match="at least one"):
        prompt_prefill(0)


@pytest.mark.parametrize("name", TINY)
def test_the_padding_reaches_a_prompt_row_only_through_vs_shared_exponents(name, tiny_models):
    """A 37-token prompt run at L=128 against the same plan run on the prompt and 91 more
    tokens. Causal attention masks the padding, but PV reads V in BFP16 blocks of 8
    positions, so positions 37-39 share an exponent with the prompt's 32-36: rows 0-31 are
    equal bit for bit in every layer, rows 32-36 within that rounding, and the KV cache and
    the decode step after it agree as closely."""
    m = tiny_models[name]
    runner = PlanRunner(m.args, m.weights, EmulatorBackend(), exact_tiles=True)
    tokens = torch.arange(3, 3 + 128) % m.args.vocab
    plan = baseline_plan(name, m.args, Prefill(128), lm_head="full")
    whole, padded = runner.run(plan, tokens), runner.run(plan, tokens[:37])
    assert padded.tokens == 37 and whole.tokens == 128
    same = 37 - 37 % BFP16EBS8.block
    assert padded.logits.shape == (37, m.args.vocab)
    assert torch.equal(padded.logits[:same], whole.logits[:same])
    assert compare(whole.logits[:37], padded.logits).cosine > 0.9999
    assert padded.cache.keys() == whole.cache.keys()
    for key, t in whole.cache.items():
        assert padded.cache[key].shape == t[:, :37].shape, key
        assert torch.equal(padded.cache[key][:, :same], t[:, :same]), key
    head_first = m.args.head_dim >= 128
    for key in ("x.1", "L0.n1", "L0.q", "L0.attn", "L1.ffn", f"x.{m.args.n_layers}"):
        want = whole.tensors[key]
        want = want[:, :37] if head_first and want.dim() == 3 else want[:37]
        got = padded.tensors[key]
        assert got.shape == want.shape, key
        rows = (slice(None), slice(0, same)) if got.dim() == 3 else (slice(0, same),)
        assert torch.equal(got[rows], want[rows]), key
    step = baseline_plan(name, m.args, Decode(37, 40))
    a = runner.run(step, torch.tensor([7]), {k: t[:, :37] for k, t in whole.cache.items()})
    b = runner.run(step, torch.tensor([7]), padded.cache)
    assert compare(a.logits.float(), b.logits.float()).cosine > 0.9999


@pytest.mark.parametrize("name", TINY)
def test_a_padded_prompt_answers_as_the_plan_of_its_own_length(name, tiny_models):
    """Against the plan built for 37 exactly, whose kernels may tile the attention another
    way: the same next token, the logits within bf16 rounding, the cache as long."""
    m = tiny_models[name]
    runner = PlanRunner(m.args, m.weights, EmulatorBackend(), exact_tiles=True)
    tokens = torch.arange(3, 40) % m.args.vocab
    exact = runner.run(baseline_plan(name, m.args, Prefill(37)), tokens)
    padded = runner.run(baseline_plan(name, m.args, prompt_prefill(37)), tokens)
    assert padded.logits.shape == exact.logits.shape == (1, m.args.vocab)
    assert int(padded.logits.argmax()) == int(exact.logits.argmax())
    assert compare(exact.logits.float(), padded.logits.float()).cosine > 0.9999
    for key, t in exact.cache.items():
        assert padded.cache[key].shape == t.shape, key


def test_a_prompt_longer_than_the_plan_is_refused(tiny_models):
    m = tiny_models["tiny-llama"]
    runner = PlanRunner(m.args, m.weights, EmulatorBackend())
    with pytest.raises(ValueError, match="a prompt of 1 to 16 tokens runs it"):
        runner.run(baseline_plan("tiny-llama", m.args, Prefill(16)), torch.arange(17))


def test_the_deployed_model_runs_nearby_prompts_on_one_plan(tiny_models):
    m = tiny_models["tiny-llama"]
    deployed = DeployedModel("tiny-llama", m.args, m.weights, Recipe(), EmulatorBackend())
    for n in (5, 37, 128):
        logits, cache = deployed.prefill(torch.arange(1, n + 1) % m.args.vocab)
        assert logits.shape == (m.args.vocab,) and cache["L0.k_cache"].shape[1] == n
    assert deployed.plans.modes() == [Prefill(128)]
    out = deployed.generate(torch.arange(1, 11), 4)
    assert len(out.tokens) == 4 and deployed.plans.modes() == [Prefill(128), Decode(10, 14),
                                                               Decode(11, 14), Decode(12, 14)]


@pytest.mark.slow
@pytest.mark.parametrize("model", sorted(CATALOG))
def test_every_prompt_length_runs_within_the_context_budget(model):
    """Unpadded, a prompt of 100 or 300 tokens splits the optimizer's merges at the
    unaligned tails into 9 programs; padded, every target model's deployed prefill needs
    at most the hardware contexts a process keeps open."""
    args = CATALOG[model].args
    for n in (100, 300):
        exact = optimize(baseline_plan(model, args, Prefill(n), XDNA2), XDNA2).plan
        padded = optimize(baseline_plan(model, args, prompt_prefill(n), XDNA2), XDNA2).plan
        assert plan_programs(padded, XDNA2).within(XDNA2), (model, n)
        if model == "llama-3.2-1b":
            assert not plan_programs(exact, XDNA2).within(XDNA2)
