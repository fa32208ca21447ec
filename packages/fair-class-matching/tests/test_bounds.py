"""The guarantee functions: known values, the frontier identity, input checks."""

import math

import numpy as np
import pytest
from fair_class_matching import bounds

from papershelf.errors import InputError


def test_known_values():
    assert bounds.alg_cef(0.5) == pytest.approx(0.393469, abs=1e-6)
    assert bounds.alg_usw(0.5) == pytest.approx(0.595646, abs=1e-6)
    assert bounds.alg_usw(0.0) == pytest.approx(1 - 1 / math.e)
    assert bounds.alg_usw(1.0) == pytest.approx(0.5)
    assert bounds.alg_cef(1.0) == pytest.approx(1 - 1 / math.e)
    assert bounds.indivisible_cef(0.5) == 0.25
    assert bounds.upper_usw(1.0) == pytest.approx(0.5)
    assert bounds.upper_usw(bounds.alg_cef(0.5)) == pytest.approx(0.6087, abs=1e-4)


def test_frontier_identity_and_gap_is_only_in_fairness():
    g = np.linspace(0, 1, 101)
    np.testing.assert_allclose(bounds.upper_usw(g), bounds.alg_usw(g), atol=1e-12)
    assert np.all(bounds.alg_cef(g) <= g + 1e-15)  # 1 - e^-g <= g
    assert np.all(np.diff(bounds.upper_usw(g)) < 0)  # more fairness, less welfare
    # the algorithm's point lies under the frontier: USW(g) <= UB(CEF(g))
    assert np.all(bounds.alg_usw(g) <= bounds.upper_usw(bounds.alg_cef(g)) + 1e-15)


def test_prior_bound_is_vacuous_below_0_58():
    assert bounds.PRIOR_VACUOUS_BELOW == pytest.approx(0.582, abs=1e-3)
    assert bounds.prior_upper_usw(bounds.PRIOR_VACUOUS_BELOW) == pytest.approx(1 - 1 / math.e)
    assert bounds.prior_upper_usw(0.3) > 1 - 1 / math.e > bounds.upper_usw(0.3)


def test_guarantee_table_and_errors():
    rows = bounds.guarantee_table([0, 0.5, 1])
    assert [r["gamma"] for r in rows] == [0, 0.5, 1] and rows[2]["usw"] == pytest.approx(0.5)
    for bad in (-0.1, 1.2, float("nan"), "x"):
        with pytest.raises(InputError):
            bounds.alg_cef(bad)
    with pytest.raises(InputError, match="alpha"):
        bounds.upper_usw([0.2, 2.0])
