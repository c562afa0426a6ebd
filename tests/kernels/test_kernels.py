"""The XDNA 2 hardware model, the kernel specs and the constraint checker, against the
figures and the symptom table of docs/hardware-facts.md."""

from __future__ import annotations

import pytest

from npu_deploy.kernels import SPECS, XDNA1, XDNA2, Decode, Prefill, blocking, check, model_kernels
from npu_deploy.models import CATALOG

GEMM_8x4 = {"tile_m": 64, "tile_k_l2": 256, "tile_k_l1": 32, "tile_n": 128, "herd_m": 8,
            "herd_n": 4}


def kinds(findings, severity=None):
    return {f.kind for f in findings if severity is None or f.severity == severity}


# --- the hardware ---------------------------------------------------------------------------

def test_xdna2_matches_npu_facts():
    assert (XDNA2.rows, XDNA2.cols, XDNA2.tiles) == (4, 8, 32)
    assert XDNA2.l1_bytes == 64 * 1024 and XDNA2.l2_bytes == 512 * 1024
    assert XDNA2.peak_flops == pytest.approx(59e12, rel=0.01)   # "~59 TFLOP/s array"
    assert (XDNA2.shim_inputs, XDNA2.shim_outputs) == (16, 16)


def test_another_array_is_one_more_instance():
    # The 8x4 herd that fits NPU2 does not fit the 4x4 first-generation array.
    shape = {"M": 2048, "K": 2048, "N": 2048}
    assert not blocking(check(SPECS["gemm_bf16"], shape, GEMM_8x4, XDNA2))
    assert "herd" in kinds(check(SPECS["gemm_bf16"], shape, GEMM_8x4, XDNA1), "error")
    assert not blocking(check(SPECS["gemm_bf16"], shape, {**GEMM_8x4, "herd_m": 4}, XDNA1))


# --- the measured configurations pass -----------------------------------------------------------

#: GEMV_bf16.md's measured tile (herd_m / tile_m / m_input), built as its harness builds it
#: (matvec.py: omit_pingpong)
GEMV_8x8 = {"herd_m": 8, "tile_m": 8, "m_input": 8, "pingpong": 0}


@pytest.mark.parametrize("kernel,shape,config", [
    ("gemm_fp32", {"M": 2048, "K": 8192, "N": 2048}, GEMM_8x4),
    ("gemm_bf16", {"M": 2048, "K": 8192, "N": 2048}, GEMM_8x4),
    ("gemm_bf16", {"M": 2048, "K": 2048, "N": 2048}, GEMM_8x4),
    ("gemm_bf16", {"M": 2048, "K": 2048, "N": 512}, {**GEMM_8x4, "herd_n": 4}),
    ("gemm_bf16", {"M": 2048, "K": 2048, "N": 8192}, GEMM_8x4),
    ("gemv", {"M": 16384, "K": 3072}, GEMV_8x8),
    ("gemv", {"M": 2048, "K": 2048}, GEMV_8x8),
    ("gemv", {"M": 16384, "K": 2048}, GEMV_8x8),
    ("rmsnorm", {"rows": 2048, "width": 3072}, {"herd_m": 8}),
    ("flash_attention", {"heads": 32, "kv_heads": 8, "Lq": 2048, "Lk": 2048, "head_dim": 64}, {}),
    ("add", {"rows": 1, "width": 4 * 1024 * 1024}, {"herd_m": 8}),
    ("silu_mul", {"rows": 1, "width": 16 * 1024 * 1024}, {"herd_m": 8}),
    ("rope", {"rows": 49152, "width": 128, "seq": 2048}, {"herd_m": 8}),
])
def test_measured_configurations_of_npu_facts_pass(kernel, shape, config):
    findings = check(SPECS[kernel], shape, config, XDNA2)
    assert not blocking(findings), [str(f) for f in findings]


def test_calibrated_gemm_nearly_fills_l1_and_l2():
    """The measured 8x4 configuration is tight: a larger tile breaks L1, a longer L2 K
    tile the memory tile."""
    shape = {"M": 2048, "K": 8192, "N": 2048}
    assert "l1" in kinds(check(SPECS["gemm_bf16"], shape, {**GEMM_8x4, "tile_n": 256}, XDNA2))
    assert "l2" in kinds(check(SPECS["gemm_bf16"], shape, {**GEMM_8x4, "tile_k_l2": 1024},
                               XDNA2))


