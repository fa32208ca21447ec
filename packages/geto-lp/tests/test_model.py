"""The GETO-LP against the full O(MN²) LP, POT, and known answers."""

import itertools
import math

import numpy as np
import pytest
import scipy.sparse as sp
from geto_lp import (
    barycenter,
    barycenter_objective,
    build_model,
    full_variable_count,
    make_grid,
    solve_barycenter,
    transport,
    variable_count,
)
from geto_lp.baselines import require_pot
from geto_lp.data import dirac, smooth_histograms, translated_shapes
from geto_lp.model import plan_cost
from geto_lp.reference import (
    full_lp_barycenter,
    full_transport,
    geto_model_loops,
    quantile_barycenter_1d,
)
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

# (grid shape, M, spacing, p): 1-D, 2-D, 3-D, anisotropic spacing, p = 1 and p = 3.
CASES = [
    ((9,), 3, 1.0, 2.0),
    ((5, 4), 3, (1.0, 0.6), 2.0),
    ((6, 6), 2, 1.0, 1.0),
    ((4, 5), 3, 0.5, 3.0),
    ((3, 3, 3), 3, 1.0, 2.0),
    ((2, 4, 3), 2, (0.5, 1.0, 2.0), 1.5),
]


def pot():
    try:
        return require_pot()
    except ImportError:
        pytest.skip("POT is not installed")


def random_hists(shape, m, seed, sparse=False):
    rng = np.random.default_rng(seed)
    A = rng.random((math.prod(shape), m)) ** 3
    if sparse:
        A[rng.random(A.shape) < 0.5] = 0.0
        A[0] += 1e-3  # no empty column
    return A / A.sum(axis=0)


def random_weights(m, seed):
    w = np.random.default_rng(seed + 100).random(m) + 0.1
    return w / w.sum()


@pytest.mark.parametrize("shape,m,spacing,p", CASES)
def test_vectorised_assembly_equals_the_arc_by_arc_definition(shape, m, spacing, p):
    A = random_hists(shape, m, 1)
    w = random_weights(m, 1)
    grid = make_grid(shape, spacing, p)
    model = build_model(A, grid, w)
    c, A_eq, b = geto_model_loops(A, grid, w)
    np.testing.assert_allclose(model.c, c, rtol=1e-14, atol=0)
    assert (model.A_eq.tocsr() != A_eq.tocsr()).nnz == 0
    np.testing.assert_array_equal(model.b_eq, b)


@pytest.mark.parametrize("shape,m,spacing,p", CASES)
@pytest.mark.parametrize("sparse", [False, True])
def test_objective_equals_the_full_lp(shape, m, spacing, p, sparse):
    A = random_hists(shape, m, 2, sparse=sparse)
    w = random_weights(m, 2)
    geto = solve_barycenter(A, shape, w, spacing, p=p)
    full = full_lp_barycenter(A, shape, w, spacing, p=p)
    assert geto.objective == pytest.approx(full.objective, rel=1e-9, abs=1e-12)
    # ν itself is optimal: scoring it with independent transport problems gives the optimum again
    assert barycenter_objective(geto.barycenter, A, shape, w, spacing, p=p) == pytest.approx(
        full.objective, rel=1e-8, abs=1e-12
    )
    np.testing.assert_allclose(geto.barycenter.sum(), 1.0, rtol=1e-9)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple),
    m=st.integers(1, 3),
    seed=st.integers(0, 10_000),
    p=st.sampled_from([1.0, 2.0, 2.5]),
)
@example(shape=(4, 3), m=1, seed=888, p=1.0)  # an exact 0 that HiGHS returns as -1.2e-10
def test_property_objective_equals_full_lp(shape, m, seed, p):
    A = random_hists(shape, m, seed, sparse=seed % 2 == 0)
    w = random_weights(m, seed)
    geto = solve_barycenter(A, shape, w, p=p)
    full = full_lp_barycenter(A, shape, w, p=p)
    # abs: HiGHS stops at its primal/dual feasibility tolerance (1e-7), so an optimum of exactly 0 can
    # come back as about -1e-10; 1e-11 made this random property test fail now and then in CI
    assert geto.objective == pytest.approx(full.objective, rel=1e-8, abs=1e-9)


