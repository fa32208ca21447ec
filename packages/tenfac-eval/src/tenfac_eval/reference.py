"""The slow, obviously-correct oracle: the model's likelihood written straight from its equations.

Plain Python loops over observations in float64, no vectorisation, no stability tricks beyond
``math``. Every fast path in ``core`` / ``model`` is tested against these functions.
"""

from __future__ import annotations

import math

import numpy as np


def sigmoid(u: float) -> float:
    if u == math.inf:
        return 1.0
    if u == -math.inf:
        return 0.0
    return 1.0 / (1.0 + math.exp(-u))


def thresholds(raw_row) -> list[float]:
    """tau_0 = raw_0, tau_j = tau_{j-1} + exp(raw_j)."""
    out = [float(raw_row[0])]
    for v in raw_row[1:]:
        out.append(out[-1] + math.exp(float(v)))
    return out


def predictor(theta, phi, psi, p: int, a: int, b: int, r: int) -> float:
    """eta = sum_k theta[p,k] (phi[a,k] - phi[b,k]) psi[r,k]   (phi[b] only when b >= 0)."""
    total = 0.0
    for k in range(len(psi[r])):
        x = phi[a][k] - (phi[b][k] if b >= 0 else 0.0)
        total += theta[p][k] * x * psi[r][k]
    return total


def prob_level(eta: float, tau: list[float], y: int) -> float:
    """P(Y = y) = sigmoid(tau_y - eta) - sigmoid(tau_{y-1} - eta), with tau_{-1} = -inf, tau_{L-1} = +inf."""
    upper = tau[y] if y < len(tau) else math.inf
    lower = tau[y - 1] if y >= 1 else -math.inf
    return sigmoid(upper - eta) - sigmoid(lower - eta)


def negative_log_likelihood(theta, phi, psi, tau_raw, p, a, b, r, y, n_levels) -> float:
    """-sum_i log P(y_i | eta_i, tau_{r_i}) over the observations (arrays p, a, b, r, y)."""
    total = 0.0
    for i in range(len(y)):
        L = int(n_levels[r[i]])
        tau = thresholds(tau_raw[r[i]][: L - 1])
        eta = predictor(theta, phi, psi, int(p[i]), int(a[i]), int(b[i]), int(r[i]))
        total -= math.log(prob_level(eta, tau, int(y[i])))
    return total


def glm_negative_log_likelihood(beta, tau, X, y) -> float:
    """Stage 2 with frozen features: -sum_i log P(y_i | x_i . beta, tau) (raw, ordered thresholds)."""
    total = 0.0
    for i in range(len(y)):
        eta = sum(float(X[i][k]) * float(beta[k]) for k in range(len(beta)))
        total -= math.log(prob_level(eta, [float(t) for t in tau], int(y[i])))
    return total


def model_mean(theta, phi, psi_h, tau_h, scale, prompts, model: int) -> float:
    """mean over prompts of sum_j v_j P(Y = j | prompt, model, human)."""
    acc = 0.0
    for p in prompts:
        eta = predictor(theta, phi, [list(psi_h)], int(p), model, -1, 0)
        acc += sum(scale[j] * prob_level(eta, list(tau_h), j) for j in range(len(scale)))
    return acc / len(prompts)


def finite_difference(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    """Central differences of a scalar function of a float64 array."""
    g = np.zeros_like(x, dtype=np.float64)
    flat = x.reshape(-1)
    gf = g.reshape(-1)
    for i in range(flat.size):
        old = flat[i]
        flat[i] = old + h
        up = f(x)
        flat[i] = old - h
        down = f(x)
        flat[i] = old
        gf[i] = (up - down) / (2 * h)
    return g
