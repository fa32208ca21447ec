"""The anchor schedules, with the same interface as :class:`~entropy_unmask.schedules.EntropySum`.

* :class:`FixedK` — k uniformly random masked positions per iteration (the standard masked-diffusion
  sampler with a fixed schedule, L/k iterations).
* :class:`TopKConfidence` — the k most confident positions (largest max-probability; LLaDA's
  low-confidence remasking with a fixed count).
* :class:`MaxEntropyThreshold` — every masked position whose entropy is <= tau (at least the single
  lowest-entropy one): the "max-entropy" rule, which bounds the largest entropy in the set.
* :class:`EBSampler` — EB-sampler-style error-bounded unmasking (Ben-Hamu et al., 2025): positions in
  ascending entropy, the largest prefix whose entropy sum minus its largest entropy is <= gamma
  (at least one).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from entropy_unmask.predictors import token_entropy
from entropy_unmask.schedules import (
    SUM_TOL,
    TIE_TOL,
    Schedule,
    _quantise,
    _rng,
    check_k,
    combinations_uniform,
    sorted_by,
)
from papershelf.errors import check_number


class FixedK(Schedule):
    """Reveal ``k`` uniformly random masked positions per iteration (all of them when fewer remain).

    >>> rng = np.random.default_rng(0)
    >>> int(FixedK(2).select_batch(np.full((1, 5, 2), 0.5), np.ones((1, 5), bool), rng).sum())
    2
    """

    name = "fixed-k"
    deterministic = False
    state_independent = True

    def __init__(self, k: int):
        self.k = check_k(k)

    def label(self) -> str:
        return f"fixed-k(k={self.k})"

    def select_batch(self, probs: np.ndarray, masked: np.ndarray, rng: Any = None) -> np.ndarray:
        _, rank = sorted_by(_rng(rng).random(masked.shape), masked)
        return masked & (rank < self.k)

    def set_distribution(self, probs: np.ndarray, masked: np.ndarray) -> list[tuple[tuple[int, ...], float]]:
        return combinations_uniform(np.nonzero(masked)[0], self.k)


class TopKConfidence(Schedule):
    """Reveal the ``k`` masked positions with the largest top probability (ties: lower index)."""

    name = "top-k"

    def __init__(self, k: int):
        self.k = check_k(k)

    def label(self) -> str:
        return f"top-k(k={self.k})"

    def select_batch(self, probs: np.ndarray, masked: np.ndarray, rng: Any = None) -> np.ndarray:
        _, rank = sorted_by(-_quantise(probs.max(axis=-1)), masked)
        return masked & (rank < self.k)


class MaxEntropyThreshold(Schedule):
    """Reveal every masked position with entropy <= ``tau`` nats; if none, the lowest-entropy one."""

    name = "max-entropy"

    def __init__(self, tau: float):
        self.tau = check_number("tau", tau, low=0)

    def label(self) -> str:
        return f"max-entropy(tau={self.tau:g})"

    def select_batch(self, probs: np.ndarray, masked: np.ndarray, rng: Any = None) -> np.ndarray:
        h = token_entropy(probs)
        chosen = masked & (h <= self.tau + TIE_TOL)
        _, rank = sorted_by(_quantise(h), masked)
        none = ~chosen.any(axis=1)
        return np.where(none[:, None], masked & (rank < 1), chosen)


class EBSampler(Schedule):
    """EB-sampler-style rule: ascending entropy, the largest prefix S with sum(h_S) - max(h_S) <= gamma."""

    name = "eb-sampler"

    def __init__(self, gamma: float):
        self.gamma = check_number("gamma", gamma, low=0)

    def label(self) -> str:
        return f"eb-sampler(gamma={self.gamma:g})"

    def select_batch(self, probs: np.ndarray, masked: np.ndarray, rng: Any = None) -> np.ndarray:
        h = token_entropy(probs)
        order, rank = sorted_by(_quantise(h), masked)
        hs = np.take_along_axis(h, order, axis=1)
        m = masked.sum(axis=1)
        valid = np.arange(h.shape[1])[None, :] < m[:, None]
        cums = np.cumsum(np.where(valid, hs, 0.0), axis=1)
        ok = valid & (cums - hs <= self.gamma + SUM_TOL)  # prefix sums of all but the largest (the last)
        k = np.maximum(ok.sum(axis=1), 1)
        return masked & (rank < k[:, None])


def make_schedule(name: str, value: float, **kwargs: Any) -> Schedule:
    """Build a schedule from its CLI name and its one parameter (eta, k, tau or gamma)."""
    from entropy_unmask.schedules import EntropySum
    from papershelf.errors import InputError

    if name == "entropy-sum":
        return EntropySum(value, **kwargs)
    if name == "entropy-sum-random":
        return EntropySum(value, order="random", **kwargs)
    if name == "fixed-k":
        return FixedK(int(value) if float(value).is_integer() else value)
    if name == "top-k":
        return TopKConfidence(int(value) if float(value).is_integer() else value)
    if name == "max-entropy":
        return MaxEntropyThreshold(value)
    if name == "eb-sampler":
        return EBSampler(value)
    raise InputError(f"unknown schedule {name!r}; known: {', '.join(SCHEDULES)}")


SCHEDULES = ("entropy-sum", "entropy-sum-random", "fixed-k", "top-k", "max-entropy", "eb-sampler")
