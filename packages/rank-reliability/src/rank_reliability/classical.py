"""Classical internal-consistency coefficients and the tractable λ★6 (reconstruction).

All of them read the items as the columns of a complete models × items matrix and use the item
covariance matrix S across models (σ_T² = Σ S is the variance of the total score):

* Cronbach's α = I/(I−1) (1 − Σⱼ Sⱼⱼ / σ_T²); KR-20 is the same formula for 0/1 items written with
  pⱼ(1 − pⱼ), and equals α exactly.
* Guttman's λ6 = 1 − Σⱼ eⱼ² / σ_T², with eⱼ² = 1/[S⁻¹]ⱼⱼ the residual variance of item j regressed on all
  other items (covariance scale). It is a lower bound to reliability, but it is defined only while S is
  invertible, i.e. with more models than items: in the many-items/few-models regime of AI benchmarks
  S has rank ≤ M − 1, every item is an exact linear combination of the others and λ6 is ill-posed.
* λ★6 (**reconstructed**: the paper's own definition could not be obtained) keeps λ6's form and its
  estimand σ_T², and replaces the ill-posed regression on all other items by the regression on the
  *rest score* (the sum of the other items): eⱼ² = Sⱼⱼ (1 − r²ⱼ,rest). It needs no inverse, costs
  O(M·I), stays finite for any I/M, and since the rest score is one linear combination of the other
  items, r²ⱼ,rest ≤ SMCⱼ and λ★6 ≤ λ6 whenever λ6 is defined — it remains a lower bound.
  ``variant="pinv"`` is the other candidate the notes name: eⱼ² = 1/[S⁺]ⱼⱼ with the Moore–Penrose
  inverse (equal to λ6 when S is invertible, not guaranteed to be a lower bound otherwise).
"""

from __future__ import annotations

import numpy as np

from papershelf.errors import InputError, check_choice

from .matrix import check_matrix, is_binary

VARIANTS = ("rest", "pinv")


def _complete(X: object, drop_constant: bool) -> np.ndarray:
    arr, _ = check_matrix(X, allow_missing=False, drop_constant=drop_constant)
    return arr


def _alpha_core(arr: np.ndarray) -> float:
    k = arr.shape[1]
    item_var = arr.var(axis=0, ddof=1)
    total_var = arr.sum(axis=1).var(ddof=1)
    if total_var <= 0:
        raise InputError("the total score is constant across models: reliability is undefined")
    return float(k / (k - 1) * (1.0 - item_var.sum() / total_var))


def cronbach_alpha(X: object, *, drop_constant: bool = False) -> float:
    """Cronbach's α of a complete models × items matrix.

    >>> import numpy as np
    >>> X = np.array([[1., 2., 3.], [2., 3., 5.], [4., 4., 6.], [3., 5., 6.]])
    >>> round(cronbach_alpha(X), 4)
    0.9545
    """
    return _alpha_core(_complete(X, drop_constant))


def kr20(X: object, *, drop_constant: bool = False) -> float:
    """Kuder–Richardson formula 20 of a complete 0/1 matrix: I/(I−1)(1 − Σ pⱼ(1 − pⱼ) / var(T))."""
    arr = _complete(X, drop_constant)
    if not is_binary(arr):
        raise InputError("KR-20 needs a 0/1 matrix; use cronbach_alpha for continuous scores")
    k = arr.shape[1]
    p = arr.mean(axis=0)
    total_var = arr.sum(axis=1).var(ddof=0)
    if total_var <= 0:
        raise InputError("the total score is constant across models: reliability is undefined")
    return float(k / (k - 1) * (1.0 - np.sum(p * (1 - p)) / total_var))


def guttman_lambda6(X: object, *, drop_constant: bool = False, rcond: float = 1e-10) -> float:
    """Guttman's λ6 = 1 − Σⱼ (1/[S⁻¹]ⱼⱼ) / σ_T² of a complete matrix.

    Raises :class:`InputError` when it is undefined: with as many items as models or more (the item
    covariance is singular) or when the items are collinear (smallest eigenvalue of the item correlation
    matrix below ``rcond`` × the largest). Use :func:`lambda6_star` there.
    """
    arr = _complete(X, drop_constant)
    n_models, n_items = arr.shape
    if n_models <= n_items:
        raise InputError(
            f"Guttman's λ6 is undefined with {n_models} models and {n_items} items: the item covariance "
            "has rank ≤ models − 1, so every item is an exact combination of the others",
            hint="use lambda6_star (CLI reports it) in the many-items/few-models regime",
        )
    S = np.cov(arr, rowvar=False)
    d = np.sqrt(np.diag(S))
    R = S / np.outer(d, d)
    eig = np.linalg.eigvalsh(R)
    if eig[0] <= rcond * eig[-1]:
        raise InputError(
            "Guttman's λ6 is undefined: the items are (nearly) collinear, so the item covariance is singular",
            hint="use lambda6_star",
        )
    inv_diag = np.diag(np.linalg.inv(S))
    return float(1.0 - np.sum(1.0 / inv_diag) / S.sum())


