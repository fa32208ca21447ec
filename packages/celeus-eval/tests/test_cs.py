"""The vectorised betting CS equals the plain-loop reference, and it is anytime-valid."""

import math

import numpy as np
import pytest
from celeus_eval import BettingCS, Celeus
from celeus_eval.reference import ReferenceBettingCS

from papershelf.errors import InputError
from papershelf.testing import assert_rate_at_most


def test_vectorised_cs_equals_reference_loop():
    rng = np.random.default_rng(3)
    fast, slow = BettingCS(0.05, grid=150), ReferenceBettingCS(0.05, grid=150)
    for _ in range(250):
        a = -rng.random()
        b = 1 + rng.random() * 2
        z = a + (b - a) * rng.beta(2, 5)
        lo_f, hi_f = fast.update(z, a, b)
        lo_s, hi_s = slow.update(z, a, b)
        assert fast.alive.tolist() == slow.alive
        assert lo_f == pytest.approx(lo_s, abs=1e-12) and hi_f == pytest.approx(hi_s, abs=1e-12)
        np.testing.assert_allclose(fast.log_up[fast.alive], np.array(slow.log_up)[fast.alive], rtol=1e-10)
    assert hi_f - lo_f < 0.5  # it did shrink


def test_interval_is_nested_and_rejects_points_outside_support():
    cs = BettingCS(0.05, grid=100)
    prev = (0.0, 1.0)
    rng = np.random.default_rng(0)
    for _ in range(100):
        cur = cs.update(0.3 + 0.1 * rng.standard_normal() * 0.1, 0.0, 1.0)
        assert prev[0] <= cur[0] <= cur[1] <= prev[1]
        prev = cur
    cs2 = BettingCS(0.05, grid=100)
    lo, hi = cs2.update(0.5, 0.2, 0.7)  # the mean cannot be outside the round's support
    assert lo >= 0.2 - cs2.step - 1e-12 and hi <= 0.7 + cs2.step + 1e-12


def test_anytime_coverage_over_2000_streams():
    """Fraction of whole Celeus runs whose interval EVER excludes the pool risk is <= alpha (+3 SE)."""
    rng = np.random.default_rng(11)
    alpha, n_streams, n_pool, horizon = 0.05, 2000, 60, 20
    ever_missed = 0
    for s in range(n_streams):
        p = rng.beta(2, 3, n_pool)
        losses = (rng.random(n_pool) < p).astype(float)
        surrogate = np.clip(p + 0.2 * rng.standard_normal(n_pool), 0, 1)
        engine = Celeus(surrogate, alpha=alpha, grid=60, seed=s)
        risk = losses.mean()
        for _ in range(horizon):
            lo, hi = engine.step(losses.__getitem__)
            if not lo <= risk <= hi:
                ever_missed += 1
                break
    assert_rate_at_most(ever_missed, n_streams, alpha, what="anytime miscoverage")


@pytest.mark.parametrize(
    "kwargs",
    [{"alpha": 0}, {"alpha": 1.5}, {"grid": 1}, {"c": -1}, {"theta": 2}, {"low": 1, "high": 0}],
)
def test_bad_parameters_are_input_errors(kwargs):
    with pytest.raises(InputError):
        BettingCS(**kwargs)


def test_bad_updates_are_input_errors():
    cs = BettingCS()
    with pytest.raises(InputError, match="outside"):
        cs.update(2.0, 0.0, 1.0)
    with pytest.raises(InputError, match="finite"):
        cs.update(math.nan, 0.0, 1.0)
    with pytest.raises(InputError):
        cs.update(0.5, 1.0, 1.0)
