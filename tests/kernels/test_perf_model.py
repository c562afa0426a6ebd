"""The performance model ranks configurations as NPU2 measured them (issue 23, point 3).

Every figure a test holds the model against was measured on NPU2 by upstream (the kernel
registry's rows, the sweeps of its notes, the Llama-3.2-1B and SmolLM2-1.7B deployments);
every time the model gives is modeled. The k-fold figures are held out by shape: a shape's
launches are modeled by coefficients fitted without any launch of that shape.
"""

from __future__ import annotations

import pytest

from npu_deploy.kernels.definition.registry import SPECS
from npu_deploy.kernels.families.gemm import GEMM_BF16, GEMM_FP32
from npu_deploy.kernels.families.gemm_numerics import METHODS
from npu_deploy.kernels.fidelity.perf_fidelity import (
    compare,
    fidelity,
    held_out_elfs,
    kfold,
    rank_correlations,
)
from npu_deploy.kernels.measured.measurements import table
from npu_deploy.kernels.performance.fitting import fit_groups, measured_launches
from npu_deploy.kernels.performance.model import (
    PerfParams,
    launch_seconds,
)

P = PerfParams()


def registry(kernel: str, M: int, K: int, N: int) -> dict[str, tuple[dict, float]]:
    """method -> (configuration, seconds) of a shape's measured registry rows."""
    out = {}
    for r in table(kernel, "shapes"):
        if (r["M"], r["K"], r["N"]) == (M, K, N) and r["gflops"]:
            config = {k: r[k] for k in ("method", "tile_m", "tile_k_l2", "tile_k_l1",
                                        "tile_n", "herd_m", "herd_n")}
            out[r["method"]] = (config, 2.0 * M * K * N / (r["gflops"] * 1e9))
    return out


def gemm(kernel: str, shape: tuple[int, int, int], config: dict) -> float:
    return launch_seconds(SPECS[kernel], dict(zip("MKN", shape, strict=True)), config)


# --- a GEMM's configurations rank as measured ---------------------------------------------

@pytest.mark.parametrize("shape", [(2048, 2048, 512), (1024, 1024, 1024), (512, 512, 512)])
def test_the_default_configuration_is_modeled_slower_than_a_measured_faster_one(shape):
    """At these shapes the registry measured drain faster than fused-cast, the bf16-out
    default (a configuration without `method`): the model must say so, for the spec's
    default configuration and for the registry's own fused-cast row."""
    rows = registry("gemm_bf16", *shape)
    fused, drain = rows[next(iter(METHODS["gemm_bf16"]))], rows["drain"]
    assert drain[1] < fused[1]                              # what NPU2 measured
    default = {k: v for k, v in GEMM_BF16.tunables.items() if k != "method"}
    assert gemm("gemm_bf16", shape, drain[0]) < gemm("gemm_bf16", shape, default)
    assert gemm("gemm_bf16", shape, drain[0]) < gemm("gemm_bf16", shape, fused[0])


def test_every_measured_method_order_is_the_models_at_the_registry_shapes():
    """The seven shapes where the registry measured fused-cast, drain and direct: the model
    orders each shape's three as measured, but for a pair measured within 5% of each other
    (2048^3: fused-cast 2764 us, drain 2851 us; the model has them 0.3% apart)."""
    rows = set(measured_launches(sweeps=False))
    inside = [c for c in compare() if c.launch.kernel == "gemm_bf16" and c.launch in rows]
    ranks = rank_correlations(inside)
    assert len(ranks) == 7 and sorted(ranks.values())[1] == pytest.approx(1.0)
    for group in ranks:
        shape = [c for c in inside if c.launch.group == group]
        for a in shape:
            for b in shape:
                if a.measured_s < b.measured_s and a.modeled_s >= b.modeled_s:
                    assert b.measured_s / a.measured_s < 1.05, group


def test_tile_n_is_the_dominant_lever_as_measured():
    """GEMM_bf16_in_fp32_out.md: tile_n 128 beats 64 by 1.35-1.38x at 2048^3, the down
    projection and 4096^3. The model has it the dominant lever too, but overstates it:
    1.46, 1.58 and 1.55 (a tile_n 64 GEMM re-reads A twice as often; the hardware hides
    some of that). Within 20% of each measured ratio."""
    for shape, tk2, measured in (((2048, 2048, 2048), 512, 8600 / 6367),
                                 ((2048, 8192, 2048), 256, 9321 / 6816),
                                 ((4096, 4096, 4096), 256, 9161 / 6623)):
        config = {"method": "external", "tile_m": 64, "tile_k_l2": tk2, "tile_k_l1": 32,
                  "herd_m": 8, "herd_n": 4}
        ratio = gemm("gemm_fp32", shape, {**config, "tile_n": 64}) \
            / gemm("gemm_fp32", shape, {**config, "tile_n": 128})
        assert 1.25 < ratio == pytest.approx(measured, rel=0.20), shape


