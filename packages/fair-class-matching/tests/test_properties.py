"""Hypothesis properties on small random instances: the closed form equals the event simulation,
loads never exceed capacity, every arrival is non-wasteful, max-flow equals the LP."""

import numpy as np
from fair_class_matching import metrics
from fair_class_matching.baselines import EqualFilling, Greedy, Ranking, WaterFilling
from fair_class_matching.instance import Instance
from fair_class_matching.matching import ThresholdMatcher, ThresholdRanking, run_online
from fair_class_matching.reference import reference_threshold
from hypothesis import given, settings
from hypothesis import strategies as st

GAMMAS = st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 0.3, 0.9])


@st.composite
def instances(draw, max_agents=7, max_items=9, max_classes=3, values=False):
    n = draw(st.integers(1, max_agents))
    k = draw(st.integers(1, min(max_classes, n)))
    labels = draw(st.lists(st.integers(0, k - 1), min_size=n, max_size=n))
    labels[:k] = list(range(k))
    labels = draw(st.permutations(labels))
    m = draw(st.integers(0, max_items))
    items = [sorted(draw(st.sets(st.integers(0, n - 1), max_size=n))) for _ in range(m)]
    vals = [draw(st.sampled_from([0.5, 1.0, 2.0, 3.5])) for _ in range(m)] if values else None
    return Instance.from_lists(labels, items, vals)


def dense(alloc):
    inst = alloc.instance
    out = np.zeros((inst.n_items, inst.n_agents))
    rows = np.repeat(np.arange(inst.n_items), np.diff(alloc.indptr))
    out[rows, alloc.agents] = alloc.amounts
    return out


@settings(max_examples=120, deadline=None)
@given(instances(values=True), GAMMAS, st.sampled_from(["equal", "normalized", "greedy"]))
def test_closed_form_equals_event_simulation(inst, gamma, phase1):
    alloc = run_online(inst, ThresholdMatcher(inst, gamma, phase1=phase1))
    np.testing.assert_allclose(dense(alloc), reference_threshold(inst, gamma, phase1=phase1), atol=1e-9)


@settings(max_examples=80, deadline=None)
@given(instances(values=True), GAMMAS, st.integers(0, 5))
def test_loads_within_capacity_and_non_wasteful_after_every_arrival(inst, gamma, seed):
    matchers = [
        ThresholdMatcher(inst, gamma),
        ThresholdMatcher(inst, gamma, phase1="greedy"),
        ThresholdRanking(inst, gamma, seed=seed),
        WaterFilling(inst),
        EqualFilling(inst),
        Ranking(inst, seed=seed),
        Greedy(inst),
    ]
    for matcher in matchers:
        alloc = run_online(inst, matcher, audit=True)
        assert alloc.audit.ok, (matcher.name, alloc.audit.violations)
        assert alloc.loads.max(initial=0.0) <= 1.0
        assert alloc.item_mass().max(initial=0.0) <= 1.0 + 1e-12
        np.testing.assert_allclose(
            np.bincount(alloc.agents, alloc.amounts, inst.n_agents), alloc.loads, atol=1e-12
        )


@settings(max_examples=60, deadline=None)
@given(instances())
def test_endpoints_reproduce_water_filling_and_equal_filling(inst):
    np.testing.assert_allclose(
        dense(run_online(inst, ThresholdMatcher(inst, 0.0))),
        dense(run_online(inst, WaterFilling(inst))),
        atol=1e-12,
    )
    np.testing.assert_allclose(
        dense(run_online(inst, ThresholdMatcher(inst, 1.0))),
        dense(run_online(inst, EqualFilling(inst))),
        atol=1e-12,
    )


@settings(max_examples=60, deadline=None)
@given(instances(values=True), GAMMAS, st.booleans())
def test_class_values_max_flow_equal_lp(inst, gamma, indivisible):
    matcher = ThresholdRanking(inst, gamma, seed=1) if indivisible else ThresholdMatcher(inst, gamma)
    alloc = run_online(inst, matcher)
    np.testing.assert_allclose(
        metrics.class_values(alloc), metrics.class_values(alloc, method="lp"), atol=1e-7
    )
    assert abs(metrics.offline_opt(inst) - metrics.offline_opt(inst, method="lp")) < 1e-7


@settings(max_examples=60, deadline=None)
@given(instances(), GAMMAS, st.integers(0, 3))
def test_decisions_never_depend_on_future_items(inst, gamma, seed):
    full = [
        run_online(inst, ThresholdMatcher(inst, gamma)),
        run_online(inst, ThresholdRanking(inst, gamma, seed=seed)),
        run_online(inst, EqualFilling(inst)),
    ]
    for t in range(inst.n_items + 1):
        head = inst.prefix(t)
        prefix = [
            run_online(head, ThresholdMatcher(head, gamma)),
            run_online(head, ThresholdRanking(head, gamma, seed=seed)),
            run_online(head, EqualFilling(head)),
        ]
        for a, b in zip(full, prefix):
            for s in range(t):
                assert a.assignment(s).agents.tolist() == b.assignment(s).agents.tolist()
                assert a.assignment(s).amounts.tolist() == b.assignment(s).amounts.tolist()
