"""The XRT backend of a deployment, on a simulated NPU (tests/fake_npu.py: pyxrt's calls
recorded, each run computed with the emulator's numerics on the buffer objects' bytes).

A plan run through `kernels.npu_runtime.npu_backend.NpuBackend` must give the emulator's bits: that
holds only if every argument got the buffer its binding kind says (a weight written once, an
intermediate left on the device and shared by the programs that bind it, an input written,
an output read back) and the wiring of merged dispatches is right. The measured profile,
the emitted programs in the run's directory, and a whole deployment on the xrt backend
through the conductor (the evaluator's fresh process included) are checked too. No time
here is an NPU's: the simulated device computes on this host's CPU, and on its own clock a
run lasts the dispatch's modeled device time.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from fake_npu import SimulatedXrt, compiler_for
from paths import TESTS

from npu_deploy.kernels import XDNA2
from npu_deploy.kernels.air_programs.air import pad_sequences, tensor_key
from npu_deploy.kernels.definition.specs import Decode, Prefill
from npu_deploy.kernels.emulation.emulator import EmulatorBackend
from npu_deploy.kernels.npu_runtime.npu_backend import NpuBackend, argument_kinds, measure
from npu_deploy.kernels.npu_runtime.xrt_runtime import XrtRunner
from npu_deploy.kernels.performance.model import Profile, device_s, estimate
from npu_deploy.kernels.plans.plan import baseline_plan
from npu_deploy.kernels.plans.plan_runner import PlanRunner
from npu_deploy.kernels.plans.transforms import TRANSFORMS

L = 24


def npu_backend(tmp_path: Path, head_dim: int,
                hw_contexts: int = XDNA2.hw_contexts) -> tuple[NpuBackend, SimulatedXrt]:
    sim = SimulatedXrt(head_dim)
    runner = XrtRunner(sim, clock=sim.clock, hw_contexts=hw_contexts)
    backend = NpuBackend(cache=tmp_path / "cache", objects=tmp_path / "objects",
                         programs=tmp_path / "air", runner=runner,
                         compiler=compiler_for(sim, tmp_path / "bin"),
                         lock=tmp_path / "npu.lock")
    return backend, sim


def optimized(plan, names=("align_layouts", "reuse_buffers", "merge_dispatches")):
    for name in names:
        plan = TRANSFORMS[name].apply(plan)
    return plan


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
@pytest.mark.slow         # 9 s in all on 2 busy cores: out of the fast core
def test_a_padded_sequence_on_the_simulated_npu_gives_the_emulators_bits(name, tiny_models,
                                                                         tmp_path):
    """A prefill length no tile divides: the head-first tensors live [heads, L_pad, hd] on
    the device, and what the host reads back is still the emulator's."""
    m = tiny_models[name]
    emulator = PlanRunner(m.args, m.weights, EmulatorBackend())
    backend, _ = npu_backend(tmp_path, m.args.head_dim)
    npu = PlanRunner(m.args, m.weights, backend)
    tokens = torch.arange(3, 103) % m.args.vocab
    base = baseline_plan(name, m.args, Prefill(100))
    # the baseline binds q, k, v and o head-first (padded per head); the optimized plan
    # writes them seq-first for the GEMMs (padded at their end)
    pads = {b.seq_pad for d in pad_sequences(list(base.dispatches))
            for ln in d.launches for b in ln.bindings if b.seq_pad}
    assert pads and all(length == 100 < pad for length, pad in pads), pads
    for plan in (base, optimized(base)):
        want, got = emulator.run(plan, tokens), npu.run(plan, tokens)
        assert torch.equal(got.logits, want.logits), plan.history
        for key, cache in want.cache.items():
            assert torch.equal(got.cache[key], cache), (plan.history, key)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen2-hd128"])
