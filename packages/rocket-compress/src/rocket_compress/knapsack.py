"""Multi-choice knapsack (MCKP): one option per layer, minimum total error, total parameters ≤ budget.

``solve_mckp(costs, errors, budget)`` solves

    minimise Σ_g errors[g][j_g]   subject to   Σ_g costs[g][j_g] ≤ budget,   one j_g per group g,

with integer costs. ``method="dp"`` (default) is an exact dynamic program over the groups whose states are
the Pareto frontier of (cost so far, error so far): a state that costs more and errs no less than another
can never be part of a better completion, so dropping it keeps the optimum. ``method="grid"`` is the
classical DP over a capacity array, exact when ``unit=1`` and otherwise solving the problem with every cost
rounded *up* to a multiple of ``unit`` (always feasible for the true costs). ``method="ortools"`` is an
optional cross-check with OR-Tools CP-SAT (errors scaled to integers), used only when ortools is installed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from papershelf.errors import InputError, MissingDependencyError


def _validate(costs, errors, budget):
    if len(costs) == 0 or len(costs) != len(errors):
        raise InputError("costs and errors must be non-empty lists with one entry per group")
    cs, es = [], []
    for g, (c, e) in enumerate(zip(costs, errors, strict=True)):
        c = np.asarray(c)
        e = np.asarray(e, dtype=np.float64)
        if c.ndim != 1 or c.shape != e.shape or len(c) == 0:
            raise InputError(f"group {g}: costs and errors must be equal-length non-empty 1-D lists")
        if not np.all(np.isfinite(e)):
            raise InputError(f"group {g}: errors must be finite")
        if np.any(c < 0) or np.any(c != np.round(c)):
            raise InputError(f"group {g}: costs must be non-negative integers")
        cs.append(c.astype(np.int64))
        es.append(e)
    if not math.isfinite(float(budget)) or budget < 0:
        raise InputError(f"budget must be a non-negative number, got {budget}")
    if sum(int(c.min()) for c in cs) > budget:
        raise InputError(
            f"budget {budget:g} is below the cheapest possible total {sum(int(c.min()) for c in cs)}"
        )
    return cs, es, math.floor(budget)


def solve_mckp(
    costs: Sequence[Sequence[int]],
    errors: Sequence[Sequence[float]],
    budget: float,
    *,
    method: str = "dp",
    unit: int = 1,
) -> list[int]:
    """The chosen option index of every group (see the module docstring)."""
    cs, es, cap = _validate(costs, errors, budget)
    if method == "dp":
        return _pareto_dp(cs, es, cap)
    if method == "grid":
        if int(unit) < 1:
            raise InputError(f"unit must be a positive integer, got {unit}")
        return _grid_dp(cs, es, cap, int(unit))
    if method == "ortools":
        return _ortools(cs, es, cap)
    raise InputError(f"method must be one of dp, grid, ortools; got {method!r}")


def _pareto_dp(cs, es, cap):
    # suffix minimum costs: a state is useful only if it leaves room for the cheapest completion
    min_rest = np.concatenate([np.cumsum([int(c.min()) for c in cs][::-1])[::-1][1:], [0]])
    cost = np.zeros(1, dtype=np.int64)
    err = np.zeros(1)
    parents: list[tuple[np.ndarray, np.ndarray]] = []
    for g, (c, e) in enumerate(zip(cs, es, strict=True)):
        nc = (cost[:, None] + c[None, :]).ravel()
        ne = (err[:, None] + e[None, :]).ravel()
        src = np.repeat(np.arange(len(cost)), len(c))
        opt = np.tile(np.arange(len(c)), len(cost))
        ok = nc + min_rest[g] <= cap
        nc, ne, src, opt = nc[ok], ne[ok], src[ok], opt[ok]
        order = np.lexsort((ne, nc))  # by cost, then error
        nc, ne, src, opt = nc[order], ne[order], src[order], opt[order]
        # keep a state only if its error is strictly below every cheaper-or-equal state's
        prev_best = np.concatenate([[np.inf], np.minimum.accumulate(ne)[:-1]])
        keep = ne < prev_best
        cost, err = nc[keep], ne[keep]
        parents.append((src[keep], opt[keep]))
    state = int(np.argmin(err))  # the frontier's last state has the smallest error; argmin is explicit
    choice = [0] * len(cs)
    for g in range(len(cs) - 1, -1, -1):
        src, opt = parents[g]
        choice[g] = int(opt[state])
        state = int(src[state])
    return choice


def _grid_dp(cs, es, cap, unit):
    slots = cap // unit
    inf = np.inf
    best = np.full(slots + 1, inf)
    best[0] = 0.0
    picks = []
    for c, e in zip(cs, es, strict=True):
        w = -(-c // unit)  # ceil
        new = np.full(slots + 1, inf)
        arg = np.full(slots + 1, -1, dtype=np.int64)
        for j in np.argsort(w, kind="stable"):
            if w[j] > slots:
                continue
            cand = np.full(slots + 1, inf)
            cand[w[j] :] = best[: slots + 1 - w[j]] + e[j]
            better = cand < new
            new[better] = cand[better]
            arg[better] = j
        best = new
        picks.append(arg)
    if not np.isfinite(best).any():
        raise InputError("no feasible choice with costs rounded up to the grid unit; lower unit")
    s = int(np.argmin(best))
    choice = [0] * len(cs)
    for g in range(len(cs) - 1, -1, -1):
        j = int(picks[g][s])
        choice[g] = j
        s -= int(-(-cs[g][j] // unit))
    return choice


def _ortools(cs, es, cap, scale: float = 1e6):
    try:
        from ortools.sat.python import cp_model
    except ImportError:
        raise MissingDependencyError("ortools", package="rocket-compress", extra="ortools") from None
    model = cp_model.CpModel()
    xs = [[model.NewBoolVar(f"x{g}_{j}") for j in range(len(c))] for g, c in enumerate(cs)]
    for row in xs:
        model.AddExactlyOne(row)
    model.Add(sum(int(c[j]) * xs[g][j] for g, c in enumerate(cs) for j in range(len(c))) <= cap)
    model.Minimize(sum(round(scale * e[j]) * xs[g][j] for g, e in enumerate(es) for j in range(len(e))))
    solver = cp_model.CpSolver()
    status = solver.Solve(model)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        raise InputError("OR-Tools found no feasible choice")
    return [next(j for j in range(len(row)) if solver.Value(row[j])) for row in xs]


def total(costs, errors, choice) -> tuple[int, float]:
    """(total cost, total error) of a choice."""
    c = sum(int(costs[g][j]) for g, j in enumerate(choice))
    e = sum(float(errors[g][j]) for g, j in enumerate(choice))
    return c, e
