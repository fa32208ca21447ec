"""The engine: stopping-time coverage (and the CLT harness failing), perfect surrogate, input checks."""

import numpy as np
import pytest
from celeus_eval import Celeus, evaluate
from celeus_eval.baselines import clt_peeking

from papershelf.errors import InputError
from papershelf.testing import assert_rate_above, assert_rate_at_most


def _pool(rng, n=400):
    p = rng.beta(1, 6, n)
    losses = (rng.random(n) < p).astype(float)
    return losses, np.clip(p + 0.1 * rng.standard_normal(n), 0, 1)


def test_coverage_at_stopping_time_holds_for_celeus_and_fails_for_clt_peeking():
    """Same pools, same stopping rule (width <= 0.1): Celeus keeps 95%, peeking at a Wald CI does not.

    With a 10%-ish error rate the Wald interval's width collapses whenever the early labels are
    mostly zeros, so stopping at the first narrow interval misses often (about 25% here).
    """
    rng = np.random.default_rng(5)
    reps, alpha = 200, 0.05
    celeus_miss = clt_miss = 0
    for r in range(reps):
        losses, surrogate = _pool(rng, 300)
        risk = losses.mean()
        res = evaluate(losses, surrogate, alpha=alpha, target_width=0.1, grid=200, seed=r)
        celeus_miss += not (res.lower <= risk <= res.upper)
        clt = clt_peeking(losses, alpha=alpha, target_width=0.1, min_labels=10, seed=r)
        clt_miss += not (clt.lower <= risk <= clt.upper)
    assert_rate_at_most(celeus_miss, reps, alpha, what="Celeus miscoverage at stop")
    assert_rate_above(clt_miss, reps, alpha, what="CLT-peeking miscoverage at stop")


def test_perfect_surrogate_stops_far_sooner_and_signal_is_constant():
    rng = np.random.default_rng(2)
    losses = (rng.random(5000) < 0.3).astype(float)
    perfect = Celeus(losses, losses, seed=0)
    res = perfect.run(losses)
    assert all(abs(t["signal"] - losses.mean()) < 1e-12 for t in res.trace)  # Z_t == R_N exactly
    assert res.reached and res.lower <= losses.mean() <= res.upper
    uninformed = evaluate(losses, np.full(5000, 0.3), seed=0)
    # The support still has to allow for any surrogate error, so it is not O(1) labels, but an
    # exact surrogate needs well under a tenth of what a flat one needs.
    assert res.n_labels < 0.1 * uninformed.n_labels, (res.n_labels, uninformed.n_labels)


def test_propose_observe_in_batches_equals_one_at_a_time():
    rng = np.random.default_rng(4)
    losses, surrogate = _pool(rng, 300)
    one = Celeus(surrogate, seed=9)
    r1 = one.run(losses, max_labels=120, stop=False)
    batch = Celeus(surrogate, seed=9)
    for _ in range(6):
        for i in [batch.propose() for _ in range(20)]:
            batch.observe(losses[i])
    assert batch.interval == (r1.lower, r1.upper)
    assert [t["index"] for t in batch.trace] == [t["index"] for t in r1.trace]


def test_population_estimand_is_wider_and_checks_reachability():
    rng = np.random.default_rng(1)
    losses, surrogate = _pool(rng, 20000)
    pool = Celeus(surrogate, seed=0)
    pop = Celeus(surrogate, estimand="population", seed=0)
    for _ in range(200):
        i = pool.propose()
        assert pop.propose() == i
        pool.observe(losses[i])
        pop.observe(losses[i])
    assert pop.width > pool.width
    with pytest.raises(InputError, match="unreachable"):
        Celeus(surrogate[:500], estimand="population", target_width=0.05)


def test_oracle_sampling_beats_uniform_sampling():
    rng = np.random.default_rng(8)
    losses, surrogate = _pool(rng, 3000)
    oracle = [
        evaluate(losses, surrogate, sampling="oracle", oracle_losses=losses, seed=s).n_labels
        for s in range(3)
    ]
    uniform = [evaluate(losses, surrogate, sampling="uniform", seed=s).n_labels for s in range(3)]
    assert np.median(oracle) < np.median(uniform)


def test_whole_pool_gives_the_exact_risk():
    rng = np.random.default_rng(3)
    losses, surrogate = _pool(rng, 50)
    res = evaluate(losses, surrogate, target_width=1e-9, seed=0)
    assert res.n_labels == 50
    assert res.lower == pytest.approx(losses.mean()) and res.upper == pytest.approx(losses.mean())


def test_callable_oracle_and_max_labels():
    rng = np.random.default_rng(3)
    losses, surrogate = _pool(rng, 500)
    asked = []

    def oracle(i):
        asked.append(i)
        return losses[i]

    res = evaluate(oracle, surrogate, max_labels=25, seed=1)
    assert res.n_labels == 25 == len(asked) == len(set(asked))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"alpha": 0.0}, "alpha"),
        ({"alpha": 1.2}, "alpha"),
        ({"target_width": -1}, "target_width"),
        ({"beta": 0}, "beta"),
        ({"sampling": "magic"}, "sampling"),
        ({"estimand": "world"}, "estimand"),
        ({"loss_range": (1, 0)}, "loss_range"),
        ({"sampling": "oracle"}, "oracle_losses"),
    ],
)
def test_bad_parameters(kwargs, match):
    with pytest.raises(InputError, match=match):
        Celeus(np.full(10, 0.5), **kwargs)


@pytest.mark.parametrize(
    ("surrogate", "match"),
    [
        (np.array([0.1, np.nan, 0.3]), "NaN"),
        (np.array([0.1, 1.5]), r"\[0, 1\]"),
        (np.zeros((2, 2)), "one-dimensional"),
        (np.array([]), "empty"),
        (["a", "b"], "numbers"),
    ],
)
def test_bad_surrogates(surrogate, match):
    with pytest.raises(InputError, match=match):
        Celeus(surrogate)


def test_bad_labels_and_oracles():
    engine = Celeus(np.full(10, 0.5), seed=0)
    with pytest.raises(InputError, match="propose"):
        engine.observe(1.0)
    engine.propose()
    with pytest.raises(InputError, match="loss"):
        engine.observe(2.0)
    with pytest.raises(InputError, match="loss"):
        engine.observe(float("nan"))
    with pytest.raises(InputError, match="oracle"):
        evaluate(np.array([0.0, 1.0, np.nan]), np.full(3, 0.5))
    with pytest.raises(InputError, match="10 losses"):
        Celeus(np.full(10, 0.5)).run(np.zeros(9))
