"""The slow, obviously-correct BIF step, straight from the equations, in float64 NumPy with loops.

This is the oracle the GPyTorch/BoTorch path is tested against: given the children's data and
hyperparameters and the parent's data, it recomputes every quantity of one BIF iteration —
children's posteriors and acquisition maps, the prior map, the parent's posterior and acquisition,
the query, and the soft decomposition — with textbook GP algebra (explicit kernel loops, a linear solve).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def matern(x1: np.ndarray, x2: np.ndarray, lengthscale: np.ndarray, outputscale: float, nu: float) -> float:
    """s·k_ν(r), r = ‖(x1 − x2)/ℓ‖ (ARD).

    ν=½: e^{−r}; ν=3/2: (1+√3r)e^{−√3r}; ν=5/2: (1+√5r+5r²/3)e^{−√5r}.
    """
    r = math.sqrt(sum(((a - b) / l) ** 2 for a, b, l in zip(x1, x2, lengthscale)))
    if nu == 0.5:
        k = math.exp(-r)
    elif nu == 1.5:
        k = (1.0 + math.sqrt(3.0) * r) * math.exp(-math.sqrt(3.0) * r)
    else:
        k = (1.0 + math.sqrt(5.0) * r + 5.0 * r * r / 3.0) * math.exp(-math.sqrt(5.0) * r)
    return outputscale * k


def additive_kernel(
    x1: np.ndarray, x2: np.ndarray, groups: Sequence[Sequence[int]], hypers: Sequence[tuple], nu: float
) -> float:
    """Σ_i s_i·k_ν(x1[dims_i], x2[dims_i]; ℓ_i) — the parent's kernel."""
    return sum(matern(x1[list(dims)], x2[list(dims)], ls, s, nu) for dims, (ls, s) in zip(groups, hypers))


def gp_posterior(
    X: np.ndarray,
    y: np.ndarray,
    Xs: np.ndarray,
    kernel,
    mean_train: np.ndarray,
    mean_test: np.ndarray,
    noise: float,
) -> tuple[np.ndarray, np.ndarray]:
    """μ* = m* + K*ᵀ(K + σ²I)⁻¹(y − m), σ*² = k** − K*ᵀ(K + σ²I)⁻¹K* (latent, no noise), floored at 1e-12."""
    n, m = len(X), len(Xs)
    K = np.empty((n, n))
    for i in range(n):
        for j in range(n):
            K[i, j] = kernel(X[i], X[j])
    Ks = np.empty((n, m))
    for i in range(n):
        for j in range(m):
            Ks[i, j] = kernel(X[i], Xs[j])
    kss = np.array([kernel(Xs[j], Xs[j]) for j in range(m)])
    A = K + noise * np.eye(n)
    alpha = np.linalg.solve(A, y - mean_train)
    mu = mean_test + Ks.T @ alpha
    var = kss - np.einsum("ij,ij->j", Ks, np.linalg.solve(A, Ks))
    return mu, np.sqrt(np.maximum(var, 1e-12))


def prior_sigma(outputscale: float, m: int) -> np.ndarray:
    return np.full(m, math.sqrt(max(outputscale, 1e-12)))


def acquisition(
    mu: np.ndarray, sigma: np.ndarray, kind: str, param: float, counts: np.ndarray, best_f: float
) -> np.ndarray:
    """Per point: UCB μ + param·σ/√n; EI σ(zΦ(z) + φ(z)); PI Φ(z); z = (μ − best_f − param)/σ."""
    out = np.empty(len(mu))
    for j in range(len(mu)):
        if kind == "ucb":
            out[j] = mu[j] + param * sigma[j] / math.sqrt(counts[j])
            continue
        z = (mu[j] - best_f - param) / sigma[j]
        cdf = 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))
        pdf = math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)
        out[j] = sigma[j] * (z * cdf + pdf) if kind == "ei" else cdf
    return out


