"""Dispatch plans, their transforms and the NPU2 performance model (issue 5).

Transforms run on the emulator with tiny random models: the ones that keep the kernels give
the same bits; the two that swap a kernel stay within its numerics. The performance model
is checked against the Llama-3.2-1B figures of docs/hardware-facts.md it is calibrated on.
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch

from npu_deploy.cli.models import model_shape
from npu_deploy.kernels import XDNA2
from npu_deploy.kernels.air_programs.air import emit_plan
from npu_deploy.kernels.air_programs.air_verify import check_programs
from npu_deploy.kernels.definition.checker import check_merge, shared_configs
from npu_deploy.kernels.definition.rules import blocking
from npu_deploy.kernels.definition.selection import select
from npu_deploy.kernels.definition.specs import SPECS, Decode, KernelUse, Prefill
from npu_deploy.kernels.emulation.emulator import EmulatorBackend
from npu_deploy.kernels.performance.calibration import (
    _first_with_role,
    calibrate,
    deployed,
    reference_decode,
    reference_prefill,
)
from npu_deploy.kernels.performance.calibration_set import CALIBRATION
from npu_deploy.kernels.performance.model import PerfParams, estimate
from npu_deploy.kernels.plans.plan import Dispatch, HostStep, baseline_plan
from npu_deploy.kernels.plans.plan_runner import PlanRunner
from npu_deploy.kernels.plans.transforms import (
    TRANSFORMS,
    IllegalTransform,
    align_layouts,
    merge,
    merge_dispatches,
    reuse_buffers,
)
from npu_deploy.metrics.comparison import compare
from npu_deploy.models import CATALOG

LLAMA = CATALOG["llama-3.2-1b"].args
TINY = ["tiny-llama", "tiny-llama-mha", "tiny-qwen2", "tiny-qwen3", "tiny-qwen2-hd128"]
L = 37


# --- plans -----------------------------------------------------------------------------

def test_baseline_prefill_is_one_dispatch_per_kernel_with_everything_synced():
    plan = baseline_plan("llama-3.2-1b", LLAMA, Prefill(2048))
    assert all(len(d.launches) == 1 for d in plan.dispatches)
    kinds = {b.kind for ln in plan.launches() for b in ln.bindings}
    assert kinds == {"input", "output"}                  # weights re-uploaded, all synced
    # the LM head on the last position only, as GEMV partitions (as upstream runs it),
    # after the final norm of that row on the host: no [2048, 128256] FP32 logits
    assert plan.lm_head == "last-token"
    gemv = [ln for ln in plan.launches() if ln.role.startswith("lm_head")]
    assert len(gemv) == 8 and {ln.kernel for ln in gemv} == {"gemv"}
    assert sum(ln.shape_dict["M"] for ln in gemv) == LLAMA.vocab
    assert plan.host_steps[-1].op == "final_norm_last_row"
    full = baseline_plan("llama-3.2-1b", LLAMA, Prefill(2048), lm_head="full")
    lm = [ln for ln in full.launches() if ln.role == "lm_head"]
    assert full.lm_head == "full" and lm[0].shape_dict == {"M": 2048, "K": 2048, "N": 128256}
    ops = [s.op for s in plan.host_steps]
    # q, k, v to head-first and the attention output back, in every layer
    assert ops.count("transpose") == 4 * LLAMA.n_layers and ops[0] == "embedding"
    assert ops.count("kv_store") == LLAMA.n_layers
    heads = {b.layout for ln in plan.launches() if ln.kernel == "flash_attention"
             for b in ln.bindings}
    assert heads == {"head-first"}


def test_baseline_decode_keeps_host_steps_explicit():
    plan = baseline_plan("llama-3.2-1b", LLAMA, Decode(100))
    ops = {s.op for s in plan.host_steps}
    assert ops == {"embedding", "kv_append"}
    att = [ln for ln in plan.launches() if ln.role == "attention"]
    assert len(att) == LLAMA.n_layers and att[0].kernel == "npu_decode_attention"
    assert att[0].shape_dict["Lk"] == 101
    gemv = [ln for ln in plan.launches() if ln.role.startswith("lm_head")]
    assert len(gemv) == 8 and all(ln.shape_dict["M"] <= 16384 for ln in gemv)


def test_no_baseline_decode_launch_runs_at_a_configuration_the_checker_refuses():
    """benchmarks/air_programs.py emits every launch of these plans: a launch at a
    configuration with blocking findings is a program that cannot run (qwen2.5-3b's decode
    attention at p=2048 filled 74.5 KiB of a 64 KiB compute tile)."""
    from npu_deploy.kernels.definition.checker import check

    for name, entry in CATALOG.items():
        plan = baseline_plan(name, entry.args, Decode(2048))
        refused = {(ln.kernel, ln.shape, ln.config) for ln in plan.launches()
                   if blocking(check(ln.spec, ln.shape_dict, ln.config_dict, XDNA2))}
        assert not refused, (name, refused)


def test_decode_attention_without_a_valid_configuration_runs_on_the_host_with_the_reason():
    """qwen2.5-3b groups 8 queries per KV head at head_dim 128: at p=2048 their FP32 score
    rows overflow L1, so the baseline takes the CPU fallback and says why; at p=100 the
    NPU program fits and stays."""
    from npu_deploy.kernels.plans.optimize import optimize

    args = CATALOG["qwen2.5-3b"].args
    plan = baseline_plan("qwen2.5-3b", args, Decode(2048))
    att = [s for s in plan.host_steps if s.role == "attention"]
    assert len(att) == args.n_layers and not any(ln.role == "attention"
                                                 for ln in plan.launches())
    assert {s.op for s in att} == {"decode_attention"}
    assert all("L1 footprint 74.5 KiB" in s.reason for s in att)
    assert all(s.reason == "" for s in plan.host_steps if s.role != "attention")
    for step in optimize(plan).plan.steps:     # no transform puts it back on the NPU
        assert isinstance(step, HostStep) or all(ln.role != "attention"
                                                 for ln in step.launches)
    short = baseline_plan("qwen2.5-3b", args, Decode(100))
    assert sum(ln.kernel == "npu_decode_attention" for ln in short.launches()) == args.n_layers
    assert not any(s.op == "decode_attention" for s in short.host_steps)


def test_decode_plans_of_one_context_emit_one_program_at_every_position():
    """Built for a context, the decode attention takes the step's length at run time: the
    plans at positions 40 and 400 (and 1023) emit the same programs, digest for digest;
    built for their own lengths they do not. The checker holds the program as built: a
    context whose score rows overflow L1 sends the step to the host even where its own
    length would fit."""
    _, args = model_shape("smollm2-135m")

    def digests(mode: Decode) -> list[str]:
        return [p.digest for p in emit_plan(baseline_plan("smollm2-135m", args, mode))]

    once = digests(Decode(40, 1024))
    assert once == digests(Decode(400, 1024)) == digests(Decode(1023, 1024))
    alone = digests(Decode(40)), digests(Decode(400))
    assert alone[0] != alone[1]
    assert sum(a != b for a, b in zip(*alone, strict=True)) == args.n_layers    # attention
    qwen = CATALOG["qwen2.5-3b"].args
    far = baseline_plan("qwen2.5-3b", qwen, Decode(100, 2048))
    att = [s for s in far.host_steps if s.role == "attention"]
    assert len(att) == qwen.n_layers and all("shorter context" in s.reason for s in att)
    assert all(s.shape_dict["Lk"] == 101 for s in att)     # the host attends the step's


def test_decode_attention_built_for_a_context_is_priced_as_it_streams():
    """Like upstream's one decode template, a program built for a context streams all of
    its cache at every step (the cores skip the positions past the length, the DMA does
    not): the modeled launch and the bytes the host writes are the context's at any
    position, those of the step built for the whole context; the FLOPs are the step's."""
    def attention(mode: Decode) -> tuple[float, int, float]:
        profile = estimate(baseline_plan("llama-3.2-1b", LLAMA, mode))
        step = next(s for s in profile.steps
                    if any(ln.kernel == "npu_decode_attention" for ln in s.launches))
        return step.launches[0].seconds, step.host_bytes, step.launches[0].flops

    early, late, whole = attention(Decode(128, 1024)), attention(Decode(1000, 1024)), \
        attention(Decode(1023))
    assert early[:2] == late[:2] == whole[:2]
    assert early[2] < late[2] < whole[2]
    alone = attention(Decode(128))
    assert alone[0] < early[0] and alone[1] < early[1]