# --- the static symptoms of docs/hardware-facts.md#known-failure-symptoms are flagged -------

def test_n_not_divisible_by_tile_n_times_herd_n_is_silent_corruption():
    findings = check(SPECS["gemm_bf16"], {"M": 2048, "K": 896, "N": 896}, GEMM_8x4, XDNA2)
    corrupt = [f for f in findings if f.severity == "corrupt"]
    assert len(corrupt) == 1 and "N=896" in corrupt[0].message and "896)" in corrupt[0].message
    assert "cosine ~0.02" in corrupt[0].message


def test_herd_n_1_tile_n_128_at_896_fails_at_run_time():
    config = {**GEMM_8x4, "herd_n": 1}
    findings = check(SPECS["gemm_bf16"], {"M": 2048, "K": 896, "N": 896}, config, XDNA2)
    assert "known_failure" in kinds(findings, "error")
    # upstream's working configuration: herd_n 4 with tile_n 32, drain at tile_m 32
    ok = check(SPECS["gemm_bf16"], {"M": 2048, "K": 896, "N": 896},
               {**config, "tile_n": 32, "herd_n": 4, "tile_m": 32, "tile_k_l2": 128,
                "method": "drain"}, XDNA2)
    assert not blocking(ok)


def test_a_gemv_streams_x_once_per_call_within_the_repeat_count():
    # qwen3_4b_decode.py's down GEMV (M 2560, K 9728): m_input 1 repeats x 2560/8 - 1 = 319
    # times, over 255; upstream's m_input 2 (159), with omit_pingpong so two rows fit L1
    found = blocking(check(SPECS["gemv"], {"M": 2560, "K": 9728},
                           {"tile_m": 2, "m_input": 1, "pingpong": 0}, XDNA2))
    assert [f.kind for f in found] == ["repeat"] and "319" in found[0].message
    upstream = {"tile_m": 2, "m_input": 2, "herd_m": 8}
    assert not blocking(check(SPECS["gemv"], {"M": 2560, "K": 9728},
                              {**upstream, "pingpong": 0}, XDNA2))
    l1 = blocking(check(SPECS["gemv"], {"M": 2560, "K": 9728}, {**upstream, "pingpong": 1},
                        XDNA2))
    assert [f.kind for f in l1] == ["l1"] and "pingpong 0" in l1[0].message


def test_lm_head_gemv_needs_partitions():
    shape = {"M": 128256, "K": 2048}
    assert "repeat" in kinds(check(SPECS["gemv"], shape, {}, XDNA2))
    assert not blocking(check(SPECS["gemv"], shape, {"partitions": 8}, XDNA2))


def test_unaligned_dims_are_refused_or_padded():
    # K must divide by tile_k_l2 (the builder asserts it); M is padded by the host.
    findings = check(SPECS["gemm_bf16"], {"M": 2000, "K": 4900, "N": 1024}, GEMM_8x4, XDNA2)
    k = [f for f in blocking(findings) if f.kind == "divisible"]
    assert k and "K=4900" in k[0].message and "tile_k_l2" in k[0].message
    assert {"padding"} <= kinds(findings, "warning")


def test_l2_capacity_exceeded():
    findings = check(SPECS["gemm_bf16"], {"M": 2048, "K": 2048, "N": 2048},
                     {**GEMM_8x4, "tile_k_l2": 1024}, XDNA2)
    l2 = [f for f in findings if f.kind == "l2"]
    assert l2 and "L2 capacity exceeded" in l2[0].message and "512 KiB" in l2[0].message


def test_too_many_ddr_streams_is_out_of_channels():
    # Two DDR inputs + one output per tile: 8 tiles fit, 16 do not ...
    add = SPECS["add"]
    shape = {"rows": 1, "width": 1 << 22}
    assert not blocking(check(add, shape, {"herd_m": 8}, XDNA2))
    flagged = [f for f in check(add, shape, {"herd_m": 8, "herd_rows": 2}, XDNA2)
               if f.kind == "shim_streams"]
    assert flagged and "out of channels" in flagged[0].message and "at most 8" in flagged[0].message
    # ... while one input + one output per tile can use 8x2.
    norm = {"rows": 2048, "width": 2048}
    assert not blocking(check(SPECS["rmsnorm"], norm, {"herd_m": 8, "herd_rows": 2}, XDNA2))


