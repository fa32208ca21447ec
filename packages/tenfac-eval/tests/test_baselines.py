"""The anchors: PPI++ against hand-computed answers, the human-only and masked-CP fits, raw autorater."""

import numpy as np
import pytest
from tenfac_eval import HumanOnly, MaskedCP, Ratings, ppi_plus_plus, raw_autorater, simulate, split_human


def test_ppi_plus_plus_known_answers():
    rng = np.random.default_rng(0)
    y = rng.normal(size=200)
    fu = rng.normal(size=2000)
    # a predictor unrelated to y: lambda ~ 0 and PPI++ reduces to the classical mean
    r = ppi_plus_plus(y, rng.normal(size=200), fu)
    assert abs(r["lambda"]) < 0.2
    # a perfect predictor: lambda = 1/(1 + n/N), estimate = mean of the predictions pooled
    f = y.copy()
    r = ppi_plus_plus(y, f, fu)
    var_f = np.var(np.concatenate([f, fu]), ddof=1)
    lam = np.cov(y, f)[0, 1] / ((1 + 200 / 2000) * var_f)
    assert r["lambda"] == pytest.approx(min(lam, 1.0))
    assert r["estimate"] == pytest.approx(y.mean() + r["lambda"] * (fu.mean() - f.mean()))
    se = np.sqrt(np.var(y - r["lambda"] * f, ddof=1) / 200 + r["lambda"] ** 2 * np.var(fu, ddof=1) / 2000)
    assert r["se"] == pytest.approx(se)
    classical = np.std(y, ddof=1) / np.sqrt(200)
    assert r["se"] < 0.5 * classical


def test_raw_autorater_maps_scales():
    auto = Ratings.from_columns(["p", "p", "q"], ["m", "m", "m"], ["a", "b", "a"], [1, 5, 5], scale="1-5")
    score, probs = raw_autorater(auto, ["p", "q"], ["m", "m"], (0.0, 1.0), eps=0.1)
    np.testing.assert_allclose(score, [0.5, 1.0])
    np.testing.assert_allclose(probs, [[0.5, 0.5], [0.05, 0.95]])


def test_human_only_and_masked_cp_fit():
    sim = simulate(200, 4, 3, rank=1, seed=4)
    cal, held = split_human(sim.human_all, 0.3, seed=0)
    hp, hm = list(held.prompt), list(held.model)
    ho = HumanOnly().fit(cal)
    h = ho.predict_proba(hp, hm)
    assert ho.l2_ in HumanOnly.GRID
    assert h.shape == (len(held), 5) and np.allclose(h.sum(1), 1)
    c = MaskedCP(rank=1).fit(sim.autorater, cal).predict_proba(hp, hm)
    marginal = np.bincount(cal.level, minlength=5) / len(cal)

    def ll(probs):
        return -np.mean(np.log(probs[np.arange(len(held)), held.level]))

    assert ll(h) < ll(np.tile(marginal, (len(held), 1)))  # it learns the model effects
    assert ll(c) < ll(h) - 0.05  # the autoraters carry information the human-only model cannot have