def test_a_head_dim_the_kernels_cannot_take_is_refused_with_the_reason(tiny_models):
    """Upstream's rope (rope_halfsplit.cc) rotates rows of a multiple of 32 and attn_npu2.cc
    scales its softmax for head_dim 64, 128, 256 or 512: a model of head_dim 16 runs on
    neither, and their selections say so (Phase 1 blocks on them) while the model's other
    kernels are not blamed; the tiny models (head_dim 64) run."""
    def refused(args):
        plan = baseline_plan("m", args, Prefill(32))
        found = {}
        for ln in plan.launches():
            use = KernelUse(ln.role, SPECS[ln.kernel], ln.shape_dict)
            found.update((ln.kernel, f.message) for f in blocking(select(use, XDNA2).findings))
        return found

    args = tiny_models["tiny-qwen2"].args
    assert args.head_dim == 64 and refused(args) == {}
    narrow = dataclasses.replace(args, n_heads=4, n_kv_heads=2, head_dim=16)
    assert refused(narrow) == {
        "rope": "width=16 is not a multiple of 32: rope works on 16-lane vectors of each half "
                "of a row",
        "flash_attention": "head_dim=16: attn_npu2.cc compiles its softmax scale "
                           "1/sqrt(dk_full) only for dk_full 64, 128, 256, 512 (a static_assert); "
                           "run this attention on the CPU"}