@pytest.mark.slow         # 14 s in all on 2 busy cores: out of the fast core
def test_plans_on_the_simulated_npu_give_the_emulators_bits(name, tiny_models, tmp_path):
    m = tiny_models[name]
    emulator = PlanRunner(m.args, m.weights, EmulatorBackend())
    backend, sim = npu_backend(tmp_path, m.args.head_dim)
    npu = PlanRunner(m.args, m.weights, backend)
    tokens = torch.arange(5, 5 + L) % m.args.vocab
    base = baseline_plan(name, m.args, Prefill(L))
    for plan in (base, optimized(base)):
        want, got = emulator.run(plan, tokens), npu.run(plan, tokens)
        assert torch.equal(got.logits, want.logits), plan.history
        for key, cache in want.cache.items():
            assert torch.equal(got.cache[key], cache), (plan.history, key)
    decode = baseline_plan(name, m.args, Decode(L))
    for plan in (decode, optimized(decode, ("reuse_buffers", "merge_dispatches"))):
        want = emulator.run(plan, torch.tensor([9]), base_cache := emulator.run(
            base, tokens).cache)
        got = npu.run(plan, torch.tensor([9]), base_cache)
        assert torch.equal(got.logits, want.logits), plan.history
    # never more contexts open than the budget, in one format
    counts = backend.runner.contexts                    # type: ignore[union-attr]
    assert counts.peak <= XDNA2.hw_contexts and sim.peak_live <= XDNA2.hw_contexts
    assert counts.output_format == "elf" and sim.mixed_runs == 0
    # every program was written to the programs directory, named by its function
    files = {p.name for p in (tmp_path / "air").iterdir()}
    assert files == set(backend.written) and all(
        (tmp_path / "air" / f).read_text().count(f"def {e['function']}(") == 1
        for f, e in backend.written.items())
    assert len(backend.times) == sum(len(p.dispatches) for p in (base, optimized(base))) \
        + sum(len(p.dispatches) for p in (decode, optimized(decode, ("reuse_buffers",
                                                                     "merge_dispatches"))))


def test_every_layer_runs_the_same_compiled_program_on_buffers_of_its_own(tiny_models,
                                                                          tmp_path):
    """A program is its kernel, shapes, configuration and layouts, never its layer: layer 0's
    dispatches and layer 1's are one build and one loaded context, each layer with its own
    weights and activations (as upstream's `load_and_run` keeps a buffer set per layer)."""
    m = tiny_models["tiny-llama"]
    assert m.args.n_layers >= 2
    backend, sim = npu_backend(tmp_path, m.args.head_dim)
    built: list[str] = []
    compile_fn = backend.compiler
    backend.compiler = lambda program: (built.append(program.digest), compile_fn(program))[1]
    emulator = PlanRunner(m.args, m.weights, EmulatorBackend())
    npu = PlanRunner(m.args, m.weights, backend)
    tokens = torch.arange(L) % m.args.vocab
    plan = optimized(baseline_plan("tiny-llama", m.args, Prefill(L)))
    assert torch.equal(npu.run(plan, tokens).logits, emulator.run(plan, tokens).logits)
    by_layer = {}
    for d in plan.dispatches:
        layer = {ln.layer for ln in d.launches}
        if len(layer) == 1 and None not in layer:
            program, artifact = backend.program(d, m.args.head_dim)
            by_layer.setdefault(layer.pop(), []).append((program, artifact))
    first, second = by_layer[0], by_layer[1]
    assert [p.digest for p, _ in first] == [p.digest for p, _ in second]
    assert [p.function for p, _ in first] == [p.function for p, _ in second]
    assert [a for _, a in first] == [a for _, a in second]          # one build each
    assert "L0." not in first[0][0].source and "L1." not in second[0][0].source
    # each distinct program built once, loaded once; the layers' tensors are their own
    assert len(built) == len(set(built)) == len({p.digest for p, _ in first}) + sum(
        1 for d in plan.dispatches if any(ln.layer is None for ln in d.launches))
    assert len([c for c in sim.calls if c[0] == "hw_context"]) == len(set(built))
    assert set(first[0][0].tensors).isdisjoint(second[0][0].tensors)


