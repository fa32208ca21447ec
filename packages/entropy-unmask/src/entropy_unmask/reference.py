"""The slow, obviously-correct version: everything straight from the definitions, in float64 Python.

* the rules, re-implemented per state with plain loops (``reference_sets``);
* the oracle's conditionals by summing a dense joint table;
* the sampler's law by recursion over every partial state and every value of every revealed set;
* KL(p || q), E_q[#iterations], and E_p[sum_t TC(X_{S_t} | x_obs)] with the total correlation computed
  from the conditional joint of the revealed block: sum_i H(X_i | x_obs) - H(X_S | x_obs).

Only for tiny problems (V^L up to a few thousand). The fast engine in :mod:`entropy_unmask.exact` is
tested against it.
"""

from __future__ import annotations

import itertools
import math
from functools import cache

import numpy as np


def _H(p) -> float:
    return -sum(x * math.log(x) for x in p if x > 0)


def reference_sets(
    rule: str,
    param: float,
    rows: dict[int, list[float]],
    *,
    order: str = "entropy",
    include_crossing: bool = True,
) -> list[tuple[tuple[int, ...], float]]:
    """The set distribution of one state. ``rows``: masked position -> its predictive distribution."""
    pos = sorted(rows)
    h = {i: _H(rows[i]) for i in pos}
    conf = {i: max(rows[i]) for i in pos}
    tol = 1e-10
    by_h = sorted(pos, key=lambda i: (round(h[i] / tol), i))
    if rule == "entropy-sum" and order == "entropy":
        out, s = [], 0.0
        for i in by_h:
            if include_crossing:
                out.append(i)
                s += h[i]
                if s >= param - 1e-12:
                    break
            else:
                if out and s + h[i] >= param - 1e-12:
                    break
                out.append(i)
                s += h[i]
        return [(tuple(sorted(out)), 1.0)]
    if rule == "entropy-sum":  # random order: average over all permutations
        acc: dict[tuple[int, ...], float] = {}
        perms = list(itertools.permutations(pos))
        for perm in perms:
            ((S, _),) = reference_sets_from_order(perm, h, param, include_crossing)
            acc[S] = acc.get(S, 0.0) + 1.0 / len(perms)
        return list(acc.items())
    if rule == "fixed-k":
        k = min(int(param), len(pos))
        combos = list(itertools.combinations(pos, k))
        return [(c, 1.0 / len(combos)) for c in combos]
    if rule == "top-k":
        ranked = sorted(pos, key=lambda i: (-round(conf[i] / tol), i))
        return [(tuple(sorted(ranked[: int(param)])), 1.0)]
    if rule == "max-entropy":
        S = [i for i in pos if h[i] <= param + tol]
        return [(tuple(S) if S else (by_h[0],), 1.0)]
    if rule == "eb-sampler":
        S = [by_h[0]]
        for i in by_h[1:]:
            cand = [*S, i]
            if sum(h[j] for j in cand) - max(h[j] for j in cand) <= param + 1e-12:
                S = cand
            else:
                break
        return [(tuple(sorted(S)), 1.0)]
    raise ValueError(rule)


def reference_sets_from_order(perm, h, eta, include_crossing):
    out, s = [], 0.0
    for i in perm:
        if include_crossing:
            out.append(i)
            s += h[i]
            if s >= eta - 1e-12:
                break
        else:
            if out and s + h[i] >= eta - 1e-12:
                break
            out.append(i)
            s += h[i]
    return [(tuple(sorted(out)), 1.0)]


def reference_analysis(
    table: np.ndarray, rule: str, param: float, *, order: str = "entropy", include_crossing: bool = True
) -> dict:
    """Brute-force law of a rule driven by the exact oracle of ``table`` (shape (V,)*L).

    Returns q (dense table), kl, expected_iterations (under q), p_expected_iterations and tc_sum
    (under the target's trajectories), entropy.
    """
    table = np.asarray(table, dtype=np.float64)
    V, L = table.shape[0], table.ndim
    seqs = list(itertools.product(range(V), repeat=L))
    P = {x: float(table[x]) for x in seqs}

    def weight(state) -> float:
        return sum(P[x] for x in seqs if all(s < 0 or s == xi for s, xi in zip(state, x)))

    def cond(state) -> dict[int, list[float]]:
        z = weight(state)
        rows = {}
        for i in range(L):
            if state[i] < 0:
                if z == 0:
                    rows[i] = [1.0 / V] * V
                else:
                    rows[i] = [weight((*state[:i], v, *state[i + 1 :])) / z for v in range(V)]
        return rows

    def block_entropy(state, S) -> float:
        z = weight(state)
        acc: dict[tuple[int, ...], float] = {}
        for x in seqs:
            if all(s < 0 or s == xi for s, xi in zip(state, x)):
                key = tuple(x[i] for i in S)
                acc[key] = acc.get(key, 0.0) + P[x] / z
        return _H(acc.values())

    @cache
    def sampler(state) -> tuple[tuple[tuple[tuple[int, ...], float], ...], float]:
        """(law of the completed sequence as ((x, prob), ...), expected iterations) from ``state``."""
        if all(s >= 0 for s in state):
            return ((state, 1.0),), 0.0
        rows = cond(state)
        law: dict[tuple[int, ...], float] = {}
        it = 1.0
        for S, ps in reference_sets(rule, param, rows, order=order, include_crossing=include_crossing):
            for vals in itertools.product(range(V), repeat=len(S)):
                pv = ps * math.prod(rows[i][v] for i, v in zip(S, vals))
                if pv == 0:
                    continue
                nxt = list(state)
                for i, v in zip(S, vals):
                    nxt[i] = v
                sub, sub_it = sampler(tuple(nxt))
                it += pv * sub_it
                for x, px in sub:
                    law[x] = law.get(x, 0.0) + pv * px
        return tuple(law.items()), it

    @cache
    def target(state) -> tuple[float, float, float]:
        """E over the target's trajectory from ``state`` (given it): (iterations, sum of TC, sum of h)."""
        if all(s >= 0 for s in state):
            return 0.0, 0.0, 0.0
        rows = cond(state)
        z = weight(state)
        it, tc, hs = 1.0, 0.0, 0.0
        for S, ps in reference_sets(rule, param, rows, order=order, include_crossing=include_crossing):
            hsum = sum(_H(rows[i]) for i in S)
            tc += ps * (hsum - block_entropy(state, S))
            hs += ps * hsum
            for vals in itertools.product(range(V), repeat=len(S)):
                nxt = list(state)
                for i, v in zip(S, vals):
                    nxt[i] = v
                pz = weight(tuple(nxt)) / z
                if pz == 0:
                    continue
                a, b, c = target(tuple(nxt))
                it += ps * pz * a
                tc += ps * pz * b
                hs += ps * pz * c
        return it, tc, hs

    start = (-1,) * L
    law, it = sampler(start)
    q = np.zeros((V,) * L)
    for x, px in law:
        q[x] += px
    pit, tc, hs = target(start)
    p = table.reshape(-1)
    qq = q.reshape(-1)
    pos = p > 0
    kl = float(np.sum(p[pos] * np.log(p[pos] / qq[pos]))) if (qq[pos] > 0).all() else math.inf
    return {
        "q": q,
        "kl": kl,
        "expected_iterations": it,
        "p_expected_iterations": pit,
        "tc_sum": tc,
        "p_entropy_sum": hs,
        "entropy": float(-np.sum(p[pos] * np.log(p[pos]))),
    }
