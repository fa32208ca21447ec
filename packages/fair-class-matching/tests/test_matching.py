"""Known answers of the online matchers, the indivisible rule against its reference, the matcher API."""

import numpy as np
import pytest
from fair_class_matching import ThresholdMatcher, ThresholdRanking, threshold_divisible, upper_triangular
from fair_class_matching.baselines import EqualFilling, Greedy, Ranking, WaterFilling, water_filling
from fair_class_matching.data import family
from fair_class_matching.matching import fill_levels, run_online, water_level
from fair_class_matching.reference import reference_threshold_ranking

from papershelf.errors import InputError


def test_hand_computed_three_agents():
    # agents 0 (class 0), 1 and 2 (class 1); gamma = 0.5
    m = ThresholdMatcher([0, 1, 1], gamma=0.5)
    a = m.arrive([1])  # phase 1 fills agent 1 to 0.5, phase 2 to 1
    assert a.agents.tolist() == [1] and a.amounts.tolist() == [1.0]
    a = m.arrive([0, 2])  # class 0 trails (0 < 1): agent 0 to gamma, then class 1's agent 2 to gamma
    assert a.agents.tolist() == [0, 2] and a.amounts.tolist() == [0.5, 0.5]
    a = m.arrive([0, 2])  # nobody below gamma: water-filling, half each
    assert a.amounts.tolist() == [0.5, 0.5]
    assert m.loads.tolist() == [1.0, 1.0, 1.0] and m.class_value.tolist() == [1.0, 2.0]
    a = m.arrive([0, 1, 2])  # everyone full: the item is lost
    assert a.agents.size == 0 and a.total == 0.0
    # EQUAL-FILLING (gamma = 1) gives the whole second item to the trailing class
    ef = ThresholdMatcher([0, 1, 1], gamma=1.0)
    ef.arrive([1])
    assert ef.arrive([0, 2]).agents.tolist() == [0]


def test_phase1_equalises_class_values_then_water_fills():
    # class 0 has agents 0,1; class 1 has agent 2. One item to all three at gamma = 1:
    # classes tie at 0, so each class gets 1/2; class 0 splits its half over two agents.
    m = ThresholdMatcher([0, 0, 1], gamma=1.0)
    assert m.arrive([0, 1, 2]).amounts.tolist() == [0.25, 0.25, 0.5]
    # water-filling instead raises the three agents together
    w = WaterFilling([0, 0, 1])
    np.testing.assert_allclose(w.arrive([0, 1, 2]).amounts, [1 / 3] * 3)


def test_water_level_and_fill_levels():
    assert water_level([0.0, 0.5], 1.0, 0.5) == 0.5
    assert water_level([0.0, 0.5], 1.0, 1.0) == 0.75
    assert water_level([0.2, 0.4], 0.5, 1.0) is None  # cannot absorb 1 below 0.5
    out, used = fill_levels([0.0, 1.0], [1.0, 1.0], [5.0, 5.0], 3.0)  # L = 2: 2 + 1
    assert used and out == [2.0, 1.0]
    out, used = fill_levels([0.0, 0.0], [1.0, 2.0], [0.5, 5.0], 3.0)  # L = 1.25: 0.5 (capped) + 2.5
    assert used and out == pytest.approx([0.5, 2.5])
    out, used = fill_levels([0.0], [1.0], [0.3], 1.0)
    assert not used and out == [0.3]


def test_water_filling_upper_triangular_500_reaches_1_minus_1_over_e():
    inst = upper_triangular(500, 2)
    ratio = water_filling(inst).usw() / 500  # OPT = 500 (item t -> agent t)
    assert abs(ratio - (1 - 1 / np.e)) < 0.01


@pytest.mark.parametrize("gamma", [0.0, 0.3, 0.5, 1.0])
def test_threshold_ranking_equals_reference(gamma):
    for seed in range(6):
        inst = family(("gnp", "block", "upper-triangular")[seed % 3], 14, seed=seed)
        matcher = ThresholdRanking(inst, gamma, seed=seed)
        ranks = np.array(matcher.ranks)
        alloc = run_online(inst, matcher)
        got = np.full(inst.n_items, -1)
        for t in range(inst.n_items):
            a = alloc.assignment(t)
            if a.agents.size:
                got[t] = a.agents[0]
        np.testing.assert_array_equal(got, reference_threshold_ranking(inst, gamma, ranks))


def test_ranking_at_gamma_zero_and_greedy():
    inst = family("gnp", 20, seed=3)
    a = run_online(inst, ThresholdRanking(inst, 0.0, seed=5))
    b = run_online(inst, Ranking(inst, seed=5))
    np.testing.assert_array_equal(a.agents, b.agents)
    g = run_online(inst, Greedy(inst))
    assert g.integral and a.integral
    first_free = []
    taken = set()
    for nbrs in inst.items:  # greedy: lowest-index free neighbour
        free = [x for x in nbrs.tolist() if x not in taken]
        if free:
            taken.add(free[0])
            first_free.append(free[0])
    assert g.agents.tolist() == first_free


def test_threshold_usw_beats_half_on_upper_triangular():
    alloc = threshold_divisible(upper_triangular(100, 2), 0.5)
    assert alloc.usw() / 100 > 0.5956


def test_matcher_input_errors():
    with pytest.raises(InputError, match=r"gamma must be in \[0, 1\]"):
        ThresholdMatcher([0, 1], gamma=1.5)
    with pytest.raises(InputError, match="gamma"):
        ThresholdRanking([0, 1], gamma=-0.1)
    with pytest.raises(InputError, match="phase1"):
        ThresholdMatcher([0, 1], gamma=0.5, phase1="fancy")
    m = ThresholdMatcher([0, 1], gamma=0.5)
    with pytest.raises(InputError, match="unknown agent 2"):
        m.arrive([0, 2])
    with pytest.raises(InputError, match="twice"):
        m.arrive([1, 1])
    with pytest.raises(InputError, match="value"):
        m.arrive([0], value=-1.0)
    with pytest.raises(InputError, match="no agents"):
        ThresholdMatcher([0, 2], gamma=0.5)  # class 1 is empty
    inst = upper_triangular(4, 2)
    used = ThresholdMatcher(inst, 0.5)
    run_online(inst, used)
    with pytest.raises(InputError, match="already seen"):
        run_online(inst, used)
    with pytest.raises(InputError, match="agents"):
        run_online(upper_triangular(5, 2), EqualFilling(inst))
