"""Vectorised float64 likelihood of the ordinal CP model, its exact gradient, and the stage-2 GLM.

Model (per observation i with prompt p, model a, optional second model b, rater r, level y):

    x_i   = phi[a] - phi[b]          (phi[b] term only for side-by-side ratings)
    eta_i = sum_k theta[p, k] * x_i[k] * psi[r, k]
    P(y <= j) = sigmoid(tau[r, j] - eta_i),  j = 0 .. L_r - 2,  tau[r] strictly increasing.

Column 0 of ``theta`` is fixed at 1 (a model main effect phi[:, 0] * psi[r, 0]) and column 1 of ``phi``
is fixed at 1 (a prompt main effect theta[:, 1] * psi[r, 1]); columns 2.. are the rank-K interaction.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.special import expit

FIXED_THETA_COL = 0
FIXED_PHI_COL = 1


@dataclass(frozen=True)
class Obs:
    """Encoded observations: int64 index arrays of shape (n,); ``b`` is -1 for absolute ratings."""

    p: np.ndarray
    a: np.ndarray
    b: np.ndarray
    r: np.ndarray
    y: np.ndarray

    def __len__(self) -> int:
        return int(self.y.size)

    def take(self, idx: np.ndarray) -> Obs:
        return Obs(self.p[idx], self.a[idx], self.b[idx], self.r[idx], self.y[idx])


def concat_obs(*parts: Obs) -> Obs:
    return Obs(*(np.concatenate([getattr(o, f) for o in parts]) for f in ("p", "a", "b", "r", "y")))


def thresholds_from_raw(raw: np.ndarray) -> np.ndarray:
    """tau[:, 0] = raw[:, 0]; tau[:, j] = tau[:, j-1] + exp(raw[:, j]) (strictly increasing)."""
    steps = np.concatenate([raw[:, :1], np.exp(raw[:, 1:])], axis=1)
    return np.cumsum(steps, axis=1)


def raw_from_thresholds(tau: np.ndarray) -> np.ndarray:
    d = np.diff(tau, axis=1)
    return np.concatenate([tau[:, :1], np.log(d)], axis=1)


def pair_features(theta: np.ndarray, phi: np.ndarray, obs: Obs) -> np.ndarray:
    """x_i = theta[p] * (phi[a] - phi[b]) — the stage-2 features, (n, C)."""
    return theta[obs.p] * _model_diff(phi, obs)


def _model_diff(phi: np.ndarray, obs: Obs) -> np.ndarray:
    x = phi[obs.a]  # fancy indexing copies
    pair = obs.b >= 0
    if pair.any():
        x[pair] -= phi[obs.b[pair]]
    return x


def ordinal_terms(eta: np.ndarray, tau: np.ndarray, r: np.ndarray, y: np.ndarray, n_levels: np.ndarray):
    """Per-observation log-likelihood log P(y | eta) and the pieces of its derivatives.

    Returns ``(loglik, s_hi, s_lo, top, bot)`` with ``s_hi = f(hi)/D`` and ``s_lo = f(lo)/D`` where
    hi = tau[y] - eta, lo = tau[y-1] - eta, D = F(hi) - F(lo), f the logistic density.
    Stable in the tails: log D = log F(hi) + log F(-lo) + log(1 - exp(lo - hi)).
    """
    jmax = tau.shape[1] - 1
    top = y == n_levels[r] - 1
    bot = y == 0
    # clipping at +-300 only touches probabilities below 1e-130 and keeps every step finite
    hi = np.clip(tau[r, np.minimum(y, jmax)] - eta, -300.0, 300.0)
    lo = np.clip(tau[r, np.clip(y - 1, 0, jmax)] - eta, -300.0, 300.0)
    hi[top] = np.inf
    lo[bot] = -np.inf
    sig_hi = expit(hi)  # F(hi), 1 at the top level
    sig_nlo = expit(-lo)  # 1 - F(lo), 1 at the bottom level
    gap = hi - lo  # > 0; inf at either end
    one_m = np.maximum(-np.expm1(-gap), 1e-300)  # 1 - exp(-(hi - lo))
    log_d = np.log(sig_hi) + np.log(sig_nlo) + np.log(one_m)
    # f(hi)/D = (1 - F(hi)) / ((1 - F(lo)) (1 - e^-gap));  f(lo)/D = F(lo) / (F(hi) (1 - e^-gap))
    s_hi = (1.0 - sig_hi) / (sig_nlo * one_m)
    s_lo = (1.0 - sig_nlo) / (sig_hi * one_m)
    return log_d, s_hi, s_lo, top, bot


def _scatter(idx: np.ndarray, vals: np.ndarray, size: int) -> np.ndarray:
    out = np.empty((size, vals.shape[1]))
    for c in range(vals.shape[1]):
        out[:, c] = np.bincount(idx, weights=vals[:, c], minlength=size)
    return out


def nll_and_grad(
    theta: np.ndarray,
    phi: np.ndarray,
    psi: np.ndarray,
    tau_raw: np.ndarray,
    obs: Obs,
    n_levels: np.ndarray,
) -> tuple[float, dict[str, np.ndarray]]:
    """Total negative log-likelihood (no penalty) and its gradient w.r.t. every block (same shapes).

    The gradients of the fixed columns (theta[:, 0], phi[:, 1]) are returned too; callers zero them.
    """
    x = _model_diff(phi, obs)
    tp = theta[obs.p]
    pr = psi[obs.r]
    eta = np.einsum("nk,nk,nk->n", tp, x, pr)
    tau = thresholds_from_raw(tau_raw)
    loglik, s_hi, s_lo, top, bot = ordinal_terms(eta, tau, obs.r, obs.y, n_levels)
    g_eta = (s_hi - s_lo)[:, None]  # d(-loglik)/d eta
    g_theta = _scatter(obs.p, g_eta * x * pr, theta.shape[0])
    w = g_eta * tp * pr
    g_phi = _scatter(obs.a, w, phi.shape[0])
    pair = obs.b >= 0
    if pair.any():
        g_phi -= _scatter(obs.b[pair], w[pair], phi.shape[0])
    g_psi = _scatter(obs.r, g_eta * tp * x, psi.shape[0])
    # thresholds: d(-loglik)/d tau[y] = -s_hi ; d(-loglik)/d tau[y-1] = +s_lo
    R, J = tau.shape
    g_tau = np.zeros(R * J)
    keep = ~top
    g_tau += np.bincount(obs.r[keep] * J + obs.y[keep], weights=-s_hi[keep], minlength=R * J)
    keep = ~bot
    g_tau += np.bincount(obs.r[keep] * J + obs.y[keep] - 1, weights=s_lo[keep], minlength=R * J)
    g_tau = g_tau.reshape(R, J)
    # chain to raw: tau_j = raw_0 + sum_{l=1..j} exp(raw_l)
    tail = np.cumsum(g_tau[:, ::-1], axis=1)[:, ::-1]
    g_raw = np.concatenate([tail[:, :1], tail[:, 1:] * np.exp(tau_raw[:, 1:])], axis=1)
    return float(-loglik.sum()), {"theta": g_theta, "phi": g_phi, "psi": g_psi, "tau_raw": g_raw}


def level_probs(eta: np.ndarray, tau: np.ndarray) -> np.ndarray:
    """P(y = j) for j = 0..L-1 given eta (n,) and one rater's thresholds tau (L-1,) → (n, L)."""
    cdf = expit(tau[None, :] - eta[:, None])
    cdf = np.concatenate([np.zeros((eta.size, 1)), cdf, np.ones((eta.size, 1))], axis=1)
    return np.clip(np.diff(cdf, axis=1), 0.0, 1.0)


