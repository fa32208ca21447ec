"""Slow, obviously-correct float64 versions of the equations: the oracle for the fast paths.

Plain numpy loops over images, directions, rows/columns, steps and samples.
"""

from __future__ import annotations

import numpy as np

from circle_cil.reservoir import LEAKY_SLOPE, BiRC2D


def _act(z: np.ndarray, name: str) -> np.ndarray:
    return np.tanh(z) if name == "tanh" else np.where(z > 0, z, LEAKY_SLOPE * z)


def esn_scan(inputs: np.ndarray, W_in: np.ndarray, W_rec: np.ndarray, leak: float, act: str) -> np.ndarray:
    """One leaky ESN over a sequence ``(T, P)`` from h_0 = 0 → states ``(T, q)``."""
    h = np.zeros(W_rec.shape[0])
    out = []
    for u in inputs:
        h = (1 - leak) * h + leak * _act(u @ W_in + h @ W_rec, act)
        out.append(h)
    return np.array(out)


def birc2d_state_map(res: BiRC2D, image: np.ndarray) -> np.ndarray:
    """The ``(Nh, Nw, units)`` state map of one image ``(C, H, W)``, quarters → ← ↓ ↑."""
    C, H, W = image.shape
    p = res.patch
    Nh, Nw = H // p, W // p
    grid = np.empty((Nh, Nw, C * p * p))
    for i in range(Nh):
        for j in range(Nw):
            grid[i, j] = image[:, i * p : (i + 1) * p, j * p : (j + 1) * p].reshape(-1)
    q = res.units // 4
    out = np.zeros((Nh, Nw, 4 * q))
    w = res.weights
    for i in range(Nh):  # rows: → and ←
        out[i, :, 0:q] = esn_scan(grid[i], w[0].W_in, w[0].W_rec, res.leak, res.activation)
        out[i, :, q : 2 * q] = esn_scan(grid[i][::-1], w[1].W_in, w[1].W_rec, res.leak, res.activation)[::-1]
    for j in range(Nw):  # columns: ↓ and ↑
        col = grid[:, j]
        out[:, j, 2 * q : 3 * q] = esn_scan(col, w[2].W_in, w[2].W_rec, res.leak, res.activation)
        out[:, j, 3 * q :] = esn_scan(col[::-1], w[3].W_in, w[3].W_rec, res.leak, res.activation)[::-1]
    return out


def pool_reference(m: np.ndarray, pooling: str) -> np.ndarray:
    """Pool one ``(Nh, Nw, D)`` map (2×2 grid cells as in adaptive average pooling)."""
    Nh, Nw, _ = m.shape

    def cells():
        for a in range(2):
            for b in range(2):
                r0, r1 = (a * Nh) // 2, -((-(a + 1) * Nh) // 2)
                c0, c1 = (b * Nw) // 2, -((-(b + 1) * Nw) // 2)
                yield m[r0:r1, c0:c1].mean(axis=(0, 1))

    mean = m.mean(axis=(0, 1))
    if pooling == "mean":
        return mean
    if pooling == "meanmax":
        return np.concatenate([mean, m.max(axis=(0, 1))])
    if pooling == "grid":
        return np.concatenate(list(cells()))
    if pooling == "pyramid":
        return np.concatenate([mean, *cells()])
    return m.reshape(-1)


def slda_stream(X: np.ndarray, y: np.ndarray, cov_update: str):
    """Sample-by-sample SLDA, the recurrence literally: returns (classes, means, counts, Σ, t)."""
    d = X.shape[1]
    classes: list[int] = []
    mu: dict[int, np.ndarray] = {}
    cnt: dict[int, int] = {}
    Sigma = np.zeros((d, d))
    t = 0
    for x, c in zip(X, y):
        c = int(c)
        if c not in mu:
            classes.append(c)
            mu[c], cnt[c] = np.zeros(d), 0
        delta = x - mu[c]
        if cov_update == "hayes_kanan":
            Sigma = (t * Sigma + (t / (t + 1)) * np.outer(delta, delta)) / (t + 1)
        else:  # Welford: pooled scatter S += n_c/(n_c+1) ΔΔᵀ, Σ = S/t
            S = Sigma * t + (cnt[c] / (cnt[c] + 1)) * np.outer(delta, delta)
            Sigma = S / (t + 1)
        mu[c] = mu[c] + delta / (cnt[c] + 1)
        cnt[c] += 1
        t += 1
    means = np.array([mu[c] for c in classes])
    counts = np.array([cnt[c] for c in classes])
    return classes, means, counts, Sigma, t


def batch_lda(X: np.ndarray, y: np.ndarray):
    """Batch LDA statistics: (classes sorted, means, pooled within-class covariance Σ_c S_c / N)."""
    classes = sorted(set(int(c) for c in y))
    means = np.array([X[y == c].mean(0) for c in classes])
    S = sum((X[y == c] - m).T @ (X[y == c] - m) for c, m in zip(classes, means))
    return classes, means, S / len(X)


def lda_scores(X: np.ndarray, means: np.ndarray, Sigma: np.ndarray, shrinkage: float) -> np.ndarray:
    """scores_c(x) = xᵀΛμ_c − ½μ_cᵀΛμ_c with Λ = ((1−ε)Σ + εI)⁻¹."""
    Lam = np.linalg.inv((1 - shrinkage) * Sigma + shrinkage * np.eye(Sigma.shape[0]))
    W = Lam @ means.T
    return X @ W - 0.5 * np.sum(means.T * W, axis=0)


def softmax(s: np.ndarray) -> np.ndarray:
    e = np.exp(s - s.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)
