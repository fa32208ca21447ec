"""Slow, obviously-correct float64 versions of Potara's equations: the oracle the fast paths are tested on.

Notation (per client, per module or over all merged parameters):

* ``a = tr Σ_F`` — trace of the posterior covariance of the federated task vector Δ_F;
* ``b = tr Σ_L`` — the same for the client's local task vector Δ_L;
* ``c = tr Σ_FL`` — trace of their cross-covariance under a joint Gaussian approximation.

The merged model is ``θ(λ) = θ₀ + λ Δ_F + (1 − λ) Δ_L``; the variance-trace term of the bound is
``V(λ) = tr Cov(λ Δ_F + (1 − λ) Δ_L) = λ² a + (1 − λ)² b + 2 λ (1 − λ) c``, minimised at
``λ* = (b − c) / (a + b − 2c)`` with value ``(a b − c²) / (a + b − 2c)``.
"""

from __future__ import annotations

import numpy as np


def variance_bound_reference(lam: float, a: float, b: float, c: float = 0.0) -> float:
    """``V(λ) = λ² a + (1 − λ)² b + 2 λ (1 − λ) c`` in float64, term by term."""
    lam, a, b, c = float(lam), float(a), float(b), float(c)
    return lam * lam * a + (1.0 - lam) * (1.0 - lam) * b + 2.0 * lam * (1.0 - lam) * c


def optimal_weight_reference(a: float, b: float, c: float = 0.0) -> float:
    """Minimise ``V`` by brute force on a fine grid of [0, 1] (1e-5 spacing), no closed form used."""
    grid = np.linspace(0.0, 1.0, 100_001)
    vals = grid**2 * a + (1 - grid) ** 2 * b + 2 * grid * (1 - grid) * c
    return float(grid[int(np.argmin(vals))])


def monte_carlo_quadratic_loss(
    lams: np.ndarray,
    cov: np.ndarray,
    hessian: np.ndarray | None = None,
    *,
    n: int = 20_000,
    seed: int = 0,
) -> np.ndarray:
    """Expected quadratic loss ``E[½ eᵀ H e]`` of ``e = λ e_F + (1 − λ) e_L`` by sampling.

    ``cov`` is the (2d × 2d) joint covariance of ``(e_F, e_L)``, the estimation errors of the two task
    vectors around the client optimum; ``hessian`` defaults to the identity (the isotropic case in which
    the variance-trace bound is tight). The same samples are reused for every λ (common random numbers).
    """
    cov = np.asarray(cov, dtype=np.float64)
    d = cov.shape[0] // 2
    rng = np.random.default_rng(seed)
    e = rng.multivariate_normal(np.zeros(2 * d), cov, size=n, method="cholesky")
    ef, el = e[:, :d], e[:, d:]
    h = np.eye(d) if hessian is None else np.asarray(hessian, dtype=np.float64)
    # With common random numbers the sample mean of ½ eᵀHe is exactly a quadratic in λ whose
    # coefficients are sample moments; evaluating it that way is the same Monte Carlo estimate, fast.
    s_ff = float(np.mean(np.einsum("ni,ij,nj->n", ef, h, ef)))
    s_ll = float(np.mean(np.einsum("ni,ij,nj->n", el, h, el)))
    s_fl = float(np.mean(np.einsum("ni,ij,nj->n", ef, h, el)))
    lams = np.asarray(lams, dtype=np.float64)
    return 0.5 * (lams**2 * s_ff + (1 - lams) ** 2 * s_ll + 2 * lams * (1 - lams) * s_fl)


def logistic_fisher_reference(X: np.ndarray, w: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    """Diagonal Fisher of binary logistic regression ``p = σ(x·w)`` (no bias), averaged over rows of X.

    Without ``y`` it is the model (expected) Fisher ``mean_s p_s (1 − p_s) x_sj²``; with labels it is the
    empirical Fisher ``mean_s (y_s − p_s)² x_sj²`` — both straight from ∇_w log p(y|x) = (y − p) x.
    """
    X = np.asarray(X, dtype=np.float64)
    p = 1.0 / (1.0 + np.exp(-(X @ np.asarray(w, dtype=np.float64))))
    weight = p * (1 - p) if y is None else (np.asarray(y, dtype=np.float64) - p) ** 2
    return np.array([np.mean(weight * X[:, j] ** 2) for j in range(X.shape[1])])


def merge_factors_reference(
    fed: dict[str, np.ndarray], loc: dict[str, np.ndarray], lam: float
) -> dict[str, np.ndarray]:
    """Merge LoRA factors entry by entry: ``A = λ A_F + (1 − λ) A_L`` and likewise for B."""
    return {k: lam * np.asarray(fed[k], np.float64) + (1 - lam) * np.asarray(loc[k], np.float64) for k in fed}


def merged_delta_reference(
    a_f: np.ndarray,
    b_f: np.ndarray,
    a_l: np.ndarray,
    b_l: np.ndarray,
    lam: float,
    mode: str,
    s_f=1.0,
    s_l=1.0,
) -> np.ndarray:
    """The dense weight update ``ΔW`` a merged LoRA module applies, for ``mode`` "product" or "factors".

    product: ``λ s_F B_F A_F + (1 − λ) s_L B_L A_L`` (the theory's convex mix of task vectors);
    factors: ``s (λ B_F + (1 − λ) B_L)(λ A_F + (1 − λ) A_L)`` (the paper's practice; needs s_F = s_L = s).
    """
    if mode == "product":
        return lam * s_f * (b_f @ a_f) + (1 - lam) * s_l * (b_l @ a_l)
    return s_f * ((lam * b_f + (1 - lam) * b_l) @ (lam * a_f + (1 - lam) * a_l))
