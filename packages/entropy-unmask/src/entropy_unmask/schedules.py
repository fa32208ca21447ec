"""Unmasking schedules: which masked positions to reveal at one iteration.

Every schedule has the same two entry points:

* ``select_batch(probs, masked, rng) -> chosen``: probs (B, L, V) float64 predictor rows, masked (B, L)
  bool, returns (B, L) bool, a non-empty subset of the masked positions of each row that has one.
  Used by the sampler (vectorised over a batch of sequences).
* ``set_distribution(probs, masked) -> [(positions, probability), ...]``: the exact distribution of the
  chosen set for one state (probs (L, V), masked (L,)). Deterministic schedules return one set. Used by
  the exact analysis.

Entropies equal within ``TIE_TOL`` are ties, broken by the lower position index, so that batched and
single calls choose the same sets bit for bit.

:class:`EntropySum` is the paper's rule; the baselines live in :mod:`entropy_unmask.baselines`.
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from entropy_unmask.predictors import token_entropy
from papershelf.errors import InputError, check_int, check_number

TIE_TOL = 1e-10  # entropies closer than this are ties
SUM_TOL = 1e-12  # cumulative sums within this of a threshold count as reaching it
MAX_RANDOM_SET_POSITIONS = 14  # exact random-order sets enumerate all subsets of <= 14 masked positions
MAX_FIXED_SETS = 2**16  # exact fixed-k sets enumerate the C(m, k) subsets (C(16, 8) = 12,870)


def _rng(rng: Any) -> np.random.Generator:
    return rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)


def _quantise(h: np.ndarray) -> np.ndarray:
    return np.round(h / TIE_TOL) * TIE_TOL


def sorted_by(key: np.ndarray, masked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Order of positions by ascending ``key`` among masked ones (stable: ties by index) and each
    position's rank in that order (masked positions first)."""
    k = np.where(masked, key, np.inf)
    order = np.argsort(k, axis=1, kind="stable")
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(k.shape[1])[None, :].repeat(k.shape[0], 0), axis=1)
    return order, rank


