"""The exact engine against the brute-force reference, and the paper's identities and bounds."""

import math

import numpy as np
import pytest
from entropy_unmask import (
    EBSampler,
    EntropySum,
    FixedK,
    MaxEntropyThreshold,
    TopKConfidence,
    exact_analysis,
    exact_output_distribution,
    iteration_bound,
    kl_divergence,
    markov,
    point_mass,
    product,
    random_code,
    template,
)
from entropy_unmask.data import copy, hmm, mixture
from entropy_unmask.reference import reference_analysis

TARGETS = {
    "markov": lambda: markov(L=4, V=3, seed=1),
    "code": lambda: random_code(L=4, V=3, size=6, seed=2),
    "copy": lambda: copy(L=4, V=3, seed=3),
    "hmm": lambda: hmm(L=4, V=3, hidden=5, seed=4),
}
RULES = [
    ("entropy-sum", 0.3, {}, lambda: EntropySum(0.3)),
    ("entropy-sum", 0.7, {"include_crossing": False}, lambda: EntropySum(0.7, include_crossing=False)),
    ("entropy-sum", 0.5, {"order": "random"}, lambda: EntropySum(0.5, order="random")),
    ("fixed-k", 2, {}, lambda: FixedK(2)),
    ("top-k", 2, {}, lambda: TopKConfidence(2)),
    ("max-entropy", 0.5, {}, lambda: MaxEntropyThreshold(0.5)),
    ("eb-sampler", 0.4, {}, lambda: EBSampler(0.4)),
]


@pytest.mark.parametrize("family", ["markov", "code", "copy"])
@pytest.mark.parametrize("rule", RULES, ids=[f"{r[0]}-{r[1]}-{r[2]}" for r in RULES])
def test_fast_engine_matches_reference(family, rule):
    name, param, kw, make = rule
    target = TARGETS[family]()
    ref = reference_analysis(target.table(), name, param, **kw)
    fast = exact_analysis(target.oracle(), make(), target)
    assert fast.kl == pytest.approx(ref["kl"], abs=1e-12)
    assert fast.expected_iterations == pytest.approx(ref["expected_iterations"], abs=1e-12)
    assert fast.p_expected_iterations == pytest.approx(ref["p_expected_iterations"], abs=1e-12)
    assert fast.tc_sum == pytest.approx(ref["tc_sum"], abs=1e-12)
    q = exact_output_distribution(target.oracle(), make(), target.L, target.V)
    np.testing.assert_allclose(q, ref["q"], atol=1e-14)
    assert q.sum() == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("family", sorted(TARGETS))
def test_kl_equals_expected_total_correlation_for_deterministic_rules(family):
    target = TARGETS[family]()
    for sched in (
        EntropySum(0.4),
        EntropySum(1.0),
        TopKConfidence(2),
        EBSampler(0.3),
        MaxEntropyThreshold(0.6),
    ):
        res = exact_analysis(target.oracle(), sched, target)
        assert res.kl == pytest.approx(res.tc_sum, abs=1e-12), sched
    # random rules: q is a mixture over set choices, so KL <= E[sum TC] (convexity), strictly here
    for sched in (FixedK(2), EntropySum(0.5, order="random")):
        res = exact_analysis(target.oracle(), sched, target)
        assert res.kl <= res.tc_sum + 1e-12


def test_tc_identity_is_not_vacuous():
    target = markov(L=6, V=3, seed=0)
    res = exact_analysis(target.oracle(), EntropySum(1.0), target)
    assert res.kl > 0.01  # a real error, and the identity still holds
    assert res.kl == pytest.approx(res.tc_sum, abs=1e-12)


@pytest.mark.parametrize("eta", [0.02, 0.1, 0.3, 0.7, 1.5])
@pytest.mark.parametrize("family", ["markov", "code", "copy", "hmm"])
def test_iteration_bound(family, eta):
    target = TARGETS[family]()
    res = exact_analysis(target.oracle(), EntropySum(eta), target)
    bound = iteration_bound(res.entropy, res.kl, eta)
    assert res.p_expected_iterations <= bound + 1e-9
    # E_p[sum of revealed entropies] = H + KL exactly
    assert res.p_entropy_sum == pytest.approx(res.entropy + res.kl, abs=1e-12)


@pytest.mark.parametrize("order", ["entropy", "random"])
def test_eta_to_zero_is_exact(order):
    for target in (markov(L=5, V=3, seed=0), random_code(L=5, V=3, size=7, seed=1), copy(L=6, V=3)):
        res = exact_analysis(target.oracle(), EntropySum(1e-9, order=order), target)
        assert abs(res.kl) < 1e-10
        assert res.off_support_mass < 1e-12


def test_eta_to_zero_reveals_one_token_per_step_on_full_entropy_positions():
    target = product(L=5, V=3, seed=0)  # every position has positive entropy
    res = exact_analysis(target.oracle(), EntropySum(1e-9), target)
    assert res.expected_iterations == pytest.approx(5.0)


