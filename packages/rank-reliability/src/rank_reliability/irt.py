"""A two-parameter logistic (2PL) item response model fitted by marginal maximum a-posteriori EM.

P(X[m, i] = 1) = σ(aᵢ θₘ + dᵢ), θ ~ N(0, 1), aᵢ = exp(αᵢ) > 0 the discrimination, bᵢ = −dᵢ/aᵢ the
difficulty. The EM of Bock & Aitkin integrates θ over Gauss–Hermite nodes; the M-step takes Fisher-scoring
steps for every item at once. Weak priors αᵢ ~ N(0, 1) and dᵢ ~ N(0, 3²) keep items that nearly every
model gets right (or wrong) finite — with a few dozen models that is common. Missing cells are skipped.

Used by the IRT Fisher-information item selection baseline (the tinyBenchmarks/metabench style of
choosing items): item information Iᵢ(θ) = aᵢ² Pᵢ(θ)(1 − Pᵢ(θ)) summed over the models' abilities.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from papershelf.errors import InputError, check_int, check_number

from .matrix import check_matrix, is_binary


def _log_sigmoid(z: np.ndarray) -> np.ndarray:
    return -np.logaddexp(0.0, -z)


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return np.exp(_log_sigmoid(z))


@dataclass(frozen=True)
class TwoPL:
    """Fitted 2PL: ``a``, ``d`` (items,), ``theta`` (models,) posterior means, and fit diagnostics."""

    a: np.ndarray
    d: np.ndarray
    theta: np.ndarray
    theta_sd: np.ndarray
    log_likelihood: float
    n_iter: int
    converged: bool

    @property
    def b(self) -> np.ndarray:
        """Difficulty bᵢ = −dᵢ / aᵢ."""
        return -self.d / self.a

    def prob(self, theta: object) -> np.ndarray:
        """P(correct) for abilities ``theta`` (n,) on every item: (n, items)."""
        t = np.atleast_1d(np.asarray(theta, dtype=np.float64))
        return _sigmoid(np.outer(t, self.a) + self.d)

    def information(self, theta: object) -> np.ndarray:
        """Fisher information aᵢ² Pᵢ(θ)(1 − Pᵢ(θ)) of every item at abilities ``theta``: (n, items)."""
        p = self.prob(theta)
        return self.a**2 * p * (1.0 - p)


def fit_2pl(
    X: object,
    *,
    n_nodes: int = 41,
    max_iter: int = 300,
    tol: float = 1e-4,
    prior_sd_log_a: float = 1.0,
    prior_sd_d: float = 3.0,
) -> TwoPL:
    """Fit a 2PL model to a 0/1 models × items matrix (NaN = missing) by marginal MAP-EM."""
    arr, _ = check_matrix(X)
    if not is_binary(arr):
        raise InputError("the 2PL model needs a 0/1 matrix (right/wrong per item)")
    n_nodes = check_int("n_nodes", n_nodes, low=5, high=201)
    max_iter = check_int("max_iter", max_iter, low=1)
    tol = check_number("tol", tol, low=0, low_open=True)
    var_a = check_number("prior_sd_log_a", prior_sd_log_a, low=0, low_open=True) ** 2
    var_d = check_number("prior_sd_d", prior_sd_d, low=0, low_open=True) ** 2

    nodes, weights = np.polynomial.hermite_e.hermegauss(n_nodes)
    log_w = np.log(weights / weights.sum())
    obs = ~np.isnan(arr)
    X1 = np.where(obs, arr, 0.0)
    X0 = obs - X1  # 1 where observed wrong
    n_items = arr.shape[1]
    # start: unit slope, intercept from the item's logit proportion correct
    p0 = np.clip(X1.sum(0) / obs.sum(0), 0.02, 0.98)
    alpha = np.zeros(n_items)
    d = np.log(p0 / (1 - p0))
    converged = False
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is reported
        a = np.exp(alpha)
        z = np.outer(a, nodes) + d[:, None]  # (items, nodes)
        ll = X1 @ _log_sigmoid(z) + X0 @ _log_sigmoid(-z)  # (models, nodes)
        ll += log_w
        norm = np.logaddexp.reduce(ll, axis=1, keepdims=True)
        post = np.exp(ll - norm)
        r = X1.T @ post  # expected correct at each node (items, nodes)
        n = obs.T.astype(np.float64) @ post  # expected count at each node
        old = np.concatenate([alpha, d])
        for _ in range(4):  # Fisher-scoring steps of the M-step
            a = np.exp(alpha)
            z = np.outer(a, nodes) + d[:, None]
            p = _sigmoid(z)
            resid = r - n * p
            w = n * p * (1 - p)
            at = a[:, None] * nodes
            g_alpha = np.sum(resid * at, axis=1) - alpha / var_a
            g_d = np.sum(resid, axis=1) - d / var_d
            h_aa = np.sum(w * at * at, axis=1) + 1 / var_a
            h_ad = np.sum(w * at, axis=1)
            h_dd = np.sum(w, axis=1) + 1 / var_d
            det = h_aa * h_dd - h_ad**2
            step_alpha = np.clip((h_dd * g_alpha - h_ad * g_d) / det, -1.0, 1.0)
            step_d = np.clip((h_aa * g_d - h_ad * g_alpha) / det, -2.0, 2.0)
            alpha = alpha + step_alpha
            d = d + step_d
        if np.max(np.abs(np.concatenate([alpha, d]) - old)) < tol:
            converged = True
            break
    a = np.exp(alpha)
    z = np.outer(a, nodes) + d[:, None]
    ll = X1 @ _log_sigmoid(z) + X0 @ _log_sigmoid(-z) + log_w
    norm = np.logaddexp.reduce(ll, axis=1, keepdims=True)
    post = np.exp(ll - norm)
    theta = post @ nodes
    theta_sd = np.sqrt(np.maximum(post @ nodes**2 - theta**2, 0.0))
    return TwoPL(
        a=a,
        d=d,
        theta=theta,
        theta_sd=theta_sd,
        log_likelihood=float(norm.sum()),
        n_iter=it,
        converged=converged,
    )