def test_highs_unknown_status_is_retried_and_matches_the_full_lp():
    # the instance the property test found: HiGHS IPM without presolve ends in an "unknown" status
    A, w = random_hists((3, 3), 3, 179, sparse=False), random_weights(3, 179)
    geto = solve_barycenter(A, (3, 3), w, p=1.0)
    full = full_lp_barycenter(A, (3, 3), w, p=1.0)
    assert geto.objective == pytest.approx(full.objective, rel=1e-8, abs=1e-11)


@pytest.mark.parametrize("shape,m", [((6, 5), 3), ((3, 3, 4), 2)])
def test_objective_equals_pot(shape, m):
    ot = pot()
    A = smooth_histograms(shape, m, seed=3)
    w = random_weights(m, 3)
    pts = make_grid(shape).points()
    _, log = ot.lp.barycenter(A, ot.dist(pts, pts), w, log=True, solver="highs-ipm")
    assert solve_barycenter(A, shape, w).objective == pytest.approx(log.fun, rel=1e-6)


@pytest.mark.parametrize("shape,m,spacing,p", CASES)
def test_recovered_plans_have_the_right_marginals_and_costs(shape, m, spacing, p):
    A = random_hists(shape, m, 4, sparse=True)
    w = random_weights(m, 4)
    res = solve_barycenter(A, shape, w, spacing, p=p)
    total = 0.0
    for k in range(m):
        plan = res.plan(k)
        assert sp.issparse(plan) and plan.shape == (res.grid.size,) * 2
        assert plan.min() >= 0
        np.testing.assert_allclose(np.asarray(plan.sum(axis=1)).ravel(), res.barycenter, atol=1e-9, rtol=0)
        np.testing.assert_allclose(np.asarray(plan.sum(axis=0)).ravel(), A[:, k], atol=1e-9, rtol=0)
        cost = plan_cost(plan, res.grid)
        assert cost == pytest.approx(res.costs[k], rel=1e-9, abs=1e-12)
        total += w[k] * cost
    assert total == pytest.approx(res.objective, rel=1e-9, abs=1e-12)


def test_layer_flows_conserve_mass():
    shape, m = (4, 3, 3), 2
    A = random_hists(shape, m, 5)
    res = solve_barycenter(A, shape)
    for k in range(m):
        flows = res.flows[k]
        np.testing.assert_allclose(np.asarray(flows[0].sum(axis=1)).ravel(), A[:, k], atol=1e-9)
        for a, b in itertools.pairwise(flows):
            np.testing.assert_allclose(
                np.asarray(a.sum(axis=0)).ravel(), np.asarray(b.sum(axis=1)).ravel(), atol=1e-9
            )
        np.testing.assert_allclose(np.asarray(flows[-1].sum(axis=0)).ravel(), res.barycenter, atol=1e-9)


@pytest.mark.parametrize("shape", [(7,), (5, 4), (3, 2, 3)])
def test_one_input_returns_it_with_objective_zero(shape):
    mu = random_hists(shape, 1, 6, sparse=True)
    nu, log = barycenter(mu, shape, log=True, return_plans=True)
    np.testing.assert_allclose(nu, mu[:, 0], atol=1e-12)
    assert log["objective"] == pytest.approx(0.0, abs=1e-12)
    np.testing.assert_allclose(log["plans"][0].diagonal(), mu[:, 0], atol=1e-12)