def test_head_dim_128_seq_first_attention_hangs():
    shape = {"heads": 24, "kv_heads": 8, "Lq": 2048, "Lk": 2048, "head_dim": 128}
    assert "layout" in kinds(check(SPECS["flash_attention"], shape, {}, XDNA2), "error")
    assert not blocking(check(SPECS["flash_attention"], shape, {"layout": "head-first"}, XDNA2))


def test_attention_resources_follow_the_mlir_air_program():
    """32 tiles for 4 q tiles x 4 cascade stages
    (docs/hardware-facts.md#measured-kernel-throughput); the example unrolls two heads."""
    from npu_deploy.kernels.definition.checker import check_with_usage

    shape = {"heads": 32, "kv_heads": 8, "Lq": 2048, "Lk": 2048, "head_dim": 64}
    findings, usage = check_with_usage(SPECS["flash_attention"], shape, {}, XDNA2)
    assert not blocking(findings) and usage["tiles"] == 32
    # Q 64x64, the K/Q relay 64x64, V 64x64, scores 64x64, the running and the cascade's
    # output 64x64, 10 row vectors of 64 (the program's buffers), and the causal mask's
    # counter: 3 i32 (attn_npu2.py's layout at one V column tile).
    assert usage["l1_bytes"] == 2 * (6 * 64 * 64 + 10 * 64) + 4 * 3 == 50444
    # A 128-wide V tile at head_dim 128 does not fit a compute tile's 64 KiB.
    wide = {**shape, "head_dim": 128}
    over = [f for f in check(SPECS["flash_attention"], wide, {"layout": "head-first",
                                                               "dv_tile": 128}, XDNA2)
            if f.kind == "l1"]
    assert over and "64 KiB" in over[0].message and "dv_tile" in over[0].message
    assert over[0].value > 64 * 1024


@pytest.mark.parametrize("config,needle", [
    ({"heads_per_unroll": 4}, "herd"),                 # 4 x 4 q tiles = 16 columns
    ({"q_tile": 512}, "divisible"),                    # q blocks of 128 against K chunks of 64
    ({"heads_per_unroll": 3}, "divisible"),            # 32 heads do not split by 3
])
def test_attention_configurations_that_cannot_exist(config, needle):
    shape = {"heads": 32, "kv_heads": 8, "Lq": 2048, "Lk": 2048, "head_dim": 64}
    assert needle in kinds(check(SPECS["flash_attention"], shape, config, XDNA2), "error")


def test_odd_head_counts_get_one_head_per_unroll():
    from npu_deploy.kernels.definition.selection import select

    uses = {u.role: u for u in model_kernels(CATALOG["smollm2-135m"].args, Prefill(2048))}
    chosen = select(uses["attention"], XDNA2)
    assert chosen.config["heads_per_unroll"] == 1 and chosen.usage["tiles"] == 16
    assert not blocking(chosen.findings)


def test_attention_compiled_for_other_sizes_is_corrupt():
    shape = {"heads": 32, "kv_heads": 8, "Lq": 2048, "Lk": 2048, "head_dim": 64}
    found = check(SPECS["flash_attention"], shape, {"compiled_for": (1024, 1024, 64)}, XDNA2)
    assert "known_failure" in kinds(found, "corrupt")


def test_padding_records_the_wasted_work():
    findings = check(SPECS["gemm_bf16"], {"M": 100, "K": 2048, "N": 2048}, GEMM_8x4, XDNA2)
    pad = [f for f in findings if f.kind == "padding"]
    assert pad and "M=100" in pad[0].message and "512" in pad[0].message
    assert pad[0].value == 412 and pad[0].limit == 512


def test_cpu_ops_have_no_hardware_limits():
    assert check(SPECS["decode_attention"], {"heads": 9, "kv_heads": 3, "Lq": 1, "Lk": 9000,
                                             "head_dim": 64}, {}, XDNA2) == []


