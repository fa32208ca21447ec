"""analyze() and cohort_reliability(): the report, missing cells, range restriction in cohorts."""

import numpy as np
import pytest
from rank_reliability import analyze, cohort_reliability, variance_components
from rank_reliability.data import simulate_2pl, simulate_crossed


def test_analyze_report():
    X = simulate_2pl(40, 300, seed=0).X
    rep = analyze(X, n_splits=50, drop_constant=True)
    d = rep.as_dict()
    assert d["binary"] and d["complete"]
    assert d["classical"]["lambda6"] is None and "undefined" in d["notes"][-1]
    assert d["classical"]["kr20"] == pytest.approx(d["classical"]["alpha"])
    assert d["rho"] == pytest.approx(d["classical"]["alpha"], abs=1e-10)
    assert d["curve"]["n_items"][-1] == rep.shape[1]
    assert np.all(np.diff(d["curve"]["rho"]) > 0)


def test_analyze_with_missing_cells():
    sim = simulate_crossed(30, 50, missing=0.2, seed=1)
    d = analyze(sim.X, n_splits=20).as_dict()
    assert not d["complete"] and d["classical"]["alpha"] is None
    assert d["components"]["n_items_effective"] < 50


def test_cohorts_show_range_restriction_against_random_halves():
    # abilities spread more in the lower half than in the (ceiling-compressed) upper half
    X = simulate_2pl(120, 300, theta_mean=1.5, b_sd=0.8, seed=2).X
    X = X[:, X.min(0) < X.max(0)]
    c = cohort_reliability(X, n_random=10, n_splits=20)
    assert c["lower"]["n_models"] == c["higher"]["n_models"] == 60
    assert c["higher"]["mean_score"] > c["lower"]["mean_score"]
    assert c["higher"]["components"]["model"] < c["random_half"]["components"]["model"]
    assert c["higher"]["rho"] < c["random_half"]["rho"]
    vc_all = variance_components(X)
    assert c["all"]["components"]["model"] == pytest.approx(vc_all.model)
