"""GELU (tanh approximation), the family added as one module and one registry entry: its
numerics on the emulator, its checker rule against upstream's measured placements, its
selection, its price in the performance model and its page in docs/kernels.md. (Its
program is held to the same checks as every kernel's in test_air.py and
test_air_addressing.py.)"""

from __future__ import annotations

import math

import pytest
import torch
from paths import ROOT

from npu_deploy.kernels import SPECS, XDNA1, XDNA2, blocking, check
from npu_deploy.kernels.definition.selection import select
from npu_deploy.kernels.definition.specs import KernelUse
from npu_deploy.kernels.emulation.emulator import EmulatorBackend
from npu_deploy.kernels.emulation.validate import validate_kernel
from npu_deploy.kernels.measured.measurements import table
from npu_deploy.kernels.performance.model import PerfParams, launch_seconds, launch_work
from npu_deploy.kernels.plans.plan import Binding, Launch

GELU = SPECS["gelu"]
#: SmolVLA's SigLIP MLP activation, upstream's main shape: N = 1024 x 3072.
SIGLIP = {"rows": 1024, "width": 3072}


def reference_gelu(x: torch.Tensor) -> torch.Tensor:
    """The formula, written out here (float64): 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))."""
    x = x.double()
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))


# --- numerics ------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [{"rows": 1, "width": 16}, {"rows": 8, "width": 64},
                                   {"rows": 128, "width": 1536}])
def test_the_emulated_gelu_passes_validation(shape):
    config = select(KernelUse("act", GELU, shape), XDNA2).config
    report = validate_kernel(GELU, shape, config, EmulatorBackend(), seed=1)
    assert report.passed and report.atol == 5e-2
    # one cast to bf16 of the FP32 result: within half a bf16 ulp of the formula
    (out,) = report.metrics.values()
    assert out.mean_rel_l1 < 3e-3


def test_the_emulation_is_the_tanh_formula_rounded_once_to_bf16():
    x = torch.linspace(-6, 6, 4001).to(torch.bfloat16)
    got = EmulatorBackend()
    out = {"y": torch.full((1, 4001), float("nan"), dtype=torch.bfloat16)}
    got.run(GELU, {"rows": 1, "width": 4001}, {}, {"x": x[None]}, out)
    # FP32 math, one cast: within half a bf16 ulp of the formula in float64 (where GELU is
    # below 1e-6, for x < -4.5, FP32's 1 + tanh cancels: an absolute 1e-6 covers it)
    want, got = reference_gelu(x.float()), out["y"][0].double()
    assert torch.allclose(got, want, rtol=2.0**-8, atol=1e-6)
    assert not torch.allclose(got, want, rtol=2.0**-12, atol=1e-6)     # bf16, not FP32
    # the tanh approximation, not the exact erf GELU (they differ by up to ~1e-3 here)
    erf = torch.nn.functional.gelu(x.double())
    assert (reference_gelu(x.float()) - erf).abs().max() > 1e-4


class Wrong:
    """A GELU that computes something else: `fault(x)` instead."""

    name = "wrong"

    def __init__(self, fault):
        self.fault = fault

    def run(self, spec, shape, config, inputs, outputs):
        outputs["y"].copy_(self.fault(inputs["x"].float()).to(torch.bfloat16))


@pytest.mark.parametrize("fault", [
    lambda x: x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),  # no 0.5
    lambda x: torch.relu(x),                                                     # a ReLU
    lambda x: torch.where(torch.arange(x.numel()).view(x.shape) < x.numel() // 2,  # half written
                          reference_gelu(x).float(), torch.full_like(x, float("nan"))),
], ids=["no-half", "relu", "half-written"])
def test_validation_fails_a_wrong_gelu(fault):
    report = validate_kernel(GELU, {"rows": 8, "width": 64}, {}, Wrong(fault), seed=1)
    assert not report.passed


# --- the checker against upstream's measured placements ---------------------------------------

