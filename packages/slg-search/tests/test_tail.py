"""Tail estimation and the best-of-N prediction, against the reference equations and known answers."""

import math

import numpy as np
import pytest
from slg_search.envs import GaussianTwoStage, mixture_expected_max
from slg_search.reference import expected_max_normal_ref, predict_ref, tail_fit_ref, truncnorm_constants_ref
from slg_search.tail import (
    empirical_bon,
    expected_max_normal,
    predict_bon,
    predict_curve,
    tail_fit,
    tail_fit_batch,
    truncnorm_constants,
)

from papershelf.errors import InputError


def test_truncated_normal_constants_match_the_paper_values():
    z, lam, c = truncnorm_constants(0.2)
    assert z == pytest.approx(0.8416, abs=1e-4)
    assert lam == pytest.approx(1.3998, abs=1e-4)
    assert c == pytest.approx(0.2186, abs=1e-4)


@pytest.mark.parametrize("q", [0.05, 0.2, 0.5, 0.9])
def test_truncated_normal_constants_are_the_truncated_moments(q):
    # λ and c are the mean and variance of a standard normal truncated below at Φ⁻¹(1 − q) (scipy)
    assert truncnorm_constants(q) == pytest.approx(truncnorm_constants_ref(q), rel=1e-9)


def test_parameter_recovery_on_a_large_sample():
    x = np.random.default_rng(1).normal(1.5, 2.0, size=1_000_000)
    fit = tail_fit(x)
    assert fit.family == "gaussian" and fit.n_tail == 200_000
    assert fit.mu == pytest.approx(1.5, rel=0.02)
    assert fit.sigma == pytest.approx(2.0, rel=0.02)


def test_tail_fit_matches_the_loop_reference_including_ties():
    rng = np.random.default_rng(2)
    for m in (3, 7, 50, 201):
        for q in (0.1, 0.2, 0.45):
            x = np.round(rng.gamma(2.0, size=m), 1)  # rounding makes ties at the threshold
            fit, ref = tail_fit(x, q), tail_fit_ref(x, q)
            if ref is None:
                assert fit.family == "max"
            else:
                assert (fit.mu, fit.sigma) == pytest.approx(ref, rel=1e-12, abs=1e-12)
            for rule in ("quantile", "expected"):
                for n in (1, 2, 37, 1000):
                    assert float(fit.predict(n, rule)) == pytest.approx(predict_ref(x, n, q, rule), rel=1e-6)


def test_batched_fit_equals_row_by_row():
    x = np.round(np.random.default_rng(3).normal(size=(40, 30)), 1)
    x[0] = 1.0  # a degenerate row: falls back to its max
    mu, sigma = tail_fit_batch(x, 0.25)
    for i in range(x.shape[0]):
        fit = tail_fit(x[i], 0.25)
        if fit.family == "max":
            assert sigma[i] == 0 and mu[i] == x[i].max()
        else:
            assert (mu[i], sigma[i]) == pytest.approx((fit.mu, fit.sigma), rel=1e-12)


@pytest.mark.parametrize("n", [1, 2, 3, 10, 100, 1000, 100_000])
def test_expected_max_of_normals_against_quadrature(n):
    assert float(expected_max_normal(n)) == pytest.approx(expected_max_normal_ref(n), abs=1e-7)


def test_expected_max_known_answers():
    assert float(expected_max_normal(2)) == pytest.approx(1 / math.sqrt(math.pi), abs=1e-9)
    assert float(expected_max_normal(3)) == pytest.approx(1.5 / math.sqrt(math.pi), abs=1e-9)


def test_mixture_expected_max_against_quadrature():
    from scipy import integrate, stats

    means, sds, w = np.array([0.0, 1.0, -0.5]), np.array([1.0, 0.3, 2.0]), np.array([0.5, 0.2, 0.3])

    def dens(x, n):
        cdf = float(np.sum(w * stats.norm.cdf(x, means, sds)))
        pdf = float(np.sum(w * stats.norm.pdf(x, means, sds)))
        return x * n * pdf * cdf ** (n - 1)

    for n in (1, 5, 300):
        ref = integrate.quad(dens, -25, 25, args=(n,), limit=400, points=[0, 2, 4, 6])[0]
        assert mixture_expected_max(n, means, sds, w) == pytest.approx(ref, abs=1e-6)


