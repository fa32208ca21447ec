"""Classical coefficients: known answers, identities, the λ★6 ≤ λ6 bound, fast == reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_reliability import cronbach_alpha, guttman_lambda6, kr20, lambda6_star
from rank_reliability import reference as ref
from rank_reliability.classical import item_contributions

from papershelf.errors import InputError


def exact_covariance_data(cov, n, seed=0):
    """n rows whose sample covariance is exactly ``cov``."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(n, cov.shape[0]))
    Z -= Z.mean(0)
    Z = Z @ np.linalg.inv(np.linalg.cholesky(np.cov(Z, rowvar=False))).T
    return Z @ np.linalg.cholesky(cov).T + 3.0


@pytest.mark.parametrize(("k", "r"), [(4, 0.3), (10, 0.5), (6, 0.05)])
def test_compound_symmetry_known_answers(k, r):
    cov = 2.0 * ((1 - r) * np.eye(k) + r * np.ones((k, k)))
    X = exact_covariance_data(cov, 40)
    assert cronbach_alpha(X) == pytest.approx(k * r / (1 + (k - 1) * r), abs=1e-10)
    assert guttman_lambda6(X) == pytest.approx(1 - (1 - r) / (1 + (k - 2) * r), abs=1e-10)
    # λ★6 rest-score: r²(item, rest) = (k−1)r² / (1 + (k−2)r) under compound symmetry
    r2 = (k - 1) * r * r / (1 + (k - 2) * r)
    assert lambda6_star(X) == pytest.approx(1 - k * (1 - r2) / (k * (1 + (k - 1) * r)), abs=1e-10)


def test_kr20_equals_alpha_on_binary_items():
    X = (np.random.default_rng(1).random((30, 12)) < np.linspace(0.2, 0.8, 12)).astype(float)
    X[:, 0] = np.r_[np.ones(15), np.zeros(15)]
    assert kr20(X) == pytest.approx(cronbach_alpha(X), abs=1e-12)
    with pytest.raises(InputError, match="0/1"):
        kr20(X + 0.5)


@pytest.mark.parametrize("shape", [(12, 5), (6, 20)])
@pytest.mark.parametrize("variant", ["rest", "pinv"])
def test_lambda6_star_equals_reference(shape, variant):
    X = np.random.default_rng(shape[1]).normal(size=shape)
    assert lambda6_star(X, variant=variant) == pytest.approx(ref.lambda6_star(X, variant), abs=1e-9)


def test_lambda6_equals_regression_reference_and_pinv():
    X = np.random.default_rng(7).normal(size=(25, 6)) + np.random.default_rng(8).normal(size=(25, 1))
    assert guttman_lambda6(X) == pytest.approx(ref.guttman_lambda6(X), abs=1e-10)
    assert lambda6_star(X, variant="pinv") == pytest.approx(guttman_lambda6(X), abs=1e-10)
    assert cronbach_alpha(X) == pytest.approx(ref.cronbach_alpha(X), abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 10_000), st.integers(2, 8), st.integers(1, 12), st.floats(0.0, 2.0))
def test_lambda6_star_is_below_lambda6(seed, k, extra_models, loading):
    rng = np.random.default_rng(seed)
    n = k + 2 + extra_models
    X = rng.normal(size=(n, k)) + loading * rng.normal(size=(n, 1)) * rng.uniform(0.2, 1.5, size=k)
    assert lambda6_star(X) <= guttman_lambda6(X) + 1e-10


def test_degenerate_regime():
    rng = np.random.default_rng(0)
    X = ((rng.normal(size=(15, 1)) + rng.normal(size=(15, 300))) > 0).astype(float)
    with pytest.raises(InputError, match="undefined with 15 models and 300 items"):
        guttman_lambda6(X)
    value = lambda6_star(X)
    assert np.isfinite(value) and 0 < value <= 1
    assert np.isfinite(lambda6_star(X, variant="pinv"))


def test_collinear_items_make_lambda6_undefined():
    X = np.random.default_rng(2).normal(size=(20, 3))
    X = np.column_stack([X, X[:, 0] + X[:, 1]])
    with pytest.raises(InputError, match="collinear"):
        guttman_lambda6(X)


def test_item_contributions():
    X = np.random.default_rng(3).normal(size=(15, 6)) + np.random.default_rng(4).normal(size=(15, 1))
    contrib = item_contributions(X)
    s2 = X.var(axis=0, ddof=1)
    assert np.all(contrib >= 0) and np.all(contrib <= s2)
    assert 1 - (s2 - contrib).sum() / X.sum(1).var(ddof=1) == pytest.approx(lambda6_star(X))