@pytest.mark.slow
def test_every_target_model_gets_a_plan_and_a_profile():
    for name, entry in CATALOG.items():
        for mode in (Prefill(2048), Decode(2048)):
            plan = reference_prefill(name, entry.args, 2048) if isinstance(mode, Prefill) \
                else reference_decode(name, entry.args, 2048)
            profile = estimate(plan)
            assert profile.source == "modeled" and profile.total_s > 0, name
            assert all(s.seconds > 0 for s in profile.steps)


# --- transforms on the emulator ---------------------------------------------------------

@pytest.fixture(scope="module")
def runs(tiny_models):
    """name -> (runner, tokens, baseline prefill result)."""
    out = {}
    for name in TINY:
        m = tiny_models[name]
        runner = PlanRunner(m.args, m.weights, EmulatorBackend())
        tokens = torch.arange(3, 3 + L) % m.args.vocab
        out[name] = (runner, tokens, runner.run(baseline_plan(name, m.args, Prefill(L)), tokens))
    return out


@pytest.mark.parametrize("name", TINY)
def test_transforms_that_keep_the_kernels_keep_the_bits(name, tiny_models, runs):
    runner, tokens, base = runs[name]
    args = tiny_models[name].args
    plan = baseline_plan(name, args, Prefill(L))
    for t in ("align_layouts", "reuse_buffers", "merge_dispatches"):
        plan = TRANSFORMS[t].apply(plan)
        got = runner.run(plan, tokens)
        assert torch.equal(got.logits, base.logits), t
        for key, cache in base.cache.items():
            assert torch.equal(got.cache[key], cache), (t, key)
    assert not [s for s in plan.host_steps if s.op == "transpose"]
    assert len(plan.dispatches) < len(baseline_plan(name, args, Prefill(L)).dispatches)

    decode = baseline_plan(name, args, Decode(L))
    before = runner.run(decode, torch.tensor([7]), base.cache)
    for t in ("reuse_buffers", "merge_dispatches"):
        decode = TRANSFORMS[t].apply(decode)
        got = runner.run(decode, torch.tensor([7]), base.cache).logits
        moved = [ln for ln in decode.launches() if ln.config_dict.get("kernel") == "mv_bf16"]
        if TRANSFORMS[t].preserves == "bits" or not moved:
            assert torch.equal(got, before.logits), t
        else:
            # the GEMVs that share an ELF on mv_bf16.o round per K block: close, not equal
            assert {ln.kernel for ln in moved} == {"gemv"}
            assert torch.allclose(got.float(), before.logits.float(), rtol=0.05, atol=0.02)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2-hd128"])