# --- the specs ------------------------------------------------------------------------------

def test_llama_1b_prefill_projections_are_the_calibration_set():
    uses = {u.role: u for u in model_kernels(CATALOG["llama-3.2-1b"].args, Prefill(2048))}
    mkn = {r: (u.shape["M"], u.shape["K"], u.shape["N"]) for r, u in uses.items()
           if u.spec.name == "gemm_bf16"}
    assert mkn["q_proj"] == (2048, 2048, 2048) and mkn["o_proj"] == (2048, 2048, 2048)
    assert mkn["k_proj"] == (2048, 2048, 512) and mkn["gate_proj"] == (2048, 2048, 8192)
    assert mkn["down_proj"] == (2048, 8192, 2048)
    assert uses["q_proj"].spec.flops(uses["q_proj"].shape) == 2 * 2048**3
    assert uses["attention"].shape == {"heads": 32, "kv_heads": 8, "Lq": 2048, "Lk": 2048,
                                       "head_dim": 64}


def test_decode_uses_gemv_and_cpu_attention():
    uses = {u.role: u for u in model_kernels(CATALOG["llama-3.2-1b"].args, Decode(100))}
    assert uses["q_proj"].spec.name == "gemv" and uses["q_proj"].shape == {"M": 2048, "K": 2048}
    assert uses["k_proj"].shape == {"M": 512, "K": 2048}
    assert uses["lm_head"].shape == {"M": 128256, "K": 2048}
    assert uses["attention"].spec.where == "cpu" and uses["attention"].shape["Lk"] == 101


def test_architecture_features_bring_their_kernels():
    qwen2 = {u.role for u in model_kernels(CATALOG["qwen2.5-0.5b"].args, Prefill(128))}
    qwen3 = {u.role: u for u in model_kernels(CATALOG["qwen3-4b"].args, Prefill(128))}
    llama = {u.role for u in model_kernels(CATALOG["llama-3.2-1b"].args, Prefill(128))}
    assert "qkv_bias" in qwen2 and "qkv_bias" not in llama
    assert {"q_norm", "k_norm"} <= set(qwen3) and "q_norm" not in llama
    assert qwen3["q_proj"].shape["N"] == 4096 and qwen3["o_proj"].shape["K"] == 4096


def test_bytes_moved_counts_every_operand():
    gemm = SPECS["gemm_fp32"]
    shape = {"M": 4, "K": 6, "N": 8}
    assert gemm.bytes_moved(shape) == 4 * 6 * 2 + 6 * 8 * 2 + 4 * 8 * 4


# --- tile selection ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(CATALOG))
def test_selection_finds_a_valid_configuration_for_every_kernel(name):
    from npu_deploy.kernels.definition.selection import select_all

    for mode in (Prefill(2048), Prefill(77), Decode(2047)):
        for sel in select_all(model_kernels(CATALOG[name].args, mode), XDNA2):
            assert sel.valid, (name, str(mode), sel.use.spec.name, sel.use.shape,
                               [str(f) for f in sel.findings])
            again = check(sel.use.spec, sel.use.shape, sel.config, XDNA2)
            assert not blocking(again)      # the chosen config really passes the checker


def test_selection_keeps_the_calibrated_config_where_it_fits():
    from npu_deploy.kernels.definition.selection import select_all

    sels = {s.roles[0]: s for s in select_all(
        model_kernels(CATALOG["llama-3.2-1b"].args, Prefill(2048)), XDNA2)}
    assert {k: sels["down_proj"].config[k] for k in GEMM_8x4} == GEMM_8x4
    assert sels["down_proj"].tried == 1
    assert sels["k_proj"].config["herd_n"] * sels["k_proj"].config["tile_n"] == 512


def test_unaligned_widths_get_a_smaller_tile_n():
    from npu_deploy.kernels.definition.selection import select_all

    sels = {s.roles[0]: s for s in select_all(
        model_kernels(CATALOG["qwen2.5-0.5b"].args, Prefill(2048)), XDNA2)}
    gate = sels["gate_proj"].config            # N = 4864 = 19 x 256
    assert 4864 % (gate["tile_n"] * gate["herd_n"]) == 0
    assert gate["herd_m"] * gate["herd_n"] == 32 and gate["tile_n"] < 128   # upstream's 64 x 4
    assert sels["q_proj"].config["herd_n"] * sels["q_proj"].config["tile_n"] in (896, 448, 128)


