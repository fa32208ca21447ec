"""Slow, obviously-correct versions of Celeus's quantities, written as plain loops over the equations.

They are the oracle the vectorised code in :mod:`celeus_eval.signal`, :mod:`celeus_eval.cs` and
:mod:`celeus_eval.celeus` is tested against, and the plain-Python baseline of the update-cost
benchmark. Nothing here is meant to be fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def proposal(score: Sequence[float], beta: float, n_pool: int) -> list[float]:
    """q_t(j) = beta/N + (1 - n beta/N) score_j / sum(score), uniform when degenerate (see signal.py)."""
    n = len(score)
    total = math.fsum(score)
    if total < 1e-12 or n * beta / n_pool >= 1.0:
        return [1.0 / n] * n
    return [beta / n_pool + (1.0 - n * beta / n_pool) * s / total for s in score]


def signal(
    losses: Sequence[float], surrogate: Sequence[float], labelled: set[int], q: dict[int, float], drawn: int
) -> float:
    """Z_t = m_t + (l_I - s_I)/(N q_I) for drawn item I, from Eq. (1) term by term."""
    n_pool = len(losses)
    m = math.fsum(losses[i] if i in labelled else surrogate[i] for i in range(n_pool)) / n_pool
    return m + (losses[drawn] - surrogate[drawn]) / (n_pool * q[drawn])


def expected_signal(
    losses: Sequence[float], surrogate: Sequence[float], labelled: set[int], q: dict[int, float]
) -> float:
    """E[Z_t | past] = sum over every remaining j of q_j Z_t(j); Theorem 1 says this equals mean(losses)."""
    return math.fsum(q[j] * signal(losses, surrogate, labelled, q, j) for j in q)


def support(
    labelled_loss_sum: float,
    surrogate: Sequence[float],
    remaining: Sequence[int],
    q: dict[int, float],
    low: float,
    high: float,
) -> tuple[float, float]:
    """[a_t, b_t] of Eqs. (4a)-(4b), by enumerating every remaining item and both loss extremes."""
    n_pool = len(surrogate)
    m = (labelled_loss_sum + math.fsum(surrogate[j] for j in remaining)) / n_pool
    values = [m + (y - surrogate[j]) / (n_pool * q[j]) for j in remaining for y in (low, high)]
    return min(values), max(values)


class ReferenceBettingCS:
    """The adaptive-bounds hedged betting CS, one grid point at a time in plain Python.

    Same maths as :class:`celeus_eval.cs.BettingCS`: rescale to [0, 1] by the round's support, a
    predictable per-candidate variance, bet sqrt(2 log(2/alpha) / (var t log(t+1))) capped at
    1/(v + c) and 1/(1 - v + c), two-sided wealth hedged with weight theta, permanent rejection once
    the hedged wealth reaches 1/alpha.
    """

    def __init__(
        self,
        alpha: float,
        *,
        low: float = 0.0,
        high: float = 1.0,
        grid: int = 2000,
        c: float = 0.5,
        theta: float = 0.5,
        min_var: float = 1e-6,
    ) -> None:
        self.alpha, self.low, self.high, self.c, self.theta, self.min_var = (
            alpha,
            low,
            high,
            c,
            theta,
            min_var,
        )
        step = (high - low) / (grid + 1)
        self.points = [low + (k + 1) * step for k in range(grid)]
        self.step = step
        self.log_up = [0.0] * grid
        self.log_down = [0.0] * grid
        self.sq = [0.0] * grid
        self.alive = [True] * grid
        self.t = 0

    def update(self, z: float, a: float, b: float) -> tuple[float, float]:
        self.t += 1
        t = self.t
        r = (z - a) / (b - a)
        threshold = math.log(1.0 / self.alpha)
        for k, point in enumerate(self.points):
            if not self.alive[k]:
                continue
            v = (point - a) / (b - a)
            if v <= 0.0 or v >= 1.0:
                self.alive[k] = False
                continue
            var = max(self.min_var, (0.25 + self.sq[k]) / t)
            lam = math.sqrt(2.0 * math.log(2.0 / self.alpha) / (var * t * math.log(t + 1.0)))
            lam_up = min(lam, 1.0 / (v + self.c))
            lam_down = min(lam, 1.0 / (1.0 - v + self.c))
            self.log_up[k] += math.log(1.0 + lam_up * (r - v))
            self.log_down[k] += math.log(1.0 - lam_down * (r - v))
            self.sq[k] += (r - v) ** 2
            hedged = math.log(
                self.theta * math.exp(self.log_up[k]) + (1.0 - self.theta) * math.exp(self.log_down[k])
            )
            if hedged >= threshold:
                self.alive[k] = False
        return self.interval

    @property
    def interval(self) -> tuple[float, float]:
        kept = [p for p, ok in zip(self.points, self.alive) if ok]
        if not kept:
            return (math.nan, math.nan)
        return max(self.low, kept[0] - self.step), min(self.high, kept[-1] + self.step)
