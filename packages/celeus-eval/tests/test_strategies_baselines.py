"""Surrogate strategies, pools and baselines: known values, invariants, validity."""

import numpy as np
import pytest
from celeus_eval import strategies
from celeus_eval.baselines import WoRBettingCS, celeus_ablation, cer_eval, ppi_fixed_n, uniform_betting
from celeus_eval.data import auc, synthetic_pool

from papershelf.errors import InputError
from papershelf.testing import assert_rate_at_most

F = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [1 / 3, 1 / 3, 1 / 3]])
G = np.array([[0.6, 0.3, 0.1], [0.5, 0.4, 0.1], [0.2, 0.5, 0.3]])


def test_strategy_quantities_known_values():
    np.testing.assert_allclose(strategies.gini_uncertainty(F), [1 - 0.54, 1 - 0.66, 2 / 3])
    np.testing.assert_allclose(strategies.hard_disagreement(F, G), [0, 1, 1])
    np.testing.assert_allclose(strategies.soft_pseudo_loss(F, G), [0.3, 0.9, 2 / 3])
    np.testing.assert_allclose(strategies.entropy(np.array([[0.5, 0.5]])), [np.log(2)])
    np.testing.assert_allclose(strategies.mode_loss(F), -np.log([0.7, 0.8, 1 / 3]))
    s, p = strategies.surrogate_and_proxy(F, G)  # S4: Gini of f, hard disagreement
    np.testing.assert_allclose(s, strategies.gini_uncertainty(F))
    np.testing.assert_allclose(p, [0, 1, 1])
    s, p = strategies.surrogate_and_proxy(F, G, loss="cross_entropy")  # S2: H(f), mode loss
    np.testing.assert_allclose(s, strategies.entropy(F))
    np.testing.assert_allclose(p, strategies.mode_loss(F))
    losses = strategies.true_losses(F, np.array([0, 1, 2]), loss="cross_entropy", ce_cap=1.0)
    np.testing.assert_allclose(losses, [-np.log(0.7), 1.0, 1.0])  # -log(1/3) > 1 is capped


def test_strategy_input_errors():
    with pytest.raises(InputError, match="sums to"):
        strategies.surrogate_and_proxy(F * 2, G)
    with pytest.raises(InputError, match="classes"):
        strategies.surrogate_and_proxy(F, G[:, :2] / G[:, :2].sum(1, keepdims=True))
    with pytest.raises(InputError, match="strategy"):
        strategies.surrogate_and_proxy(F, G, strategy="S9")
    with pytest.raises(InputError, match="labels"):
        strategies.true_losses(F, np.array([0, 1, 5]))


def test_auc_known_values_and_synthetic_pool_hits_target():
    assert auc(np.array([0.1, 0.2, 0.8, 0.9]), np.array([0, 0, 1, 1])) == 1.0
    assert auc(np.array([0.5, 0.5]), np.array([0, 1])) == 0.5
    pool = synthetic_pool(5000, target_auc=0.85, seed=2)
    assert abs(pool.auc() - 0.85) < 0.01
    assert 0.1 < pool.risk < 0.3


def test_wor_betting_cs_is_valid_and_collapses_on_the_whole_pool():
    rng = np.random.default_rng(0)
    misses, reps = 0, 300
    for r in range(reps):
        losses = (rng.random(200) < 0.3).astype(float)
        res = uniform_betting(losses, target_width=0.15, grid=200, seed=r)
        misses += not (res.lower <= losses.mean() <= res.upper)
    assert_rate_at_most(misses, reps, 0.05, what="uniform betting miscoverage")
    res = uniform_betting(losses, target_width=1e-9, grid=200, seed=0)
    assert res.n_labels == 200 and res.lower == pytest.approx(losses.mean())
    cs = WoRBettingCS(0.05, 10, grid=99)
    for x in [1, 1, 1, 1, 1]:
        lo, _ = cs.update(x)
    assert lo > 0.3  # five ones out of ten: the sequence has moved well up from 0


def test_ablations_and_cer_eval_and_ppi_run_and_cover():
    pool = synthetic_pool(2000, seed=4)
    for name in ("M2-fixed-bounds", "M3-no-surrogate", "surrogate-uniform"):
        res = celeus_ablation(name, pool.losses, pool.surrogate, pool.proxy, target_width=0.15, seed=0)
        assert res.reached and res.lower <= pool.risk <= res.upper
    res = cer_eval(pool.losses, pool.features, target_width=0.15, seed=0)
    assert res.reached and res.lower <= pool.risk <= res.upper and res.n_labels < pool.size
    cover = [
        (r.lower <= pool.risk <= r.upper)
        for r in (ppi_fixed_n(pool.losses, pool.surrogate, 200, seed=s) for s in range(100))
    ]
    assert np.mean(cover) > 0.88  # nominal 0.95 at a fixed n; Monte-Carlo slack for 100 runs
    with pytest.raises(InputError, match="ablation"):
        celeus_ablation("M9", pool.losses, pool.surrogate)
    with pytest.raises(InputError, match="features"):
        cer_eval(pool.losses, pool.features[:10])