@pytest.mark.parametrize(
    "shape,a,b,spacing,expected_point,expected",
    [
        ((3, 3), (0, 0), (2, 2), 1.0, (1, 1), 2.0),  # ½·(1+1) + ½·(1+1)
        ((5, 5), (0, 0), (4, 2), 1.0, (2, 1), 5.0),  # ½·5 + ½·5
        ((5, 3, 5), (0, 0, 4), (4, 2, 0), (1.0, 2.0, 0.5), (2, 1, 2), 4 + 4 + 1),
        ((9,), (1,), (7,), 0.5, (4,), 2.25),
    ],
)
def test_two_diracs_meet_at_the_midpoint(shape, a, b, spacing, expected_point, expected):
    A = np.stack([dirac(shape, a), dirac(shape, b)], axis=1)
    nu, log = barycenter(A, shape, spacing=spacing, log=True)
    np.testing.assert_allclose(nu, dirac(shape, expected_point), atol=1e-12)
    assert log["objective"] == pytest.approx(expected, rel=1e-12)


def test_two_diracs_with_unequal_weights():
    A = np.stack([dirac((7,), (0,)), dirac((7,), (6,))], axis=1)
    nu, log = barycenter(A, (7,), weights=[2 / 3, 1 / 3], log=True)
    np.testing.assert_allclose(nu, dirac((7,), (2,)), atol=1e-12)
    assert log["objective"] == pytest.approx(2 / 3 * 4 + 1 / 3 * 16)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_1d_agrees_with_quantile_averaging(seed):
    rng = np.random.default_rng(seed)
    n, m = 21, 2
    A = np.zeros((n, m))
    for k in range(m):  # inputs on even cells: averages of two even positions are integers
        A[0:n:2, k] = rng.random(len(range(0, n, 2))) ** 2
    A /= A.sum(axis=0)
    w = np.array([0.5, 0.5])
    atoms, masses, objective = quantile_barycenter_1d(np.arange(n, dtype=float), A, w)
    expected = np.zeros(n)
    expected[atoms.astype(int)] = masses
    res = solve_barycenter(A, (n,), w)
    assert res.objective == pytest.approx(objective, rel=1e-9)
    np.testing.assert_allclose(res.barycenter, expected, atol=1e-9)


def test_1d_three_inputs_with_weights():
    n = 25
    rng = np.random.default_rng(7)
    A = np.zeros((n, 3))
    for k in range(3):
        A[0:n:4, k] = rng.random(len(range(0, n, 4)))
    A /= A.sum(axis=0)
    w = np.array([0.25, 0.25, 0.5])  # averages of multiples of 4 with these weights are integers
    atoms, masses, objective = quantile_barycenter_1d(np.arange(n, dtype=float), A, w)
    res = solve_barycenter(A, (n,), w)
    assert res.objective == pytest.approx(objective, rel=1e-9)
    expected = np.zeros(n)
    expected[atoms.astype(int)] = masses
    np.testing.assert_allclose(res.barycenter, expected, atol=1e-9)