@pytest.mark.parametrize("transforms", [(), ("reuse_buffers", "merge_dispatches")],
                         ids=["baseline", "merged"])
def test_decode_attention_is_built_once_for_every_position_of_its_context(
        transforms, tiny_models, tmp_path):
    """Decode steps of one context at positions 64+ apart: the decode-attention program is
    one source (one digest), compiled and loaded once on the simulated NPU (every layer runs
    it), its
    cache buffers sized for the context and kept from step to step; each step reads its
    length at run time and gives the emulator's bits, which are those of the step built for
    its own length (positions past it count for nothing)."""
    name, context, window = "tiny-llama", 200, 256         # the context up to k_tile (64)
    m = tiny_models[name]
    emulator = PlanRunner(m.args, m.weights, EmulatorBackend())
    backend, sim = npu_backend(tmp_path, m.args.head_dim)
    compiled = []
    compile_fn = backend.compiler
    assert compile_fn is not None
    backend.compiler = lambda program: (compiled.append(program), compile_fn(program))[1]
    npu = PlanRunner(m.args, m.weights, backend)
    digests, buffers = set(), set()
    for pos in (10, 74, 150):
        cache = emulator.run(baseline_plan(name, m.args, Prefill(pos)),
                             torch.arange(3, 3 + pos) % m.args.vocab).cache
        plan = optimized(baseline_plan(name, m.args, Decode(pos, context)), transforms)
        alone = optimized(baseline_plan(name, m.args, Decode(pos)), transforms)
        token = torch.tensor([pos % m.args.vocab])
        want = emulator.run(plan, token, cache)
        assert torch.equal(want.logits, emulator.run(alone, token, cache).logits)
        got = npu.run(plan, token, cache)
        assert torch.equal(got.logits, want.logits), pos
        attention = [d for d in plan.dispatches
                     if any(ln.kernel == "npu_decode_attention" for ln in d.launches)]
        assert len(attention) == m.args.n_layers
        digests.add(tuple(backend.emitted(d, m.args.head_dim).digest for d in attention))
        buffers.add(backend.runner._device["L0.k_cache"][0].id)     # type: ignore[union-attr]
        assert backend.runner._device["L0.k_cache"][2] == \
            2 * m.args.n_kv_heads * window * m.args.head_dim        # type: ignore[union-attr]
    assert len(digests) == 1 and len(buffers) == 1
    built = [p for p in compiled
             if any(ln.kernel == "npu_decode_attention" for ln in p.launches)]
    assert len(built) == 1                      # one build, whatever the layer and position
    assert {p.digest for p in built} == set(next(iter(digests)))
    assert all(ln.shape_dict["Lk"] == window for p in built for ln in p.launches
               if ln.kernel == "npu_decode_attention")
    # one hardware context per load: each compiled program opened once, unless more
    # programs than the budget took turns (the baseline's), each reopened after eviction
    opened = len([c for c in sim.calls if c[0] == "hw_context"])
    assert opened == backend.runner.loads                   # type: ignore[union-attr]
    if len(compiled) <= backend.hw.hw_contexts:
        assert opened == len(compiled)
    else:
        assert backend.runner.evictions > 0                 # type: ignore[union-attr]


def test_a_step_past_its_context_is_refused(tiny_models):
    m = tiny_models["tiny-llama"]
    with pytest.raises(ValueError, match="past the context of 64"):
        Decode(64, 64)
    plan = baseline_plan("tiny-llama", m.args, Decode(63, 64))
    launch = next(ln for ln in plan.launches() if ln.kernel == "npu_decode_attention")
    late = launch.with_bindings(launch.bindings)
    late = replace(late, shape=tuple(sorted({**late.shape_dict, "Lk": 65}.items())))
    with pytest.raises(ValueError, match="Lk=65 is past the context 64"):
        late.built()


