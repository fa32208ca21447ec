"""The methods Celeus is measured against, all with the same stopping rule and result type.

* :func:`uniform_betting` — what a user would pick today: items drawn uniformly without replacement,
  the Waudby-Smith & Ramdas without-replacement hedged betting confidence sequence (predictable
  plug-in empirical-Bernstein bets). Anytime-valid. The paper's main baseline ("naive e-value").
* :func:`celeus_ablation` — the paper's ablations through the Celeus engine: M2 fixed bounds,
  M3 no surrogate (uniform sampling, constant surrogate), and surrogate-without-guided-sampling.
* :func:`cer_eval` — Cer-Eval (arXiv 2505.03814) as reconstructed: partition the pool by 1-NN on
  features, label the stratum whose bound shrinks most, LIL-style empirical-Bernstein bound.
* :func:`clt_peeking` — a Wald interval recomputed after every label and stopped at the target width.
  Not anytime-valid: kept to show the failure Celeus fixes.
* :func:`ppi_fixed_n` — a prediction-powered interval from a fixed, pre-chosen number of uniform labels.
"""

from __future__ import annotations

import math
from statistics import NormalDist
from typing import Any

import numpy as np

from celeus_eval.celeus import (
    Celeus,
    EvalResult,
    _check_range,
    check_vector,
    pool_interval,
    population_widening,
)
from papershelf.errors import InputError, check_int, check_number

ABLATIONS = {
    "M2-fixed-bounds": {"bounds": "fixed"},
    "M3-no-surrogate": {"sampling": "uniform", "no_surrogate": True},
    "surrogate-uniform": {"sampling": "uniform"},
}


class WoRBettingCS:
    """Hedged betting CS for the mean of a finite population sampled uniformly without replacement.

    Observations are rescaled to [0, 1]. For a candidate mean m after t-1 draws with sum S, the next
    draw's conditional mean is mu_t(m) = (N m - S) / (N - t + 1); candidates whose mu_t leaves [0, 1]
    are impossible. Bets: lambda_t = sqrt(2 log(2/alpha) / (sigma2_{t-1} t log(1 + t))) with the
    predictable variance sigma2 = (1/4 + sum (x_i - mu_hat_i)^2) / t, truncated at c/mu_t and
    c/(1 - mu_t) (c = 1/2); wealths hedged with weight theta; reject at 1/alpha.
    """

    def __init__(self, alpha: float, n_pool: int, *, grid: int = 2000, c: float = 0.5, theta: float = 0.5):
        self.alpha = check_number("alpha", alpha, low=0, high=1, low_open=True, high_open=True)
        self.n_pool = check_int("n_pool", n_pool, low=1)
        self.c, self.theta = c, theta
        self.step = 1.0 / (grid + 1)
        self.points = self.step * np.arange(1, grid + 1)
        self.log_up = np.zeros(grid)
        self.log_down = np.zeros(grid)
        self.alive = np.ones(grid, dtype=bool)
        self.t = 0
        self.total = 0.0
        self._sq = 0.0  # sum of (x_i - mu_hat_{i-1})^2 over past draws (predictable variance)
        self._mean_hat = 0.5  # (1/2 + sum x) / (t + 1)
        self._log_bet_scale = 2.0 * math.log(2.0 / self.alpha)

    def update(self, x: float) -> tuple[float, float]:
        self.t += 1
        t, n = self.t, self.n_pool
        idx = np.flatnonzero(self.alive)
        mu = (n * self.points[idx] - self.total) / (n - t + 1)
        possible = (mu >= 0.0) & (mu <= 1.0)
        self.alive[idx[~possible]] = False
        idx, mu = idx[possible], mu[possible]
        var = (0.25 + self._sq) / t
        lam = math.sqrt(self._log_bet_scale / (var * t * math.log(1.0 + t)))
        with np.errstate(divide="ignore"):
            lam_up = np.minimum(lam, self.c / mu)
            lam_down = np.minimum(lam, self.c / (1.0 - mu))
        self.log_up[idx] += np.log1p(lam_up * (x - mu))
        self.log_down[idx] += np.log1p(-lam_down * (x - mu))
        hedged = np.logaddexp(
            math.log(self.theta) + self.log_up[idx], math.log(1 - self.theta) + self.log_down[idx]
        )
        self.alive[idx[hedged >= math.log(1.0 / self.alpha)]] = False
        self._sq += (x - self._mean_hat) ** 2
        self.total += x
        self._mean_hat = (0.5 + self.total) / (t + 1)
        return self.interval

    @property
    def interval(self) -> tuple[float, float]:
        idx = np.flatnonzero(self.alive)
        if idx.size == 0:
            return (math.nan, math.nan)
        return max(0.0, self.points[idx[0]] - self.step), min(1.0, self.points[idx[-1]] + self.step)