def test_head_dim_128_aligns_on_head_first_attention(name, tiny_models):
    plan = align_layouts(baseline_plan(name, tiny_models[name].args, Prefill(L)))
    att = [ln for ln in plan.launches() if ln.kernel == "flash_attention"][0]
    want = "head-first" if tiny_models[name].args.head_dim >= 128 else "seq-first"
    assert att.config_dict["layout"] == want
    assert {b.layout for b in att.bindings if b.operand != "o"} == {want}
    assert att.binding("o").layout == "seq-first"          # the O GEMM reads it as is
    q_proj = [ln for ln in plan.launches() if ln.role == "q_proj"][0]
    assert q_proj.binding("c").layout == want             # the GEMM's output DMA writes it


@pytest.mark.parametrize("name", TINY)
def test_last_token_lm_head_changes_only_the_lm_head_numerics(name, tiny_models, runs):
    runner, tokens, _ = runs[name]
    args = tiny_models[name].args
    full = baseline_plan(name, args, Prefill(L), lm_head="full")
    base = runner.run(full, tokens)
    assert base.logits.shape == (L, args.vocab)
    plan = TRANSFORMS["last_token_lm_head"].apply(full)
    # the transform gives what the baseline runs by default (issue 36)
    assert plan.steps == baseline_plan(name, args, Prefill(L)).steps
    with pytest.raises(IllegalTransform, match="whole sequence"):
        TRANSFORMS["last_token_lm_head"].apply(plan)
    got = runner.run(plan, tokens)
    assert got.logits.shape == (1, args.vocab) and plan.lm_head == "last-token"
    c = compare(base.logits[-1:], got.logits.float())
    # GEMV (FP32 lanes) against the BFP16 GEMM: the GEMM's ~1e-2 error, no more.
    assert c.cosine > 0.9995 and c.mean_rel_l1 < 3e-2
    assert int(got.logits.float().argmax()) == int(base.logits[-1].argmax())
    for key, cache in base.cache.items():                  # the layers are untouched
        assert torch.equal(got.cache[key], cache)


@pytest.mark.parametrize("name", TINY)
def test_decode_attention_on_cpu_changes_only_attention_numerics(name, tiny_models, runs):
    runner, tokens, base = runs[name]
    args = tiny_models[name].args
    npu = baseline_plan(name, args, Decode(L))
    cpu = TRANSFORMS["decode_attention_on_cpu"].apply(npu)
    assert [s.op for s in cpu.host_steps].count("decode_attention") == args.n_layers
    a = runner.run(npu, torch.tensor([7]), base.cache)
    b = runner.run(cpu, torch.tensor([7]), base.cache)
    c = compare(a.logits.float(), b.logits.float())
    assert c.cosine > 0.9995 and int(a.logits.argmax()) == int(b.logits.argmax())
    # and both agree with a prefill of the longer sequence
    longer = runner.run(baseline_plan(name, args, Prefill(L + 1)),
                        torch.cat((tokens, torch.tensor([7]))))
    assert compare(longer.logits[-1:], b.logits.float()).cosine > 0.999


def test_transforms_are_pure():
    plan = baseline_plan("llama-3.2-1b", LLAMA, Prefill(2048))
    snapshot = dataclasses.astuple(plan)
    merge_dispatches(reuse_buffers(align_layouts(plan)))
    assert dataclasses.astuple(plan) == snapshot


# --- illegal merges ------------------------------------------------------------------------

def _index(plan, role, layer=0):
    for i, s in enumerate(plan.steps):
        if isinstance(s, Dispatch) and any(ln.role == role and ln.layer == layer
                                           for ln in s.launches):
            return i
    raise KeyError(role)


def test_checker_refuses_merging_attention_with_its_neighbours():
    plan = reuse_buffers(align_layouts(baseline_plan("llama-3.2-1b", LLAMA, Prefill(2048))))
    i = _index(plan, "attention")
    with pytest.raises(IllegalTransform) as err:
        merge(plan, i, i + 1)
    assert "flash_attention" in str(err.value) and err.value.findings
    # the launches before it merge
    merged = merge(plan, _index(plan, "attn_norm"), _index(plan, "rope_k"), "rms_gemms_rope")
    assert len(merged.steps) == len(plan.steps) - 5


