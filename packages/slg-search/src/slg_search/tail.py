"""Tail estimation from sampled rewards and the predicted best-of-N value V̂_N (the scaling-law prediction).

Gaussian (default): keep the rewards at or above the empirical (1 − q) quantile, treat them as a normal
N(μ, σ²) truncated below at its own (1 − q) quantile z = Φ⁻¹(1 − q), and match the first two moments of
that truncated normal:

    λ = φ(z) / q                       (inverse Mills ratio at z)
    c = 1 + zλ − λ²                    (variance of the standard normal truncated at z)
    σ̂ = √(v / c),   μ̂ = m̄ − σ̂ λ      (m̄, v: mean and unbiased variance of the kept rewards)

Generalized Pareto (option): fit a GPD to the exceedances over the same threshold u by maximum
likelihood (scipy), with the empirical tail mass p_u above u; below u the empirical distribution is kept.

Two rules turn a fit into a prediction for best-of-N:

* ``"quantile"`` (the paper's rule): V̂_N = the fitted (1 − 1/N) quantile, μ̂ + σ̂ Φ⁻¹(1 − 1/N);
* ``"expected"``: V̂_N = E[max of N draws] under the fitted distribution, by numerical integration.

Both grow like σ√(2 log N); they differ by a bounded amount (Φ⁻¹(0.999) = 3.090 against E[max of 1000
standard normals] = 3.241). Fallback (documented): with fewer than two kept rewards, or zero spread
among them, the fit is degenerate and V̂_N = max(rewards) for every N.

>>> import numpy as np
>>> rng = np.random.default_rng(0)
>>> fit = tail_fit(rng.normal(1.0, 2.0, size=100_000))
>>> round(fit.mu, 1), round(fit.sigma, 1)
(1.0, 2.0)
>>> round(float(expected_max_normal(2)), 6)  # E[max of two standard normals] = 1/√π
0.56419
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import special

from papershelf.errors import InputError, check_choice, check_int, check_number

FAMILIES = ("gaussian", "gpd")
RULES = ("quantile", "expected")
#: Minimum exceedances for a GPD fit; with fewer, the Gaussian fit is used instead.
GPD_MIN_EXCEEDANCES = 10


def check_rewards(rewards: Any, name: str = "rewards") -> np.ndarray:
    """Rewards as a finite 1-D float64 array with at least one entry (InputError otherwise)."""
    try:
        arr = np.asarray(rewards, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be numeric") from None
    if arr.ndim != 1:
        raise InputError(f"{name} must be a 1-D array of rewards, got shape {arr.shape}")
    if arr.size == 0:
        raise InputError(f"{name} is empty: at least one reward is needed")
    bad = ~np.isfinite(arr)
    if bad.any():
        i = int(np.argmax(bad))
        raise InputError(f"{name} must be finite: entry {i} is {arr[i]}")
    return arr


def check_tail_fraction(q: Any) -> float:
    return check_number("tail_fraction", q, low=0.0, high=1.0, low_open=True, high_open=True)


def check_n(n: Any, name: str = "n") -> int:
    return check_int(name, n, low=1)


def truncnorm_constants(q: float) -> tuple[float, float, float]:
    """(z, λ, c) of a standard normal truncated below at its (1 − q) quantile.

    >>> [round(x, 4) for x in truncnorm_constants(0.2)]
    [0.8416, 1.3998, 0.2186]
    """
    q = check_tail_fraction(q)
    z = float(special.ndtri(1.0 - q))
    lam = float(math.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi) / q)
    return z, lam, 1.0 + z * lam - lam * lam


# ---- E[max of N] of a standard normal ---------------------------------------------------------------
_GRID = np.linspace(-9.0, 9.0, 18_001)  # step 1e-3; the density of the max lives well inside for N <= 1e9
_LOGPHI = -0.5 * _GRID**2 - 0.5 * math.log(2.0 * math.pi)
_LOGCDF = special.log_ndtr(_GRID)


def expected_max_normal(n: Any) -> np.ndarray:
    """E[max of n i.i.d. standard normals], vectorised over ``n`` (numerical integration on a fine grid).

    Uses E = ∫ x · n φ(x) Φ(x)^(n−1) dx with the trapezoid rule (step 1e-3; error < 1e-9 for n <= 1e6).
    """
    ns = np.asarray(n, dtype=np.float64)
    if np.any(ns < 1) or not np.all(np.isfinite(ns)):
        raise InputError("n must be >= 1 (a number of draws)")
    flat = ns.reshape(-1)
    dens = np.exp(np.log(flat)[:, None] + _LOGPHI[None, :] + (flat[:, None] - 1.0) * _LOGCDF[None, :])
    out = np.trapezoid(dens * _GRID[None, :], _GRID, axis=1)
    return out.reshape(ns.shape)


# ---- the fit -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TailFit:
    """A fitted upper tail. ``family`` is what was actually fitted (after any fallback).

    Gaussian: ``mu``, ``sigma`` of the normal whose upper tail matches. GPD: ``threshold`` u,
    ``tail_mass`` p_u, ``shape`` ξ, ``scale`` β, and the sorted ``body`` of rewards at or below u.
    Degenerate (``family == "max"``): V̂_N = ``sample_max`` for all N; ``note`` says why.
    """

    family: str
    n_samples: int
    n_tail: int
    sample_max: float
    mu: float = float("nan")
    sigma: float = float("nan")
    threshold: float = float("nan")
    tail_mass: float = float("nan")
    shape: float = float("nan")
    scale: float = float("nan")
    note: str = ""
    body: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)

    def predict(self, n: Any, rule: str = "expected") -> np.ndarray | float:
        """V̂_N for ``n`` (an int or an array of ints)."""
        check_choice("rule", rule, RULES)
        ns = np.asarray(n)
        if ns.size == 0 or np.any(ns < 1) or not np.all(np.isfinite(ns)):
            raise InputError(f"n must be >= 1, got {n!r}")
        if self.family == "max":
            out = np.full(ns.shape, self.sample_max, dtype=np.float64)
        elif self.family == "gaussian":
            nf = ns.astype(np.float64)
            if rule == "quantile":
                with np.errstate(divide="ignore"):
                    factor = special.ndtri(1.0 - 1.0 / nf)
                factor = np.where(nf == 1, 0.0, factor)  # the median for one draw
            else:
                factor = expected_max_normal(nf)
            out = self.mu + self.sigma * factor
        else:
            out = np.vectorize(lambda k: self._gpd_value(int(k), rule), otypes=[float])(ns)
        return float(out) if np.ndim(n) == 0 else out

    # GPD: F(x) = empirical CDF for x <= u, 1 − p_u (1 + ξ(x−u)/β)^(−1/ξ) above.
    def _gpd_survival(self, y: np.ndarray) -> np.ndarray:
        xi, beta = self.shape, self.scale
        if abs(xi) < 1e-12:
            return np.exp(-y / beta)
        base = 1.0 + xi * y / beta
        return np.where(base > 0, np.maximum(base, 1e-300) ** (-1.0 / xi), 0.0)

    def _gpd_value(self, n: int, rule: str) -> float:
        u, p, xi, beta = self.threshold, self.tail_mass, self.shape, self.scale
        if rule == "quantile":
            if n * p > 1.0:  # the (1 − 1/n) quantile lies in the fitted tail
                s = 1.0 / (n * p)
                y = beta * math.log(1.0 / s) if abs(xi) < 1e-12 else beta * (s ** (-xi) - 1.0) / xi
                return u + y
            return float(np.quantile(np.append(self.body, u), 1.0 - 1.0 / n)) if n > 1 else self._median()
        if xi >= 1.0:
            return math.inf  # the tail has no mean: E[max] diverges
        # E[max] = L + ∫_L^∞ (1 − F^n): the body part is exact (F is a step function), the tail numeric.
        body = self.body
        m = self.n_samples
        lower = float(body[0]) if body.size else u
        total = lower
        if body.size:
            edges = np.append(body, u)
            levels = np.arange(1, body.size + 1) / m  # F on [body[i], body[i+1])
            total += float(np.sum((1.0 - levels**n) * np.diff(edges)))
        span = beta / -xi if xi < 0 else _gpd_upper(xi, beta, p, n)  # finite endpoint, or negligible beyond
        ys = np.linspace(0.0, span, 20_001)
        integrand = -np.expm1(n * np.log1p(-p * self._gpd_survival(ys)))
        total += float(np.trapezoid(integrand, ys))
        return total

    def _median(self) -> float:
        return float(np.median(np.append(self.body, self.threshold)))


def _gpd_upper(xi: float, beta: float, p: float, n: int) -> float:
    """A point y beyond which n·p·S(y) < 1e-10 (the integrand is negligible)."""
    target = 1e-10 / (n * p)
    if xi < 1e-12:
        return beta * math.log(1.0 / target)
    return beta * (target ** (-xi) - 1.0) / xi


def tail_fit(rewards: Any, tail_fraction: float = 0.2, family: str = "gaussian") -> TailFit:
    """Fit the upper tail of ``rewards`` (1-D, finite). See the module docstring for the estimators."""
    r = check_rewards(rewards)
    q = check_tail_fraction(tail_fraction)
    check_choice("family", family, FAMILIES)
    m = r.size
    rmax = float(r.max())
    threshold = float(np.percentile(r, 100.0 * (1.0 - q)))
    tail = r[r >= threshold]
    if family == "gpd":
        fit = _gpd_fit(r, threshold, rmax)
        if fit is not None:
            return fit
    if tail.size < 2:
        return TailFit("max", m, int(tail.size), rmax, note="fewer than 2 rewards in the tail")
    var = float(np.var(tail, ddof=1))
    if not var > 0.0:
        return TailFit("max", m, int(tail.size), rmax, note="no spread among the tail rewards")
    _, lam, c = truncnorm_constants(q)
    sigma = math.sqrt(var / c)
    mu = float(np.mean(tail)) - sigma * lam
    note = "gpd needs more exceedances; gaussian used" if family == "gpd" else ""
    return TailFit("gaussian", m, int(tail.size), rmax, mu=mu, sigma=sigma, threshold=threshold, note=note)


def _gpd_fit(r: np.ndarray, u: float, rmax: float) -> TailFit | None:
    from scipy import stats

    exc = r[r > u] - u
    if exc.size < GPD_MIN_EXCEEDANCES or not np.ptp(exc) > 0:
        return None
    shape, _, scale = stats.genpareto.fit(exc, floc=0.0)
    if not (np.isfinite(shape) and np.isfinite(scale) and scale > 0):
        return None
    body = np.sort(r[r <= u])
    return TailFit(
        "gpd",
        r.size,
        int(exc.size),
        rmax,
        threshold=u,
        tail_mass=exc.size / r.size,
        shape=float(shape),
        scale=float(scale),
        body=body,
    )


def tail_fit_batch(rewards: Any, tail_fraction: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian tail fits of every row of a (R, m) array at once: returns (μ̂, σ̂), each of shape (R,).

    Degenerate rows (fewer than two tail rewards or no spread) get σ̂ = 0 and μ̂ = the row maximum, so
    that μ̂ + σ̂·anything = max(row), exactly the scalar fallback.
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] == 0:
        raise InputError(f"rewards must be a 2-D (repetitions, samples) array, got shape {r.shape}")
    if not np.all(np.isfinite(r)):
        raise InputError("rewards must be finite")
    q = check_tail_fraction(tail_fraction)
    thr = np.percentile(r, 100.0 * (1.0 - q), axis=1, keepdims=True)
    mask = r >= thr
    k = mask.sum(axis=1)
    s1 = np.where(mask, r, 0.0).sum(axis=1)
    mean = s1 / k
    dev = np.where(mask, r - mean[:, None], 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        var = (dev**2).sum(axis=1) / (k - 1)
    _, lam, c = truncnorm_constants(q)
    ok = (k >= 2) & (var > 0)
    sigma = np.where(ok, np.sqrt(np.where(ok, var, 0.0) / c), 0.0)
    mu = np.where(ok, mean - sigma * lam, r.max(axis=1))
    return mu, sigma


def predict_bon(
    rewards: Any, n: Any, tail_fraction: float = 0.2, family: str = "gaussian", rule: str = "expected"
) -> np.ndarray | float:
    """The predicted best-of-N value V̂_N from sampled ``rewards`` (``n``: an int or an array of ints)."""
    return tail_fit(rewards, tail_fraction, family).predict(n, rule)


def predict_curve(
    rewards: Any, ns: Any, tail_fraction: float = 0.2, family: str = "gaussian", rule: str = "expected"
) -> np.ndarray:
    """V̂_N for every N in ``ns`` (the predicted scaling curve)."""
    arr = np.atleast_1d(np.asarray(ns))
    return np.asarray(predict_bon(rewards, arr, tail_fraction, family, rule), dtype=np.float64)


def empirical_bon(rewards: Any, n: int) -> float:
    """The unbiased estimate of E[max of n draws] from m >= n samples (U-statistic of order n).

    With sorted rewards r_(1) <= … <= r_(m), E[max of n] = Σ_i C(i−1, n−1)/C(m, n) · r_(i).
    """
    r = np.sort(check_rewards(rewards))
    n = check_n(n)
    m = r.size
    if n > m:
        raise InputError(f"n must be <= the number of rewards ({m}) for the empirical estimate, got {n}")
    i = np.arange(1, m + 1)
    logw = special.gammaln(i) - special.gammaln(n) - special.gammaln(i - n + 1)
    log_total = special.gammaln(m + 1) - special.gammaln(n + 1) - special.gammaln(m - n + 1)
    logw = np.where(i >= n, logw - log_total, -np.inf)
    return float(np.sum(np.exp(logw) * r))