def normalize_groups(y: Sequence[float], source: Sequence[str]) -> np.ndarray:
    """Each source group min–max normalised to [0, 1]; a one-point or flat group divided by its max."""
    out = np.zeros(len(y))
    for group in ("env", "bif"):
        idx = [k for k in range(len(y)) if source[k] == group]
        if not idx:
            continue
        vals = [y[k] for k in idx]
        lo, hi = min(vals), max(vals)
        for k in idx:
            if len(idx) > 1 and hi > lo:
                out[k] = (y[k] - lo) / (hi - lo)
            elif hi != 0.0:
                out[k] = y[k] / hi
    return out


def shared_targets(
    y: Sequence[float],
    source: Sequence[str],
    share: Sequence[float],
    epoch: Sequence[int],
    scales: Sequence[tuple[float, float]],
    env_centers: Sequence[float | None] | None = None,
) -> np.ndarray:
    """On the parent's scale (c, s) of each entry's task: sub-response w·y → w·(y − c)/s, written as
    (ỹ − w·c)/s; direct observation v → (v − c_i)/s, c_i the task's entry of ``env_centers`` or, when
    that is None, the mean of that task's direct observations."""
    out = np.zeros(len(y))
    for k in range(len(y)):
        c, s = scales[epoch[k]]
        if source[k] == "bif":
            out[k] = (y[k] - share[k] * c) / s
        else:
            ci = None if env_centers is None else env_centers[epoch[k]]
            if ci is None:
                env = [y[j] for j in range(len(y)) if source[j] == "env" and epoch[j] == epoch[k]]
                ci = sum(env) / len(env)
            out[k] = (y[k] - ci) / s
    return out


def residual_decompose(
    t: Sequence[float], means: Sequence[Sequence[float]], shares: Sequence[Sequence[float]]
) -> list[list[float]]:
    """ỹ_ik = μ_ik + w_ik·(t_k − Σ_j μ_jk) for every observation k and child i (one sweep)."""
    out = [[0.0] * len(t) for _ in means]
    for k in range(len(t)):
        r = t[k] - sum(m[k] for m in means)
        for i in range(len(means)):
            out[i][k] = means[i][k] + shares[i][k] * r
    return out


def calibrated_prior(m: np.ndarray, observed: Sequence[int], t: np.ndarray) -> np.ndarray:
    """α·m + β with the least-squares α (clipped to [0, (max t − min t)/(max m − min m)]) and β on the
    observed grid points ``observed`` with standardised targets ``t``; the raw map when nothing
    is observed."""
    if len(observed) == 0:
        return m.copy()
    mo = np.array([m[j] for j in observed])
    cov = sum((a - mo.mean()) * (b - t.mean()) for a, b in zip(mo, t))
    var = sum((a - mo.mean()) ** 2 for a in mo)
    alpha = max(cov / var, 0.0) if var > 1e-24 else 0.0
    if max(m) > min(m):
        alpha = min(alpha, (max(t) - min(t)) / (max(m) - min(m)))
    return alpha * m + (t.mean() - alpha * mo.mean())


def prior_map(acq_maps: Sequence[np.ndarray], child_of: Sequence[np.ndarray]) -> np.ndarray:
    """m(x) = (1/K)·Σ_i a_i(x_i) for every parent grid point, then divided by |max m| (if non-zero)."""
    K = len(acq_maps)
    n = len(child_of[0])
    m = np.empty(n)
    for p in range(n):
        m[p] = sum(acq_maps[i][child_of[i][p]] for i in range(K)) / K
    top = abs(max(m))
    return m / top if top != 0.0 else m


def decompose(y: float, acq_maps: Sequence[np.ndarray], child_points: Sequence[int]) -> list[float]:
    """ĉ_i = a_i(x_i)/max a_i (NaN → 0); ỹ_i = y·exp(ĉ_i)/Σ_j exp(ĉ_j)."""
    c = []
    for a, j in zip(acq_maps, child_points):
        top = max(a)
        ratio = a[j] / top if top != 0.0 else float("nan")
        c.append(ratio if math.isfinite(ratio) else 0.0)
    z = sum(math.exp(v) for v in c)
    return [y * math.exp(v) / z for v in c]