def item_residuals(arr: np.ndarray, variant: str = "rest") -> tuple[np.ndarray, float]:
    """Per-item residual variances eⱼ² of λ★6 and the total-score variance σ_T² (validated input).

    Items with zero variance get eⱼ² = 0 (they add nothing to σ_T² either); a rest score with zero
    variance explains nothing (r² = 0).
    """
    n_models = arr.shape[0]
    Xc = arr - arr.mean(axis=0)
    s2 = np.einsum("mi,mi->i", Xc, Xc) / (n_models - 1)
    Tc = Xc.sum(axis=1)
    var_t = float(Tc @ Tc) / (n_models - 1)
    if variant == "rest":
        cov_t = (Tc @ Xc) / (n_models - 1)  # cov(item j, total)
        cov_rest = cov_t - s2  # cov(item j, total − item j)
        var_rest = var_t - 2 * cov_t + s2
        explained = np.divide(cov_rest**2, var_rest, out=np.zeros_like(s2), where=var_rest > 1e-12 * var_t)
        e2 = np.maximum(s2 - explained, 0.0)
    else:
        # S = V diag(λ/(M−1)) Vᵀ over the nonzero eigenvalues λ of XcᵀXc, so [S⁺]ⱼⱼ = (M−1) Σ V²ⱼₖ/λₖ.
        # With fewer models than items, take the eigenvectors from the small M × M Gram matrix.
        tol_scale = max(arr.shape) * np.finfo(np.float64).eps
        if n_models <= arr.shape[1]:
            lam, U = np.linalg.eigh(Xc @ Xc.T)
            keep = lam > lam[-1] * tol_scale
            XtU = Xc.T @ U[:, keep]  # = V √λ
            pinv_diag = (n_models - 1) * np.sum(XtU**2 / lam[keep] ** 2, axis=1)
        else:
            lam, V = np.linalg.eigh(Xc.T @ Xc)
            keep = lam > lam[-1] * tol_scale
            pinv_diag = (n_models - 1) * np.sum(V[:, keep] ** 2 / lam[keep], axis=1)
        e2 = np.divide(1.0, pinv_diag, out=np.zeros_like(s2), where=pinv_diag > 0)
    return e2, var_t


def lambda6_star(X: object, *, variant: str = "rest", drop_constant: bool = False) -> float:
    """λ★6 of a complete models × items matrix (reconstruction; see the module docstring).

    ``variant="rest"`` (default): eⱼ² = Sⱼⱼ(1 − r²ⱼ,rest), finite for any shape, ≤ λ6 where λ6 exists.
    ``variant="pinv"``: eⱼ² = 1/[S⁺]ⱼⱼ (Moore–Penrose), = λ6 when S is invertible.

    >>> import numpy as np
    >>> X = np.array([[1., 2., 3.], [2., 3., 5.], [4., 4., 6.], [3., 5., 6.]])
    >>> round(lambda6_star(X), 4)
    0.938
    """
    check_choice("variant", variant, VARIANTS)
    arr = _complete(X, drop_constant)
    e2, var_t = item_residuals(arr, variant)
    if var_t <= 0:
        raise InputError("the total score is constant across models: reliability is undefined")
    return float(1.0 - e2.sum() / var_t)


def item_contributions(X: object, *, drop_constant: bool = False) -> np.ndarray:
    """Per-item explained variance Sⱼⱼ r²ⱼ,rest: how much each item adds to λ★6's numerator."""
    arr = _complete(X, drop_constant)
    Xc = arr - arr.mean(axis=0)
    s2 = Xc.var(axis=0, ddof=1)
    e2, _ = item_residuals(arr, "rest")
    return s2 - e2
