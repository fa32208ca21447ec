"""Fast paths against the slow reference: likelihood, gradient, stage-2 GLM, delta method."""

import numpy as np
import pytest
from scipy.optimize import minimize
from tenfac_eval import reference as ref
from tenfac_eval.core import Obs, fit_glm, glm_terms, nll_and_grad, thresholds_from_raw


def _problem(seed=0, P=5, M=4, R=3, C=4, n=60, levels=(5, 3, 2), pairwise=True):
    rng = np.random.default_rng(seed)
    theta, phi, psi = rng.normal(size=(P, C)), rng.normal(size=(M, C)), rng.normal(size=(R, C))
    J = max(levels) - 1
    tau_raw = rng.normal(0, 0.5, (R, J))
    p, a, r = rng.integers(0, P, n), rng.integers(0, M, n), rng.integers(0, R, n)
    b = np.where(rng.random(n) < 0.3, (a + 1) % M, -1) if pairwise else np.full(n, -1)
    L = np.array(levels)
    y = rng.integers(0, L[r])
    y[:R] = L[r[:R]] - 1  # make sure the top and bottom levels occur
    y[R : 2 * R] = 0
    return theta, phi, psi, tau_raw, Obs(p, a, b, r, y), L


def test_nll_matches_reference():
    theta, phi, psi, tau_raw, obs, L = _problem()
    fast, _ = nll_and_grad(theta, phi, psi, tau_raw, obs, L)
    slow = ref.negative_log_likelihood(theta, phi, psi, tau_raw, obs.p, obs.a, obs.b, obs.r, obs.y, L)
    assert fast == pytest.approx(slow, rel=1e-12)


def test_nll_is_stable_in_the_tails():
    theta, phi, psi, tau_raw, obs, L = _problem(seed=1, pairwise=False)
    theta = theta * 6  # |eta| up to ~100: naive differences of sigmoids lose everything here
    fast, grads = nll_and_grad(theta, phi, psi, tau_raw, obs, L)
    assert np.isfinite(fast) and all(np.all(np.isfinite(g)) for g in grads.values())


@pytest.mark.parametrize("block", ["theta", "phi", "psi", "tau_raw"])
def test_gradient_equals_finite_differences(block):
    blocks = dict(zip(["theta", "phi", "psi", "tau_raw"], _problem(seed=2)[:4], strict=True))
    _, _, _, _, obs, L = _problem(seed=2)
    _, grads = nll_and_grad(blocks["theta"], blocks["phi"], blocks["psi"], blocks["tau_raw"], obs, L)

    def f(x):
        b = dict(blocks, **{block: x})
        return ref.negative_log_likelihood(
            b["theta"], b["phi"], b["psi"], b["tau_raw"], obs.p, obs.a, obs.b, obs.r, obs.y, L
        )

    numeric = ref.finite_difference(f, blocks[block].copy())
    g = grads[block]
    if block == "tau_raw":  # padded thresholds a rater never uses have zero gradient both ways
        assert np.allclose(g, numeric, atol=1e-6)
    else:
        np.testing.assert_allclose(g, numeric, rtol=1e-6, atol=1e-6)


def _glm_data(seed=0, n=400, q=3, L=4):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, q))
    beta = np.array([1.0, -0.5, 0.8])[:q]
    tau = np.linspace(-1, 1.2, L - 1)
    eta = X @ beta
    cdf = 1 / (1 + np.exp(-(tau[None, :] - eta[:, None])))
    y = (rng.random(n)[:, None] > cdf).sum(1)
    return X, y, L


def test_glm_gradient_and_hessian_match_finite_differences():
    X, y, L = _glm_data()
    beta, tau = np.array([0.3, -0.2, 0.1]), np.array([-0.7, 0.1, 0.9])
    _, g, H = glm_terms(beta, tau, X, y, L)

    def f(v):
        return -ref.glm_negative_log_likelihood(v[:3], v[3:], X, y)

    v = np.concatenate([beta, tau])
    np.testing.assert_allclose(g, ref.finite_difference(f, v.copy()), rtol=1e-6, atol=1e-6)

    def grad_i(i):
        return lambda w: glm_terms(w[:3], w[3:], X, y, L)[1][i]

    numeric_h = np.array([ref.finite_difference(grad_i(i), v.copy()) for i in range(6)])
    np.testing.assert_allclose(H, numeric_h, rtol=1e-5, atol=1e-5)


def test_stage2_newton_equals_generic_optimiser_on_the_reference():
    X, y, L = _glm_data(seed=3)
    beta, tau, _ = fit_glm(X, y, L)

    def f(v):  # reference NLL in an unconstrained threshold parameterisation
        return ref.glm_negative_log_likelihood(v[:3], ref.thresholds(v[3:]), X, y)

    v0 = np.concatenate([np.zeros(3), [-1.0, 0.0, 0.0]])
    res = minimize(f, v0, method="BFGS", options={"gtol": 1e-9})
    np.testing.assert_allclose(beta, res.x[:3], atol=1e-4)
    np.testing.assert_allclose(tau, ref.thresholds(res.x[3:]), atol=1e-4)


def test_stage2_equals_statsmodels_ordered_model():
    """The independent implementation (statsmodels' OrderedModel, logit) on the same frozen features."""
    om = pytest.importorskip("statsmodels.miscmodels.ordinal_model")
    X, y, L = _glm_data(seed=4)
    beta, tau, _ = fit_glm(X, y, L)
    res = om.OrderedModel(y, X, distr="logit").fit(method="newton", disp=False, maxiter=200, tol=1e-12)
    np.testing.assert_allclose(beta, res.params[:3], atol=1e-4)
    cuts = thresholds_from_raw(np.asarray(res.params[3:])[None, :])[0]
    np.testing.assert_allclose(tau, cuts, atol=1e-4)
