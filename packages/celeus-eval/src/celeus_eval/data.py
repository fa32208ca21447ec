"""Offline evaluation pools with known ground truth, in the paper's structure.

A :class:`Pool` holds, per item, the true loss (hidden from the method except through labels), the
surrogate prediction of that loss, the label-free proxy of the sampling rule, and features (for
Cer-Eval). Two generators:

* :func:`synthetic_pool` — numpy only: latent difficulty, calibrated surrogate with a chosen AUC.
* :func:`digits_pool` — scikit-learn's bundled digits: a target classifier evaluated on held-out and
  pixel-shifted images, its Gini uncertainty as surrogate, disagreement with a smaller classifier as
  proxy (the paper's Strategy S4, with the two LLMs replaced by two classifiers).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from celeus_eval.strategies import surrogate_and_proxy, true_losses
from papershelf.errors import InputError, MissingDependencyError, check_int, check_number


@dataclass(frozen=True)
class Pool:
    """An evaluation pool: ``losses``, ``surrogate``, ``proxy`` of shape (N,), ``features`` (N, d)."""

    name: str
    losses: np.ndarray
    surrogate: np.ndarray
    proxy: np.ndarray
    features: np.ndarray

    @property
    def size(self) -> int:
        return int(self.losses.size)

    @property
    def risk(self) -> float:
        """The estimand: the pool's mean loss."""
        return float(self.losses.mean())

    def auc(self) -> float:
        """AUC of the surrogate for telling wrong (loss 1) from right (loss 0) items."""
        return auc(self.surrogate, self.losses > 0.5)


