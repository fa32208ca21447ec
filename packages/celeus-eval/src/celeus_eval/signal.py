"""The Celeus signal (Eq. 1), its per-round support (Eqs. 4a-4b) and the sampling proposals.

Notation, for a pool of N items with losses ``l`` in [L, U] and surrogate predictions ``s`` in [L, U]:

* ``labelled`` — the items whose loss is known before round t; ``remaining`` (J) — the others.
* ``m_t = (sum_{labelled} l + sum_{J} s) / N`` — the pool plug-in.
* an item ``I`` is drawn from J with probability ``q[I]`` (without replacement across rounds);
* ``Z_t = m_t + (l[I] - s[I]) / (N q[I])`` — conditionally unbiased for the pool risk
  ``R_N = mean(l)``: ``sum_{j in J} q[j] Z_t(j) = R_N`` exactly.

Everything here is vectorised over the remaining items; :mod:`celeus_eval.reference` has the same
quantities written as plain loops.
"""

from __future__ import annotations

import numpy as np

SAMPLING_RULES = ("uncertainty", "uniform", "oracle")


def residual_proposal(score: np.ndarray, beta: float, n_pool: int) -> np.ndarray:
    """q over the remaining items: floor ``beta / N`` plus the rest in proportion to ``score``.

    ``q[j] = beta/N + (1 - n*beta/N) * score[j] / sum(score)`` with n = len(score) remaining items
    (the paper's Theorem-4 minimum-probability form). Falls back to uniform 1/n when the scores sum
    to (almost) zero or when the floor alone would exceed the mass (n*beta/N >= 1).
    """
    n = score.shape[0]
    total = float(score.sum())
    floor_mass = n * beta / n_pool
    if total < 1e-12 or floor_mass >= 1.0:
        return np.full(n, 1.0 / n)
    return beta / n_pool + (1.0 - floor_mass) * (score / total)


def plug_in(labelled_loss_sum: float, remaining_surrogate_sum: float, n_pool: int) -> float:
    """m_t: labelled losses plus surrogate predictions of the unlabelled items, over N."""
    return (labelled_loss_sum + remaining_surrogate_sum) / n_pool


def signal_value(m: float, loss: float, surrogate: float, q: float, n_pool: int) -> float:
    """Z_t for the drawn item: the plug-in plus its inverse-probability-weighted residual."""
    return m + (loss - surrogate) / (n_pool * q)


def support_offsets(
    surrogate: np.ndarray, q: np.ndarray, n_pool: int, low: float, high: float
) -> tuple[float, float]:
    """(a_t - m_t, b_t - m_t): how far below and above the plug-in the signal can land this round.

    Depends only on the surrogate and the frozen q of every remaining item, never on labels, so it
    is fixed at draw time. Uses the actual q of each item, so Z_t lies in [a_t, b_t] with certainty.
    """
    weight = 1.0 / (n_pool * q)
    return float(np.min((low - surrogate) * weight)), float(np.max((high - surrogate) * weight))


def support(
    m: float, surrogate: np.ndarray, q: np.ndarray, n_pool: int, low: float, high: float
) -> tuple[float, float]:
    """[a_t, b_t] of Eqs. (4a)-(4b): the smallest interval holding Z_t whatever the drawn loss is."""
    below, above = support_offsets(surrogate, q, n_pool, low, high)
    return m + below, m + above


def fixed_support(beta: float, low: float, high: float) -> tuple[float, float]:
    """One [a, b] valid in every round when q >= beta/N (the 'fixed bounds' ablation, M2)."""
    spread = (high - low) / beta
    return low - spread, high + spread