def test_gemvs_of_another_k_share_an_elf_on_mv_bf16():
    # SmolLM2-135M's q..v GEMVs all read K = 576 with one tile: one mv.o and one declaration
    # of its matvec serve them. up..down also takes the down GEMV (K = 1536, its own tile_m):
    # mv.cc's symbols cannot be renamed, so as selected the two cannot share an ELF, and
    # the merge moves down onto mv_bf16.o (upstream's o_gemv_ffn does the same for its K).
    args = CATALOG["smollm2-135m"].args
    plan = reuse_buffers(baseline_plan("smollm2-135m", args, Decode(10)))
    first, last = _index(plan, "q_proj"), _index(plan, "v_proj")
    qkv = merge(plan, first, last)
    assert {ln.config_dict.get("kernel", "mv") for ln in qkv.launches()
            if ln.kernel == "gemv"} == {"mv"}
    up, down = _index(plan, "up_proj"), _index(plan, "down_proj")
    launches = [ln for d in plan.steps[up:down + 1] for ln in d.launches]
    raw = check_merge([(ln.spec, ln.shape_dict, ln.config_dict) for ln in launches], XDNA2)
    assert re.search("export linalg_fill_bf16: mv_m16.o .* mv_m8.o", raw[0].message)
    merged = merge(plan, up, down)
    (elf,) = [d for d in merged.dispatches if any(ln.role == "down_proj" and ln.layer == 0
                                                  for ln in d.launches)]
    kinds = {ln.role: ln.config_dict.get("kernel", "mv") for ln in elf.launches
             if ln.kernel == "gemv"}
    assert kinds == {"up_proj": "mv", "down_proj": "mv_bf16"}
    down_ln = next(ln for ln in elf.launches if ln.role == "down_proj")
    assert down_ln.config_dict["k_chunk"] == 512                    # 1536 = 3 x 512
    verdict = check_programs(emit_plan(dataclasses.replace(merged, steps=(elf,))))
    assert verdict.clean == len(verdict.results) >= 1, verdict.as_json()["violations"]


def test_gemvs_that_no_k_chunk_or_row_block_fits_do_not_share():
    spec = SPECS["gemv"]
    a = (spec, {"M": 128, "K": 128}, {"tile_m": 16, "m_input": 8})
    b = (spec, {"M": 100, "K": 192}, {"tile_m": 8, "m_input": 8})   # 100 rows: not 8-row blocks
    assert check_merge([a, b], XDNA2)
    assert shared_configs([a, b], XDNA2) is None
    c = (spec, {"M": 128, "K": 192}, {"tile_m": 8, "m_input": 8})
    assert shared_configs([a, c], XDNA2)[1]["kernel"] == "mv_bf16"


def test_merge_refuses_across_a_host_step():
    plan = baseline_plan("llama-3.2-1b", LLAMA, Prefill(2048))
    i = _index(plan, "v_proj")
    assert isinstance(plan.steps[i + 1], HostStep)
    with pytest.raises(IllegalTransform, match="host step"):
        merge(plan, i, i + 2)


# --- the performance model ---------------------------------------------------------------

def test_calibration_is_rerunnable_and_gives_the_stored_parameters():
    got, stored = calibrate(), PerfParams()
    for field in dataclasses.fields(PerfParams):
        a, b = getattr(got, field.name), getattr(stored, field.name)
        if isinstance(a, tuple) and isinstance(a[0], tuple):       # (key, value) pairs
            assert [k for k, _ in a] == [k for k, _ in b], field.name
            assert [v for _, v in a] == pytest.approx([v for _, v in b], rel=1e-6), field.name
        elif isinstance(a, tuple):
            assert a == pytest.approx(b, rel=1e-6), field.name
        else:
            assert a == pytest.approx(b, rel=1e-6), field.name
    lo, hi = CALIBRATION.dispatch_overhead_range
    assert lo <= stored.dispatch_overhead_s <= hi


def test_llama_reference_plans_meet_the_measured_deployment():
    """Priced at the configurations the deployment ran (calibration.json), the reference
    plans come out at the measured TTFT, time per token and dispatch times."""
    pre = deployed(reference_prefill("llama-3.2-1b", LLAMA, 2048))
    dec = deployed(reference_decode("llama-3.2-1b", LLAMA, 2048))
    assert len([d for d in pre.dispatches if d.launches[0].layer == 0]) == 3
    assert len([d for d in dec.dispatches if d.launches[0].layer == 0]) == 2
    ptime, dtime = estimate(pre), estimate(dec)
    assert ptime.total_s == pytest.approx(1.27, rel=0.05)           # TTFT
    assert dtime.total_s == pytest.approx(0.092, rel=0.05)          # per token
    for plan, prof, figures in ((pre, ptime, CALIBRATION.prefill_dispatches),
                                (dec, dtime, CALIBRATION.decode_dispatches)):
        for role, measured in figures:
            step = prof.by_name(_first_with_role(plan, role).name)
            assert step.device_s == pytest.approx(measured, rel=0.10), role


