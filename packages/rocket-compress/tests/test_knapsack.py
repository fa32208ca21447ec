"""The multi-choice knapsack solvers against brute force."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocket_compress.knapsack import solve_mckp, total
from rocket_compress.reference import mckp_brute_force

from papershelf.errors import InputError


@st.composite
def instances(draw):
    groups = draw(st.integers(1, 5))
    costs = [draw(st.lists(st.integers(0, 30), min_size=1, max_size=4)) for _ in range(groups)]
    errors = [
        draw(st.lists(st.floats(0, 10, allow_nan=False), min_size=len(c), max_size=len(c))) for c in costs
    ]
    lo = sum(min(c) for c in costs)
    hi = sum(max(c) for c in costs)
    budget = draw(st.integers(lo, hi))
    return costs, errors, budget


@settings(max_examples=30, deadline=None)
@given(instances())
def test_exact_dp_equals_brute_force(inst):
    costs, errors, budget = inst
    _, best = mckp_brute_force(costs, errors, budget)
    for method in ("dp", "grid"):
        choice = solve_mckp(costs, errors, budget, method=method)
        c, e = total(costs, errors, choice)
        assert c <= budget
        assert abs(e - best) <= 1e-9 * max(1.0, best), method


@settings(max_examples=15, deadline=None)
@given(instances(), st.integers(2, 7))
def test_coarse_grid_is_feasible_and_never_better_than_exact(inst, unit):
    costs, errors, budget = inst
    _, best = mckp_brute_force(costs, errors, budget)
    try:
        choice = solve_mckp(costs, errors, budget, method="grid", unit=unit)
    except InputError:
        return  # rounding costs up can make a tight budget infeasible: reported, never violated
    c, e = total(costs, errors, choice)
    assert c <= budget and e >= best - 1e-9


def test_larger_instance_dp_equals_brute_force():
    rng = np.random.default_rng(0)
    costs = [list(rng.integers(10, 200, 5)) for _ in range(6)]
    errors = [list(rng.random(5)) for _ in range(6)]
    budget = 600
    _, best = mckp_brute_force(costs, errors, budget)
    assert abs(total(costs, errors, solve_mckp(costs, errors, budget))[1] - best) < 1e-12


def test_ortools_cross_check_when_installed():
    pytest.importorskip("ortools")
    rng = np.random.default_rng(1)
    costs = [list(rng.integers(10, 100, 4)) for _ in range(5)]
    errors = [list(rng.random(4)) for _ in range(5)]
    a = total(costs, errors, solve_mckp(costs, errors, 250, method="ortools"))[1]
    b = total(costs, errors, solve_mckp(costs, errors, 250))[1]
    assert abs(a - b) < 1e-5


def test_bad_inputs():
    with pytest.raises(InputError, match="below the cheapest"):
        solve_mckp([[5, 6]], [[1.0, 0.0]], 4)
    with pytest.raises(InputError, match="equal-length"):
        solve_mckp([[5, 6]], [[1.0]], 10)
    with pytest.raises(InputError, match="method"):
        solve_mckp([[5]], [[1.0]], 10, method="greedy")
    with pytest.raises(InputError, match="integers"):
        solve_mckp([[5.5]], [[1.0]], 10)