def _prepare(losses: Any, loss_range: Any) -> tuple[np.ndarray, float, float]:
    low, high = _check_range(loss_range)
    return check_vector("losses", losses, None, low, high), low, high


def _alphas(alpha: float, estimand: str, alpha_split: float, n_pool: int, loss_range: tuple[float, float]):
    alpha = check_number("alpha", alpha, low=0, high=1, low_open=True, high_open=True)
    if estimand == "population":
        return alpha * alpha_split, population_widening(alpha * (1 - alpha_split), n_pool, loss_range)
    if estimand != "pool":
        raise InputError(f"estimand must be one of pool, population; got {estimand!r}")
    return alpha, 0.0


def uniform_betting(
    losses: Any,
    *,
    alpha: float = 0.05,
    target_width: float = 0.05,
    loss_range: tuple[float, float] = (0.0, 1.0),
    estimand: str = "pool",
    alpha_split: float = 0.5,
    grid: int = 2000,
    max_labels: int | None = None,
    seed: int | np.random.Generator | None = None,
) -> EvalResult:
    """Uniform without-replacement sampling with the WSR betting CS; stops at ``target_width``."""
    y, low, high = _prepare(losses, loss_range)
    n_pool = y.size
    alpha_cs, widening = _alphas(alpha, estimand, alpha_split, n_pool, (low, high))
    target_width = check_number("target_width", target_width, low=0, low_open=True)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    order = rng.permutation(n_pool)
    limit = n_pool if max_labels is None else min(n_pool, check_int("max_labels", max_labels, low=0))
    cs = WoRBettingCS(alpha_cs, n_pool, grid=grid)
    span = high - low
    interval, loss_sum, trace = (low, high), 0.0, []
    for t, i in enumerate(order[:limit], start=1):
        lo01, hi01 = cs.update((y[i] - low) / span)
        loss_sum += y[i]
        estimate = loss_sum / t
        lo, hi = (estimate, estimate) if math.isnan(lo01) else (low + span * lo01, low + span * hi01)
        interval = pool_interval(
            (lo, hi),
            estimate=estimate,
            loss_sum=loss_sum,
            n_labels=t,
            n_pool=n_pool,
            loss_range=(low, high),
            widening=widening,
        )
        trace.append(
            {"t": t, "index": int(i), "loss": float(y[i]), "lower": interval[0], "upper": interval[1]}
        )
        if interval[1] - interval[0] <= target_width:
            break
    n = len(trace)
    estimate = loss_sum / n if n else (low + high) / 2
    return EvalResult(estimate, interval[0], interval[1], n, interval[1] - interval[0] <= target_width, trace)


def celeus_ablation(
    name: str, losses: Any, surrogate: Any, proxy: Any = None, *, seed: Any = None, **options: Any
) -> EvalResult:
    """Run one of the paper's ablations (keys of :data:`ABLATIONS`) through the Celeus engine."""
    if name not in ABLATIONS:
        raise InputError(f"ablation must be one of {', '.join(ABLATIONS)}; got {name!r}")
    spec = dict(ABLATIONS[name])
    y, low, _ = _prepare(losses, options.get("loss_range", (0.0, 1.0)))
    if spec.pop("no_surrogate", False):
        surrogate, proxy = np.full(y.size, low), None
    engine = Celeus(surrogate, proxy, seed=seed, **{**options, **spec})
    return engine.run(y)


