"""The signal is exactly conditionally unbiased, and its announced support always holds it."""

import numpy as np
from celeus_eval import reference
from celeus_eval.signal import fixed_support, plug_in, residual_proposal, signal_value, support
from hypothesis import given, settings
from hypothesis import strategies as st


def _random_round(rng, n_pool, n_labelled, low=0.0, high=1.0, beta=0.4):
    losses = rng.uniform(low, high, n_pool)
    surrogate = rng.uniform(low, high, n_pool)
    proxy = rng.uniform(low, high, n_pool)
    labelled = rng.choice(n_pool, size=n_labelled, replace=False)
    remaining = np.setdiff1d(np.arange(n_pool), labelled)
    q = residual_proposal(np.abs(proxy[remaining] - surrogate[remaining]), beta, n_pool)
    return losses, surrogate, labelled, remaining, q


def test_signal_is_conditionally_unbiased_to_1e12():
    rng = np.random.default_rng(0)
    for trial in range(200):
        n_pool = int(rng.integers(2, 60))
        losses, surrogate, labelled, remaining, q = _random_round(rng, n_pool, int(rng.integers(0, n_pool)))
        m = plug_in(losses[labelled].sum(), surrogate[remaining].sum(), n_pool)
        z = np.array([signal_value(m, losses[j], surrogate[j], qj, n_pool) for j, qj in zip(remaining, q)])
        assert abs(q.sum() - 1.0) < 1e-12
        assert abs(float(np.dot(q, z)) - losses.mean()) < 1e-12, trial


def test_fast_signal_matches_reference_and_reference_is_unbiased():
    rng = np.random.default_rng(1)
    losses, surrogate, labelled, remaining, q = _random_round(rng, 40, 13)
    qd = dict(zip(remaining.tolist(), q.tolist()))
    m = plug_in(losses[labelled].sum(), surrogate[remaining].sum(), 40)
    for j in remaining:
        fast = signal_value(m, losses[j], surrogate[j], qd[j], 40)
        slow = reference.signal(losses.tolist(), surrogate.tolist(), set(labelled.tolist()), qd, int(j))
        assert abs(fast - slow) < 1e-12
    expected = reference.expected_signal(losses.tolist(), surrogate.tolist(), set(labelled.tolist()), qd)
    assert abs(expected - losses.mean()) < 1e-12


@settings(max_examples=60, deadline=None)
@given(
    n_pool=st.integers(2, 40),
    frac=st.floats(0, 0.95),
    beta=st.floats(0.01, 1.0),
    low=st.floats(-2, 1),
    spread=st.floats(0.1, 4),
    seed=st.integers(0, 2**16),
)
def test_support_holds_every_possible_signal_and_matches_reference(n_pool, frac, beta, low, spread, seed):
    rng = np.random.default_rng(seed)
    high = low + spread
    losses, surrogate, labelled, remaining, q = _random_round(
        rng, n_pool, int(frac * n_pool), low, high, beta
    )
    m = plug_in(losses[labelled].sum(), surrogate[remaining].sum(), n_pool)
    a, b = support(m, surrogate[remaining], q, n_pool, low, high)
    qd = dict(zip(remaining.tolist(), q.tolist()))
    ra, rb = reference.support(losses[labelled].sum(), surrogate.tolist(), remaining.tolist(), qd, low, high)
    assert abs(a - ra) < 1e-9 and abs(b - rb) < 1e-9
    for j, qj in zip(remaining, q):
        for y in (low, high, losses[j]):
            z = signal_value(m, y, surrogate[j], qj, n_pool)
            assert a - 1e-9 <= z <= b + 1e-9
    # the fixed (M2) support contains the adaptive one whenever q respects the floor
    fa, fb = fixed_support(beta, low, high)
    if q.min() >= beta / n_pool - 1e-15:
        assert fa - 1e-9 <= a and b <= fb + 1e-9


def test_proposal_floor_and_fallbacks():
    q = residual_proposal(np.array([0.0, 1.0, 3.0]), 0.4, 10)
    assert np.all(q >= 0.4 / 10 - 1e-15) and abs(q.sum() - 1) < 1e-12
    assert q[2] > q[1] > q[0]
    np.testing.assert_allclose(residual_proposal(np.zeros(4), 0.4, 10), 0.25)
    # the floor alone would exceed the mass: uniform
    np.testing.assert_allclose(residual_proposal(np.array([1.0, 2.0]), 1.0, 2), 0.5)
    assert reference.proposal([0.0, 1.0, 3.0], 0.4, 10) == list(q)