@pytest.mark.parametrize(
    "shape,offsets,spacing",
    [
        ((10, 10), [(0, 0), (4, 2), (2, 4)], 1.0),
        ((9, 12), [(0, 1), (3, 6), (3, 2)], (1.5, 0.5)),
        ((8, 8, 8), [(0, 0, 0), (3, 1, 0), (0, 2, 3)], 1.0),
    ],
)
def test_translates_have_the_known_barycenter(shape, offsets, spacing):
    known = translated_shapes(shape, offsets, spacing=spacing, shape_size=tuple(s // 2 for s in shape))
    res = solve_barycenter(known.A, shape, known.weights, spacing)
    assert res.objective == pytest.approx(known.objective, rel=1e-9)
    np.testing.assert_allclose(res.barycenter, known.barycenter, atol=1e-9)


@pytest.mark.parametrize("shape", [(3, 4), (8, 8), (5, 5, 5), (2, 3, 4), (1, 6), (10,)])
@pytest.mark.parametrize("m", [1, 3])
def test_variable_count_formula(shape, m):
    A = random_hists(shape, m, 8)
    model = build_model(A, make_grid(shape), np.full(m, 1 / m))
    n = math.prod(shape)
    assert model.n_variables == variable_count(shape, m) == m * n * sum(shape) + n
    assert model.n_constraints == m * (len(shape) + 1) * n
    assert model.n_nonzeros == 2 * (model.n_variables - n) + m * n
    assert full_variable_count(shape, m) == m * n * n + n
    if len(set(shape)) == 1:  # a cube: M·d·N^{1+1/d} + N
        d = len(shape)
        assert variable_count(shape, m) == round(m * d * n ** (1 + 1 / d)) + n


def test_variable_counts_of_the_benchmark_sizes():
    assert variable_count((32, 32), 3) == 197_632
    assert full_variable_count((32, 32), 3) == 3_146_752
    assert variable_count((64, 64), 4) == 2_101_248
    assert variable_count((16, 16, 16), 3) == 593_920


def test_weights_are_normalised():
    A = random_hists((4, 4), 3, 9)
    a = solve_barycenter(A, (4, 4), [2.0, 1.0, 1.0])
    b = solve_barycenter(A, (4, 4), [0.5, 0.25, 0.25])
    assert a.objective == pytest.approx(b.objective, rel=1e-12)
    np.testing.assert_allclose(a.weights, [0.5, 0.25, 0.25])
    np.testing.assert_allclose(a.barycenter, b.barycenter, atol=1e-9)


def test_zero_weight_input_is_ignored():
    A = random_hists((4, 4), 3, 10)
    with_zero = solve_barycenter(A, (4, 4), [0.5, 0.5, 0.0])
    without = solve_barycenter(A[:, :2], (4, 4), [0.5, 0.5])
    assert with_zero.objective == pytest.approx(without.objective, rel=1e-9)


def test_equal_masses_other_than_one_are_kept():
    A = random_hists((3, 4), 2, 11) * 5.0
    res = solve_barycenter(A, (3, 4))
    unit = solve_barycenter(A / 5.0, (3, 4))
    assert res.barycenter.sum() == pytest.approx(5.0)
    assert res.objective == pytest.approx(5.0 * unit.objective, rel=1e-9)


def test_normalize_divides_each_input_by_its_mass():
    A = random_hists((3, 4), 2, 12) * np.array([2.0, 7.0])
    res = solve_barycenter(A, (3, 4), normalize=True)
    ref = solve_barycenter(A / A.sum(axis=0), (3, 4))
    assert res.objective == pytest.approx(ref.objective, rel=1e-12)


@pytest.mark.parametrize(
    "shape,spacing,p", [((5, 4), 1.0, 2.0), ((3, 3, 3), (1.0, 2.0, 0.5), 2.0), ((6, 5), 1.0, 1.0)]
)
def test_transport_equals_the_full_transport_lp(shape, spacing, p):
    A = random_hists(shape, 2, 13, sparse=True)
    res = transport(A[:, 0], A[:, 1], shape, spacing, p=p)
    assert res.cost == pytest.approx(full_transport(A[:, 0], A[:, 1], shape, spacing, p=p), rel=1e-9)
    plan = res.plan()
    np.testing.assert_allclose(np.asarray(plan.sum(axis=1)).ravel(), A[:, 0], atol=1e-9)
    np.testing.assert_allclose(np.asarray(plan.sum(axis=0)).ravel(), A[:, 1], atol=1e-9)
    assert plan_cost(plan, res.grid) == pytest.approx(res.cost, rel=1e-9)


def test_transport_equals_pot_emd2():
    ot = pot()
    shape = (6, 6)
    A = smooth_histograms(shape, 2, seed=14)
    pts = make_grid(shape).points()
    assert transport(A[:, 0], A[:, 1], shape).cost == pytest.approx(
        ot.emd2(A[:, 0].copy(), A[:, 1].copy(), ot.dist(pts, pts)), rel=1e-9
    )


def test_log_mirrors_pot_conventions():
    A = random_hists((4, 4), 2, 15)
    nu = barycenter(A, (4, 4))
    nu2, log = barycenter(A, (4, 4), log=True)
    assert nu.shape == (16,)
    np.testing.assert_allclose(nu, nu2, atol=1e-12)
    for key in ("objective", "fun", "costs", "flows", "n_variables", "n_constraints", "solve_seconds"):
        assert key in log
    assert len(log["flows"]) == 2 and len(log["flows"][0]) == 2
    assert "plans" not in log
