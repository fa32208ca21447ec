"""Each rule against its plain-loop reference definition, and the crossing / tie semantics."""

import numpy as np
import pytest
from entropy_unmask import EBSampler, EntropySum, FixedK, MaxEntropyThreshold, TopKConfidence
from entropy_unmask.reference import reference_sets
from hypothesis import given, settings
from hypothesis import strategies as st


def _rows(seed, B, L, V):
    rng = np.random.default_rng(seed)
    conc = rng.choice([0.05, 0.3, 1.0, 5.0], size=(B, L, 1))
    p = rng.gamma(conc, size=(B, L, V)) + 1e-300
    p /= p.sum(axis=-1, keepdims=True)
    # some exactly deterministic rows and exact ties
    p[:, 0] = np.eye(V)[0]
    if L > 2:
        p[:, 2] = p[:, 1]
    masked = rng.random((B, L)) < 0.8
    masked[:, 0] = True
    return p, masked


CASES = [
    ("entropy-sum", lambda v: EntropySum(v), {}),
    ("entropy-sum", lambda v: EntropySum(v, include_crossing=False), {"include_crossing": False}),
    ("top-k", lambda v: TopKConfidence(max(1, int(v * 3))), None),
    ("max-entropy", lambda v: MaxEntropyThreshold(v), {}),
    ("eb-sampler", lambda v: EBSampler(v), {}),
]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), value=st.floats(0.001, 3.0), L=st.integers(1, 7), V=st.integers(2, 5))
def test_deterministic_rules_match_reference(seed, value, L, V):
    probs, masked = _rows(seed, 6, L, V)
    for name, make, kw in CASES:
        sched = make(value)
        param = sched.k if name == "top-k" else value
        got = sched.select_batch(probs, masked, None)
        for b in range(probs.shape[0]):
            rows = {i: probs[b, i].tolist() for i in range(L) if masked[b, i]}
            ((S, pr),) = reference_sets(name, param, rows, **(kw or {}))
            assert tuple(np.nonzero(got[b])[0].tolist()) == S, (name, value, b)
            assert pr == 1.0


def test_crossing_token_semantics():
    # entropies (nats): 0, log 2, ~0.325, log 2
    p = np.array([[[1.0, 0.0], [0.5, 0.5], [0.9, 0.1], [0.5, 0.5]]])
    m = np.ones((1, 4), bool)
    assert EntropySum(0.5).select_batch(p, m)[0].tolist() == [True, True, True, False]
    assert EntropySum(0.5, include_crossing=False).select_batch(p, m)[0].tolist() == [
        True,
        False,
        True,
        False,
    ]
    # a first token above eta is still revealed alone
    assert EntropySum(0.01, include_crossing=False).select_batch(p[:, 1:], m[:, 1:])[0].tolist() == [
        False,
        True,
        False,
    ]
    # all remaining entropy below eta: reveal everything
    assert EntropySum(10.0).select_batch(p, m)[0].all()


def test_eb_and_max_entropy_examples():
    p = np.array([[[1.0, 0.0], [0.5, 0.5], [0.9, 0.1], [0.5, 0.5]]])
    m = np.ones((1, 4), bool)
    # ascending: 0 (pos 0), 0.325 (pos 2), 0.693 (pos 1), 0.693 (pos 3)
    assert EBSampler(0.33).select_batch(p, m)[0].tolist() == [True, True, True, False]
    assert EBSampler(0.0).select_batch(p, m)[0].tolist() == [True, False, True, False]
    assert MaxEntropyThreshold(0.4).select_batch(p, m)[0].tolist() == [True, False, True, False]
    m2 = np.array([[False, True, False, True]])
    assert MaxEntropyThreshold(0.1).select_batch(p, m2)[0].tolist() == [False, True, False, False]


def test_batched_equals_single_calls():
    probs, masked = _rows(7, 50, 6, 3)
    for sched in (EntropySum(0.4), TopKConfidence(2), EBSampler(0.2), MaxEntropyThreshold(0.3)):
        batch = sched.select_batch(probs, masked, None)
        for b in range(50):
            assert (sched.select_batch(probs[b : b + 1], masked[b : b + 1], None)[0] == batch[b]).all()


@pytest.mark.parametrize(
    "sched",
    [FixedK(3), EntropySum(0.6, order="random"), EntropySum(0.6, order="random", include_crossing=False)],
)
def test_random_rules_set_distribution_matches_reference_and_frequencies(sched):
    probs, masked = _rows(3, 1, 6, 3)
    rows = {i: probs[0, i].tolist() for i in range(6) if masked[0, i]}
    if isinstance(sched, FixedK):
        ref = dict(reference_sets("fixed-k", 3, rows))
    else:
        ref = dict(
            reference_sets("entropy-sum", 0.6, rows, order="random", include_crossing=sched.include_crossing)
        )
    got = dict(sched.set_distribution(probs[0], masked[0]))
    assert set(got) == set(ref)
    for S in ref:
        assert got[S] == pytest.approx(ref[S], abs=1e-12)
    assert sum(got.values()) == pytest.approx(1.0)
    # the sampler's choices follow that distribution (chi-square style bound on the worst cell)
    n = 20000
    chosen = sched.select_batch(np.repeat(probs, n, 0), np.repeat(masked, n, 0), np.random.default_rng(0))
    keys = [tuple(np.nonzero(c)[0].tolist()) for c in chosen]
    for S, pr in ref.items():
        freq = keys.count(S) / n
        assert abs(freq - pr) < 5 * np.sqrt(pr * (1 - pr) / n) + 1e-9


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), eta=st.floats(0.01, 3.0))
def test_entropy_sum_with_crossing_equals_eb_sampler_at_gamma_eta(seed, eta):
    # ascending order + crossing token: reveal the prefix whose first k-1 entropies sum below eta,
    # which is EB-sampler's largest prefix with sum - max <= gamma at gamma = eta (off exact ties)
    probs, masked = _rows(seed, 20, 6, 3)
    a = EntropySum(eta).select_batch(probs, masked)
    b = EBSampler(eta).select_batch(probs, masked)
    assert (a == b).all()
    # without the crossing token the rules differ on some state
    c = EntropySum(eta, include_crossing=False).select_batch(probs, masked)
    assert (c.sum(axis=1) <= a.sum(axis=1)).all()


@pytest.mark.parametrize("include_crossing", [True, False])
def test_random_order_weights_for_many_states_match_the_reference(include_crossing):
    # the batched form used by the exact engine: several states sharing one mask, each row against the
    # plain-loop reference of its own state
    probs, masked = _rows(7, 5, 6, 3)
    mask = masked[0]
    sched = EntropySum(0.6, order="random", include_crossing=include_crossing)
    sets, W = sched.set_weights(probs, mask)
    assert W.shape == (5, sets.size) and np.allclose(W.sum(axis=1), 1.0)
    for g in range(5):
        rows = {i: probs[g, i].tolist() for i in range(6) if mask[i]}
        ref = dict(
            reference_sets("entropy-sum", 0.6, rows, order="random", include_crossing=include_crossing)
        )
        got = {tuple(i for i in range(6) if S >> i & 1): w for S, w in zip(sets.tolist(), W[g]) if w > 0}
        assert set(got) == set(ref)
        for S in ref:
            assert got[S] == pytest.approx(ref[S], abs=1e-12)