def test_the_weight_dma_bound_connector_ranks_its_tile_n_sweep_as_measured():
    """64x12288x960 at herd 4x4: tile_n 16, 48, 80, 240 took 3352, 1347, 890, ~690 us; its
    time is the weight's DMA, not the matmuls."""
    from npu_deploy.kernels.families.gemm import work

    shape = {"M": 64, "K": 12288, "N": 960}
    config = {"method": "drain", "tile_m": 16, "tile_k_l2": 256, "tile_k_l1": 32,
              "herd_m": 4, "herd_n": 4}
    times = [launch_seconds(GEMM_BF16, shape, {**config, "tile_n": tn})
             for tn in (16, 48, 80, 240)]
    assert times == sorted(times, reverse=True)
    assert times[-1] == pytest.approx(690e-6, rel=0.10)
    w = work(GEMM_BF16, shape, {**GEMM_BF16.tunables, **config, "tile_n": 240}, P)
    assert w.bound == "memory"


def test_a_tiny_gemm_is_its_launch_floor():
    """64x32x720: 115.9 us for 3.3 MFLOP is ~100% per-launch floor (upstream)."""
    (config, measured), = registry("gemm_bf16", 64, 32, 720).values()
    modeled = gemm("gemm_bf16", (64, 32, 720), config)
    assert modeled == pytest.approx(measured, rel=0.30)
    assert P.gemm_floor_s / modeled > 0.7


def test_fused_cast_pays_a_separate_cast_launch_over_the_fp32_gemm():
    """At the Llama-3.2-1B shapes the bf16 fused-cast time is the fp32-out external GEMM at
    the same tiles plus a cast launch; the model's difference within 40% of the measured
    one at each shape."""
    for shape in ((2048, 2048, 2048), (2048, 2048, 512), (2048, 2048, 8192),
                  (2048, 8192, 2048)):
        (fused, t_fused), (external, t_ext) = (registry("gemm_bf16", *shape)["fused-cast"],
                                               registry("gemm_fp32", *shape)["external"])
        assert {**fused, "method": "external"} == external
        modeled = gemm("gemm_bf16", shape, fused) - gemm("gemm_fp32", shape, external)
        assert modeled == pytest.approx(t_fused - t_ext, rel=0.40), shape


def test_fewer_tiles_mean_more_launch_iterations():
    """Herd occupancy: halving herd_m at fixed tiles doubles the M launch iterations of a
    compute-heavy (direct codegen) GEMM, which the model prices nearly twice."""
    config = {"method": "direct", "tile_m": 64, "tile_k_l2": 256, "tile_k_l1": 32,
              "tile_n": 128, "herd_n": 4}
    full = gemm("gemm_fp32", (2048, 2048, 2048), {**config, "herd_m": 8})
    half = gemm("gemm_fp32", (2048, 2048, 2048), {**config, "herd_m": 4})
    assert 1.6 < half / full < 2.0


def test_the_fp32_default_is_the_external_kernel():
    default = dict(GEMM_FP32.tunables)
    shape = (2048, 2048, 2048)
    assert gemm("gemm_fp32", shape, {**default, "method": "external"}) \
        == gemm("gemm_fp32", shape, {k: v for k, v in default.items() if k != "method"})
    assert gemm("gemm_fp32", shape, {**default, "method": "direct"}) \
        > gemm("gemm_fp32", shape, {**default, "method": "external"})


# --- the fidelity figures, in-sample and held out ------------------------------------------

@pytest.fixture(scope="module")
def figures():
    launches = measured_launches()
    return compare(launches), kfold(launches)


def _of(comparisons, kernels):
    return [c for c in comparisons if c.launch.kernel in kernels]


