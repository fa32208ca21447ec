"""Crossed random-effects decomposition of a models × items score matrix, and what it implies.

Model (one observation per cell, cells may be missing)::

    X[m, i] = μ + a_m + b_i + e_mi,   var(a) = σ²_M,  var(b) = σ²_I,  var(e) = σ²_E

(``e`` holds the model × item interaction and the noise; with one observation per cell they cannot be
told apart). The components are estimated by the method of moments on three quadratic forms — squared
differences of cells in the same row, in the same column, and of any two cells — whose expectations are
linear in (σ²_M, σ²_I, σ²_E) for any pattern of missing cells. On a complete matrix the estimates are
exactly the classical two-way ANOVA (mean-square) estimates; :mod:`rank_reliability.reference` holds both
the ANOVA formulas and the pairwise sums written out, and the tests hold the fast path to them.

For a leaderboard that gives every model the same ``n`` items, item effects cancel from every comparison
of two models, so the signal-to-noise ratio and the (relative) generalizability coefficient are::

    SNR(n) = n σ²_M / σ²_E,        ρ(n) = SNR / (1 + SNR) = σ²_M / (σ²_M + σ²_E / n)

and, with Gaussian effects, the score differences of a model pair on two independent item sets of
sizes n₁, n₂ correlate at r = √(ρ(n₁) ρ(n₂)), which fixes the expected rank concordance exactly:
E[Kendall τ] = (2/π) arcsin r and E[Spearman] = 6/(π(M+1)) [arcsin r + (M − 2) arcsin(r/2)].
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from papershelf.errors import InputError, check_choice, check_int, check_number

from .matrix import check_matrix


@dataclass(frozen=True)
class VarianceComponents:
    """Estimated variance components of a score matrix and the matrix's design.

    ``model`` (σ²_M, the signal), ``item`` (σ²_I) and ``residual`` (σ²_E, interaction + noise) are the
    raw moment estimates and may be slightly negative in small samples; the derived quantities use
    ``max(σ²_M, 0)``. ``n_items_effective`` is the number of items per model that ρ refers to by default:
    the item count of a complete matrix, the harmonic mean of the per-model counts otherwise.
    """

    model: float
    item: float
    residual: float
    grand_mean: float
    n_models: int
    n_items: int
    n_observed: int
    n_items_effective: float

    def _n(self, n_items: float | None) -> float:
        if n_items is None:
            return self.n_items_effective
        return check_number("n_items", n_items, low=0, low_open=True)

    def snr(self, n_items: float | None = None) -> float:
        """Signal-to-noise ratio n σ²_M / σ²_E of the mean over ``n_items`` items (inf if σ²_E ≤ 0)."""
        n = self._n(n_items)
        signal = max(self.model, 0.0)
        if self.residual <= 0:
            return math.inf if signal > 0 else 0.0
        return n * signal / self.residual

    def g_coefficient(self, n_items: float | None = None) -> float:
        """Relative generalizability coefficient ρ(n) = SNR/(1 + SNR): reliability of the ranking."""
        s = self.snr(n_items)
        return 1.0 if math.isinf(s) else s / (1.0 + s)

    def phi(self, n_items: float | None = None) -> float:
        """Absolute coefficient Φ(n) = σ²_M / (σ²_M + (σ²_I + σ²_E)/n): models on different items."""
        n = self._n(n_items)
        signal = max(self.model, 0.0)
        noise = max(self.item, 0.0) + max(self.residual, 0.0)
        return 1.0 if noise == 0 else signal / (signal + noise / n)

    def form_correlation(self, n_a: float | None = None, n_b: float | None = math.inf) -> float:
        """Correlation of a model pair's score differences on independent item sets of n_a and n_b items.

        ``n_b = inf`` is the true (infinite-item) score; ``n_b = n_a`` gives ρ(n_a) (parallel forms).
        """
        rho_a = self.g_coefficient(n_a)
        if n_b is not None and math.isinf(n_b):
            return math.sqrt(rho_a)
        return math.sqrt(rho_a * self.g_coefficient(n_b))

    def expected_kendall(self, n_a: float | None = None, n_b: float | None = None) -> float:
        """E[Kendall τ] between rankings on two independent sets of n_a and n_b items (n_b default n_a)."""
        return kendall_from_correlation(self.form_correlation(n_a, n_a if n_b is None else n_b))

    def expected_spearman(self, n_a: float | None = None, n_b: float | None = None) -> float:
        """E[Spearman] between rankings of the ``n_models`` models on two independent item sets."""
        r = self.form_correlation(n_a, n_a if n_b is None else n_b)
        return spearman_from_correlation(r, self.n_models)

    def items_for(self, target: float) -> float:
        """D-study: items needed for ρ(n) = ``target`` (inf if σ²_M ≤ 0)."""
        target = check_number("target", target, low=0, high=1, low_open=True, high_open=True)
        if self.model <= 0:
            return math.inf
        return target / (1 - target) * max(self.residual, 0.0) / self.model

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


def kendall_from_correlation(r: float) -> float:
    """E[Kendall τ] of a bivariate normal with correlation r: (2/π) arcsin r (Greiner's relation)."""
    r = check_number("r", r, low=-1, high=1)
    return 2.0 / math.pi * math.asin(r)


def spearman_from_correlation(r: float, n: int | None = None) -> float:
    """E[Spearman ρ_s] of n bivariate-normal pairs with correlation r (Moran, 1948); n=None: n → ∞."""
    r = check_number("r", r, low=-1, high=1)
    if n is None:
        return 6.0 / math.pi * math.asin(r / 2)
    n = check_int("n", n, low=2)
    return 6.0 / (math.pi * (n + 1)) * (math.asin(r) + (n - 2) * math.asin(r / 2))


def correlation_from_kendall(tau: float) -> float:
    """Inverse of :func:`kendall_from_correlation`: the form correlation implied by a mean Kendall τ."""
    tau = check_number("tau", tau, low=-1, high=1)
    return math.sin(math.pi * tau / 2)


def moment_sums(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The three pairwise sums of squared differences and their expectation coefficients.

    Returns ``(stats, coef)`` with ``stats = [rows, cols, all]`` — Σ over unordered pairs of observed cells
    in the same row / same column / anywhere of (x − x')² — and ``coef`` (3 × 3) such that
    E[stats] = coef @ [σ²_M, σ²_I, σ²_E]. ``X`` must be validated (NaN marks missing cells).
    """
    obs = ~np.isnan(X)
    n_obs = int(obs.sum())
    mu = float(np.nansum(X)) / n_obs
    Y = np.where(obs, X - mu, 0.0)  # centred for round-off; pair differences are unchanged
    Y2 = Y * Y
    n_row = obs.sum(axis=1).astype(np.float64)
    n_col = obs.sum(axis=0).astype(np.float64)
    row_sum, col_sum = Y.sum(axis=1), Y.sum(axis=0)
    within_rows = float(np.sum(n_row * Y2.sum(axis=1) - row_sum**2))
    within_cols = float(np.sum(n_col * Y2.sum(axis=0) - col_sum**2))
    total = float(n_obs * Y2.sum() - Y.sum() ** 2)
    N = float(n_obs)
    pr = float(np.sum(n_row * (n_row - 1)))  # 2 × (pairs within rows)
    pc = float(np.sum(n_col * (n_col - 1)))
    coef = np.array(
        [
            [0.0, pr, pr],  # same model, two items: 2(σ²_I + σ²_E) per pair
            [pc, 0.0, pc],  # same item, two models: 2(σ²_M + σ²_E) per pair
            [N * N - float(np.sum(n_row**2)), N * N - float(np.sum(n_col**2)), N * N - N],
        ]
    )
    return np.array([within_rows, within_cols, total]), coef


def variance_components(X: object, *, drop_constant: bool = False) -> VarianceComponents:
    """Estimate (σ²_M, σ²_I, σ²_E) of a models × items matrix (NaN = missing) by the method of moments.

    O(models × items), vectorised. On a complete matrix the result equals the two-way ANOVA estimates
    σ²_E = MS_res, σ²_M = (MS_M − MS_res)/I, σ²_I = (MS_I − MS_res)/M.

    >>> import numpy as np
    >>> X = np.array([[1., 2., 3.], [2., 3., 5.], [4., 4., 6.], [3., 5., 6.]])
    >>> vc = variance_components(X)
    >>> round(vc.model, 4), round(vc.item, 4), round(vc.residual, 4)
    (1.5556, 1.5278, 0.2222)
    """
    arr, _ = check_matrix(X, drop_constant=drop_constant)
    return components_of(arr)


def components_of(arr: np.ndarray) -> VarianceComponents:
    """:func:`variance_components` of an already validated matrix (constant columns allowed)."""
    stats, coef = moment_sums(arr)
    if np.linalg.matrix_rank(coef) < 3:
        raise InputError(
            "the pattern of missing cells does not identify the variance components: need some model "
            "pairs sharing an item and some item pairs sharing a model"
        )
    model, item, residual = np.linalg.solve(coef, stats)
    obs = ~np.isnan(arr)
    n_row = obs.sum(axis=1)
    n_eff = float(arr.shape[1]) if obs.all() else float(n_row.size / np.sum(1.0 / n_row))
    return VarianceComponents(
        model=float(model),
        item=float(item),
        residual=float(residual),
        grand_mean=float(np.nanmean(arr)),
        n_models=int(arr.shape[0]),
        n_items=int(arr.shape[1]),
        n_observed=int(obs.sum()),
        n_items_effective=n_eff,
    )


def reliability_curve(vc: VarianceComponents, n_items: object) -> dict[str, np.ndarray]:
    """SNR, ρ, Φ and the expected parallel-form Kendall τ / Spearman at each item count in ``n_items``."""
    ns = np.atleast_1d(np.asarray(n_items, dtype=np.float64))
    if ns.ndim != 1 or not np.all(np.isfinite(ns)) or np.any(ns <= 0):
        raise InputError("n_items must be positive finite item counts")
    return {
        "n_items": ns,
        "snr": np.array([vc.snr(n) for n in ns]),
        "rho": np.array([vc.g_coefficient(n) for n in ns]),
        "phi": np.array([vc.phi(n) for n in ns]),
        "kendall": np.array([vc.expected_kendall(n) for n in ns]),
        "spearman": np.array([vc.expected_spearman(n) for n in ns]),
    }


KINDS = ("parallel", "true")


def expected_kendall(rho: float, kind: str = "parallel") -> float:
    """E[Kendall τ] implied by reliability ρ: between parallel forms ((2/π) arcsin ρ) or vs the truth
    ((2/π) arcsin √ρ)."""
    check_choice("kind", kind, KINDS)
    rho = check_number("rho", rho, low=0, high=1)
    return kendall_from_correlation(rho if kind == "parallel" else math.sqrt(rho))