def test_intermediates_stay_on_the_device_and_weights_are_written_once(tiny_models, tmp_path):
    m = tiny_models["tiny-llama"]
    backend, sim = npu_backend(tmp_path, m.args.head_dim)
    runner = PlanRunner(m.args, m.weights, backend)
    plan = optimized(baseline_plan("tiny-llama", m.args, Prefill(L)))
    tokens = torch.arange(L) % m.args.vocab
    runner.run(plan, tokens)
    kinds: dict[str, set[str]] = {}
    for dispatch in plan.dispatches:
        program, _ = backend.program(dispatch, m.args.head_dim)
        for (arg, _, _), key in zip(program.arguments, program.tensors, strict=True):
            kinds.setdefault(key, set()).add(argument_kinds(dispatch, program)[arg])
    inter = {k for k, v in kinds.items() if v == {"intermediate"}}
    static = {k for k, v in kinds.items() if "static" in v}
    assert inter and static and any(k.endswith(":KN") for k in static)
    # an intermediate crossing dispatches is one device buffer: produced by one program,
    # read by another, never synced, except once when allocated padded (its padding zeroed)
    crossing = [k for k in inter if sum(
        k in backend.program(d, m.args.head_dim)[0].tensors for d in plan.dispatches) > 1]
    assert crossing
    device = backend.runner._device                    # type: ignore[union-attr]
    assert inter <= set(device)
    padded = {device[k][0].id for k in inter if device[k][2] > device[k][1]}
    synced = [c[1] for c in sim.calls if c[0] == "sync"]
    assert not ({device[k][0].id for k in inter} - padded) & set(synced)
    assert padded and all(synced.count(bo) == 1 for bo in padded)
    # a second run writes no weight again
    writes = len([c for c in sim.calls if c[0] == "sync" and c[2] == "to_device"])
    runner.run(plan, tokens)
    again = len([c for c in sim.calls if c[0] == "sync" and c[2] == "to_device"]) - writes
    static_bos = {bo.id for bo, *_ in backend.runner._static.values()}   # type: ignore[union-attr]
    assert again and not [c for c in sim.calls[-again * 4:] if c[0] == "sync"
                          and c[1] in static_bos and c[2] == "to_device"]
    # nor zeroes a padded intermediate again
    assert all([c[1] for c in sim.calls if c[0] == "sync"].count(bo) == 1 for bo in padded)


def test_a_plan_of_more_programs_than_contexts_runs_within_the_budget(tiny_models, tmp_path):
    """More distinct programs than the runner may hold open (a budget of 4 here, below the
    plan's count; the default 8 works the same way): the least recently run are closed and
    opened again, the weights and intermediates stay on the device, and the logits are the
    emulator's bits."""
    m = tiny_models["tiny-llama"]
    budget = 4
    backend, sim = npu_backend(tmp_path, m.args.head_dim, hw_contexts=budget)
    plan = optimized(baseline_plan("tiny-llama", m.args, Prefill(L)))     # static weights
    tokens = torch.arange(5, 5 + L) % m.args.vocab
    want = PlanRunner(m.args, m.weights, EmulatorBackend()).run(plan, tokens)
    npu = PlanRunner(m.args, m.weights, backend)
    for _ in range(2):
        assert torch.equal(npu.run(plan, tokens).logits, want.logits)
    programs = {artifact.key for _, artifact in backend._programs.values()}
    counts = backend.runner.contexts                    # type: ignore[union-attr]
    assert len(programs) > budget
    assert counts.peak == sim.peak_live == sim.live["elf"] == budget
    assert counts.evictions > 0 and counts.loads == counts.evictions + counts.open
    assert counts.loads > len(programs)       # the second run reopened what the first closed
    # every weight written once, whatever was closed in between
    static = {bo.id for bo, *_ in backend.runner._static.values()}   # type: ignore[union-attr]
    writes = [c[1] for c in sim.calls if c[0] == "sync" and c[2] == "to_device"]
    assert static and all(writes.count(bo) == 1 for bo in static)


