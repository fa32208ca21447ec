"""The anytime-valid betting confidence sequence Celeus builds over its signals, vectorised over a grid.

Each candidate value ``v`` of the mean keeps two wealth processes (betting that the mean is above and
below ``v``); every round's signal and its support ``[a_t, b_t]`` are rescaled to [0, 1], bets are
predictable and capped so every wealth factor stays positive, the two wealths are hedged, and ``v`` is
rejected for good once the hedged wealth reaches ``1/alpha`` (Ville's inequality makes the chance that
the true mean is ever rejected at most ``alpha``). The confidence sequence is the range of the grid
points still alive, widened by one grid step so a mean between two grid points is covered too.
"""

from __future__ import annotations

import math

import numpy as np

from papershelf.errors import InputError, check_int, check_number


class BettingCS:
    """Hedged betting confidence sequence for the mean of signals with per-round known support.

    Parameters
    ----------
    alpha : float in (0, 1)
        Error level of the sequence: P(the mean ever leaves the sequence) <= alpha.
    low, high : float
        The range the mean is known to lie in (the loss range); the grid covers its interior.
    grid : int
        Number of candidate values (paper: 2000).
    c : float > 0
        Bet cap offset: bets are capped at 1/(v + c) and 1/(1 - v + c) (paper: 0.5).
    theta : float in [0, 1]
        Weight of the "mean is above v" wealth in the hedge (paper: 0.5).

    ``update(z, a, b)`` takes one signal ``z`` known in advance to lie in ``[a, b]`` and returns the
    current interval ``(lower, upper)``.
    """

    def __init__(
        self,
        alpha: float = 0.05,
        *,
        low: float = 0.0,
        high: float = 1.0,
        grid: int = 2000,
        c: float = 0.5,
        theta: float = 0.5,
        min_var: float = 1e-6,
    ) -> None:
        self.alpha = check_number("alpha", alpha, low=0, high=1, low_open=True, high_open=True)
        self.low = check_number("low", low)
        self.high = check_number("high", high)
        if not self.high > self.low:
            raise InputError(f"the range must have high > low, got [{low}, {high}]")
        self.grid = check_int("grid", grid, low=2, high=10_000_000)
        self.c = check_number("c", c, low=0, low_open=True)
        self.theta = check_number("theta", theta, low=0, high=1)
        self.min_var = check_number("min_var", min_var, low=0, low_open=True)
        self.step = (self.high - self.low) / (self.grid + 1)
        self.points = self.low + self.step * np.arange(1, self.grid + 1)
        self._log_bet_scale = 2.0 * math.log(2.0 / self.alpha)
        self._log_threshold = math.log(1.0 / self.alpha)
        self.log_up = np.zeros(self.grid)
        self.log_down = np.zeros(self.grid)
        self.sq = np.zeros(self.grid)  # sum over past rounds of (r_s - v_s)^2, per candidate
        self.alive = np.ones(self.grid, dtype=bool)
        self.t = 0

    def update(self, z: float, a: float, b: float) -> tuple[float, float]:
        """Feed one signal ``z`` with predictable support ``[a, b]``; return the new interval."""
        if not (math.isfinite(z) and math.isfinite(a) and math.isfinite(b) and b > a):
            raise InputError(f"signal and support must be finite with b > a, got z={z}, a={a}, b={b}")
        if not a - 1e-9 * (b - a) <= z <= b + 1e-9 * (b - a):
            raise InputError(f"signal z={z} lies outside its announced support [{a}, {b}]")
        self.t += 1
        t = self.t
        span = b - a
        r = min(1.0, max(0.0, (z - a) / span))
        v = (self.points - a) / span
        # A candidate outside the round's support cannot be the mean: rejected for good.
        self.alive &= (v > 0.0) & (v < 1.0)
        idx = np.flatnonzero(self.alive)
        if idx.size:
            v = v[idx]
            var = np.maximum(self.min_var, (0.25 + self.sq[idx]) / t)
            lam = np.sqrt(self._log_bet_scale / (var * (t * math.log(t + 1.0))))
            lam_up = np.minimum(lam, 1.0 / (v + self.c))
            lam_down = np.minimum(lam, 1.0 / (1.0 - v + self.c))
            dev = r - v
            self.log_up[idx] += np.log1p(lam_up * dev)
            self.log_down[idx] += np.log1p(-lam_down * dev)
            self.sq[idx] += dev * dev
            hedged = np.logaddexp(
                _log_or_neg_inf(self.theta) + self.log_up[idx],
                _log_or_neg_inf(1.0 - self.theta) + self.log_down[idx],
            )
            self.alive[idx[hedged >= self._log_threshold]] = False
        return self.interval

    @property
    def empty(self) -> bool:
        """True once every candidate is rejected (an event of probability at most alpha)."""
        return not bool(self.alive.any())

    @property
    def interval(self) -> tuple[float, float]:
        """(lower, upper) of the candidates still alive, widened by one grid step; NaNs when empty."""
        idx = np.flatnonzero(self.alive)
        if idx.size == 0:
            return (math.nan, math.nan)
        lower = max(self.low, float(self.points[idx[0]]) - self.step)
        upper = min(self.high, float(self.points[idx[-1]]) + self.step)
        return lower, upper


def _log_or_neg_inf(x: float) -> float:
    return math.log(x) if x > 0 else -math.inf