class Schedule:
    """Base class. Subclasses set ``name``, ``deterministic`` and ``state_independent``."""

    name = "schedule"
    deterministic = True
    state_independent = False

    def select_batch(self, probs: np.ndarray, masked: np.ndarray, rng: Any = None) -> np.ndarray:
        raise NotImplementedError

    def set_distribution(self, probs: np.ndarray, masked: np.ndarray) -> list[tuple[tuple[int, ...], float]]:
        if not self.deterministic:
            raise NotImplementedError
        chosen = self.select_batch(probs[None], masked[None], None)[0]
        return [(tuple(np.nonzero(chosen)[0].tolist()), 1.0)]

    def label(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return self.label()


class EntropySum(Schedule):
    """The entropy-sum rule (Cai & Li): reveal masked positions one after another until the cumulative
    predictive entropy h_i = H(p(. | x_obs)) reaches ``eta`` (nats); the reveals are sampled
    independently from their marginals. The default order is ascending entropy; the paper's order could
    not be read (README, Fidelity), so this is the package's inference.

    ``include_crossing=True`` (default) also reveals the token whose entropy makes the sum reach ``eta``
    (the smallest k >= 1 with h_(1) + ... + h_(k) >= eta); ``False`` stops before it (the largest k >= 1
    with the sum < eta). ``order="random"`` takes the positions in a uniformly random order instead
    of by entropy. With all remaining entropies summing below ``eta`` every masked position is revealed.

    >>> p = np.array([[[1.0, 0.0], [0.5, 0.5], [0.9, 0.1], [0.5, 0.5]]])
    >>> EntropySum(0.5).select_batch(p, np.ones((1, 4), bool))[0].tolist()
    [True, True, True, False]
    """

    name = "entropy-sum"

    def __init__(self, eta: float, *, order: str = "entropy", include_crossing: bool = True):
        self.eta = check_number("eta", eta, low=0, low_open=True)
        if order not in ("entropy", "random"):
            raise InputError(f"order must be 'entropy' or 'random', got {order!r}")
        self.order = order
        self.include_crossing = bool(include_crossing)
        self.deterministic = order == "entropy"

    def label(self) -> str:
        extra = "" if self.order == "entropy" else ",random"
        extra += "" if self.include_crossing else ",no-crossing"
        return f"entropy-sum(eta={self.eta:g}{extra})"

    def _count(self, hs: np.ndarray, m: np.ndarray) -> np.ndarray:
        """Number of positions to reveal given entropies in reveal order (B, L) and masked counts m."""
        L = hs.shape[1]
        valid = np.arange(L)[None, :] < m[:, None]
        cums = np.cumsum(np.where(valid, hs, 0.0), axis=1)
        reached = valid & (cums >= self.eta - SUM_TOL)
        has = reached.any(axis=1)
        first = np.argmax(reached, axis=1)  # index of the crossing token
        k = np.where(has, first + 1 if self.include_crossing else np.maximum(first, 1), m)
        return k

    def select_batch(self, probs: np.ndarray, masked: np.ndarray, rng: Any = None) -> np.ndarray:
        h = token_entropy(probs)
        if self.order == "entropy":
            key = _quantise(h)
        else:
            key = _rng(rng).random(h.shape)
        order, rank = sorted_by(key, masked)
        hs = np.take_along_axis(h, order, axis=1)
        k = self._count(hs, masked.sum(axis=1))
        return masked & (rank < k[:, None])

    def set_distribution(self, probs: np.ndarray, masked: np.ndarray) -> list[tuple[tuple[int, ...], float]]:
        if self.order == "entropy":
            return super().set_distribution(probs, masked)
        sets, W = self.set_weights(probs[None], masked)
        L = masked.shape[0]
        return [(tuple(i for i in range(L) if S >> i & 1), float(w)) for S, w in zip(sets.tolist(), W[0])]

    def set_weights(self, probs: np.ndarray, masked: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Random order, exactly, for G states sharing one mask: probs (G, L, V), masked (L,) ->
        (sets (nS,) int64 bitmasks over the L positions, W (G, nS) probability of each set per state)."""
        pos = np.nonzero(masked)[0]
        m = pos.size
        if m > MAX_RANDOM_SET_POSITIONS:
            raise InputError(
                f"exact random-order sets need <= {MAX_RANDOM_SET_POSITIONS} masked positions, got {m}"
            )
        h = token_entropy(probs)[:, pos]  # (G, m)
        G = h.shape[0]
        # f[:, T] = probability that the random order starts with the positions of T (in some order)
        # while every proper prefix stayed below eta; out[:, T] = probability that T is the chosen set.
        # Subsets T are bitmasks over the m masked positions, processed one popcount layer at a time.
        T_all = np.arange(1 << m, dtype=np.int64)
        bits = (T_all[:, None] >> np.arange(m)[None, :]) & 1
        below = h @ bits.T < self.eta - SUM_TOL  # (G, 2^m)
        size = bits.sum(axis=1)
        f = np.zeros((G, 1 << m))
        f[:, 0] = 1.0
        out = np.zeros((G, 1 << m))
        for s in range(m + 1):
            T = T_all[size == s]
            if s == m:  # everything revealed
                out[:, T] += f[:, T]
                break
            go = f[:, T]
            if s > 0:  # stop where the last added token crossed eta
                crossed = ~below[:, T]
                out[:, T] += np.where(crossed, go, 0.0)
                go = np.where(crossed, 0.0, go)
            share = go / (m - s)
            for j in range(m):
                free = ((T >> j) & 1) == 0
                src, U, sh = T[free], T[free] | (1 << j), share[:, free]  # U distinct for one j
                if self.include_crossing or s == 0:
                    f[:, U] += sh
                else:
                    cross = ~below[:, U]  # j would cross: stop at T without it
                    out[:, src] += np.where(cross, sh, 0.0)
                    f[:, U] += np.where(cross, 0.0, sh)
        keep = np.nonzero((out > 0).any(axis=0))[0]
        sets = bits[keep] @ (np.int64(1) << pos.astype(np.int64))
        return sets.astype(np.int64), out[:, keep]


def combinations_uniform(pos: np.ndarray, k: int) -> list[tuple[tuple[int, ...], float]]:
    """All k-subsets of ``pos`` with equal probability (refused above MAX_FIXED_SETS subsets)."""
    count = math.comb(pos.size, min(k, pos.size))
    if count > MAX_FIXED_SETS:
        raise InputError(
            f"exact fixed-k sets: C({pos.size}, {min(k, pos.size)}) = {count:,} subsets "
            f"(limit {MAX_FIXED_SETS:,})"
        )
    combos = list(itertools.combinations(pos.tolist(), min(k, pos.size)))
    return [(c, 1.0 / len(combos)) for c in combos]


def check_k(k: Any) -> int:
    return check_int("k", k, low=1)
