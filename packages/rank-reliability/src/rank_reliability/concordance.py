"""Rank concordance of leaderboards: batched Kendall τ-b / Spearman, and split-half resampling.

Split-half resampling is the observable side of the variance-components mapping: split the items at
random into two halves, rank the models on each half, and measure how often the two leaderboards agree.
:func:`split_half` returns the empirical τ of every split beside the value the variance components predict.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from papershelf.errors import InputError, check_int

from .components import VarianceComponents, variance_components
from .matrix import check_matrix


def _pair_signs(scores: np.ndarray, pairs: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    i, j = pairs
    return np.sign(scores[..., i] - scores[..., j])


def kendall_tau(a: object, b: object) -> np.ndarray | float:
    """Kendall τ-b between score vectors ``a`` and ``b`` (last axis = models); batched over leading axes.

    τ-b = Σ sign(aᵢ−aⱼ) sign(bᵢ−bⱼ) / √(pairs untied in a × pairs untied in b). When one ranking is
    all ties there is no ordering to agree with and τ is 0.

    >>> float(kendall_tau([1, 2, 3, 4], [1, 3, 2, 4]))
    0.6666666666666666
    """
    A = np.asarray(a, dtype=np.float64)
    B = np.asarray(b, dtype=np.float64)
    if A.shape != B.shape or A.shape[-1] < 2:
        raise InputError(f"kendall_tau needs two equal shapes with >= 2 models, got {A.shape} and {B.shape}")
    if np.isnan(A).any() or np.isnan(B).any():
        raise InputError("kendall_tau got NaN scores")
    pairs = np.triu_indices(A.shape[-1], k=1)
    lead = A.shape[:-1]
    A2 = A.reshape(-1, A.shape[-1])
    B2 = B.reshape(-1, B.shape[-1])
    out = np.empty(A2.shape[0])
    step = max(1, 2_000_000 // max(1, pairs[0].size))  # bound memory for many models
    for s in range(0, A2.shape[0], step):
        sa = _pair_signs(A2[s : s + step], pairs)
        sb = _pair_signs(B2[s : s + step], pairs)
        num = np.sum(sa * sb, axis=-1)
        den = np.sqrt(np.sum(np.abs(sa), axis=-1) * np.sum(np.abs(sb), axis=-1))
        out[s : s + step] = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    return float(out[0]) if not lead else out.reshape(lead)


def _ranks(x: np.ndarray) -> np.ndarray:
    """Average ranks (ties share the mean rank) along the last axis."""
    x2 = x.reshape(-1, x.shape[-1])
    out = np.empty_like(x2)
    for r, row in enumerate(x2):
        order = np.argsort(row, kind="mergesort")
        sorted_row = row[order]
        _, first, counts = np.unique(sorted_row, return_index=True, return_counts=True)
        ranks = np.empty(row.size)
        ranks[order] = np.repeat(first + (counts - 1) / 2.0, counts)
        out[r] = ranks
    return out.reshape(x.shape)


def spearman(a: object, b: object) -> np.ndarray | float:
    """Spearman rank correlation (Pearson correlation of average ranks) along the last axis."""
    A = np.asarray(a, dtype=np.float64)
    B = np.asarray(b, dtype=np.float64)
    if A.shape != B.shape or A.shape[-1] < 2:
        raise InputError(f"spearman needs two equal shapes with >= 2 models, got {A.shape} and {B.shape}")
    ra, rb = _ranks(A), _ranks(B)
    ra = ra - ra.mean(axis=-1, keepdims=True)
    rb = rb - rb.mean(axis=-1, keepdims=True)
    den = np.sqrt(np.sum(ra * ra, axis=-1) * np.sum(rb * rb, axis=-1))
    num = np.sum(ra * rb, axis=-1)
    out = np.divide(num, den, out=np.zeros_like(num), where=den > 0)
    return float(out) if out.ndim == 0 else out


def discordance(tau: object) -> np.ndarray | float:
    """Discordant-pair rate (1 − τ)/2 (exact for rankings without ties)."""
    out = (1.0 - np.asarray(tau, dtype=np.float64)) / 2.0
    return float(out) if out.ndim == 0 else out


def half_means(X: np.ndarray, masks: np.ndarray) -> np.ndarray:
    """Per-model mean score on the items selected by each boolean mask: (splits, items) -> (splits, models).

    Missing cells (NaN) are skipped; a model with no observed item in a half has no score there, which is
    an :class:`InputError`.
    """
    obs = ~np.isnan(X)
    Y = np.where(obs, X, 0.0)
    W = masks.astype(np.float64)
    sums = W @ Y.T
    counts = W @ obs.T.astype(np.float64)
    if np.any(counts == 0):
        raise InputError("a model has no observed item in a split half; the matrix is too sparse to split")
    return sums / counts


@dataclass(frozen=True)
class SplitHalf:
    """Empirical and predicted concordance of split-half leaderboards.

    ``kendall`` / ``spearman``: one value per split; ``predicted_kendall`` / ``predicted_spearman``: the
    variance-components mapping at the halves' sizes.
    """

    kendall: np.ndarray
    spearman: np.ndarray
    predicted_kendall: float
    predicted_spearman: float
    n_half: tuple[int, int]
    components: VarianceComponents

    @property
    def mean_kendall(self) -> float:
        return float(np.mean(self.kendall))

    @property
    def mean_spearman(self) -> float:
        return float(np.mean(self.spearman))

    def as_dict(self) -> dict[str, object]:
        return {
            "n_splits": int(self.kendall.size),
            "n_half": list(self.n_half),
            "mean_kendall": self.mean_kendall,
            "sd_kendall": float(np.std(self.kendall)),
            "predicted_kendall": self.predicted_kendall,
            "mean_spearman": self.mean_spearman,
            "predicted_spearman": self.predicted_spearman,
            "mean_discordance": float(np.mean(discordance(self.kendall))),
            "predicted_discordance": discordance(self.predicted_kendall),
        }


def split_masks(n_items: int, n_splits: int, rng: np.random.Generator) -> np.ndarray:
    """``n_splits`` random halvings of ``n_items`` items: boolean (splits, items), ⌊n/2⌋ True per row."""
    keys = rng.random((n_splits, n_items))
    order = np.argsort(keys, axis=1)
    masks = np.zeros((n_splits, n_items), dtype=bool)
    np.put_along_axis(masks, order[:, : n_items // 2], True, axis=1)
    return masks


def split_half(
    X: object,
    n_splits: int = 200,
    *,
    seed: int = 0,
    drop_constant: bool = False,
    components: VarianceComponents | None = None,
) -> SplitHalf:
    """Rank concordance between random item halves, beside the closed-form prediction.

    Each split assigns ⌊I/2⌋ items to half A and the rest to half B; models are scored by their mean
    on each half. The prediction is E[τ] = (2/π) arcsin √(ρ(n_A) ρ(n_B)) from the variance components of
    the whole matrix (``components`` to reuse ones already estimated).
    """
    arr, _ = check_matrix(X, drop_constant=drop_constant)
    n_splits = check_int("n_splits", n_splits, low=1)
    n_items = arr.shape[1]
    vc = components if components is not None else variance_components(arr)
    rng = np.random.default_rng(seed)
    masks = split_masks(n_items, n_splits, rng)
    a = half_means(arr, masks)
    b = half_means(arr, ~masks)
    frac = vc.n_items_effective / n_items
    n_a, n_b = (n_items // 2) * frac, (n_items - n_items // 2) * frac
    return SplitHalf(
        kendall=np.asarray(kendall_tau(a, b)),
        spearman=np.asarray(spearman(a, b)),
        predicted_kendall=vc.expected_kendall(n_a, n_b),
        predicted_spearman=vc.expected_spearman(n_a, n_b),
        n_half=(n_items // 2, n_items - n_items // 2),
        components=vc,
    )


def subset_concordance(
    X: object, n_items: int, n_draws: int = 100, *, seed: int = 0, drop_constant: bool = False
) -> np.ndarray:
    """Kendall τ-b between leaderboards on two disjoint random sets of ``n_items`` items, per draw.

    The empirical side of E[τ] = (2/π) arcsin ρ(n) at any item count n ≤ I/2 (split-half is n = I/2).
    """
    arr, _ = check_matrix(X, drop_constant=drop_constant)
    n_draws = check_int("n_draws", n_draws, low=1)
    n_items = check_int("n_items", n_items, low=1, high=arr.shape[1] // 2)
    rng = np.random.default_rng(seed)
    order = np.argsort(rng.random((n_draws, arr.shape[1])), axis=1)
    first = np.zeros((n_draws, arr.shape[1]), dtype=bool)
    second = np.zeros_like(first)
    np.put_along_axis(first, order[:, :n_items], True, axis=1)
    np.put_along_axis(second, order[:, n_items : 2 * n_items], True, axis=1)
    return np.asarray(kendall_tau(half_means(arr, first), half_means(arr, second)))
