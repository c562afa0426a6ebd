"""The GEMM checker and selection held against what ran on NPU2: every configuration of
upstream's kernel registry (kernels/data/gemm_bf16.json, gemm_fp32.json) and every failure
it reports (kernels/data/gemm_failures.json)."""

from __future__ import annotations

import pytest

from npu_deploy.kernels.definition.checker import blocking, check
from npu_deploy.kernels.definition.hardware import XDNA2
from npu_deploy.kernels.definition.registry import SPECS
from npu_deploy.kernels.definition.selection import select, select_all
from npu_deploy.kernels.definition.specs import Decode, KernelUse, Prefill, model_kernels
from npu_deploy.kernels.families.gemm import CONFIG_KEYS, row_config
from npu_deploy.kernels.measured.measurements import load, table
from npu_deploy.models import CATALOG

GEMMS = ("gemm_bf16", "gemm_fp32")


def _measured() -> list[tuple[str, dict]]:
    return [(name, row) for name in GEMMS for row in table(name, "shapes")
            if row["gflops"] is not None]


def _shape(row: dict) -> dict[str, int]:
    return {"M": row["M"], "K": row["K"], "N": row["N"]}


def _config(name: str, row: dict) -> dict:
    return row_config(SPECS[name], row)


def test_the_registry_holds_109_measured_configurations_over_81_shapes():
    rows = _measured()
    assert len(rows) == 109
    assert len({(n, r["M"], r["K"], r["N"]) for n, r in rows}) == 81


@pytest.mark.parametrize(("name", "row"), _measured(),
                         ids=lambda v: v if isinstance(v, str) else
                         f"{v['M']}x{v['K']}x{v['N']}-{v['method']}")
def test_the_checker_accepts_every_configuration_that_ran_on_npu2(name, row):
    found = blocking(check(SPECS[name], _shape(row), _config(name, row), XDNA2))
    assert not found, [str(f) for f in found]


@pytest.mark.parametrize("row", load("gemm_failures")["failures"],
                         ids=lambda r: f"{r['M']}x{r['K']}x{r['N']}-{r['method']}-"
                                       f"{r['tile_k_l2']}/{r['tile_k_l1']}/{r['tile_n']}-"
                                       f"{r['herd_m']}x{r['herd_n']}")
def test_the_checker_rejects_every_configuration_that_failed_on_npu2(row):
    name = row["family"]
    found = blocking(check(SPECS[name], _shape(row), _config(name, row), XDNA2))
    assert found, "a configuration upstream saw fail passes the checker"
    kinds = {f.kind for f in found}
    # A failure a rule explains is caught by that rule, not only by the list of failures.
    assert row["explained_by"] is None or row["explained_by"] in kinds, kinds
    if row["outcome"] == "corrupt":
        assert any(f.severity == "corrupt" for f in found)


def test_the_reason_names_the_limit_and_the_fix():
    spec, shape = SPECS["gemm_bf16"], {"M": 2048, "K": 896, "N": 896}
    found = check(spec, shape, {**spec.tunables, "tile_n": 128, "herd_n": 4}, XDNA2)
    text = " ".join(str(f) for f in found)
    assert "not divisible by tile_n x herd_n" in text and "silently corrupt" in text
    found = check(spec, shape, {**spec.tunables, "tile_m": 32, "herd_n": 1, "method": "drain",
                                "tile_k_l2": 128}, XDNA2)
    assert any(f.kind == "known_failure" and "fails at run time" in f.message for f in found)


def test_npu_facts_failure_table_is_flagged():
    spec = SPECS["gemm_bf16"]
    shape = {"M": 2048, "K": 4096, "N": 4096}
    big_l2 = {**spec.tunables, "tile_m": 128, "tile_n": 128, "tile_k_l2": 1024, "herd_m": 8}
    assert "l2" in {f.kind for f in blocking(check(spec, shape, big_l2, XDNA2))}
    wide = {**spec.tunables, "herd_n": 8, "tile_n": 64}
    kinds = {f.kind for f in blocking(check(spec, shape, wide, XDNA2))}
    assert {"herd", "channels"} <= kinds


