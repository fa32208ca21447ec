"""Item selection: greedy fast path == reference, budget and seeding, the anchors, rank stability."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rank_reliability import fit_2pl, kendall_tau, lambda6_star, select_items, selection_stability
from rank_reliability import reference as ref
from rank_reliability.concordance import spearman
from rank_reliability.data import simulate_2pl
from rank_reliability.selection import METHODS, difficulty_strata, stratum_quotas
from scipy import stats


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_greedy_equals_reference(seed):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(14, 22)) + rng.normal(size=(14, 1)) * rng.uniform(0, 1.5, 22)
    fast = select_items(X, 9, method="lambda6_star")
    assert fast.tolist() == ref.greedy_lambda6_star(X, 9)
    assert select_items(X, 9, method="lambda6_star_strat").tolist() == ref.greedy_lambda6_star(
        X, 9, n_strata=10
    )
    for budget in (1, 9, 21, 22):  # 22 = every item: the bound is undefined at the last step
        pool = select_items(X, budget, method="lambda6_star_pool")
        assert pool.tolist() == ref.greedy_lambda6_star_pool(X, budget)


def _rest_correlation(X, subset):
    inside = np.zeros(X.shape[1], dtype=bool)
    inside[subset] = True
    return np.corrcoef(X[:, inside].sum(1), X[:, ~inside].sum(1))[0, 1]


def test_pool_bound_greedy_beats_random_on_its_own_criterion():
    X = simulate_2pl(40, 200, log_a_sd=0.6, seed=3).X
    X = X[:, X.min(0) < X.max(0)]
    greedy = _rest_correlation(X, select_items(X, 25))  # the default method
    rand = [_rest_correlation(X, select_items(X, 25, method="random", seed=s)) for s in range(10)]
    assert greedy > max(rand)


def test_strata_and_proportional_quotas():
    X = np.random.default_rng(0).random((10, 23))
    labels = difficulty_strata(X)
    means = X.mean(0)
    assert np.bincount(labels).tolist() == [3, 2, 2, 3, 2, 2, 3, 2, 2, 2]  # equal-count deciles of 23
    for h in range(9):  # strata are ordered by mean score
        assert means[labels == h].max() < means[labels == h + 1].min()
    for budget in (1, 7, 10, 23):
        q = stratum_quotas(labels, budget)
        assert q.sum() == budget and np.all(q <= np.bincount(labels))
        assert np.all(np.abs(q - budget * np.bincount(labels) / 23) < 1)
    q = stratum_quotas(labels, 10)
    for method in ("stratified", "lambda6_star_strat"):
        sel = select_items(X, 10, method=method, seed=1)
        assert np.bincount(labels[sel], minlength=10).tolist() == q.tolist()


def test_internal_greedy_narrows_difficulty_and_pool_bound_does_not():
    # wide ability and difficulty ranges: the model x item interaction is structured by difficulty
    X = simulate_2pl(60, 400, theta_sd=2.0, b_sd=2.0, log_a_sd=0.3, seed=0).X
    X = X[:, X.min(0) < X.max(0)]
    p = X.mean(0)
    spread = {m: p[select_items(X, 40, method=m)].std() / p.std() for m in METHODS if m != "irt_info"}
    assert spread["lambda6_star"] < 0.6
    assert spread["lambda6_star_pool"] > 0.9 and spread["lambda6_star_strat"] > 0.8
    taus = selection_stability(X, 40, methods=("lambda6_star_pool", "random"), n_draws=5, seed=0)
    disc = {m: np.mean((1 - t) / 2) for m, t in taus.items()}
    assert disc["lambda6_star_pool"] < 0.8 * disc["random"]


def test_greedy_beats_random_on_its_own_criterion():
    X = simulate_2pl(40, 200, log_a_sd=0.6, seed=3).X
    X = X[:, X.min(0) < X.max(0)]
    greedy = lambda6_star(X[:, select_items(X, 25, method="lambda6_star")])
    rand = [lambda6_star(X[:, select_items(X, 25, method="random", seed=s)]) for s in range(10)]
    assert greedy > max(rand)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 1000), st.integers(1, 15), st.sampled_from([m for m in METHODS if m != "irt_info"]))
def test_budget_is_respected(seed, budget, method):
    X = np.random.default_rng(seed).normal(size=(8, 15))
    sel = select_items(X, budget, method=method, seed=seed)
    assert sel.shape == (budget,) and len(set(sel.tolist())) == budget
    assert sel.min() >= 0 and sel.max() < 15


def test_selection_is_seeded_and_maps_back_to_original_columns():
    X = simulate_2pl(30, 80, seed=1).X
    X[:, 5] = 1.0  # a constant item
    a = select_items(X, 10, method="random", seed=4, drop_constant=True)
    assert np.array_equal(a, select_items(X, 10, method="random", seed=4, drop_constant=True))
    assert not np.array_equal(a, select_items(X, 10, method="random", seed=5, drop_constant=True))
    b = select_items(X, 10, method="stratified", seed=4, drop_constant=True)
    assert np.array_equal(b, select_items(X, 10, method="stratified", seed=4, drop_constant=True))
    for method in METHODS:
        assert 5 not in select_items(X, 20, method=method, drop_constant=True)


def test_irt_information_selection_prefers_discriminating_items():
    X = simulate_2pl(300, 30, seed=2).X
    X[:, :5] = (np.random.default_rng(0).random((300, 5)) < 0.5).astype(float)  # pure-noise items
    picked = select_items(X, 10, method="irt_info")
    assert not set(picked.tolist()) & set(range(5))


def test_fit_2pl_recovers_the_generator():
    sim = simulate_2pl(800, 25, log_a_sd=0.4, seed=5)
    fit = fit_2pl(sim.X)
    assert fit.converged
    assert np.corrcoef(fit.a, sim.a)[0, 1] > 0.8
    assert np.corrcoef(fit.b, sim.b)[0, 1] > 0.95
    assert np.corrcoef(fit.theta, sim.theta)[0, 1] > 0.9
    assert fit.information([0.0]).shape == (1, 25)


def test_lambda6_star_selection_beats_random_on_a_2pl_benchmark():
    # items differ in discrimination; 5 fixed draws, the margin is far from the noise
    X = simulate_2pl(60, 400, log_a_sd=0.7, seed=1).X
    X = X[:, X.min(0) < X.max(0)]
    methods = ("lambda6_star_pool", "lambda6_star", "random")
    taus = selection_stability(X, 40, methods=methods, n_draws=5, seed=0)
    disc = {m: np.mean((1 - t) / 2) for m, t in taus.items()}
    assert disc["lambda6_star"] < 0.85 * disc["random"]
    assert disc["lambda6_star_pool"] < 0.8 * disc["random"]
    again = selection_stability(X, 40, methods=methods, n_draws=5, seed=0)
    np.testing.assert_array_equal(taus["random"], again["random"])


def test_selection_stability_modes():
    X = simulate_2pl(30, 200, seed=6).X
    X = X[:, X.min(0) < X.max(0)]
    for kwargs in ({"heldout_models": True}, {"parallel": True}):
        out = selection_stability(X, 20, methods=("item_rest", "stratified"), n_draws=2, **kwargs)
        assert set(out) == {"item_rest", "stratified"} and all(np.all(np.abs(t) <= 1) for t in out.values())


def test_kendall_and_spearman_against_scipy_and_reference():
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.integers(0, 5, 12).astype(float)  # many ties
        b = a + rng.integers(-2, 3, 12)
        tau = kendall_tau(a, b)
        assert tau == pytest.approx(stats.kendalltau(a, b).statistic, abs=1e-12)
        assert tau == pytest.approx(ref.kendall_tau_b(a, b), abs=1e-12)
        assert spearman(a, b) == pytest.approx(stats.spearmanr(a, b).statistic, abs=1e-12)
    assert kendall_tau(np.ones(5), np.arange(5.0)) == 0.0
    batch = kendall_tau(rng.normal(size=(3, 4, 9)), rng.normal(size=(3, 4, 9)))
    assert batch.shape == (3, 4)