def test_odd_sequence_lengths_are_padded_and_the_waste_recorded():
    from npu_deploy.kernels.definition.selection import select_all

    sels = {s.roles[0]: s for s in select_all(
        model_kernels(CATALOG["smollm2-135m"].args, Prefill(77)), XDNA2)}
    q = sels["q_proj"]
    assert q.valid and 0 < q.wasted_fraction < 1
    assert any(f.kind == "padding" and "M=77" in f.message for f in q.findings)


def test_cli_kernels_table_and_json(cli):
    import json

    result = cli("kernels", "llama-3.2-1b")
    assert result.exit_code == 0, result.stderr
    assert "gemm_bf16" in result.stdout and "2048x8192x2048" in result.stdout
    assert "nothing ran on an NPU here" in result.stdout
    assert "measured on NPU2: Xilinx/mlir-air" in result.stdout     # the footnote of a source
    rows = json.loads(cli("kernels", "llama-3.2-1b", "--json").stdout)
    down = next(r for r in rows if "down_proj" in r["roles"])
    assert down["config_source"] == "measured" and down["modeled_s"] > 0
    measured = down["measured_npu"]
    assert measured["same_config"] and "GEMM_bf16_in_bf16_out.json" in measured["source"]
    assert measured["seconds"] == pytest.approx(2 * 2048 * 8192 * 2048 / 8898e9)
    rows = json.loads(cli("kernels", "qwen3-4b", "--decode", "100", "--json").stdout)
    assert all(r["valid"] for r in rows)
    assert {r["kernel"] for r in rows} >= {"gemv", "decode_attention", "qk_norm"}
    assert "no model" in cli("kernels", "no-such-model").stderr


def test_a_gemv_takes_whole_rows_of_k_in_64_wide_vectors():
    # mv.cc sums a row in 64-wide vectors with no tail (matvec.py asserts K % 64 == 0); it
    # fills m_input of tile_m's rows per call
    from npu_deploy.kernels.definition.selection import select
    from npu_deploy.kernels.definition.specs import KernelUse

    found = blocking(check(SPECS["gemv"], {"M": 576, "K": 600}, {}, XDNA2))
    assert any(f.kind == "divisible" and "K=600" in f.message for f in found)
    found = blocking(check(SPECS["gemv"], {"M": 576, "K": 576}, {"tile_m": 8, "m_input": 16},
                           XDNA2))
    assert [f.kind for f in found] == ["divisible"]
    chosen = select(KernelUse("q_proj", SPECS["gemv"], {"M": 576, "K": 576}), XDNA2)
    assert chosen.valid and chosen.config["tile_m"] % chosen.config["m_input"] == 0


def test_gemvs_that_mv_o_cannot_serve_at_once_are_not_merged_into_one_elf():
    # mv.cc's symbols take no suffix: each tile_m is its own object (DIM_M_OUTPUT) exporting
    # the same names, and one module declares matvec_vectorized_bf16_bf16 with one set of
    # L1 buffer types
    from npu_deploy.kernels.definition.checker import check_merge

    gemv, q = SPECS["gemv"], {"M": 896, "K": 896}
    same = {"tile_m": 16, "m_input": 8}
    assert check_merge([(gemv, q, same), (gemv, {"M": 128, "K": 896}, same)], XDNA2) == []
    tiles = check_merge([(gemv, q, same), (gemv, q, {"tile_m": 8, "m_input": 8})], XDNA2)
    assert len(tiles) == 1 and tiles[0].kind == "merge"
    assert "mv_m16.o" in tiles[0].message and "mv_m8.o" in tiles[0].message
    assert "DIM_M_OUTPUT=8" in tiles[0].message and "cannot rename" in tiles[0].message
    ks = check_merge([(gemv, q, same), (gemv, {"M": 896, "K": 1536}, same)], XDNA2)
    assert [f.kind for f in ks] == ["merge"] and "declares a symbol once" in ks[0].message
