"""The seam between weight formats and the 4-bit kernels (kernels.emulation.kernel_fields): a
QuantizedMatrix's fields as proj_qmm / gemv_int4 read them and back to the same device bytes
bit for bit, and Phase 1 validating both kernels on seeded, valid quantized weights."""

from __future__ import annotations

import pytest
import torch

from npu_deploy.formats import QuantizedMatrix
from npu_deploy.kernels import SPECS
from npu_deploy.kernels.emulation.emulator import EmulatorBackend
from npu_deploy.kernels.emulation.kernel_fields import (
    device_codec,
    kernel_of,
    kernel_tensors,
    quant_fields,
    seeded_matrix,
    to_device,
)
from npu_deploy.kernels.emulation.quantized import proj_qmm, reference
from npu_deploy.kernels.emulation.validate import seeded_inputs, validate_kernel

FORMATS = ("q4nx", "q4_0-container", "awq-int4")


def weights(rows=64, k=2048, seed=0):
    return torch.randn(rows, k, generator=torch.Generator().manual_seed(seed)) / k ** 0.5


@pytest.mark.parametrize("fmt", FORMATS)
def test_fields_go_back_to_the_same_device_bytes_bit_for_bit(fmt):
    m = QuantizedMatrix.quantize(fmt, weights())
    assert to_device(quant_fields(m), fmt) == m.data


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_fields_stand_for_the_formats_own_dequantized_weights_exactly(fmt):
    m = QuantizedMatrix.quantize(fmt, weights())
    f = quant_fields(m)
    w = f.dequantized(signed=fmt == "q4_0-container", subtract=fmt == "awq-int4")
    assert torch.equal(w.to(torch.float32), m.dequantize())


def test_a_q4_0_code_reaches_the_kernel_as_its_nibble_and_the_kernel_reads_it_signed():
    m = QuantizedMatrix.quantize("q4_0-container", weights(32, 256))
    f, signed = quant_fields(m), m.parts().q
    assert f.offset is None and torch.equal(f.q, signed.view(torch.uint8) & 0xF)
    x = torch.randn(256, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    got = proj_qmm(f, x, signed=True).float()
    want = (m.dequantize().double() @ x.double()).float()
    assert torch.allclose(got, want, atol=0.05, rtol=0.02)
    assert torch.equal(reference(f, x, signed=True), want)


def test_the_awq_gemvs_bytes_follow_its_tile_and_unpack_to_the_same_fields():
    m = QuantizedMatrix.quantize("awq-int4", weights(64, 2048))
    f = quant_fields(m)
    tiled = to_device(f, "awq-int4", {"m_tile": 16, "k_chunk": 512})
    assert tiled != m.data and len(tiled) == len(m.data)
    parts = device_codec("awq-int4", {"m_tile": 16, "k_chunk": 512}).unpack(tiled, (64, 2048))
    assert parts.same_bits(m.parts())


@pytest.mark.parametrize("fmt", ["q4nx-legacy", "gguf-q4_1"])
def test_a_format_no_kernel_reads_is_refused_in_one_line(fmt):
    with pytest.raises(ValueError, match="no 4-bit kernel reads") as e:
        kernel_of(fmt)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_seeded_weight_is_a_valid_matrix_with_every_code(fmt):
    m = seeded_matrix(fmt, (64, 2048), torch.Generator().manual_seed(0))
    t = kernel_tensors(m)
    assert set(torch.unique(t["w.q"]).tolist()) == set(range(16))
    assert bytes(t["w"].numpy()) == m.data
    # the group's range of randn / sqrt(K) weights, filled uniformly: near unit-scale outputs
    assert 1.0 < float(m.dequantize().std()) * 2048 ** 0.5 < 2.0


@pytest.mark.parametrize("kernel,shape,config", [
    ("proj_qmm", {"M": 256, "K": 2048}, {}),
    ("proj_qmm", {"M": 256, "K": 2048}, {"codec": "q4_0"}),
    ("gemv_int4", {"M": 256, "K": 4096}, {}),
    ("gemv_int4", {"M": 256, "K": 4096}, {"k_chunk": 512}),
])
def test_phase_1_validates_the_quantized_kernels_on_seeded_weights(kernel, shape, config):
    """As the bf16 kernels do: validate_kernel seeds its own inputs, passes at the kernel's
    atol and fails at a bf16 GEMV's."""
    spec = SPECS[kernel]
    inputs = seeded_inputs(spec, shape, 0, config)
    assert tuple(inputs["w"].shape) == spec.operands(shape)[0].dims
    assert validate_kernel(spec, shape, config, EmulatorBackend()).passed
    assert not validate_kernel(spec, shape, config, EmulatorBackend(), atol=1e-3).passed


def test_the_seeded_gemv_bytes_are_the_tile_of_the_configuration():
    spec, shape = SPECS["gemv_int4"], {"M": 64, "K": 2048}
    inputs = seeded_inputs(spec, shape, 0, {"k_chunk": 512})
    data = bytes(inputs["w"].numpy())
    parts = device_codec("awq-int4", {**spec.tunables, "k_chunk": 512}).unpack(data, (64, 2048))
    assert torch.equal(parts.q, inputs["w.q"]) and torch.equal(parts.offsets, inputs["w.zero"])