@pytest.mark.slow         # 4 s on 2 busy cores: out of the fast core
def test_a_measured_profile_is_per_dispatch_with_its_transfers(tiny_models, tmp_path):
    m = tiny_models["tiny-qwen3"]
    backend, _ = npu_backend(tmp_path, m.args.head_dim)
    runner = PlanRunner(m.args, m.weights, backend)
    plan = optimized(baseline_plan("tiny-qwen3", m.args, Prefill(L)))
    profile = measure(runner, plan, torch.arange(L) % m.args.vocab, repeats=3)
    assert profile.source == "measured-npu" and "median of 3 runs" in profile.calibration
    npu = [s for s in profile.steps if s.where == "npu"]
    assert [s.name for s in npu] == [d.name for d in plan.dispatches]
    assert len(profile.steps) == len(plan.steps)
    assert all(s.seconds > 0 and 0 <= s.host_transfer_s <= s.seconds for s in npu)
    # the simulated device's clock: a run lasts at least its modeled device time
    assert all(s.seconds >= device_s(d) for s, d in zip(npu, plan.dispatches, strict=True))
    assert sum(s.host_bytes for s in npu) > 0
    assert profile.one_time_s > 0                  # the weights' first writes, measured
    assert profile.total_s == pytest.approx(profile.steps_s + profile.one_time_s)
    assert len(profile.runs) == 3 and all(r > profile.one_time_s for r in profile.runs)
    assert profile.fastest_s <= profile.slowest_s
    with pytest.raises(ValueError, match="at least one measured run"):
        measure(runner, plan, torch.arange(L) % m.args.vocab, repeats=0)


def test_faster_means_beyond_the_run_to_run_spread(tiny_models):
    m = tiny_models["tiny-llama"]
    model = estimate(baseline_plan("tiny-llama", m.args, Prefill(L)))

    def runs(*ms: float) -> Profile:
        return replace(model, source="measured-npu", runs=tuple(x * 1e-3 for x in ms))

    assert runs(4.0, 4.2, 4.1).faster_than(runs(4.3, 4.5))
    assert not runs(4.0, 4.4).faster_than(runs(4.3, 4.5))       # the ranges overlap
    assert not runs(4.0, 4.1).faster_than(runs(4.0, 4.5))
    assert not runs(5.0).faster_than(runs(4.0, 4.5))
    cheaper = replace(model, one_time_s=model.one_time_s - 1e-6)
    assert cheaper.faster_than(model) and not model.faster_than(model)   # modeled: as is
    assert runs(4.0).fastest_s == runs(4.0).slowest_s == pytest.approx(4e-3)


def test_a_weight_read_by_a_gemm_and_a_gemv_is_two_buffers(tiny_models):
    m = tiny_models["tiny-llama"]
    pre = baseline_plan("tiny-llama", m.args, Prefill(L))
    dec = baseline_plan("tiny-llama", m.args, Decode(L))
    gemm = next(ln for ln in pre.launches() if ln.role == "q_proj")
    gemv = next(ln for ln in dec.launches() if ln.role == "q_proj")
    assert gemm.binding("b").tensor == gemv.binding("w").tensor
    assert tensor_key(gemm, gemm.binding("b")) != tensor_key(gemv, gemv.binding("w"))


