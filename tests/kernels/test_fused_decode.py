"""The fused 4-bit decode's model (kernels.performance.fused_decode): its one end-to-end
term is calibrated on Llama-3.2-1B's measured decode and nothing else; the rest follows the
models' own dimensions."""

import math

import pytest

from npu_deploy.kernels.measured.quantized_deployments import QUANTIZED_MEASURED
from npu_deploy.kernels.performance import fused_decode
from npu_deploy.kernels.performance.fused_decode import (
    CALIBRATION_TARGET,
    FUSED_LAYER_S,
    MeasuredDecode,
    calibrate_layer_s,
    fused_token,
    has_fused_decode,
    measured_decode,
)


def test_llama32_1b_reproduces_its_calibration_target():
    """The calibrated per-layer rest gives Llama-3.2-1B's measured ~50 tok/s back."""
    assert fused_token("llama32_1b_q4nx").tokens_per_s == pytest.approx(50.0, rel=1e-5)


def test_the_stored_per_layer_rest_is_the_calibrations_output():
    assert FUSED_LAYER_S == pytest.approx(calibrate_layer_s(CALIBRATION_TARGET), rel=1e-6)


def test_the_calibration_target_is_the_measured_llama32_1b_row():
    """The one figure fitted on is the one section 7 prints as measured for that entry."""
    assert CALIBRATION_TARGET == measured_decode("llama32_1b_q4nx")
    assert CALIBRATION_TARGET.tokens_per_s == QUANTIZED_MEASURED["llama32_1b_q4nx"][1] == 50.0


@pytest.mark.parametrize("model", [m for m in QUANTIZED_MEASURED if m != "llama32_1b_q4nx"])
def test_no_other_models_end_to_end_figure_can_be_fitted_on(model):
    """The calibration takes exactly the Llama-3.2-1B row: another model's measured decode
    (any of section 7's) is refused, not silently fitted."""
    rate = QUANTIZED_MEASURED[model][1] or 10.0
    with pytest.raises(ValueError, match="calibrated on llama32_1b_q4nx's measured decode"):
        calibrate_layer_s(MeasuredDecode(model, rate, QUANTIZED_MEASURED[model][2]))


def test_the_fit_moves_with_llama32_1b_alone():
    """Changing the Llama-3.2-1B figure changes the fitted term (so it is fitted on it)."""
    faster = MeasuredDecode("llama32_1b_q4nx", 55.0, "what if")
    assert calibrate_layer_s(faster) < calibrate_layer_s(CALIBRATION_TARGET)


def test_more_weight_bytes_decode_slower():
    """8B streams six times the 1B's weights: slower per token, and slower in each part
    that streams weights or cache."""
    small, large = fused_token("llama32_1b_q4nx"), fused_token("llama31_8b_q4nx")
    assert large.weight_bytes > 5 * small.weight_bytes
    assert large.projections_s > 5 * small.projections_s
    assert large.kv_bytes > small.kv_bytes and large.kv_readback_s > small.kv_readback_s
    assert large.tokens_per_s < small.tokens_per_s / 3


def test_across_the_catalog_more_weight_bytes_decode_slower():
    """Every 4-bit entry with a fused decode, ordered by the weight bytes a token streams, is
    ordered by its modeled time per token too (a batch-1 decode streams every weight)."""
    tokens = sorted((fused_token(m) for m in fused_decode.FUSED_LAYOUTS),
                    key=lambda t: t.weight_bytes)
    assert [t.total_s for t in tokens] == sorted(t.total_s for t in tokens)


def test_weight_bytes_are_upstreams_q4nx_sizes():
    """Llama-3.1-8B's layers and LM head in Q4NX blocks: 4.375 GiB, as upstream sizes its
    decode weights (llms/llama31_8b_q4nx/README.md, the five weight buffers)."""
    assert fused_token("llama31_8b_q4nx").weight_bytes == 4.375 * 2**30


def test_qwen25_3b_has_no_device_lm_head_and_int4_has_no_fused_decode():
    assert fused_token("qwen25_3b_q4").lm_head_s == 0.0
    assert not has_fused_decode("llama32_1b_int4")
    with pytest.raises(KeyError, match="no fused decode upstream"):
        fused_token("llama32_1b_int4")


def test_the_kv_readback_is_the_whole_template_window():
    """Each layer's K and V at all 2048 positions whatever the context (ATTN_MAXL)."""
    t = fused_token("llama32_3b_q4nx")
    assert t.kv_bytes == 28 * 2 * 8 * 128 * 2048 * 2 == 224 * 2**20     # README: 224 MiB
    assert math.isclose(t.total_s, t.projections_s + t.lm_head_s + t.kv_readback_s
                        + t.layers_s + t.dispatch_s)
    assert fused_decode.ATTN_MAXL == 2048