def test_prediction_from_200_samples_within_3_percent_of_exact():
    # mean over 300 repetitions; per-repetition sd of V̂_1000 is about 0.4, so the mean's se is ~0.7%
    x = np.random.default_rng(4).normal(size=(300, 200))
    mu, sigma = tail_fit_batch(x)
    for n in (10, 100, 1000):
        exact = float(expected_max_normal(n))
        assert np.mean(mu + sigma * exact) == pytest.approx(exact, rel=0.03)


def test_quantile_rule_is_the_fitted_quantile():
    from scipy import stats

    fit = tail_fit(np.random.default_rng(5).normal(size=500))
    for n in (2, 10, 1000):
        assert float(fit.predict(n, "quantile")) == pytest.approx(
            stats.norm.ppf(1 - 1 / n, fit.mu, fit.sigma), rel=1e-10
        )


def test_empirical_bon_is_the_exact_u_statistic():
    x = np.array([3.0, 1.0, 2.0, 5.0])
    # all 6 pairs: max of pairs = 3,3,5,2,5,5 → mean 23/6
    assert empirical_bon(x, 2) == pytest.approx(23 / 6)
    assert empirical_bon(x, 1) == pytest.approx(x.mean())
    assert empirical_bon(x, 4) == pytest.approx(5.0)


def test_gpd_recovers_an_exponential_tail():
    x = np.random.default_rng(6).exponential(size=20_000)
    fit = tail_fit(x, family="gpd")
    assert fit.family == "gpd"
    assert abs(fit.shape) < 0.05 and fit.scale == pytest.approx(1.0, rel=0.05)
    harmonic = sum(1 / k for k in range(1, 1001))  # E[max of 1000 Exp(1)] = H_1000
    assert float(fit.predict(1000, "expected")) == pytest.approx(harmonic, rel=0.02)
    assert float(fit.predict(1000, "quantile")) == pytest.approx(math.log(1000), rel=0.02)


def test_fallbacks_are_documented_not_crashes():
    assert tail_fit([2.5]).family == "max"
    assert float(predict_bon([2.5], 1000)) == 2.5
    assert tail_fit([1.0, 1.0, 1.0, 1.0]).note == "no spread among the tail rewards"
    assert float(predict_bon([0.0, 1.0, 2.0, 3.0], 50)) == 3.0  # one reward in the top 20%
    few = tail_fit(np.arange(20.0), family="gpd")  # 4 exceedances: the gaussian fit is used
    assert few.family == "gaussian" and "gpd" in few.note


def test_predict_curve_is_increasing_in_n():
    curve = predict_curve(np.random.default_rng(7).normal(size=100), [1, 10, 100, 1000])
    assert np.all(np.diff(curve) > 0)


def test_two_stage_child_value_is_mu_plus_sigma_e_n():
    env = GaussianTwoStage([1.0, 2.0], [0.5, 0.1])
    assert env.expected_best(0, 1000) == pytest.approx(1 + 0.5 * expected_max_normal_ref(1000), abs=1e-7)


@pytest.mark.parametrize(
    "rewards,match",
    [
        ([1.0, np.nan, 2.0], "entry 1 is nan"),
        ([1.0, np.inf], "finite"),
        ([], "empty"),
        ([[1.0, 2.0], [3.0, 4.0]], "1-D"),
        (["a", "b"], "numeric"),
    ],
)
def test_bad_rewards(rewards, match):
    with pytest.raises(InputError, match=match):
        tail_fit(rewards)


@pytest.mark.parametrize("q", [0.0, 1.0, -0.1, 1.5, float("nan")])
def test_tail_fraction_out_of_range(q):
    with pytest.raises(InputError, match="tail_fraction"):
        tail_fit([1.0, 2.0, 3.0], tail_fraction=q)


def test_bad_family_rule_and_n():
    with pytest.raises(InputError, match="family"):
        tail_fit([1.0, 2.0], family="weibull")
    with pytest.raises(InputError, match="rule"):
        predict_bon([1.0, 2.0, 3.0], 10, rule="median")
    with pytest.raises(InputError, match="n must be >= 1"):
        predict_bon([1.0, 2.0, 3.0], 0)
    with pytest.raises(InputError, match="rewards"):
        tail_fit_batch(np.full((2, 3), np.nan))