@pytest.mark.e2e
def test_a_deployment_on_the_xrt_backend_measures_and_writes_its_programs(tmp_path,
                                                                          monkeypatch):
    from npu_deploy.agents.autopilot import pipeline
    from npu_deploy.machine import Conductor, Policy
    from npu_deploy.pipeline.workspace import workspace_dir
    from npu_deploy.store import EventStore

    tests = str(TESTS)      # the evaluator's process imports fake_npu too
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        p for p in (tests, os.environ.get("PYTHONPATH")) if p))
    (tmp_path / "objects").mkdir()
    db = tmp_path / "runs.db"
    # on a virtual clock: under load, host noise could hide every transform's gain
    config = {"seq_len": 32, "steps": 6, "backend": "xrt",
              "npu_runtime": "fake_npu:steady_runtime",
              "air_objects": str(tmp_path / "objects"), "air_cache": str(tmp_path / "cache"),
              "npu_repeats": 3}
    with EventStore.open(db) as store:
        c = Conductor.start(store, pipeline(), Policy(auto_approve=True), model="tiny-qwen2",
                            config=config)
        halt = c.run()
        c.close()
        assert halt.reason == "finished", halt
        events = list(store.events(c.run_id))
    assert events[-1].payload["verdict"] == "PASS"
    profiles = [e.payload for e in events if e.type == "profile.recorded"]
    assert profiles and all(p["source"] == "measured-npu" and len(p["runs"]) == 3
                            for p in profiles)
    dispatches = [x for p in profiles for x in p["entries"] if x["kind"] == "dispatch"]
    assert dispatches and all(x["transfer_s"] is not None for x in dispatches)
    tried = [e.payload["result"] for e in events if e.type == "tool.completed"
             and e.payload["tool"] == "apply_transform"]
    assert tried and all(r["source"] == "measured-npu" for r in tried)
    # every decision was made on three runs each; a kept one beat every run without it
    timed = [r for r in tried if "after_runs" in r]
    assert timed and all(len(r["before_runs"]) == len(r["after_runs"]) == 3 for r in timed)
    assert all(max(r["after_runs"]) < min(r["before_runs"]) for r in timed if r["kept"])
    assert all("3 runs each" in r["reason"] for r in timed if not r["kept"])
    gates = [e.payload for e in events if e.type == "gate.evaluated" and e.phase in (4, 5)]
    speed = [c for g in gates for c in g["checks"] if c["metric"].endswith("_measured_slowest_s")]
    assert len(speed) == len(gates) and all("slowest of 3 runs" in c["message"] for c in speed)
    emitted = next(e.payload["result"] for e in events if e.type == "tool.completed"
                   and e.payload["tool"] == "emit_programs")
    root = workspace_dir(db, c.run_id) / "air"
    for mode in ("prefill", "decode"):
        files = list((root / mode).glob("*.py"))
        assert len(files) == emitted[mode]["programs"] > 0
        for f in files:
            compile(f.read_text(), str(f), "exec")
    assert list((root / "compiled").glob("*.py"))      # what ran, as it was compiled


def test_a_gemm_with_b_in_column_blocks_gets_its_weight_in_that_layout(tiny_models, tmp_path):
    """b_parts > 1: the backend writes the LM head's B as column blocks, which the program
    reads (tests/kernels/test_air_addressing.py); the simulated NPU reads it back the same way
    and the logits are the emulator's bits, while the bytes on the device are not B [K, N]."""
    from npu_deploy.kernels.plans.plan import Dispatch

    m = tiny_models["tiny-llama"]
    base = baseline_plan("tiny-llama", m.args, Prefill(L), lm_head="full")   # a GEMM head
    blocked = {"b_parts": 2, "tile_n": 16, "herd_n": 1}

    def with_blocks(step):
        if not isinstance(step, Dispatch):
            return step
        return replace(step, launches=tuple(
            replace(ln, config=tuple(sorted({**ln.config_dict, **blocked}.items())))
            if ln.role == "lm_head" else ln for ln in step.launches))

    plan = replace(base, steps=tuple(with_blocks(s) for s in base.steps))
    head = next(ln for d in plan.dispatches for ln in d.launches if ln.role == "lm_head")
    assert head.config_dict["b_parts"] == 2 and m.args.vocab % 32 == 0
    tokens = torch.arange(5, 5 + L) % m.args.vocab
    want = PlanRunner(m.args, m.weights, EmulatorBackend()).run(base, tokens)
    backend, sim = npu_backend(tmp_path, m.args.head_dim)
    got = PlanRunner(m.args, m.weights, backend).run(plan, tokens)
    assert torch.equal(got.logits, want.logits)
