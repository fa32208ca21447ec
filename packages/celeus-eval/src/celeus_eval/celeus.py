"""The Celeus engine: surrogate-assisted signals, residual-guided sampling, anytime-valid stopping.

Round t of :class:`Celeus`:

1. ``propose()`` freezes the sampling distribution q over the unlabelled items (it depends on the
   surrogate and the label-free proxy only, never on labels) and draws one item without replacement.
2. ``observe(loss)`` reveals that item's loss, forms the signal Z_t (exactly conditionally unbiased
   for the pool risk) and its support [a_t, b_t], and feeds both to the :class:`~celeus_eval.cs.BettingCS`.
3. The reported interval is the sequence intersected with the pool's feasibility bounds and, for the
   population estimand, widened by the Hoeffding term for the pool-to-population step.

Because draws never depend on labels, several items can be proposed before any label comes back (a
labelling campaign asks for ``k`` items at a time) and the result is identical to labelling them one
by one: the human-in-the-loop CLI replays a campaign through the very same engine.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from celeus_eval.cs import BettingCS
from celeus_eval.signal import (
    SAMPLING_RULES,
    fixed_support,
    plug_in,
    residual_proposal,
    signal_value,
    support_offsets,
)
from papershelf.errors import InputError, check_choice, check_int, check_number

ESTIMANDS = ("pool", "population")
BOUNDS = ("adaptive", "fixed")


@dataclass(frozen=True)
class Draw:
    """One proposed item, with everything about its round that was frozen before its label came back."""

    index: int
    q: float  # probability the item had of being drawn
    low_offset: float  # a_t - m_t
    high_offset: float  # b_t - m_t


@dataclass
class EvalResult:
    """Outcome of an evaluation.

    ``estimate`` is the running mean of the signals (unbiased for the pool risk); ``lower``/``upper``
    the anytime-valid interval at the stopping time; ``reached`` whether its width got down to the
    target; ``trace`` one dict per labelled item (t, index, loss, signal, lower, upper).
    """

    estimate: float
    lower: float
    upper: float
    n_labels: int
    reached: bool
    trace: list[dict[str, float]] = field(default_factory=list, repr=False)

    @property
    def width(self) -> float:
        return self.upper - self.lower

    def as_dict(self, *, with_trace: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "estimate": self.estimate,
            "lower": self.lower,
            "upper": self.upper,
            "width": self.width,
            "n_labels": self.n_labels,
            "reached": self.reached,
        }
        if with_trace:
            out["trace"] = self.trace
        return out


def check_vector(name: str, values: Any, n: int | None, low: float, high: float) -> np.ndarray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be an array of numbers") from None
    if arr.ndim != 1:
        raise InputError(f"{name} must be one-dimensional, got shape {arr.shape}")
    if arr.size == 0:
        raise InputError(f"{name} is empty: the pool needs at least one item")
    if n is not None and arr.shape[0] != n:
        raise InputError(f"{name} has {arr.shape[0]} items but the pool has {n}")
    bad = ~np.isfinite(arr)
    if bad.any():
        raise InputError(
            f"{name} has {int(bad.sum())} NaN/inf value(s), first at position {int(np.argmax(bad))}"
        )
    out = (arr < low) | (arr > high)
    if out.any():
        i = int(np.argmax(out))
        raise InputError(f"{name} must lie in [{low:g}, {high:g}]; position {i} holds {arr[i]:g}")
    return arr


def _check_range(loss_range: Any) -> tuple[float, float]:
    try:
        low, high = (float(x) for x in loss_range)
    except (TypeError, ValueError):
        raise InputError(f"loss_range must be a pair (low, high), got {loss_range!r}") from None
    if not (math.isfinite(low) and math.isfinite(high) and high > low):
        raise InputError(f"loss_range must be finite with high > low, got ({low}, {high})")
    return low, high


class Celeus:
    """Sequential, anytime-valid, label-efficient estimation of a pool's mean loss.

    Parameters
    ----------
    surrogate : array (N,) in loss_range
        Cheap predictions of each item's loss (e.g. the target model's own uncertainty). A constant
        array switches the surrogate off (the "no surrogate" ablation).
    proxy : array (N,) in loss_range, optional
        The label-free proxy loss of the sampling rule (e.g. disagreement with a smaller model).
        Without one, the rule uses the residual a calibrated surrogate would expect,
        2 s(1-s)(U-L) on the rescaled surrogate s.
    alpha : float in (0, 1)
        Miscoverage allowed over the whole sequence (default 0.05).
    target_width : float > 0
        Stop once the interval's full width is at most this (default 0.05).
    sampling : "uncertainty" | "uniform" | "oracle"
        "uncertainty": q proportional to |proxy - surrogate| with floor beta/N (the paper's rule);
        "uniform": 1/n over the n unlabelled items; "oracle": q proportional to the true residual
        |loss - surrogate| (simulations only, needs ``oracle_losses``; the paper's Theorem-5 optimum).
    beta : float in (0, 1]
        Floor of the sampling rule, q >= beta/N (paper: 0.4).
    loss_range : (L, U)
        Known range of every loss (default (0, 1); cross-entropy capped at 3 uses (0, 3)).
    estimand : "pool" | "population"
        "pool": the mean loss of these N items, with all of alpha on the sequence. "population": the
        paper's protocol, alpha split between the sequence and a Hoeffding widening
        (U-L) sqrt(log(2/alpha_2)/(2N)) for the step from pool to population.
    alpha_split : float in (0, 1)
        Share of alpha given to the sequence when estimand="population" (paper: 0.5).
    grid, bet_cap, hedge : int, float, float
        The betting sequence's grid size (2000), cap offset c (0.5) and hedge weight theta (0.5).
    bounds : "adaptive" | "fixed"
        Per-round support of the signal (the paper's default) or one support valid in every round
        (ablation M2).
    seed : int | numpy.random.Generator | None
        Randomness of the draws.
    """

    def __init__(
        self,
        surrogate: Any,
        proxy: Any = None,
        *,
        alpha: float = 0.05,
        target_width: float = 0.05,
        sampling: str = "uncertainty",
        beta: float = 0.4,
        loss_range: tuple[float, float] = (0.0, 1.0),
        estimand: str = "pool",
        alpha_split: float = 0.5,
        grid: int = 2000,
        bet_cap: float = 0.5,
        hedge: float = 0.5,
        bounds: str = "adaptive",
        oracle_losses: Any = None,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        self.low, self.high = _check_range(loss_range)
        self.alpha = check_number("alpha", alpha, low=0, high=1, low_open=True, high_open=True)
        self.target_width = check_number("target_width", target_width, low=0, low_open=True)
        self.sampling = check_choice("sampling", sampling, SAMPLING_RULES)
        self.beta = check_number("beta", beta, low=0, high=1, low_open=True)
        self.estimand = check_choice("estimand", estimand, ESTIMANDS)
        self.alpha_split = check_number(
            "alpha_split", alpha_split, low=0, high=1, low_open=True, high_open=True
        )
        self.bounds = check_choice("bounds", bounds, BOUNDS)
        grid = check_int("grid", grid, low=2, high=10_000_000)

        self.surrogate = check_vector("surrogate", surrogate, None, self.low, self.high)
        self.n_pool = n_pool = self.surrogate.shape[0]
        self.proxy = None if proxy is None else check_vector("proxy", proxy, n_pool, self.low, self.high)
        self.oracle_losses = (
            None
            if oracle_losses is None
            else check_vector("oracle_losses", oracle_losses, n_pool, self.low, self.high)
        )
        if self.sampling == "oracle" and self.oracle_losses is None:
            raise InputError("sampling='oracle' needs oracle_losses (the true losses; simulations only)")

        if self.estimand == "population":
            self.alpha_cs = self.alpha * self.alpha_split
            alpha_pop = self.alpha - self.alpha_cs
            self.widening = population_widening(alpha_pop, n_pool, (self.low, self.high))
            if 2.0 * self.widening >= self.target_width:
                raise InputError(
                    f"target_width={self.target_width:g} is unreachable for the population estimand: the "
                    f"pool-to-population widening alone is {2 * self.widening:.4f} for N={n_pool}",
                    hint="use estimand='pool' or a larger target_width",
                )
        else:
            self.alpha_cs, self.widening = self.alpha, 0.0

        self.cs = BettingCS(self.alpha_cs, low=self.low, high=self.high, grid=grid, c=bet_cap, theta=hedge)
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self._score = self._sampling_score()
        self._fixed = fixed_support(self.beta if self.sampling != "uniform" else 1.0, self.low, self.high)
        self._unlabelled = np.ones(n_pool, dtype=bool)  # not yet drawn
        self._surrogate_total = float(self.surrogate.sum())
        self._pending: deque[Draw] = deque()
        self._loss_sum = 0.0  # over items whose label has been observed
        self._surrogate_sum = 0.0  # surrogate predictions of those same items
        self._signal_sum = 0.0
        self.trace: list[dict[str, float]] = []
        self._interval = (self.low, self.high)

    # ---- sampling -------------------------------------------------------------------------------
    def _sampling_score(self) -> np.ndarray:
        if self.sampling == "uniform":
            return np.zeros(self.n_pool)
        if self.sampling == "oracle":
            return np.abs(self.oracle_losses - self.surrogate)
        if self.proxy is not None:
            return np.abs(self.proxy - self.surrogate)
        # No proxy: the absolute residual expected if the surrogate were a calibrated Bernoulli mean.
        s = (self.surrogate - self.low) / (self.high - self.low)
        return 2.0 * s * (1.0 - s) * (self.high - self.low)

    @property
    def n_drawn(self) -> int:
        return self.n_pool - int(self._unlabelled.sum())

    @property
    def n_labels(self) -> int:
        return self.cs.t

    @property
    def pending(self) -> list[int]:
        """Items proposed whose labels have not been observed yet, in draw order."""
        return [d.index for d in self._pending]

    def propose(self) -> int:
        """Draw the next item to label (without replacement); its label is then due via :meth:`observe`."""
        remaining = np.flatnonzero(self._unlabelled)
        if remaining.size == 0:
            raise InputError("every item of the pool has already been drawn")
        score = self._score[remaining]
        if self.sampling == "uniform":
            q = np.full(remaining.size, 1.0 / remaining.size)
        else:
            q = residual_proposal(score, self.beta, self.n_pool)
        cdf = np.cumsum(q)
        pick = min(int(np.searchsorted(cdf, self.rng.random() * cdf[-1], side="right")), remaining.size - 1)
        below, above = support_offsets(self.surrogate[remaining], q, self.n_pool, self.low, self.high)
        draw = Draw(index=int(remaining[pick]), q=float(q[pick]), low_offset=below, high_offset=above)
        self._unlabelled[draw.index] = False
        self._pending.append(draw)
        return draw.index

    # ---- observing ------------------------------------------------------------------------------
    def observe(self, loss: float) -> tuple[float, float]:
        """Reveal the loss of the oldest pending item; return the updated interval."""
        if not self._pending:
            raise InputError("no item is waiting for a label: call propose() first")
        loss = check_number("loss", loss, low=self.low, high=self.high)
        draw = self._pending.popleft()
        s = float(self.surrogate[draw.index])
        # Items drawn after this one but not yet labelled still count as unlabelled in this round.
        m = plug_in(self._loss_sum, self._surrogate_total - self._surrogate_sum, self.n_pool)
        z = signal_value(m, loss, s, draw.q, self.n_pool)
        if self.bounds == "adaptive":
            a, b = m + draw.low_offset, m + draw.high_offset
        else:
            a, b = self._fixed
        self.cs.update(z, a, b)
        self._loss_sum += loss
        self._surrogate_sum += s
        self._signal_sum += z
        self._interval = self._final_interval()
        lower, upper = self._interval
        self.trace.append(
            {
                "t": self.n_labels,
                "index": draw.index,
                "loss": loss,
                "signal": z,
                "lower": lower,
                "upper": upper,
            }
        )
        return self._interval

    def _final_interval(self) -> tuple[float, float]:
        lower, upper = self.cs.interval
        if self.cs.empty:  # every candidate rejected: a miscoverage event of probability <= alpha
            lower = upper = self.estimate
        return pool_interval(
            (lower, upper),
            estimate=self.estimate,
            loss_sum=self._loss_sum,
            n_labels=self.n_labels,
            n_pool=self.n_pool,
            loss_range=(self.low, self.high),
            widening=self.widening,
        )

    # ---- results --------------------------------------------------------------------------------
    @property
    def interval(self) -> tuple[float, float]:
        return self._interval

    @property
    def width(self) -> float:
        return self._interval[1] - self._interval[0]

    @property
    def reached(self) -> bool:
        return self.width <= self.target_width

    @property
    def estimate(self) -> float:
        """Mean of the signals so far (unbiased for the pool risk); the surrogate mean before any label."""
        if self.n_labels == 0:
            return self._surrogate_total / self.n_pool
        return self._signal_sum / self.n_labels

    def result(self) -> EvalResult:
        lower, upper = self._interval
        return EvalResult(
            estimate=self.estimate,
            lower=lower,
            upper=upper,
            n_labels=self.n_labels,
            reached=self.reached,
            trace=list(self.trace),
        )

    def step(self, oracle: Callable[[int], float]) -> tuple[float, float]:
        """Propose one item, ask ``oracle(index)`` for its loss, observe it."""
        index = self.propose()
        return self.observe(oracle(index))

    def run(self, oracle: Any, *, max_labels: int | None = None, stop: bool = True) -> EvalResult:
        """Label items until the interval is narrow enough (``stop``), ``max_labels`` or the pool runs out.

        ``oracle`` is an array of the N losses (retrospective use) or a callable index -> loss.
        """
        lookup = _oracle_function(oracle, self.n_pool)
        limit = self.n_pool if max_labels is None else check_int("max_labels", max_labels, low=0)
        while self.n_labels < min(limit, self.n_pool) and not (stop and self.reached):
            self.step(lookup)
        return self.result()


def pool_interval(
    interval: tuple[float, float],
    *,
    estimate: float,
    loss_sum: float,
    n_labels: int,
    n_pool: int,
    loss_range: tuple[float, float],
    widening: float = 0.0,
) -> tuple[float, float]:
    """Intersect a sequence's interval with the pool's feasibility bounds, then widen for the population.

    Whatever the N - t unlabelled losses are, the pool mean lies in
    [(sum of labelled + (N - t) L) / N, (sum of labelled + (N - t) U) / N]; the population estimand
    then adds ``widening`` on each side.
    """
    low, high = loss_range
    feasible_low = (loss_sum + (n_pool - n_labels) * low) / n_pool
    feasible_high = (loss_sum + (n_pool - n_labels) * high) / n_pool
    lower, upper = max(interval[0], feasible_low), min(interval[1], feasible_high)
    if lower > upper:  # the sequence has excluded every feasible value: report the nearest one
        lower = upper = min(max(estimate, feasible_low), feasible_high)
    return max(low, lower - widening), min(high, upper + widening)


def population_widening(alpha: float, n_pool: int, loss_range: tuple[float, float]) -> float:
    """Hoeffding's (U - L) sqrt(log(2/alpha) / (2N)) for the step from a pool of N to its population."""
    return (loss_range[1] - loss_range[0]) * math.sqrt(math.log(2.0 / alpha) / (2.0 * n_pool))


def _oracle_function(oracle: Any, n_pool: int) -> Callable[[int], float]:
    if callable(oracle):
        return oracle
    losses = np.asarray(oracle, dtype=np.float64) if not isinstance(oracle, np.ndarray) else oracle
    if losses.ndim != 1 or losses.shape[0] != n_pool:
        raise InputError(
            f"oracle must be a callable or an array of {n_pool} losses, got shape {losses.shape}"
        )
    return lambda i: float(losses[i])


def evaluate(
    oracle: Any,
    surrogate: Any,
    *,
    alpha: float = 0.05,
    target_width: float = 0.05,
    sampling: str = "uncertainty",
    max_labels: int | None = None,
    seed: int | None = None,
    **options: Any,
) -> EvalResult:
    """Estimate a pool's mean loss with an anytime-valid interval, labelling as few items as possible.

    ``oracle``: the N known losses/labels in ``loss_range`` (retrospective use) or a callable from
    item index to loss (live use). ``surrogate``: N cheap predictions of the same quantity.
    ``options`` go to :class:`Celeus` (``proxy``, ``beta``, ``loss_range``, ``estimand``, ...).

    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> p = rng.beta(1, 4, size=2000)
    >>> losses = (rng.random(2000) < p).astype(float)
    >>> res = evaluate(losses, p, target_width=0.1, seed=0)
    >>> bool(res.lower <= losses.mean() <= res.upper and res.width <= 0.1)
    True
    """
    low, high = _check_range(options.get("loss_range", (0.0, 1.0)))
    if not callable(oracle):
        oracle = check_vector("oracle", oracle, None, low, high)
        if surrogate is None:  # the no-surrogate ablation: a constant prediction
            surrogate = np.full(oracle.shape[0], low)
    engine = Celeus(
        surrogate, alpha=alpha, target_width=target_width, sampling=sampling, seed=seed, **options
    )
    return engine.run(oracle, max_labels=max_labels)
