"""Slow, obviously-correct versions straight from the equations: the oracles the fast paths are tested
against. Plain Python loops and ``math``; scipy only for independent checks (truncated-normal moments,
adaptive quadrature)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np


def truncnorm_constants_ref(q: float) -> tuple[float, float, float]:
    """(z, λ, c) from scipy's truncated normal: λ = E[Z | Z > z], c = Var[Z | Z > z], z = Φ⁻¹(1 − q)."""
    from scipy import stats

    z = float(stats.norm.ppf(1.0 - q))
    dist = stats.truncnorm(z, math.inf)
    return z, float(dist.mean()), float(dist.var())


def percentile_ref(values: list[float], p: float) -> float:
    """The p-th percentile with linear interpolation between order statistics (numpy's default)."""
    xs = sorted(values)
    h = (len(xs) - 1) * p / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (h - lo) * (xs[hi] - xs[lo])


def tail_fit_ref(rewards: Any, tail_fraction: float = 0.2) -> tuple[float, float] | None:
    """(μ̂, σ̂) of the Gaussian truncated-moment fit, or None when degenerate (fallback to the max)."""
    r = [float(x) for x in rewards]
    q = tail_fraction
    u = percentile_ref(r, 100.0 * (1.0 - q))
    tail = [x for x in r if x >= u]
    k = len(tail)
    if k < 2:
        return None
    mean = sum(tail) / k
    var = sum((x - mean) ** 2 for x in tail) / (k - 1)
    if var <= 0:
        return None
    z = _ndtri(1.0 - q)
    lam = math.exp(-z * z / 2) / math.sqrt(2 * math.pi) / q
    c = 1 + z * lam - lam * lam
    sigma = math.sqrt(var / c)
    return mean - sigma * lam, sigma


def _ndtri(p: float) -> float:
    """Φ⁻¹(p) by bisection on Φ(x) = (1 + erf(x/√2))/2."""
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def predict_ref(rewards: Any, n: int, tail_fraction: float = 0.2, rule: str = "quantile") -> float:
    """V̂_n: μ̂ + σ̂ Φ⁻¹(1 − 1/n) ("quantile") or μ̂ + σ̂ E[max of n standard normals] ("expected")."""
    fit = tail_fit_ref(rewards, tail_fraction)
    if fit is None:
        return max(float(x) for x in rewards)
    mu, sigma = fit
    if rule == "quantile":
        return mu + sigma * (0.0 if n == 1 else _ndtri(1.0 - 1.0 / n))
    return mu + sigma * expected_max_normal_ref(n)


def expected_max_normal_ref(n: int) -> float:
    """E[max of n standard normals] = ∫ x n φ(x) Φ(x)^(n−1) dx by adaptive quadrature."""
    from scipy import integrate

    def integrand(x: float) -> float:
        cdf = 0.5 * (1 + math.erf(x / math.sqrt(2)))
        return x * n * math.exp(-x * x / 2) / math.sqrt(2 * math.pi) * cdf ** (n - 1)

    return integrate.quad(integrand, -12, 12, limit=400, epsabs=1e-12, points=[0.0, 2.0, 3.0, 4.0])[0]


def slg_reference(
    env: Any, root: Any, budget: int, width: int, m: int, tail_fraction: float, seed: int
) -> dict:
    """One-layer SLG written out step by step with the reference tail fit (same rollout order as the
    fast path, so the same seed gives the same answer)."""
    rng = np.random.default_rng(seed)
    used = 0
    best = -math.inf
    responses, rewards = env.rollout(root, m, rng)
    used += m
    best = max(best, max(rewards))
    order = sorted(range(m), key=lambda i: (-rewards[i], i))
    children: list = []
    for i in order:
        child = env.first_step(root, responses[i])
        if child is not None and child not in children:
            children.append(child)
        if len(children) == width:
            break
    states, samples = [root], [list(rewards)]
    for child in children:
        _, rw = env.rollout(child, m, rng)
        used += m
        best = max(best, max(rw))
        states.append(child)
        samples.append(list(rw))
    values = [predict_ref(s, budget, tail_fraction, "quantile") for s in samples]
    candidates = range(1, len(values)) if len(values) > 1 else range(1)  # the children compete
    k = max(candidates, key=lambda i: (values[i], -i))
    if budget - used > 0:
        _, rw = env.rollout(states[k], budget - used, rng)
        best = max(best, max(rw))
        used = budget
    return {"chosen": states[k], "values": values, "best_reward": float(best), "n_rollouts": used}
