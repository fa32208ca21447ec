"""The anchors agree with each other where they must; the experiments' helpers run on tiny inputs."""

import numpy as np
import pytest
from geto_lp import solve_barycenter
from geto_lp.baselines import convolutional, full_lp
from geto_lp.data import smooth_histograms, translated_shapes
from geto_lp.experiments import volume_experiment
from geto_lp.model import barycenter_objective


def test_full_lp_anchor_and_entropic_gap():
    shape = (6, 6)
    A = smooth_histograms(shape, 3, seed=0)
    exact = solve_barycenter(A, shape)
    assert full_lp(A, shape).objective == pytest.approx(exact.objective, rel=1e-9)
    blurred = convolutional(A, shape, reg=1.0)
    assert blurred.barycenter.sum() == pytest.approx(1.0, rel=1e-6)
    # an entropic barycenter is feasible, so it can only score worse than the exact optimum
    assert barycenter_objective(blurred.barycenter, A, shape) > exact.objective * (1 + 1e-4)


def test_convolutional_matches_pot_in_2d():
    from geto_lp.baselines import pot_convolutional, pot_ibp, require_pot

    try:
        require_pot()
    except ImportError:
        pytest.skip("POT is not installed")

    shape = (5, 5)
    A = smooth_histograms(shape, 2, seed=1)
    ours = convolutional(A, shape, [0.3, 0.7], reg=2.0, max_iter=100)
    pot = pot_convolutional(A, shape, [0.3, 0.7], reg=2.0, max_iter=100)
    ibp = pot_ibp(A, shape, [0.3, 0.7], reg=2.0, max_iter=100)
    np.testing.assert_allclose(ours.barycenter, pot.barycenter, atol=1e-10)
    np.testing.assert_allclose(ours.barycenter, ibp.barycenter, atol=1e-8)


def test_convolutional_3d_shrinks_towards_the_known_barycenter_as_reg_falls():
    known = translated_shapes((8, 8, 8), [(0, 0, 0), (3, 1, 0), (0, 2, 3)], shape_size=(4, 4, 4))
    err = [
        np.abs(convolutional(known.A, known.shape, reg=r, max_iter=300).barycenter - known.barycenter).sum()
        for r in (2.0, 0.5)
    ]
    assert err[1] < err[0]


def test_volume_experiment_recovers_the_known_barycenter():
    out = volume_experiment(size=8)
    geto = out["rows"][0]
    assert geto["method"] == "geto-lp"
    assert geto["objective"] == pytest.approx(geto["known_objective"], rel=1e-9)
    assert geto["max_abs_error_vs_known"] < 1e-9
