"""One check against its threshold, as every gate records it."""

from __future__ import annotations

import math

import pytest

from npu_deploy.pipeline.gates import check, verdict


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
@pytest.mark.parametrize("comparison", ["<=", "<", ">=", ">", "=="])
def test_a_value_that_is_not_finite_never_passes(value: float, comparison: str):
    c = check("L0", "max_abs", value, 1.0, comparison)
    assert c["passed"] is False
    assert c["value"] == -1.0            # JSON has no NaN: the log records -1
    assert verdict("g", [c])["passed"] is False


def test_a_check_holds_by_its_comparison():
    assert check("s", "m", 0.5, 1.0, "<=")["passed"]
    assert not check("s", "m", 1.5, 1.0, "<=")["passed"]
    assert check("s", "m", 1.0, 1.0, ">=")["passed"]
    assert not check("s", "m", 1.0, 1.0, "<")["passed"]
    assert verdict("g", [check("s", "m", 2.0, 1.0, "<=", gating=False)])["passed"]
