"""Codebook diagnostics: utilisation, perplexity, dead codes over training, loss variance and spread."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from papershelf.errors import InputError, check_int


def code_histogram(indices, codebook_size: int) -> np.ndarray:
    """Counts of each code in ``indices`` (any shape, torch or numpy), length ``codebook_size``."""
    codebook_size = check_int("codebook_size", codebook_size, low=1)
    idx = indices.detach().cpu().numpy() if isinstance(indices, torch.Tensor) else np.asarray(indices)
    idx = idx.ravel()
    if idx.size and not np.issubdtype(idx.dtype, np.integer):
        raise InputError(f"indices must be integers, got dtype {idx.dtype}")
    if idx.size and (idx.min() < 0 or idx.max() >= codebook_size):
        raise InputError(f"indices must lie in [0, {codebook_size - 1}]")
    return np.bincount(idx.astype(np.int64), minlength=codebook_size)


def perplexity_from_counts(counts: np.ndarray) -> float:
    """``exp(H(p))`` of the normalised histogram (natural log): K for uniform use, 1 for a single code."""
    counts = np.asarray(counts, dtype=np.float64)
    total = counts.sum()
    if total <= 0:
        return 0.0
    p = counts[counts > 0] / total
    return float(math.exp(-(p * np.log(p)).sum()))


def codebook_stats(indices, codebook_size: int) -> dict[str, float]:
    """Utilisation (fraction of codes used at least once), perplexity, used and dead counts.

    >>> s = codebook_stats([0, 1, 2, 3], 8)
    >>> s["utilization"], round(s["perplexity"], 6), s["dead"]
    (0.5, 4.0, 4)
    """
    counts = code_histogram(indices, codebook_size)
    used = int((counts > 0).sum())
    return {
        "utilization": used / codebook_size,
        "perplexity": perplexity_from_counts(counts),
        "used": used,
        "dead": codebook_size - used,
        "codebook_size": codebook_size,
    }


class CodebookTracker:
    """Dead codes over training: a code is dead at step t if no batch used it in the last ``window`` steps.

    Call :meth:`update` with each training batch's indices; :meth:`snapshot` appends
    ``{step, dead, utilization_window, perplexity_window}`` to :attr:`history`.
    """

    def __init__(self, codebook_size: int, window: int = 100) -> None:
        self.codebook_size = check_int("codebook_size", codebook_size, low=1)
        self.window = check_int("window", window, low=1)
        self.last_used = np.full(self.codebook_size, -(10**12), dtype=np.int64)
        self.step = 0
        self._recent: list[np.ndarray] = []
        self.history: list[dict[str, float]] = []

    def update(self, indices) -> None:
        counts = code_histogram(indices, self.codebook_size)
        self.last_used[counts > 0] = self.step
        self._recent.append(counts)
        if len(self._recent) > self.window:
            self._recent.pop(0)
        self.step += 1

    def dead(self) -> int:
        return int((self.last_used < self.step - self.window).sum())

    def snapshot(self) -> dict[str, float]:
        counts = np.sum(self._recent, axis=0) if self._recent else np.zeros(self.codebook_size)
        row = {
            "step": self.step,
            "dead": self.dead(),
            "utilization_window": float((counts > 0).mean()),
            "perplexity_window": perplexity_from_counts(counts),
        }
        self.history.append(row)
        return row


def loss_variance(losses: Sequence[float], last: int | None = None) -> float:
    """Variance (ddof=1) of the training losses, over the last ``last`` steps when given."""
    x = np.asarray(losses, dtype=np.float64)
    if last is not None:
        x = x[-check_int("last", last, low=2) :]
    if x.size < 2:
        raise InputError("loss_variance needs at least two losses")
    return float(x.var(ddof=1))


def seed_spread(values: Sequence[float]) -> float:
    """Standard deviation (ddof=1) of one metric across seeds."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        raise InputError("seed_spread needs at least two seeds")
    return float(x.std(ddof=1))
