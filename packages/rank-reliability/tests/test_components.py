"""Variance components: fast path == the reference formulas, recovery on simulated data, the τ mapping."""

import math

import numpy as np
import pytest
from rank_reliability import cronbach_alpha, split_half, subset_concordance, variance_components
from rank_reliability import reference as ref
from rank_reliability.components import (
    correlation_from_kendall,
    expected_kendall,
    kendall_from_correlation,
    reliability_curve,
    spearman_from_correlation,
)
from rank_reliability.concordance import spearman
from rank_reliability.data import simulate_2pl, simulate_crossed, twopl_components


@pytest.mark.parametrize("shape", [(3, 2), (5, 7), (12, 4)])
def test_complete_matrix_equals_anova(shape):
    X = np.random.default_rng(sum(shape)).normal(size=shape) * 3 + 1
    vc = variance_components(X)
    np.testing.assert_allclose(
        [vc.model, vc.item, vc.residual], ref.anova_components(X), rtol=1e-10, atol=1e-12
    )


def test_missing_cells_equal_pairwise_reference():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(7, 9)) + rng.normal(size=(7, 1)) + rng.normal(size=(1, 9))
    X[rng.random(X.shape) < 0.3] = np.nan
    X[0, 0] = 0.5  # keep every row and column observed
    vc = variance_components(X)
    np.testing.assert_allclose([vc.model, vc.item, vc.residual], ref.pairwise_components(X), rtol=1e-9)
    complete = rng.normal(size=(5, 6))
    np.testing.assert_allclose(ref.pairwise_components(complete), ref.anova_components(complete), rtol=1e-9)


@pytest.mark.parametrize("missing", [0.0, 0.3])
def test_components_recovered_within_5_percent(missing):
    # 400 × 400 cells: the estimator's error around the realised variances is ~1%, so 5% cannot flake.
    sim = simulate_crossed(400, 400, var_model=0.5, var_item=1.5, var_residual=2.0, missing=missing, seed=11)
    vc = variance_components(sim.X)
    np.testing.assert_allclose([vc.model, vc.item, vc.residual], sim.realised, rtol=0.05)


def test_wrong_estimator_would_fail():
    # the naive variance of the row means overstates σ²_M by σ²_E / I; the test above would catch it
    sim = simulate_crossed(400, 20, var_model=0.5, var_residual=4.0, seed=2)
    naive = np.var(np.nanmean(sim.X, axis=1), ddof=1)
    assert abs(naive / sim.realised[0] - 1) > 0.05
    assert abs(variance_components(sim.X).model / sim.realised[0] - 1) < 0.05


def test_cronbach_alpha_is_hoyt_g_coefficient():
    X = np.random.default_rng(3).normal(size=(20, 8)) + np.arange(20)[:, None] * 0.2
    assert variance_components(X).g_coefficient() == pytest.approx(cronbach_alpha(X), abs=1e-12)


def test_snr_and_rho_known_values():
    X = np.array([[1.0, 2, 3], [2, 3, 5], [4, 4, 6], [3, 5, 6]])
    vc = variance_components(X)  # σ²_M = 14/9, σ²_E = 2/9
    assert vc.snr() == pytest.approx(3 * 7)
    assert vc.g_coefficient(1) == pytest.approx(7 / 8)
    assert vc.items_for(7 / 8) == pytest.approx(1.0)
    assert vc.form_correlation(3, math.inf) == pytest.approx(math.sqrt(21 / 22))
    curve = reliability_curve(vc, [1, 3])
    np.testing.assert_allclose(curve["rho"], [7 / 8, 21 / 22])


def test_mapping_functions():
    assert kendall_from_correlation(1.0) == 1.0 and kendall_from_correlation(0.0) == 0.0
    assert kendall_from_correlation(0.5) == pytest.approx(1 / 3)  # (2/π)·(π/6)
    assert correlation_from_kendall(kendall_from_correlation(0.37)) == pytest.approx(0.37)
    assert expected_kendall(0.81, "true") == pytest.approx(kendall_from_correlation(0.9))
    assert spearman_from_correlation(1.0, 10) == pytest.approx(1.0)
    assert spearman_from_correlation(0.6, 10**9) == pytest.approx(spearman_from_correlation(0.6), abs=1e-8)


def test_spearman_expectation_by_simulation():
    # Moran's finite-n formula against 4,000 bivariate-normal samples of 8 points (SE ≈ 0.005)
    rng = np.random.default_rng(0)
    r, n = 0.7, 8
    z = rng.normal(size=(4000, n, 2))
    a = z[..., 0]
    b = r * z[..., 0] + math.sqrt(1 - r * r) * z[..., 1]
    assert np.mean(spearman(a, b)) == pytest.approx(spearman_from_correlation(r, n), abs=0.02)
    assert abs(np.mean(spearman(a, b)) - spearman_from_correlation(r)) > 0.03  # n matters at n = 8


def test_split_half_matches_closed_form():
    sim = simulate_crossed(200, 60, var_model=0.4, var_residual=2.0, seed=5)
    sh = split_half(sim.X, 200, seed=1)
    assert 0.5 < sh.predicted_kendall < 0.9  # a regime where the mapping is informative
    assert sh.mean_kendall == pytest.approx(sh.predicted_kendall, abs=0.02)
    assert sh.mean_spearman == pytest.approx(sh.predicted_spearman, abs=0.02)
    masks = np.zeros((5, 60), dtype=bool)
    masks[:, :30] = True
    np.testing.assert_allclose(
        ref.split_half_kendall(sim.X, masks),
        [ref.kendall_tau_b(sim.X[:, :30].mean(1), sim.X[:, 30:].mean(1))] * 5,
    )


def test_subset_concordance_on_binary_2pl():
    X = simulate_2pl(80, 400, seed=3).X
    vc = variance_components(X)
    taus = subset_concordance(X, 50, 100, seed=0)
    assert np.mean(taus) == pytest.approx(vc.expected_kendall(50, 50), abs=0.03)


def test_2pl_population_components():
    truth = twopl_components()
    sim = simulate_2pl(600, 600, seed=9)
    vc = variance_components(sim.X)
    # σ²_M from 600 abilities has ~6% sampling SD; the residual and item terms are far tighter
    assert vc.residual == pytest.approx(truth["residual"], rel=0.03)
    assert vc.item == pytest.approx(truth["item"], rel=0.2)
    assert vc.model == pytest.approx(truth["model"], rel=0.2)
    assert truth["residual"] > truth["interaction"] > 0
