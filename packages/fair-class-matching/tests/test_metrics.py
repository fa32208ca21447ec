"""Class values, CEF, OPT: known answers, max-flow against LP and SciPy, ex-ante CEF."""

import numpy as np
import pytest
from fair_class_matching import Instance, metrics, threshold_divisible, upper_triangular
from fair_class_matching.baselines import equal_filling
from fair_class_matching.flow import dinic_max_flow, scipy_max_flow
from fair_class_matching.matching import ThresholdMatcher, ThresholdRanking, run_online

from papershelf.errors import InputError


def test_known_class_values_and_cef():
    # class 0 = agent 0, class 1 = agents 1, 2; items: {1}, {0,2}, {0,2} at gamma = 0.5 (see test_matching)
    inst = Instance.from_lists([0, 1, 1], [[1], [0, 2], [0, 2]])
    alloc = threshold_divisible(inst, 0.5)
    values = metrics.class_values(alloc)
    # own values: class 0 holds 1, class 1 holds 2. Class 0 could take from class 1's bundle at most
    # 1 (one agent; items 2 and 3 are at agent 2 with 0.5 each and both reach agent 0). Class 1 could
    # take class 0's bundle (0.5 + 0.5 of items 2, 3 via agent 2) = 1.
    np.testing.assert_allclose(values, [[1.0, 1.0], [1.0, 2.0]])
    assert metrics.cef(alloc) == 1.0
    # equal-filling gives class 0 all of item 2, class 1 all of item 3: same class values
    np.testing.assert_allclose(metrics.class_values(equal_filling(inst)), [[1.0, 1.0], [1.0, 2.0]])


def test_envy_example():
    # class 0 = agent 0, class 1 = agents 1, 2; water-filling: item {0,1} half/half, then item {0,2}
    # levels agent 0 at 0.5, agent 2 at 0 -> both end at 0.75. Class 0 holds 0.75 but could extract
    # min(1, 0.5 + 0.75) = 1 from class 1's bundle (agent 0 neighbours both items): CEF = 0.75.
    inst = Instance.from_lists([0, 1, 1], [[0, 1], [0, 2]])
    alloc = run_online(inst, ThresholdMatcher(inst, 0.0))
    v = metrics.class_values(alloc)
    np.testing.assert_allclose(v, [[0.75, 1.0], [0.75, 1.25]])  # class 1 can take all of X_0
    assert metrics.cef(alloc) == pytest.approx(0.75)


def test_weighted_values_polymatroid_greedy_equals_lp():
    inst = Instance.from_lists([0, 0, 1], [[0, 1, 2], [0, 2], [1, 2], [2]], values=[3.0, 1.0, 2.0, 5.0])
    alloc = run_online(inst, ThresholdMatcher(inst, 0.5))
    np.testing.assert_allclose(
        metrics.class_values(alloc), metrics.class_values(alloc, method="lp"), atol=1e-8
    )
    assert metrics.offline_opt(inst) == pytest.approx(metrics.offline_opt(inst, method="lp"))
    assert metrics.offline_opt(inst) == pytest.approx(3 + 2 + 5)  # item 1 (value 1) is left out


def test_opt_of_upper_triangular_is_n():
    assert metrics.offline_opt(upper_triangular(50, 3)) == 50


def test_dinic_matches_scipy_on_random_integer_graphs():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = 12
        tails, heads, caps = [], [], []
        for u in range(n):
            for v in range(n):
                if u != v and rng.random() < 0.25:
                    tails.append(u)
                    heads.append(v)
                    caps.append(int(rng.integers(1, 6)))
        assert dinic_max_flow(n, tails, heads, [float(c) for c in caps], 0, n - 1) == scipy_max_flow(
            n, tails, heads, caps, 0, n - 1
        )


def test_ex_ante_cef_of_randomized_runs():
    inst = upper_triangular(12, 2)
    allocs = [run_online(inst, ThresholdRanking(inst, 1.0, seed=s)) for s in range(30)]
    ex_ante, mean_run = metrics.ex_ante_cef(allocs)
    mats = np.mean([metrics.class_values(a) for a in allocs], axis=0)
    assert ex_ante == pytest.approx(metrics.cef_from_values(mats))
    assert 0 < ex_ante <= 1 and 0 < mean_run <= 1


def test_evaluate_and_bad_method():
    inst = upper_triangular(10, 2)
    out = metrics.evaluate(threshold_divisible(inst, 0.5, audit=True))
    assert out["opt"] == 10 and out["non_wasteful"] and 0 < out["usw_ratio"] <= 1
    with pytest.raises(InputError, match="method"):
        metrics.class_values(threshold_divisible(inst, 0.5), method="simplex")
