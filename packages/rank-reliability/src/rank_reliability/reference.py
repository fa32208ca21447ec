"""Slow, obviously-correct versions written straight from the equations: the oracle of the tests.

Plain loops, float64, no algebraic shortcuts. Use only on small matrices.
"""

from __future__ import annotations

import itertools
import math

import numpy as np


def anova_components(X: np.ndarray) -> tuple[float, float, float]:
    """Two-way ANOVA without replication (complete matrix): (σ²_M, σ²_I, σ²_E) from the mean squares."""
    M, I = X.shape
    grand = sum(X[m, i] for m in range(M) for i in range(I)) / (M * I)
    row = [sum(X[m, i] for i in range(I)) / I for m in range(M)]
    col = [sum(X[m, i] for m in range(M)) / M for i in range(I)]
    ss_m = I * sum((row[m] - grand) ** 2 for m in range(M))
    ss_i = M * sum((col[i] - grand) ** 2 for i in range(I))
    ss_res = sum((X[m, i] - row[m] - col[i] + grand) ** 2 for m in range(M) for i in range(I))
    ms_m, ms_i = ss_m / (M - 1), ss_i / (I - 1)
    ms_res = ss_res / ((M - 1) * (I - 1))
    return (ms_m - ms_res) / I, (ms_i - ms_res) / M, ms_res


def pairwise_components(X: np.ndarray) -> tuple[float, float, float]:
    """Method of moments over every unordered pair of observed cells (NaN = missing).

    A pair in the same row has E(x − x')² = 2(σ²_I + σ²_E); in the same column 2(σ²_M + σ²_E); in
    neither 2(σ²_M + σ²_I + σ²_E). Equate the three sums (same row, same column, all pairs) to their
    expectations and solve.
    """
    cells = [(m, i, X[m, i]) for m in range(X.shape[0]) for i in range(X.shape[1]) if not np.isnan(X[m, i])]
    s_row = s_col = s_all = 0.0
    coef = np.zeros((3, 3))
    for (m1, i1, x1), (m2, i2, x2) in itertools.combinations(cells, 2):
        sq = (x1 - x2) ** 2
        e = np.array([m1 != m2, i1 != i2, True], dtype=float) * 2  # E(x−x')² = e · (σ²_M, σ²_I, σ²_E)
        s_all += sq
        coef[2] += e
        if m1 == m2:
            s_row += sq
            coef[0] += e
        if i1 == i2:
            s_col += sq
            coef[1] += e
    sol = np.linalg.solve(coef, np.array([s_row, s_col, s_all]))
    return float(sol[0]), float(sol[1]), float(sol[2])


def _var(v: list[float] | np.ndarray) -> float:
    n = len(v)
    mean = sum(v) / n
    return sum((x - mean) ** 2 for x in v) / (n - 1)


def _cov(u: np.ndarray, v: np.ndarray) -> float:
    n = len(u)
    mu, mv = sum(u) / n, sum(v) / n
    return sum((a - mu) * (b - mv) for a, b in zip(u, v)) / (n - 1)


def cronbach_alpha(X: np.ndarray) -> float:
    k = X.shape[1]
    total = [sum(row) for row in X]
    return k / (k - 1) * (1 - sum(_var(X[:, j]) for j in range(k)) / _var(total))


def guttman_lambda6(X: np.ndarray) -> float:
    """λ6 by regressing every item on all the others (ordinary least squares with an intercept)."""
    M, k = X.shape
    total_var = _var([sum(row) for row in X])
    e2 = 0.0
    for j in range(k):
        others = np.column_stack([np.ones(M), np.delete(X, j, axis=1)])
        coef, *_ = np.linalg.lstsq(others, X[:, j], rcond=None)
        resid = X[:, j] - others @ coef
        e2 += float(resid @ resid) / (M - 1)
    return 1 - e2 / total_var


def lambda6_star(X: np.ndarray, variant: str = "rest") -> float:
    """λ★6 item by item: rest-score regression (``rest``) or the pseudo-inverse of S (``pinv``)."""
    k = X.shape[1]
    total_var = _var([sum(row) for row in X])
    if variant == "pinv":
        S = np.array([[_cov(X[:, a], X[:, b]) for b in range(k)] for a in range(k)])
        P = np.linalg.pinv(S, rcond=1e-12, hermitian=True)
        return 1 - sum(1 / P[j, j] for j in range(k)) / total_var
    e2 = 0.0
    for j in range(k):
        item = X[:, j]
        rest = np.delete(X, j, axis=1).sum(axis=1)  # the other items' total, model by model
        v_item, v_rest = _var(item), _var(rest)
        r2 = _cov(item, rest) ** 2 / (v_item * v_rest) if v_rest > 0 and v_item > 0 else 0.0
        e2 += v_item * (1 - r2)
    return 1 - e2 / total_var