def clt_peeking(
    losses: Any,
    *,
    alpha: float = 0.05,
    target_width: float = 0.05,
    min_labels: int = 30,
    loss_range: tuple[float, float] = (0.0, 1.0),
    max_labels: int | None = None,
    seed: int | np.random.Generator | None = None,
) -> EvalResult:
    """Uniform sampling and a finite-population Wald interval recomputed after every label.

    NOT anytime-valid: stopping at the first narrow interval undercovers.
    """
    y, low, high = _prepare(losses, loss_range)
    n_pool = y.size
    alpha = check_number("alpha", alpha, low=0, high=1, low_open=True, high_open=True)
    min_labels = check_int("min_labels", min_labels, low=2)
    z = NormalDist().inv_cdf(1 - alpha / 2)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    order = rng.permutation(n_pool)[: n_pool if max_labels is None else max_labels]
    sample = y[order]
    t = np.arange(1, sample.size + 1)
    mean = np.cumsum(sample) / t
    var = np.maximum(np.cumsum(sample * sample) / t - mean**2, 0.0) * t / np.maximum(t - 1, 1)
    fpc = np.sqrt(np.maximum(n_pool - t, 0) / max(n_pool - 1, 1))
    half = z * np.sqrt(var / t) * fpc
    lower, upper = np.maximum(low, mean - half), np.minimum(high, mean + half)
    ok = (upper - lower <= target_width) & (t >= min_labels)
    stop = int(np.argmax(ok)) if ok.any() else sample.size - 1
    return EvalResult(float(mean[stop]), float(lower[stop]), float(upper[stop]), stop + 1, bool(ok[stop]), [])


def ppi_fixed_n(
    losses: Any,
    surrogate: Any,
    n_labels: int,
    *,
    alpha: float = 0.05,
    loss_range: tuple[float, float] = (0.0, 1.0),
    seed: int | np.random.Generator | None = None,
) -> EvalResult:
    """Prediction-powered interval for the pool mean from ``n_labels`` uniform labels chosen in advance.

    theta_hat = mean(surrogate over the pool) + mean(loss - surrogate over the sample); the surrogate
    mean is exact for the pool, so only the rectifier's (finite-population) variance enters.
    """
    y, low, high = _prepare(losses, loss_range)
    s = check_vector("surrogate", surrogate, y.size, low, high)
    n = check_int("n_labels", n_labels, low=2, high=y.size)
    alpha = check_number("alpha", alpha, low=0, high=1, low_open=True, high_open=True)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    idx = rng.choice(y.size, size=n, replace=False)
    rect = y[idx] - s[idx]
    estimate = float(s.mean() + rect.mean())
    fpc = math.sqrt((y.size - n) / max(y.size - 1, 1))
    half = NormalDist().inv_cdf(1 - alpha / 2) * float(rect.std(ddof=1)) / math.sqrt(n) * fpc
    return EvalResult(estimate, max(low, estimate - half), min(high, estimate + half), n, True, [])


def cer_eval(
    losses: Any,
    features: Any,
    *,
    alpha: float = 0.05,
    target_width: float = 0.05,
    m_init: int = 100,
    max_strata: int = 5,
    max_labels: int | None = None,
    seed: int | np.random.Generator | None = None,
) -> EvalResult:
    """Cer-Eval's partition-based adaptive evaluation (reconstruction; 0-1 or [0, 1] losses)."""
    y, _, _ = _prepare(losses, (0.0, 1.0))
    x = np.asarray(features, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] != y.size or not np.isfinite(x).all():
        raise InputError(f"features must be a finite ({y.size}, d) array, got shape {x.shape}")
    x = x / np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
    alpha = check_number("alpha", alpha, low=0, high=1, low_open=True, high_open=True)
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    n_pool = y.size
    order = rng.permutation(n_pool)
    limit = n_pool if max_labels is None else min(n_pool, max_labels)
    eps_min = math.sqrt(math.log(1 / alpha) / (2 * n_pool))
    labelled = np.zeros(n_pool, dtype=bool)
    labelled[order[: min(m_init, limit)]] = True
    strata = np.zeros(n_pool, dtype=int)
    next_partition = m_init
    stats = _StrataStats(y, labelled, strata)
    while True:
        n_lab = int(labelled.sum())
        if n_lab >= next_partition:
            strata = _cer_partition(x, y, labelled, n_lab, n_pool, alpha, max_strata, rng)
            stats = _StrataStats(y, labelled, strata)
            next_partition = max(int(1.1 * next_partition), next_partition + 100)
        estimate, eps, gains = stats.bound(alpha)
        eps = max(eps, eps_min)
        if 2 * eps <= target_width or n_lab >= limit:
            break
        gains[stats.n_lab >= stats.n_pool] = -np.inf  # strata with nothing left to label
        if np.all(gains == -np.inf):
            break
        item = stats.take(int(np.argmax(gains)), order, labelled)
        labelled[item] = True
    lower, upper = max(0.0, estimate - eps), min(1.0, estimate + eps)
    return EvalResult(estimate, lower, upper, int(labelled.sum()), 2 * eps <= target_width, [])