# ---- stage 2: an ordinal GLM on frozen features -------------------------------------------------


def glm_terms(beta: np.ndarray, tau: np.ndarray, X: np.ndarray, y: np.ndarray, n_levels: int):
    """Log-likelihood, gradient and Hessian of the cumulative-logit GLM in (beta, tau) (concave there)."""
    n = X.shape[0]
    J = n_levels - 1
    eta = X @ beta
    r = np.zeros(n, dtype=np.int64)
    loglik, s_hi, s_lo, top, bot = ordinal_terms(eta, tau[None, :], r, y, np.array([n_levels]))
    jmax = J - 1
    hi = np.where(top, 0.0, tau[np.minimum(y, jmax)] - eta)
    lo = np.where(bot, 0.0, tau[np.clip(y - 1, 0, jmax)] - eta)
    # second derivatives of log D in (hi, lo)
    dd_hi = np.where(top, 0.0, s_hi * (1 - 2 * expit(hi)) - s_hi**2)
    dd_lo = np.where(bot, 0.0, -s_lo * (1 - 2 * expit(lo)) - s_lo**2)
    d_hilo = s_hi * s_lo
    E_hi = np.zeros((n, J))
    E_lo = np.zeros((n, J))
    rows = np.arange(n)
    E_hi[rows[~top], y[~top]] = 1.0
    E_lo[rows[~bot], y[~bot] - 1] = 1.0
    J_hi = np.concatenate([-X, E_hi], axis=1)
    J_lo = np.concatenate([-X, E_lo], axis=1)
    grad = J_hi.T @ s_hi - J_lo.T @ s_lo
    H = (J_hi * dd_hi[:, None]).T @ J_hi + (J_lo * dd_lo[:, None]).T @ J_lo
    cross = (J_hi * d_hilo[:, None]).T @ J_lo
    H += cross + cross.T
    return float(loglik.sum()), grad, H


def fit_glm(
    X: np.ndarray, y: np.ndarray, n_levels: int, *, l2: float = 0.0, max_iter: int = 100, tol: float = 1e-10
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Maximum-likelihood (optionally ridge on beta) cumulative-logit regression by damped Newton.

    Returns ``(beta (q,), tau (L-1,), hessian of the penalised log-likelihood ((q+L-1)^2))``.
    """
    n, q = X.shape
    J = n_levels - 1
    counts = np.bincount(y, minlength=n_levels)
    cum = np.cumsum(counts)[:-1] / n
    tau = np.log(cum / (1 - cum))
    beta = np.zeros(q)
    pen = np.concatenate([np.full(q, l2), np.zeros(J)])

    def objective(b, t):
        if np.any(np.diff(t) <= 0):
            return -np.inf, None, None
        ll, g, H = glm_terms(b, t, X, y, n_levels)
        theta = np.concatenate([b, t])
        return ll - 0.5 * np.sum(pen * theta**2), g - pen * theta, H - np.diag(pen)

    f, g, H = objective(beta, tau)
    for _ in range(max_iter):
        try:
            step = np.linalg.solve(-H, g)
        except np.linalg.LinAlgError:
            step = np.linalg.lstsq(-H, g, rcond=None)[0]
        t = 1.0
        while t > 1e-10:
            nb, nt = beta + t * step[:q], tau + t * step[q:]
            nf, ng, nH = objective(nb, nt)
            if nf >= f - 1e-12 * abs(f):
                break
            t *= 0.5
        else:
            break
        beta, tau, f_old, f, g, H = nb, nt, f, nf, ng, nH
        if np.max(np.abs(g)) < tol * max(1.0, n) or abs(f - f_old) < 1e-14 * max(1.0, abs(f)):
            break
    return beta, tau, H
