"""The slow, obviously-correct ROCKET, straight from the equations, in float64 NumPy.

Notation (the paper's): a linear layer is ``y = x W`` with ``W`` of shape ``(d1, d2)`` = (inputs, outputs),
i.e. the transpose of a torch ``weight``. Calibration inputs stacked as rows give ``X`` (N × d1) and the
Gram ``C = XᵀX / N``. Everything here is the oracle the fast paths in :mod:`rocket_compress.factorize` and
:mod:`rocket_compress.knapsack` are tested against.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def whiten_ref(C: np.ndarray, jitter: float = 7e-6) -> tuple[np.ndarray, np.ndarray]:
    """``S`` upper triangular with ``SᵀS = C`` (plus ``(−λ_min + jitter·mean diag)·I`` if C is not PD)."""
    C = np.asarray(C, dtype=np.float64)
    C = 0.5 * (C + C.T)
    try:
        L = np.linalg.cholesky(C)
    except np.linalg.LinAlgError:
        lam = np.linalg.eigvalsh(C)[0]
        shift = max(0.0, -lam) + jitter * max(float(np.mean(np.diag(C))), 1e-30)
        L = np.linalg.cholesky(C + shift * np.eye(len(C)))
    S = L.T
    return S, np.linalg.inv(S)


def rank_and_sparsity_ref(ratio: float, d1: int, d2: int, ks: float) -> tuple[int, int]:
    """Rank ``k = ⌊(1−cr)·d1·d2 / (d1 + d2/ks)⌋`` and the non-zeros per column of B that fill the budget.

    The non-zeros per column are the largest integer with ``d1·k + d2·nnz ≤ (1−cr)·d1·d2`` (at most k).
    """
    budget = (1.0 - ratio) * d1 * d2
    k = math.floor(budget / (d1 + d2 / ks) + 1e-9)
    nnz = min(k, math.floor((budget - d1 * k) / d2 + 1e-9))
    return k, nnz


def sparse_factorize_ref(
    W: np.ndarray,
    S: np.ndarray,
    k: int,
    nnz: int,
    *,
    lam: float = 0.5,
    recover: int = 0,
    eps: float | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """One ROCKET step for a given rank ``k`` and ``nnz`` kept coefficients per column: returns ``(A, B)``.

    1. X̃ = S W; U_k = top-k eigenvectors of X̃X̃ᵀ; V = U_kᵀ X̃.
    2. score_ij = exp(λ log|V_ij| + (1−λ) log(|V_ij| · ‖(S⁻¹U_k)_{:,i}‖)); each column keeps its
       ``nnz − recover`` best entries, then the ``d2·recover`` zeroed entries with the largest
       ``|V_ij|·‖(S⁻¹U_k)_{:,i}‖`` come back.
    3. U* = X̃ V_sᵀ (V_s V_sᵀ + εI)⁻¹ with ε = max(1e-6, 1e-3 tr(V_sV_sᵀ)/k) unless given;
       the update is kept only if it does not increase ‖X̃ − U V_s‖.
    4. A = S⁻¹ U*, B = V_s.
    """
    W = np.asarray(W, dtype=np.float64)
    S = np.asarray(S, dtype=np.float64)
    d2 = W.shape[1]
    Xt = S @ W
    evals, evecs = np.linalg.eigh(Xt @ Xt.T)
    order = np.argsort(evals)[::-1][:k]
    Uk = evecs[:, order]
    V = Uk.T @ Xt
    S_inv = np.linalg.inv(S)
    atom_norm = np.array([np.linalg.norm(S_inv @ Uk[:, i]) for i in range(k)])
    mask = np.zeros((k, d2), dtype=bool)
    keep = nnz - recover
    imp_w = np.abs(V) * atom_norm[:, None]
    for j in range(d2):
        score = np.array(
            [math.exp(lam * _log(abs(V[i, j])) + (1 - lam) * _log(imp_w[i, j])) for i in range(k)]
        )
        best = sorted(range(k), key=lambda i: (-score[i], i))[:keep]
        mask[best, j] = True
    if recover:
        zeroed = [(-imp_w[i, j], j, i) for j in range(d2) for i in range(k) if not mask[i, j]]
        for _, j, i in sorted(zeroed)[: d2 * recover]:
            mask[i, j] = True
    Vs = np.where(mask, V, 0.0)
    G = Vs @ Vs.T
    if eps is None:
        eps = max(1e-6, 1e-3 * np.trace(G) / k)
    U = Xt @ Vs.T @ np.linalg.inv(G + eps * np.eye(k))
    if np.linalg.norm(Xt - U @ Vs) > np.linalg.norm(Xt - Uk @ Vs):
        U = Uk
    return S_inv @ U, Vs


def _log(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf


def whitened_error_ref(W: np.ndarray, W_approx: np.ndarray, X: np.ndarray) -> float:
    """‖X(W − W′)‖_F, the output error on the calibration inputs."""
    return float(np.linalg.norm(np.asarray(X) @ (np.asarray(W) - np.asarray(W_approx))))


def eckart_young_tail_ref(M: np.ndarray, k: int) -> float:
    """√(Σ_{i>k} σ_i²(M)) / ‖M‖_F: the relative error of the best rank-k approximation of M."""
    s = np.linalg.svd(np.asarray(M, dtype=np.float64), compute_uv=False)
    return float(math.sqrt(np.sum(s[k:] ** 2)) / math.sqrt(np.sum(s**2)))


def mckp_brute_force(
    costs: list[list[int]], errors: list[list[float]], budget: float
) -> tuple[list[int], float]:
    """Enumerate every choice (one option per group); the cheapest-error feasible one, ties by first found."""
    best, best_err = None, math.inf
    for choice in itertools.product(*[range(len(c)) for c in costs]):
        cost = sum(costs[g][j] for g, j in enumerate(choice))
        if cost > budget:
            continue
        err = sum(errors[g][j] for g, j in enumerate(choice))
        if err < best_err:
            best, best_err = list(choice), err
    if best is None:
        raise ValueError("no feasible choice")
    return best, best_err