def test_llama_baseline_is_within_25_percent_of_iron():
    assert estimate(baseline_plan("llama-3.2-1b", LLAMA, Prefill(2048))).total_s \
        == pytest.approx(2.744, rel=0.25)
    assert estimate(baseline_plan("llama-3.2-1b", LLAMA, Decode(2048))).total_s \
        == pytest.approx(0.370, rel=0.25)


@pytest.mark.parametrize("mode", [Prefill(2048), Decode(2048)])
def test_the_model_ranks_plans_as_the_measured_reference_did(mode):
    base = baseline_plan("llama-3.2-1b", LLAMA, mode)
    bo = reuse_buffers(base)                       # per-kernel dispatches, buffers reused
    best = reference_prefill("llama-3.2-1b", LLAMA, 2048) if isinstance(mode, Prefill) \
        else reference_decode("llama-3.2-1b", LLAMA, 2048)
    times = [estimate(p).total_s for p in (base, bo, best)]
    assert times[0] > times[1] > times[2]


def test_every_report_carries_its_source_and_the_roofline():
    prof = estimate(reference_prefill("llama-3.2-1b", LLAMA, 2048))
    assert prof.source == "modeled" and "Llama-3.2-1B" in prof.calibration
    gemm = [lp for s in prof.steps for lp in s.launches if lp.kernel == "gemm_bf16"]
    assert all(0 < lp.roofline_fraction(XDNA2) <= 1 for lp in gemm)
    assert all(lp.achieved_flops <= CALIBRATION.gemm_best for lp in gemm)
    assert 0.8 < prof.eta < 1.2                   # the reference deployment is eta = 1


def test_optimize_keeps_only_faster_steps():
    from npu_deploy.kernels.plans.optimize import optimize

    result = optimize(baseline_plan("llama-3.2-1b", LLAMA, Prefill(2048)))
    kept = [a for a in result.attempts if a.kept]
    # the baseline's LM head already runs on the last token: that transform does not apply
    assert [a.transform for a in kept] == ["align_layouts", "reuse_buffers",
                                           "merge_dispatches"]
    skipped = next(a for a in result.attempts if a.transform == "last_token_lm_head")
    assert skipped.after_s is None and "whole sequence" in skipped.reason
    assert all(a.after_s is not None and a.after_s < a.before_s for a in kept)
    assert result.profile.total_s == pytest.approx(
        estimate(reference_prefill("llama-3.2-1b", LLAMA, 2048)).total_s)


# --- the command line ------------------------------------------------------------------

def test_plan_command_prints_the_plan_its_profile_and_the_transform_chain(cli):
    result = cli("plan", "llama-3.2-1b", "--optimize")
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "modeled" in out and "Nothing ran on an NPU" in out
    for name in ("align_layouts", "last_token_lm_head", "reuse_buffers", "merge_dispatches"):
        assert name in out
    assert "L0.attention" in out and "TTFT" in out
    # issue 36: as upstream's Llama-3.2-1B prefill (three per-layer ELFs and the LM head's)
    assert "programs: 4 distinct for 49 dispatches" in out


def test_plan_command_json_for_a_target_without_weights(cli):
    import json

    data = json.loads(cli("plan", "qwen2.5-1.5b", "--mode", "decode", "--pos", "500",
                          "--optimize", "--json").stdout)
    assert data["source"] == "modeled" and data["mode"] == "decode p=500"
    assert data["tokens_per_s"] > 0 and data["attempts"]
    assert any(a["transform"] == "decode_attention_on_cpu" for a in data["attempts"])
    npu = [s for s in data["steps"] if s["where"] == "npu"]
    assert npu and all(ln["bindings"] for s in npu for ln in s["launches"])
    base = json.loads(cli("plan", "qwen2.5-1.5b", "--mode", "decode", "--pos", "500",
                          "--json").stdout)
    assert base["total_s"] > data["total_s"] and base["transforms"] == []