@pytest.mark.parametrize("eta", [0.01, 0.3, 1.0, 5.0, 100.0])
def test_product_targets_have_zero_kl_at_any_eta(eta):
    target = product(L=5, V=3, seed=2)
    for sched in (EntropySum(eta), EntropySum(eta, order="random"), FixedK(3), EBSampler(eta)):
        res = exact_analysis(target.oracle(), sched, target)
        assert abs(res.kl) < 1e-12


def test_point_mass_one_iteration_and_exact():
    target = point_mass(L=7, V=4, seed=3)
    res = exact_analysis(target.oracle(), EntropySum(0.1), target)
    assert res.expected_iterations == 1.0 and abs(res.kl) < 1e-15
    assert res.q_support[0] == pytest.approx(1.0)


@pytest.mark.parametrize("sched", [EntropySum(1e-6), EntropySum(0.5), FixedK(1), MaxEntropyThreshold(0.0)])
def test_iterations_never_exceed_L(sched):
    target = template(L=8, V=3, slots=4, fills=20, seed=0)
    res = exact_analysis(target.oracle(), sched, target)
    assert res.expected_iterations <= target.L + 1e-12
    assert res.p_expected_iterations <= target.L + 1e-12


def test_hmm_against_reference_for_the_paper_rule():
    target = TARGETS["hmm"]()
    ref = reference_analysis(target.table(), "entropy-sum", 0.3)
    fast = exact_analysis(target.oracle(), EntropySum(0.3), target)
    assert fast.kl == pytest.approx(ref["kl"], abs=1e-12)
    assert fast.expected_iterations == pytest.approx(ref["expected_iterations"], abs=1e-12)


def test_support_and_full_modes_agree():
    target = mixture([markov(L=4, V=3, seed=0), random_code(L=4, V=3, size=4, seed=1)])
    for sched in (EntropySum(0.8), FixedK(2)):
        a = exact_analysis(target.oracle(), sched, target)
        b = exact_analysis(target.oracle(), sched, target, full=True)
        assert a.kl == pytest.approx(b.kl, abs=1e-12)
        assert a.expected_iterations == pytest.approx(b.expected_iterations, abs=1e-12)
        assert a.off_support_mass == pytest.approx(b.off_support_mass, abs=1e-12)


def test_larger_eta_gives_fewer_iterations_and_more_kl_on_markov():
    target = markov(L=8, V=4, seed=0)
    rows = [exact_analysis(target.oracle(), EntropySum(eta), target) for eta in (0.05, 0.5, 2.0)]
    its = [r.expected_iterations for r in rows]
    assert its[0] > its[1] > its[2]
    assert rows[0].kl < rows[2].kl


def test_kl_divergence_known_values():
    assert kl_divergence([1.0, 0.0], [0.5, 0.5]) == pytest.approx(math.log(2))
    assert kl_divergence([0.5, 0.5], [1.0, 0.0]) == math.inf
    assert kl_divergence([0.2, 0.8], [0.2, 0.8]) == 0.0


@pytest.mark.parametrize("k", [2, 3])
def test_fixed_k_off_support_mass_and_iterations_without_tracking(k):
    # fixed-k skips the per-step off-support tracking: its off-support mass (1 - sum of q on the support)
    # must equal the full-table DP's mass on sequences the target never produces, and its iterations
    # ceil(L / k), also for a predictor without the oracle's uniform tail
    target = copy(L=5, V=3, seed=2)
    res = exact_analysis(target.oracle(), FixedK(k), target)
    full = exact_analysis(target.oracle(), FixedK(k), target, full=True)
    assert res.off_support_mass > 0.01
    assert res.off_support_mass == pytest.approx(full.off_support_mass, abs=1e-12)
    assert res.kl == pytest.approx(full.kl, abs=1e-12)
    oracle = target.oracle()
    plain = exact_analysis(lambda t: oracle(t), FixedK(k), target)  # no offsupport_uniform attribute
    assert plain.expected_iterations == res.expected_iterations == math.ceil(5 / k)


def test_off_support_tracking_with_large_sequence_codes():
    # V^L = 64^10 = 2^60: the codes of x_S are above 2^53 (float64 rounds them) and the (state-set, code)
    # keys above 2^63 (int64 wraps); either used to merge distinct pairs and invent off-support mass.
    # The same joint over V = 4 has the same law on the support; no mass leaves it with eta = 0.5.
    rng = np.random.default_rng(0)
    sup = np.zeros((6, 10), dtype=np.int64)
    sup[1:] = rng.integers(0, 3, size=(5, 10))
    small, big = (_random_order(sup, V) for V in (4, 64))
    assert small.off_support_mass == 0.0
    assert big.off_support_mass == pytest.approx(1.0 - big.q_support.sum(), abs=1e-12)
    assert big.expected_iterations == pytest.approx(small.expected_iterations, abs=1e-12)
    assert big.kl == pytest.approx(small.kl, abs=1e-12)


def _random_order(support, V):
    from entropy_unmask import Joint

    joint = Joint(support, np.full(support.shape[0], 1.0 / support.shape[0]), V)
    return exact_analysis(joint.oracle(), EntropySum(0.5, order="random"), joint)
