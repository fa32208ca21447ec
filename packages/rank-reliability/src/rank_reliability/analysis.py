"""One call that reports everything about a score matrix's reliability, and the cohort analysis.

:func:`analyze` — variance components, SNR and ρ as functions of the item count, the classical
coefficients (α, KR-20 on 0/1 data, λ6 where defined, λ★6), and split-half concordance beside its
closed-form prediction. :func:`cohort_reliability` — the same quantities in the lower- and
higher-performing halves of the models (population dependence under positive distribution shift), with a
random half of the models as the control for the halved sample size.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from papershelf.errors import InputError, check_int

from .classical import _alpha_core, guttman_lambda6, item_residuals, kr20
from .components import VarianceComponents, components_of, reliability_curve, variance_components
from .concordance import SplitHalf, split_half
from .matrix import check_matrix, is_binary


def _curve_points(n_items: int) -> list[int]:
    pts = {n for n in (5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000) if n < n_items}
    pts.add(n_items)
    return sorted(pts)


@dataclass(frozen=True)
class Report:
    """Everything :func:`analyze` measured; ``as_dict()`` is JSON-ready."""

    shape: tuple[int, int]
    binary: bool
    complete: bool
    components: VarianceComponents
    curve: dict[str, list[float]]
    split: SplitHalf
    classical: dict[str, float | None]
    notes: list[str] = field(default_factory=list)
    kept_items: np.ndarray | None = None

    def as_dict(self) -> dict[str, Any]:
        vc = self.components
        return {
            "n_models": self.shape[0],
            "n_items": self.shape[1],
            "binary": self.binary,
            "complete": self.complete,
            "components": vc.as_dict(),
            "snr": vc.snr(),
            "rho": vc.g_coefficient(),
            "phi": vc.phi(),
            "expected_kendall_true": vc.expected_kendall(None, math.inf),
            "items_for_rho_0.9": vc.items_for(0.9),
            "curve": self.curve,
            "split_half": self.split.as_dict(),
            "classical": self.classical,
            "notes": self.notes,
        }


def classical_coefficients(arr: np.ndarray) -> tuple[dict[str, float | None], list[str]]:
    """α, KR-20 (0/1 only), λ6 (only where defined) and both λ★6 variants of a validated complete matrix."""
    notes: list[str] = []
    out: dict[str, float | None] = {"alpha": _alpha_core(arr), "kr20": None, "lambda6": None}
    if is_binary(arr):
        out["kr20"] = kr20(arr)
    try:
        out["lambda6"] = guttman_lambda6(arr)
    except InputError as exc:
        notes.append(f"λ6: {exc}")
    for variant in ("rest", "pinv"):
        e2, var_t = item_residuals(arr, variant)
        out[f"lambda6_star_{variant}"] = float(1.0 - e2.sum() / var_t)
    return out, notes


def analyze(X: object, *, n_splits: int = 200, seed: int = 0, drop_constant: bool = False) -> Report:
    """Variance components, ρ(n), classical coefficients and split-half concordance of a score matrix.

    Missing cells (NaN) are allowed for the components and split-half; the classical coefficients need a
    complete matrix and are reported as ``None`` otherwise.
    """
    arr, keep = check_matrix(X, drop_constant=drop_constant)
    n_splits = check_int("n_splits", n_splits, low=1)
    vc = variance_components(arr)
    curve = {k: v.tolist() for k, v in reliability_curve(vc, _curve_points(arr.shape[1])).items()}
    split = split_half(arr, n_splits, seed=seed, components=vc)
    complete = not np.isnan(arr).any()
    notes: list[str] = []
    if drop_constant and keep.size < np.asarray(X, dtype=np.float64).shape[1]:
        notes.append(f"dropped {np.asarray(X).shape[1] - keep.size} constant item(s)")
    if complete:
        classical, more = classical_coefficients(arr)
        notes += more
    else:
        classical = {k: None for k in ("alpha", "kr20", "lambda6", "lambda6_star_rest", "lambda6_star_pinv")}
        notes.append("classical coefficients need a complete matrix; the matrix has missing cells")
    if vc.model <= 0:
        notes.append("σ²_M ≤ 0: no detectable between-model signal; ρ = 0")
    return Report(arr.shape, is_binary(arr), complete, vc, curve, split, classical, notes, keep)


def _cohort_summary(arr: np.ndarray, n_splits: int, seed: int) -> dict[str, Any]:
    vc = components_of(arr)
    obs_scores = np.nanmean(arr, axis=1)
    out: dict[str, Any] = {
        "n_models": int(arr.shape[0]),
        "mean_score": float(np.mean(obs_scores)),
        "components": vc.as_dict(),
        "rho": vc.g_coefficient(),
        "snr": vc.snr(),
        "expected_kendall": vc.expected_kendall(arr.shape[1] // 2, arr.shape[1] - arr.shape[1] // 2),
        "lambda6_star": None,
        "constant_items": int(np.sum(np.nanmax(arr, axis=0) == np.nanmin(arr, axis=0))),
    }
    if not np.isnan(arr).any():
        e2, var_t = item_residuals(arr, "rest")  # items constant in the cohort add 0 to both sums
        out["lambda6_star"] = float(1.0 - e2.sum() / var_t) if var_t > 0 else None
    masks = np.random.default_rng(seed).random((n_splits, arr.shape[1])).argsort(axis=1) < arr.shape[1] // 2
    try:
        from .concordance import half_means, kendall_tau

        taus = np.asarray(kendall_tau(half_means(arr, masks), half_means(arr, ~masks)))
        out["split_half_kendall"] = float(taus.mean())
    except InputError:
        out["split_half_kendall"] = None
    return out


def cohort_reliability(
    X: object,
    *,
    n_random: int = 50,
    n_splits: int = 100,
    seed: int = 0,
    drop_constant: bool = False,
) -> dict[str, Any]:
    """Reliability of the lower and higher halves of the models (split at the median mean score).

    Returns per-cohort summaries (components, ρ(I), SNR, λ★6, split-half τ and its prediction
    ``expected_kendall`` from the cohort's components) for ``all``, ``lower``
    and ``higher``, and ``random_half``: the same quantities averaged over ``n_random`` random halves of
    the models — the control for a cohort having half the models. Items constant inside a cohort stay
    in (they are part of the benchmark) and contribute nothing to its λ★6.
    """
    arr, _ = check_matrix(X, drop_constant=drop_constant, min_models=6)
    n_random = check_int("n_random", n_random, low=1)
    n_splits = check_int("n_splits", n_splits, low=1)
    scores = np.nanmean(arr, axis=1)
    order = np.argsort(scores, kind="stable")
    half = arr.shape[0] // 2
    lower, higher = order[:half], order[arr.shape[0] - half :]
    out: dict[str, Any] = {
        "split": "median of the mean score",
        "all": _cohort_summary(arr, n_splits, seed),
        "lower": _cohort_summary(arr[lower], n_splits, seed),
        "higher": _cohort_summary(arr[higher], n_splits, seed),
    }
    rng = np.random.default_rng(seed)
    rand = [
        _cohort_summary(arr[rng.permutation(arr.shape[0])[:half]], max(10, n_splits // 5), seed + r)
        for r in range(n_random)
    ]
    keys = ("rho", "snr", "expected_kendall", "split_half_kendall", "lambda6_star", "mean_score")
    out["random_half"] = {
        k: float(np.mean([r[k] for r in rand if r[k] is not None])) for k in keys if rand[0][k] is not None
    }
    out["random_half"]["components"] = {
        c: float(np.mean([r["components"][c] for r in rand])) for c in ("model", "item", "residual")
    }
    out["random_half"]["n_random"] = n_random
    return out