def greedy_lambda6_star(X: np.ndarray, budget: int, n_strata: int | None = None) -> list[int]:
    """Greedy forward selection recomputing λ★6 of every candidate subset from scratch.

    With ``n_strata`` the items are cut here, from the definitions, into that many equal-count strata of
    mean score, and each stratum may supply only its proportional (largest-remainder) quota.
    """
    k = X.shape[1]
    quota = stratum_of = None
    if n_strata is not None:
        stratum_of, quota = _strata_and_quotas(X, budget, n_strata)
    best_r, first = -math.inf, 0
    for j in range(k):
        if quota is not None and quota[stratum_of[j]] == 0:
            continue
        rest = X.sum(axis=1) - X[:, j]
        r = _cov(X[:, j], rest) / math.sqrt(_var(X[:, j]) * _var(rest))
        if r > best_r:
            best_r, first = r, j
    selected = [first]
    if quota is not None:
        quota[stratum_of[first]] -= 1
    while len(selected) < budget:
        best, best_k = -math.inf, -1
        for cand in range(k):
            if cand in selected or (quota is not None and quota[stratum_of[cand]] == 0):
                continue
            value = lambda6_star(X[:, [*selected, cand]])
            if value > best:
                best, best_k = value, cand
        selected.append(best_k)
        if quota is not None:
            quota[stratum_of[best_k]] -= 1
    return selected


def _strata_and_quotas(X: np.ndarray, budget: int, n_strata: int) -> tuple[list[int], list[int]]:
    """Stratum of every item (by rank of its mean score) and each stratum's proportional quota."""
    k = X.shape[1]
    h_count = min(n_strata, k)
    means = [sum(X[:, j]) / X.shape[0] for j in range(k)]
    ranked = sorted(range(k), key=lambda j: (means[j], j))
    stratum_of = [0] * k
    for position, j in enumerate(ranked):
        stratum_of[j] = position * h_count // k
    sizes = [stratum_of.count(h) for h in range(h_count)]
    shares = [budget * size / k for size in sizes]
    quota = [math.floor(x) for x in shares]
    by_remainder = sorted(range(h_count), key=lambda h: (-(shares[h] - quota[h]), h))
    for h in by_remainder[: budget - sum(quota)]:
        quota[h] += 1
    return stratum_of, quota


def greedy_lambda6_star_pool(X: np.ndarray, budget: int) -> list[int]:
    """Greedy forward selection maximising corr(subset total, total of the other items), from scratch."""
    k = X.shape[1]
    selected: list[int] = []
    while len(selected) < budget:
        best, best_k = -math.inf, -1
        for cand in range(k):
            if cand in selected:
                continue
            inside = [*selected, cand]
            outside = [j for j in range(k) if j not in inside]
            if not outside:
                continue
            s_total, r_total = X[:, inside].sum(axis=1), X[:, outside].sum(axis=1)
            v_s, v_r = _var(s_total), _var(r_total)
            if v_s <= 1e-12 or v_r <= 1e-12:
                continue
            value = _cov(s_total, r_total) / math.sqrt(v_s * v_r)
            if value > best:
                best, best_k = value, cand
        if best_k < 0:  # the bound is undefined: take the remaining items in column order
            best_k = next(j for j in range(k) if j not in selected)
        selected.append(best_k)
    return selected


def kendall_tau_b(a: np.ndarray, b: np.ndarray) -> float:
    """Kendall τ-b from the count of concordant and discordant pairs and the ties in each ranking."""
    n = len(a)
    conc = disc = ties_a = ties_b = 0
    for i in range(n):
        for j in range(i + 1, n):
            da, db = a[i] - a[j], b[i] - b[j]
            if da == 0 and db == 0:
                continue
            if da == 0:
                ties_a += 1
            elif db == 0:
                ties_b += 1
            elif da * db > 0:
                conc += 1
            else:
                disc += 1
    den = math.sqrt((conc + disc + ties_a) * (conc + disc + ties_b))
    return (conc - disc) / den if den else 0.0


def split_half_kendall(X: np.ndarray, masks: np.ndarray) -> list[float]:
    """Kendall τ-b between the per-model means on each half (NaN cells skipped), split by split."""
    out = []
    for mask in masks:
        a = [np.nanmean(X[m, mask]) for m in range(X.shape[0])]
        b = [np.nanmean(X[m, ~mask]) for m in range(X.shape[0])]
        out.append(kendall_tau_b(np.array(a), np.array(b)))
    return out


def analyze(X: np.ndarray, n_splits: int = 20, seed: int = 0) -> dict[str, float]:
    """The whole analysis the slow way: ANOVA components, α, λ★6 item by item, split-half loop."""
    vm, vi, ve = anova_components(X)
    rng = np.random.default_rng(seed)
    masks = np.zeros((n_splits, X.shape[1]), dtype=bool)
    for s in range(n_splits):
        masks[s, rng.permutation(X.shape[1])[: X.shape[1] // 2]] = True
    taus = split_half_kendall(X, masks)
    return {
        "model": vm,
        "item": vi,
        "residual": ve,
        "alpha": cronbach_alpha(X),
        "lambda6_star": lambda6_star(X),
        "split_half_kendall": float(np.mean(taus)),
    }