class _StrataStats:
    """Running per-stratum counts and sums of labelled losses, so each bound costs O(K)."""

    def __init__(self, y: np.ndarray, labelled: np.ndarray, strata: np.ndarray) -> None:
        self.y, self.strata = y, strata
        k = int(strata.max()) + 1
        self.n_pool = np.bincount(strata, minlength=k).astype(float)
        lab = labelled
        self.n_lab = np.bincount(strata[lab], minlength=k).astype(float)
        self.sum = np.bincount(strata[lab], weights=y[lab], minlength=k)
        self.sumsq = np.bincount(strata[lab], weights=y[lab] ** 2, minlength=k)
        self._cursor = np.zeros(k, dtype=int)  # position in the shuffled order, per stratum

    def take(self, k: int, order: np.ndarray, labelled: np.ndarray) -> int:
        """The next unlabelled item of stratum k in the shuffled order; updates the sums."""
        pos = self._cursor[k]
        while labelled[order[pos]] or self.strata[order[pos]] != k:
            pos += 1
        self._cursor[k] = pos + 1
        item = int(order[pos])
        self.n_lab[k] += 1
        self.sum[k] += self.y[item]
        self.sumsq[k] += self.y[item] ** 2
        return item

    def bound(self, alpha: float) -> tuple[float, float, np.ndarray]:
        """Stratified estimate, its Cer-Eval bound and each stratum's score for the next label."""
        total_n = self.n_lab.sum()
        mu = self.sum.sum() / total_n
        v_all = max(self.sumsq.sum() / total_n - mu**2, 0.0)
        weight = self.n_pool / self.n_pool.sum()
        k_count = weight.size
        with np.errstate(divide="ignore", invalid="ignore"):
            n = self.n_lab
            r = np.where(n > 0, self.sum / n, mu)
            v = np.where(n > 0, np.maximum(self.sumsq / n - r**2, 0.0), v_all)
            p = n / self.n_pool
            mix = p * r + (1 - p) * mu
            v = p * v + (1 - p) * v_all + p * (r - mix) ** 2 + (1 - p) * (mu - mix) ** 2
            eta = np.sqrt((2 * np.log(np.log(n) + 1) + math.log(4 * k_count / alpha)) / (2 * n))
            eps_k = (2 / 3) * eta**2 + 2 * np.sqrt(v) * eta
            gains = weight * (4 * eta / 3 + 2 * np.sqrt(v)) * eta / n
        empty = n == 0  # nothing known about this stratum yet: maximal bound, labels go there first
        eps_k[empty], gains[empty] = 1.0, np.inf
        return float(np.sum(weight * r)), float(np.sum(weight * eps_k)), gains


def _cer_partition(x, y, labelled, n_lab, n_pool, alpha, max_strata, rng) -> np.ndarray:
    """Choose K <= max_strata strata by 1-NN on features from binned labelled losses; lowest bound wins."""
    lab_idx = np.flatnonzero(labelled)
    best, best_score = np.zeros(n_pool, dtype=int), math.inf
    for k in range(1, min(math.isqrt(n_lab), max_strata) + 1):
        bins = np.floor(y[lab_idx] * (k - 0.01 / k)).astype(int)
        if k == 1:
            strata = np.zeros(n_pool, dtype=int)
        else:
            frac = min(0.8, max((n_lab / n_pool) ** 1.5, 0.5))
            fit = rng.choice(lab_idx.size, size=max(1, int(n_lab * frac)), replace=False)
            strata = bins[fit][_nearest(x, x[lab_idx[fit]])]
        lab_counts = np.bincount(strata[lab_idx], minlength=k)
        if (lab_counts <= 1).any():
            break
        if (np.bincount(strata, minlength=k) == 0).any():
            continue
        _, score, _ = _StrataStats(y, labelled, strata).bound(alpha)
        if score < best_score:
            best, best_score = strata, score
    return best


def _nearest(queries: np.ndarray, refs: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Index of each query's nearest reference by cosine similarity (rows are unit vectors)."""
    out = np.empty(queries.shape[0], dtype=int)
    for start in range(0, queries.shape[0], chunk):
        out[start : start + chunk] = np.argmax(queries[start : start + chunk] @ refs.T, axis=1)
    return out