def test_drain_caps_tile_m_at_32_through_l1():
    spec, shape = SPECS["gemm_bf16"], {"M": 2048, "K": 2048, "N": 2048}
    drain = {**spec.tunables, "method": "drain", "tile_m": 64}
    assert "l1" in {f.kind for f in blocking(check(spec, shape, drain, XDNA2))}
    assert not blocking(check(spec, shape, {**drain, "tile_m": 32}, XDNA2))
    assert not blocking(check(spec, shape, {**drain, "method": "fused-cast"}, XDNA2))


def _model_uses():
    for name, model in CATALOG.items():
        for mode in (Prefill(2048), Prefill(128), Prefill(100), Prefill(16), Decode(2047)):
            yield name, mode, model_kernels(model.args, mode)


@pytest.mark.slow         # 5 s on 2 busy cores: out of the fast core
def test_every_shape_of_the_ten_models_gets_a_valid_configuration():
    invalid = [(name, str(mode), s.use.spec.name, s.use.shape)
               for name, mode, uses in _model_uses()
               for s in select_all(uses, XDNA2) if not s.valid]
    assert not invalid


def test_every_registry_shape_gets_a_valid_configuration_even_without_its_measurement():
    for name, row in _measured():
        chosen = select(KernelUse("x", SPECS[name], _shape(row)), XDNA2, use_measured=False)
        assert chosen.valid, (name, _shape(row), [str(f) for f in chosen.findings])


def test_at_registry_shapes_selection_takes_upstreams_fastest_high_precision_configuration():
    by_shape: dict[tuple, list[dict]] = {}
    for name, row in _measured():
        by_shape.setdefault((name, row["M"], row["K"], row["N"]), []).append(row)
    checked = 0
    for (name, *_), rows in by_shape.items():
        high = [r for r in rows if r["tier"] == "high"]
        if not high:
            continue
        fastest = max(high, key=lambda r: r["gflops"])
        chosen = select(KernelUse("x", SPECS[name], _shape(fastest)), XDNA2)
        same = [r for r in rows if all(chosen.config[k] == r[k] for k in CONFIG_KEYS)]
        assert same and same[0]["gflops"] >= 0.9 * fastest["gflops"], (name, _shape(fastest))
        assert chosen.source == "measured" and chosen.measured is not None
        checked += 1
    assert checked == 78


def test_selection_never_falls_back_to_a_corrupting_configuration():
    spec = SPECS["gemm_bf16"]
    for shape in ({"M": 64, "K": 960, "N": 720}, {"M": 2048, "K": 896, "N": 4864},
                  {"M": 16, "K": 576, "N": 1536}):
        chosen = select(KernelUse("x", spec, shape), XDNA2, use_measured=False)
        assert chosen.valid and shape["N"] % (chosen.config["tile_n"] *
                                              chosen.config["herd_n"]) == 0


def test_an_lm_head_over_a_large_vocabulary_stores_b_in_column_blocks():
    spec = SPECS["gemm_fp32"]
    chosen = select(KernelUse("lm_head", spec, {"M": 128, "K": 896, "N": 151936}), XDNA2)
    assert chosen.valid and chosen.config["b_parts"] > 1
    whole = {**chosen.config, "b_parts": 1}
    assert "stride" in {f.kind for f in check(spec, chosen.use.shape, whole, XDNA2)}


@pytest.mark.parametrize("name", ["gemm_bf16", "gemm_fp32"])
def test_a_vocabulary_with_few_factors_of_two_still_finds_column_blocks(name):
    """Gemma 3's 262208 = 64 x 4097: the 8 column blocks a tile_k_l2 of 32 needs for the
    DMA stride leave 8 x 4097 columns, which no tile_n (a multiple of 16) divides; 4 blocks
    of 16 x 4097 with tile_k_l2 16 both fit the stride and tile. The search finds them."""
    spec = SPECS[name]
    shape = {"M": 2048, "K": 2560, "N": 262208}
    chosen = select(KernelUse("lm_head", spec, shape), XDNA2, use_measured=False)
    assert chosen.valid and chosen.tried > 1, chosen.findings
    blocks = shape["N"] // chosen.config["b_parts"]
    assert blocks % (chosen.config["tile_n"] * chosen.config["herd_n"]) == 0
    assert not blocking(check(spec, shape, chosen.config, XDNA2))