def config_of(row: dict) -> dict:
    return {"herd_m": row.get("herd_x", 8), "herd_rows": row.get("herd_y", 1),
            "tile": row.get("tile_n", 4096)}


def test_the_checker_accepts_every_configuration_upstream_placed_and_refuses_the_others():
    rows = [*table("gelu", "herd"), *table("gelu", "herd_x"),
            *({**r, "herd_x": 8, "herd_y": 2} for r in table("gelu", "tile_n"))]
    placed = [r for r in rows if r.get("result", "pass") == "pass"]
    failed = [r for r in rows if r.get("result") == "fail"]
    assert len(placed) >= 10 and len(failed) == 3       # 8x4, 2x8 and 1x8 do not place
    for row in placed:
        assert not blocking(check(GELU, SIGLIP, config_of(row), XDNA2)), row
    for row in failed:
        assert blocking(check(GELU, SIGLIP, config_of(row), XDNA2)), row
    for row in table("gelu", "shapes"):                  # every measured size, best config
        shape = {"rows": 1, "width": row["N"]}
        assert not check(GELU, shape, config_of(row), XDNA2), row


def test_the_herd_cap_comes_from_the_kernels_own_streams():
    """Two streams per tile let 16 tiles place; a 3-stream kernel at the same herd cannot."""
    two_rows = {"herd_m": 8, "herd_rows": 2, "tile": 4096}
    assert not blocking(check(GELU, SIGLIP, two_rows, XDNA2))
    silu = check(SPECS["silu_mul"], SIGLIP, two_rows, XDNA2)
    assert [f.kind for f in blocking(silu)] == ["shim_streams"]
    over = check(GELU, SIGLIP, {"herd_m": 8, "herd_rows": 4, "tile": 4096}, XDNA2)
    assert [f.kind for f in blocking(over)] == ["shim_streams"]


def test_a_tile_of_partial_vectors_is_refused():
    found = check(GELU, {"rows": 8, "width": 1000}, {"tile": 1000}, XDNA2)
    assert [f.kind for f in blocking(found)] == ["divisible"]


# --- selection and cost ------------------------------------------------------------------------

@pytest.mark.parametrize("hw,herd", [(XDNA2, (8, 2)), (XDNA1, (4, 2))])
def test_selection_picks_a_valid_configuration(hw, herd):
    sel = select(KernelUse("act", GELU, SIGLIP), hw)
    assert sel.valid and not sel.findings
    assert (sel.config["herd_m"], sel.config["herd_rows"]) == herd
    assert sel.usage["tiles"] == herd[0] * herd[1]


def test_the_performance_model_prices_a_launch_as_its_page_measured_it():
    """GELU_bf16.md's herd table at 1024x3072: 8x2 (16 tiles) 522 us, 8x1 947 us."""
    config = select(KernelUse("act", GELU, SIGLIP), XDNA2).config
    launch = Launch("gelu", "act", 0, tuple(sorted(SIGLIP.items())),
                    tuple(sorted(config.items())),
                    (Binding("x", "t.x", "input"), Binding("y", "t.y", "output")))
    _, flops, nbytes, bound = launch_work(launch, PerfParams())
    n = SIGLIP["rows"] * SIGLIP["width"]
    assert nbytes == 2 * 2 * n and flops == 9 * n and bound == "memory"
    wide = launch_seconds(GELU, SIGLIP, {"herd_m": 8, "herd_rows": 2, "tile": 4096})
    narrow = launch_seconds(GELU, SIGLIP, {"herd_m": 8, "herd_rows": 1, "tile": 4096})
    assert wide == pytest.approx(522e-6, rel=0.05)
    assert narrow == pytest.approx(947e-6, rel=0.10)
    assert launch_seconds(GELU, SIGLIP, config) == wide       # selection's pick: 8x2


def test_docs_kernels_md_lists_it():
    text = (ROOT / "docs" / "kernels.md").read_text()
    assert "[`gelu`](#gelu)" in text and "## gelu\n" in text
    assert "GELU_bf16.md" in text
