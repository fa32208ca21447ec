"""The paper's guarantees on generated instances (a smaller set than `reproduce`, which runs >= 200 per γ).

Divisible: CEF >= 1 - e^-γ and USW/OPT >= 1 - e^(γ-1)/(γ+1) on every instance, minus 1e-6 (both are
worst-case guarantees, so any violation is a failure). The USW guarantee must hold for every phase-1
rule (the primal-dual argument does not use it). Indivisible: the ex-ante CEF is estimated from 60
seeds; it must not fall below γ/2 by more than 3 delta-method standard errors.
"""

import pytest
from fair_class_matching import bounds, metrics
from fair_class_matching.data import upper_triangular
from fair_class_matching.experiments import GAMMAS, divisible_guarantees, indivisible_cef, instance_set
from fair_class_matching.matching import ThresholdMatcher, run_online

INSTANCES = instance_set(10, (8, 14, 22))


def test_divisible_guarantees_on_every_instance():
    out = divisible_guarantees(INSTANCES)
    assert out["non_wasteful_every_arrival"]
    for row in out["rows"]:
        assert row["instances"] == 40
        assert row["cef_violations"] == 0 and row["min_cef"] >= row["cef_bound"] - 1e-6, row
        assert row["usw_violations"] == 0 and row["min_usw_ratio"] >= row["usw_bound"] - 1e-6, row


@pytest.mark.parametrize("phase1", ["normalized", "greedy"])
def test_usw_guarantee_does_not_depend_on_phase1_rule(phase1):
    for inst in [*INSTANCES[::3], upper_triangular(120, 2), upper_triangular(120, 3, partition="random")]:
        opt = metrics.offline_opt(inst)
        for g in GAMMAS:
            alloc = run_online(inst, ThresholdMatcher(inst, g, phase1=phase1))
            assert metrics.usw_ratio(alloc, opt) >= bounds.alg_usw(g) - 1e-6


def test_upper_triangular_is_near_the_usw_guarantee_at_gamma_0():
    inst = upper_triangular(200, 2)
    ratio = run_online(inst, ThresholdMatcher(inst, 0.0)).usw() / 200
    assert bounds.alg_usw(0.0) - 1e-6 <= ratio < bounds.alg_usw(0.0) + 0.005


@pytest.mark.parametrize("gamma", [0.5, 1.0])
def test_indivisible_ex_ante_cef_at_least_gamma_over_2(gamma):
    for inst in instance_set(1, (10, 14), seed=7):
        res = indivisible_cef(inst, gamma, 60, seed=3)
        assert res["ex_ante_cef"] + 3 * res["se"] >= bounds.indivisible_cef(gamma), (inst.name, res)
        assert res["mean_usw_ratio"] >= bounds.alg_usw(gamma) - 0.1  # in expectation; 60 seeds