def test_gemm_fidelity_meets_its_targets_in_sample_and_held_out(figures):
    """Over every measured GEMM launch (the 109 registry rows and 24 swept ones): median
    |ln(modeled/measured)| <= 0.10, 90th percentile <= 0.25, median per-shape rank
    correlation >= 0.6, in-sample and 5-fold by shape."""
    for comparisons in figures:
        f = fidelity(_of(comparisons, ("gemm_bf16", "gemm_fp32")), "gemm")
        assert f.launches == 133
        assert f.median_abs_log <= 0.10 and f.p90_abs_log <= 0.25
        assert f.rank_shapes >= 10 and f.rank_median is not None and f.rank_median >= 0.6


def test_gemv_fidelity_meets_its_error_targets_and_states_its_rank(figures):
    """GEMV: median <= 0.10 and p90 <= 0.25 in-sample and 5-fold. Only 2048x2048 has three
    measured configurations (herd_m 8 / m_input 8, m_input 1, herd_m 4): in-sample the
    model orders them as measured (1.0); held out it gets 0.5, below the 0.6 target (the
    herd_m 4 point's fold loses the only evidence on a column's bandwidth below 8)."""
    inside, held = (fidelity(_of(c, ("gemv",)), "gemv") for c in figures)
    for f in (inside, held):
        assert f.launches == 39 and f.median_abs_log <= 0.10 and f.p90_abs_log <= 0.25
        assert f.rank_shapes == 1
    assert inside.rank_median == pytest.approx(1.0)
    assert held.rank_median == pytest.approx(0.5)


def test_every_fitted_family_is_held_against_its_page(figures):
    """Each family with a page: in-sample median |ln| <= 0.15 (RMSNorm's page is the
    noisiest: 2048x2048 runs at 18.4 GB/s between 1536's 22.1 and 2560's 24.2)."""
    inside, _ = figures
    for group in fit_groups():
        for kernel in group.kernels:
            f = fidelity(_of(inside, (kernel,)), kernel)
            assert f.launches >= 12 and f.median_abs_log <= 0.15, kernel


# --- a launch inside a merged ELF ------------------------------------------------------------

def test_a_launch_inside_a_merged_elf_is_priced_from_the_deployments_breakdown():
    """In a dispatch each launch pays the fitted in-ELF price and its work times its class's
    derate; GEMMs and attention ran slower in the Llama-3.2-1B deployment than upstream's
    harness measured them, the streaming kernels faster."""
    assert P.launch_overhead_s > 0
    assert P.matmul_derate > 1 and P.attention_derate > 1 > P.stream_derate > 0


def test_other_models_elfs_are_predicted_not_fitted():
    """Upstream's per-layer ELFs of models other than Llama-3.2-1B (deployments.json:
    SmolLM2-1.7B's prefill rms_gemms_rope, flash_attn, o_ffn; Llama-3.2-3B's decode o, gate,
    up and down GEMVs) were never fitted: the model, calibrated on Llama-3.2-1B alone and
    priced at the configurations selection takes, lands within 20% of each."""
    elfs = held_out_elfs()
    assert {e.model for e in elfs} == {"smollm2-1.7b", "llama-3.2-3b"} and len(elfs) == 7
    for e in elfs:
        assert e.modeled_s == pytest.approx(e.measured_s, rel=0.20), (e.model, e.elf)


def test_auto_is_upstreams_method_rule_and_an_unknown_method_is_refused():
    """bf16 out, `auto`: fused-cast from M K N >= 4e9, else drain."""
    config = {"tile_m": 32, "tile_k_l2": 256, "tile_k_l1": 32, "tile_n": 128, "herd_m": 8,
              "herd_n": 4}
    for shape, picked in (((2048, 2048, 512), "drain"), ((2048, 2048, 2048), "fused-cast")):
        assert gemm("gemm_bf16", shape, {**config, "method": "auto"}) \
            == gemm("gemm_bf16", shape, {**config, "method": picked})
    with pytest.raises(ValueError, match="known: external, direct"):
        gemm("gemm_fp32", (64, 64, 64), {**config, "method": "drain"})


def test_selection_can_import_launch_seconds_without_a_cycle():
    """kernels.plans.plan imports the selection: the performance model must not import plan
    before it is asked to price one, so that the selection can rank by launch_seconds."""
    import subprocess
    import sys

    code = ("import sys, npu_deploy.kernels.performance.model as perf; "
            "assert 'npu_deploy.kernels.plans.plan' not in sys.modules; "
            "assert 'npu_deploy.kernels.definition.selection' not in sys.modules; "
            "assert callable(perf.launch_seconds)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