def test_plan_command_says_why_a_step_left_the_npu(cli):
    text = cli("plan", "qwen2.5-3b", "--mode", "decode", "--pos", "2048").stdout
    assert "on the CPU instead of the NPU (36 step(s), L0.attention .. L35.attention): " \
        "npu_decode_attention Lk=2049" in " ".join(text.split())
    data = json.loads(cli("plan", "qwen2.5-3b", "--mode", "decode", "--pos", "2048",
                          "--json").stdout)
    att = [s for s in data["steps"] if s["name"] == "L0.attention"]
    assert att[0]["where"] == "cpu" and "L1 footprint" in att[0]["reason"]
    assert all(s["reason"] == "" for s in data["steps"] if s.get("op") in ("embedding",
                                                                            "kv_append"))


def test_plan_command_writes_the_mlir_air_programs(cli, tmp_path):
    out = tmp_path / "air"
    result = cli("plan", "smollm2-135m", "--seq-len", "128", "--optimize", "--emit-air", out)
    assert result.exit_code == 0, result.output
    files = sorted(out.glob("*.py"))
    # one file per distinct program (every layer's dispatch shares one), within the
    # contexts a process keeps loaded
    assert 0 < len(files) <= XDNA2.hw_contexts
    assert f"{len(files)} distinct MLIR-AIR programs for " in result.output
    for f in files:
        compile(f.read_text(), str(f), "exec")
    (tmp_path / "taken").write_text("a file")
    from conftest import assert_one_error
    assert_one_error(cli("plan", "smollm2-135m", "--emit-air", tmp_path / "taken"),
                     "--emit-air")


def test_plan_command_rejects_bad_input_in_one_line(cli):
    from conftest import assert_one_error

    assert_one_error(cli("plan", "no-such-model"), "no-such-model")
    result = cli("plan", "llama-3.2-1b", "--mode", "sideways")
    assert result.exit_code == 2 and "sideways" in result.stderr
    assert_one_error(cli("plan", "llama-3.2-1b", "--mode", "decode", "--pos", "128",
                         "--context", "100"), "--context 100 must hold position 128")


def test_plan_command_prices_a_decode_built_for_a_context(cli):
    def total(*context: str) -> float:
        return float(json.loads(cli("plan", "llama-3.2-1b", "--mode", "decode", "--pos",
                                    "128", *context, "--json").stdout)["total_s"])

    data = json.loads(cli("plan", "llama-3.2-1b", "--mode", "decode", "--pos", "128",
                          "--context", "2048", "--json").stdout)
    assert data["mode"] == "decode p=128 of 2048"
    assert total("--context", "2048") == data["total_s"] > total()


def test_plan_check_verifies_every_program_and_fails_on_a_violation(cli, tmp_path):
    out = tmp_path / "air"
    result = cli("plan", "smollm2-135m", "--mode", "decode", "--pos", "40", "--emit-air", out,
                 "--check")
    report = json.loads((out / "verify.json").read_text())
    assert report["programs"] == len(list(out.glob("*.py")))
    assert f"MLIR-AIR programs: {report['clean']} of {report['programs']} clean" \
        in result.output
    failing = {c: n for c, n in report["failing_by_check"].items() if n}
    assert result.exit_code == (1 if failing else 0), result.output
    for check in failing:
        assert f"  {check}: {failing[check]} program(s), e.g. {check}: " in result.output
    assert {v["check"] for v in report["violations"]} == set(failing)
    data = json.loads(cli("plan", "smollm2-135m", "--mode", "decode", "--pos", "40",
                          "--check", "--json").stdout)
    assert data["air_check"]["clean"] == report["clean"]


def test_a_runner_on_another_backend_shares_what_it_prepared(tiny_models, runs):
    """`PlanRunner.on`: the same bits on an equal backend, from the same prepared device
    weights and GEMM operands (a static weight's block format is keyed by its tensor), and
    the runner it came from is left on its own backend."""
    name = TINY[0]
    runner, tokens, base = runs[name]
    other_backend = EmulatorBackend()
    other = runner.on(other_backend)
    assert other.backend is other_backend and runner.backend is not other_backend
    assert other.weights is runner.weights and other._gemm_b is runner._gemm_b
    got = other.run(baseline_plan(name, tiny_models[name].args, Prefill(L)), tokens)
    assert torch.equal(got.logits, base.logits)
