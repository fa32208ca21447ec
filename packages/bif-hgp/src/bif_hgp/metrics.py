"""The paper's scores: parent R², child R², the exploration score and the composite AUC.

All take NumPy arrays over a grid. ``r2`` is the ordinary coefficient of determination; ``r2_scale_free``
is the squared Pearson correlation (R² after the best affine calibration), the child score of the
paper's AUC here; ``r2_offset`` is R² after removing only the constant that an additive composite
leaves unidentified, the stricter child score (see the README's Fidelity section).
"""

from __future__ import annotations

import numpy as np


def r2(pred: np.ndarray, truth: np.ndarray) -> float:
    """1 − Σ(truth − pred)² / Σ(truth − mean(truth))²; 0 when the truth is constant.

    >>> r2(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 3.0]))
    1.0
    """
    pred, truth = np.asarray(pred, float), np.asarray(truth, float)
    ss_tot = float(np.sum((truth - truth.mean()) ** 2))
    if ss_tot == 0.0:
        return 0.0
    return 1.0 - float(np.sum((truth - pred) ** 2)) / ss_tot


def r2_scale_free(pred: np.ndarray, truth: np.ndarray) -> float:
    """Squared Pearson correlation of ``pred`` and ``truth``; 0 when either is constant.

    >>> r2_scale_free(np.array([10.0, 20.0, 30.0]), np.array([0.0, 0.5, 1.0]))
    1.0
    """
    pred, truth = np.asarray(pred, float), np.asarray(truth, float)
    a, b = pred - pred.mean(), truth - truth.mean()
    den = float(np.sqrt(np.sum(a * a) * np.sum(b * b)))
    if den == 0.0 or not np.isfinite(den):
        return 0.0
    return float(np.clip(np.sum(a * b) / den, -1.0, 1.0) ** 2)


def r2_offset(pred: np.ndarray, truth: np.ndarray) -> float:
    """R² up to an additive constant: ``r2`` after shifting ``pred`` to the truth's mean.

    For a child of an additive composite, whose sub-function is identified only up to a constant
    (g_a + c, g_b − c fit the same observations). Unlike the squared correlation it also charges a
    wrong scale: ``pred`` must be in the truth's units.

    >>> r2_offset(np.array([10.0, 11.0, 12.0]), np.array([0.0, 1.0, 2.0]))
    1.0
    >>> r2_offset(np.array([0.0, 0.5, 1.0]), np.array([0.0, 1.0, 2.0]))
    0.75
    """
    pred, truth = np.asarray(pred, float), np.asarray(truth, float)
    return r2(pred - pred.mean() + truth.mean(), truth)


def minmax(v: np.ndarray) -> np.ndarray:
    """Rescale to [0, 1]; a constant array maps to zeros."""
    v = np.asarray(v, float)
    span = float(v.max() - v.min())
    return np.zeros_like(v) if span == 0.0 else (v - v.min()) / span


def exploration_score(truth: np.ndarray, chosen: int) -> float:
    """(f(x̂) − min f)/(max f − min f) for the model's current best guess x̂ (grid index ``chosen``).

    1 means the model's argmax is the true optimum; 1 − score is the normalised simple regret.
    """
    lo, hi = float(truth.min()), float(truth.max())
    return 0.0 if hi == lo else (float(truth[chosen]) - lo) / (hi - lo)


def composite_auc(exploration: np.ndarray, parent_r2: np.ndarray, child_r2: np.ndarray) -> float:
    """The paper's AUC: the area under (exploration + parent R² + mean child R²) over the queries.

    Reported as the per-query mean ×100 (so at most 300); ratios between methods are what the
    paper's raw sum gives.
    """
    total = np.asarray(exploration, float) + np.asarray(parent_r2, float) + np.asarray(child_r2, float)
    return 100.0 * float(total.mean())


def regret_auc(exploration: np.ndarray) -> float:
    """Area under the normalised simple-regret curve (1 − exploration), per-query mean ×100."""
    return 100.0 * float(np.mean(1.0 - np.asarray(exploration, float)))
