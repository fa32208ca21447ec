"""Slow, obviously-correct float64 versions of every equation, used as the oracle by the tests.

Notation: encoder outputs ``z`` (N, d), frozen basis ``u`` (K, d), codes ``c`` (K, d), β the commitment
weight, ``sg`` stop-gradient.
"""

from __future__ import annotations

import numpy as np


def brute_force_nearest(x: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``argmin_k Σ_j (x_ij - c_kj)²`` by explicit loops over codes (float64); ties → lowest k."""
    x = np.asarray(x, dtype=np.float64)
    codes = np.asarray(codes, dtype=np.float64)
    best = np.full(x.shape[0], np.inf)
    arg = np.zeros(x.shape[0], dtype=np.int64)
    for k in range(codes.shape[0]):
        dist = ((x - codes[k]) ** 2).sum(axis=1)
        better = dist < best
        best[better] = dist[better]
        arg[better] = k
    return arg


def squared_distances(x: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """``(N, K)`` matrix of squared Euclidean distances, float64."""
    x = np.asarray(x, dtype=np.float64)
    codes = np.asarray(codes, dtype=np.float64)
    return ((x[:, None, :] - codes[None, :, :]) ** 2).sum(-1)


def asvq_codes(
    basis: np.ndarray, scale: np.ndarray | float, shift: np.ndarray | None = None, mode: str = "per_dim"
) -> np.ndarray:
    """ASVQ codes: ``per_dim``: c_k = s ⊙ u_k (+ t); ``per_code``: c_k = α_k u_k; ``scalar``: c_k = α u_k."""
    u = np.asarray(basis, dtype=np.float64)
    s = np.asarray(scale, dtype=np.float64)
    c = np.empty_like(u)
    for k in range(u.shape[0]):
        if mode == "per_dim":
            c[k] = s * u[k]
        elif mode == "per_code":
            c[k] = s[k] * u[k]
        elif mode == "scalar":
            c[k] = float(s) * u[k]
        else:
            raise ValueError(mode)
    if shift is not None:
        c = c + np.asarray(shift, dtype=np.float64)
    return c


def ema_stats_codes(basis: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
    """ASVQ ``ema_stats`` codes: c_k = μ + σ ⊙ (√d u_k)."""
    u = np.asarray(basis, dtype=np.float64)
    return np.asarray(mean, np.float64) + np.asarray(std, np.float64) * np.sqrt(u.shape[1]) * u


def simvq_codes(basis: np.ndarray, weight: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """SimVQ codes: c_k = W u_k + b (``weight`` is torch's ``Linear.weight``, shape (d_out, d_in))."""
    u = np.asarray(basis, dtype=np.float64)
    W = np.asarray(weight, dtype=np.float64)
    c = np.stack([W @ u[k] for k in range(u.shape[0])])
    return c if bias is None else c + np.asarray(bias, dtype=np.float64)


def vq_loss(z: np.ndarray, c_sel: np.ndarray, beta: float = 0.25, legacy: bool = False) -> float:
    """Value of ``||sg[z] - c||² + β ||z - sg[c]||²`` (means over all entries); legacy swaps the weight."""
    mse = float(np.mean((np.asarray(z, np.float64) - np.asarray(c_sel, np.float64)) ** 2))
    return mse * (1.0 + beta)


def rotation_matrix(z: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The rotation trick's ``λ R`` for one pair: R = I - 2 r rᵀ + 2 ĉ ẑᵀ, r = (ẑ+ĉ)/|ẑ+ĉ|, λ = |c|/|z|."""
    z = np.asarray(z, dtype=np.float64)
    c = np.asarray(c, dtype=np.float64)
    zh = z / np.linalg.norm(z)
    ch = c / np.linalg.norm(c)
    r = (zh + ch) / np.linalg.norm(zh + ch)
    R = np.eye(z.size) - 2.0 * np.outer(r, r) + 2.0 * np.outer(ch, zh)
    return np.linalg.norm(c) / np.linalg.norm(z) * R


def ema_update(
    cluster_size: np.ndarray,
    embed_sum: np.ndarray,
    z: np.ndarray,
    idx: np.ndarray,
    decay: float,
    eps: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One EMA-VQ step with Laplace smoothing; returns (cluster_size, embed_sum, codes)."""
    K = cluster_size.shape[0]
    n = np.zeros(K)
    S = np.zeros_like(embed_sum, dtype=np.float64)
    for i, k in enumerate(idx):
        n[k] += 1
        S[k] += z[i]
    N = decay * cluster_size + (1 - decay) * n
    M = decay * embed_sum + (1 - decay) * S
    total = N.sum()
    smoothed = (N + eps) / (total + K * eps) * total
    return N, M, M / smoothed[:, None]


def perplexity(indices: np.ndarray, codebook_size: int) -> float:
    """exp of the Shannon entropy (nats) of the code histogram."""
    counts = np.bincount(np.asarray(indices).ravel(), minlength=codebook_size).astype(np.float64)
    p = counts / counts.sum()
    h = 0.0
    for pk in p:
        if pk > 0:
            h -= pk * np.log(pk)
    return float(np.exp(h))


def fsq_quantize(h: np.ndarray, levels: tuple[int, ...]) -> np.ndarray:
    """FSQ in float64: bound each channel with tanh to L_i values, round, rescale by ⌊L_i/2⌋."""
    h = np.asarray(h, dtype=np.float64)
    L = np.asarray(levels, dtype=np.float64)
    half_l = (L - 1) * (1 + 1e-3) / 2
    offset = np.where(L % 2 == 0, 0.5, 0.0)
    shift = np.arctanh(offset / half_l)
    bounded = np.tanh(h + shift) * half_l - offset
    return np.round(bounded) / np.floor(L / 2)