def auc(score: np.ndarray, positive: np.ndarray) -> float:
    """Area under the ROC curve by the Mann-Whitney rank statistic (ties get average ranks)."""
    positive = np.asarray(positive, dtype=bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        raise InputError("AUC needs at least one positive and one negative item")
    order = np.argsort(score, kind="mergesort")
    ranks = np.empty(score.size)
    sorted_scores = np.asarray(score)[order]
    # average ranks over ties
    _, first, counts = np.unique(sorted_scores, return_index=True, return_counts=True)
    avg = first + (counts + 1) / 2.0
    ranks[order] = np.repeat(avg, counts)
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def synthetic_pool(
    n: int = 10_000, *, target_auc: float = 0.85, error_rate: float = 0.2, seed: int = 0
) -> Pool:
    """A pool whose calibrated surrogate separates wrong from right items with AUC ~ ``target_auc``.

    Item difficulty z ~ N(0, 1); error probability p = sigmoid(a + b z); loss ~ Bernoulli(p). The
    surrogate is p itself (calibrated); the proxy is the hard guess of a noisier helper,
    1{sigmoid(a + b (z + noise)) > 1/2}. ``b`` is tuned by bisection so the realised AUC hits the
    target, ``a`` so the mean error is ``error_rate``.
    """
    n = check_int("n", n, low=10)
    target_auc = check_number("target_auc", target_auc, low=0.5, high=1, low_open=True, high_open=True)
    error_rate = check_number("error_rate", error_rate, low=0, high=1, low_open=True, high_open=True)
    rng = np.random.default_rng(seed)
    z = rng.standard_normal(n)
    u = rng.random(n)
    helper_noise = rng.standard_normal(n)

    def build(b: float) -> tuple[np.ndarray, np.ndarray]:
        lo, hi = -30.0, 30.0  # bisection on a for the mean error probability
        for _ in range(60):
            a = (lo + hi) / 2
            lo, hi = (a, hi) if _sigmoid(a + b * z).mean() < error_rate else (lo, a)
        p = _sigmoid(a + b * z)
        return p, (u < p).astype(np.float64)

    lo_b, hi_b = 0.0, 20.0
    for _ in range(40):
        b = (lo_b + hi_b) / 2
        p, losses = build(b)
        if losses.min() == losses.max():
            break
        lo_b, hi_b = (b, hi_b) if auc(p, losses > 0.5) < target_auc else (lo_b, b)
    p, losses = build((lo_b + hi_b) / 2)
    helper = _sigmoid(np.log(error_rate / (1 - error_rate)) + 1.5 * (z + helper_noise))
    proxy = (helper > 0.5).astype(np.float64)
    features = np.stack([z + 0.5 * helper_noise, np.ones(n)], axis=1)
    return Pool("synthetic", losses, p, proxy, features)


def digits_pool(*, shifts: int = 1, train_fraction: float = 0.4, seed: int = 0) -> Pool:
    """The scikit-learn digits pool: a logistic-regression target scored on held-out, shifted images.

    Images are split once: ``train_fraction`` trains the models, the rest forms the pool together
    with every copy shifted by up to ``shifts`` pixels in each direction (9 copies, about 9.7k items,
    for shifts=1). The target model (logistic regression on the 8x8 pixels, trained on shifted
    copies too, so pool and training data share one distribution) is what is evaluated; the helper
    is a smaller model (logistic regression on 4x4 average-pooled images, same training data). Losses are the
    target's 0-1 losses; surrogate and proxy follow the paper's Strategy S4.
    """
    try:
        from sklearn.datasets import load_digits
        from sklearn.linear_model import LogisticRegression
    except ImportError:
        raise MissingDependencyError("sklearn", package="celeus-eval", extra="bench") from None
    shifts = check_int("shifts", shifts, low=0, high=3)
    train_fraction = check_number(
        "train_fraction", train_fraction, low=0, high=1, low_open=True, high_open=True
    )
    digits = load_digits()
    images, labels = digits.images / 16.0, digits.target
    order = np.random.default_rng(seed).permutation(labels.size)
    n_train = int(train_fraction * labels.size)
    train, held = order[:n_train], order[n_train:]
    train_x, train_y = _shifted_copies(images[train], labels[train], shifts)
    pool_x, pool_y = _shifted_copies(images[held], labels[held], shifts)

    target = LogisticRegression(C=1.0, max_iter=3000).fit(train_x.reshape(train_x.shape[0], -1), train_y)
    helper = LogisticRegression(C=1.0, max_iter=3000).fit(_pool4(train_x), train_y)
    p_target = target.predict_proba(pool_x.reshape(pool_x.shape[0], -1))
    p_helper = helper.predict_proba(_pool4(pool_x))
    losses = true_losses(p_target, pool_y, loss="zero_one")
    surrogate, proxy = surrogate_and_proxy(p_target, p_helper, loss="zero_one", strategy="S4")
    return Pool("digits", losses, surrogate, proxy, pool_x.reshape(pool_x.shape[0], -1))


def _shifted_copies(images: np.ndarray, labels: np.ndarray, shifts: int) -> tuple[np.ndarray, np.ndarray]:
    offsets = [(dy, dx) for dy in range(-shifts, shifts + 1) for dx in range(-shifts, shifts + 1)]
    return (
        np.concatenate([_shift(images, dy, dx) for dy, dx in offsets]),
        np.concatenate([labels] * len(offsets)),
    )


def _shift(images: np.ndarray, dy: int, dx: int) -> np.ndarray:
    """Shift 8x8 images by (dy, dx) pixels, filling with background (0)."""
    out = np.zeros_like(images)
    h, w = images.shape[1:]
    src_y = slice(max(0, -dy), h - max(0, dy))
    src_x = slice(max(0, -dx), w - max(0, dx))
    dst_y = slice(max(0, dy), h - max(0, -dy))
    dst_x = slice(max(0, dx), w - max(0, -dx))
    out[:, dst_y, dst_x] = images[:, src_y, src_x]
    return out


def _pool4(images: np.ndarray) -> np.ndarray:
    """2x2 average pooling of 8x8 images into 16 features."""
    n = images.shape[0]
    return images.reshape(n, 4, 2, 4, 2).mean(axis=(2, 4)).reshape(n, 16)
