"""The closed-form weight, the variance-trace bound, and the traces from Fisher estimates."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from potara_merge.data import correlated_gaussian_cov
from potara_merge.reference import (
    monte_carlo_quadratic_loss,
    optimal_weight_reference,
    variance_bound_reference,
)
from potara_merge.weights import (
    Traces,
    bound_at_optimum,
    global_traces,
    module_traces,
    optimal_weight,
    variance_bound,
)

from papershelf.errors import InputError


@pytest.mark.parametrize(
    ("a", "b", "rho"), [(1.0, 3.0, 0.0), (1.0, 3.0, 0.6), (2.5, 1.0, 0.3), (1.0, 1.3, 0.8), (0.4, 2.0, 0.95)]
)
def test_closed_form_is_the_monte_carlo_minimiser_under_correlated_gaussian_noise(a, b, rho):
    # Errors (e_F, e_L) jointly Gaussian with per-coordinate correlation rho; loss ½‖λe_F + (1−λ)e_L‖².
    # 20k samples, common random numbers across λ: the MC argmin's standard error is < 0.005 here,
    # so a 0.02 tolerance (the notes' stated tolerance) fails a wrong formula (c ignored: off by ≥ 0.05).
    d = 6
    cov = correlated_gaussian_cov(d, a, b, rho, seed=1)
    c = float(np.trace(cov[:d, d:]))
    grid = np.linspace(0, 1, 401)
    loss = monte_carlo_quadratic_loss(grid, cov, n=20_000, seed=2)
    lam_mc = grid[int(np.argmin(loss))]
    assert abs(optimal_weight(a, b, c) - lam_mc) <= 0.02
    # the MC loss is ½ V(λ): the bound is the expected loss itself in the isotropic case
    assert loss[200] == pytest.approx(0.5 * variance_bound(0.5, a, b, c), rel=0.03)


def test_the_cross_term_matters():
    a, b, c = 1.0, 3.0, 0.9
    assert optimal_weight(a, b, c) == pytest.approx((b - c) / (a + b - 2 * c))
    assert abs(optimal_weight(a, b, c) - optimal_weight(a, b)) > 0.05  # c = 0 is a different answer
    assert optimal_weight(a, b) == pytest.approx(b / (a + b))  # the first-pass special case


@settings(max_examples=200, deadline=None)
@given(
    a=st.floats(1e-6, 1e6),
    b=st.floats(1e-6, 1e6),
    frac=st.floats(0.0, 1.0),
)
def test_bound_at_optimum_is_at_most_both_endpoints(a, b, frac):
    c = frac * min(a, b)
    lam = optimal_weight(a, b, c)
    assert 0.0 <= lam <= 1.0
    v = bound_at_optimum(a, b, c)
    tol = 1e-9 * max(a, b)
    assert v <= variance_bound(0.0, a, b, c) + tol  # = b, the local model alone
    assert v <= variance_bound(1.0, a, b, c) + tol  # = a, the federated model alone
    den = a + b - 2 * c
    if den > 1e-9 * (a + b):
        assert v == pytest.approx((a * b - c * c) / den, rel=1e-6, abs=tol)


@settings(max_examples=100, deadline=None)
@given(a=st.floats(1e-3, 1e3), b=st.floats(1e-3, 1e3), frac=st.floats(0.0, 0.99))
def test_closed_form_matches_brute_force_reference(a, b, frac):
    c = frac * min(a, b)
    lam = optimal_weight(a, b, c)
    ref = optimal_weight_reference(a, b, c)
    # both minimise the same parabola; compare values (argmins of a flat parabola may differ)
    assert (
        variance_bound_reference(lam, a, b, c) <= variance_bound_reference(ref, a, b, c) * (1 + 1e-9) + 1e-12
    )


def test_degenerate_denominator_falls_back_to_half_and_c_is_clipped():
    assert optimal_weight(2.0, 2.0, 2.0) == 0.5
    assert optimal_weight(0.0, 0.0, 0.0) == 0.5
    assert optimal_weight(1.0, 3.0, 5.0) == optimal_weight(1.0, 3.0, 1.0) == 1.0  # c clipped to min(a, b)
    assert optimal_weight(1.0, 3.0, -2.0) == optimal_weight(1.0, 3.0)  # negative c clipped to 0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0])
def test_bad_traces_are_rejected(bad):
    with pytest.raises(InputError, match="tr Σ_F"):
        optimal_weight(bad, 1.0)


def _fishers():
    g = torch.Generator().manual_seed(0)
    ff = {"m.lora_A.weight": torch.rand(2, 3, generator=g), "m.lora_B.weight": torch.rand(4, 2, generator=g)}
    fl = {k: 3 * torch.rand(v.shape, generator=g) for k, v in ff.items()}
    return ff, fl


def test_module_traces_follow_the_inverse_diagonal_fisher():
    ff, fl = _fishers()
    groups = {"m": list(ff)}
    corr = {k: torch.full_like(v, 0.5) for k, v in ff.items()}
    t = module_traces(ff, fl, groups, corr=corr, damping=0.0, n_fed=2.0, n_loc=1.0)["m"]
    vf = [1 / (2 * f) for v in ff.values() for f in v.flatten().tolist()]
    vl = [1 / f for v in fl.values() for f in v.flatten().tolist()]
    assert t.a == pytest.approx(sum(vf))
    assert t.b == pytest.approx(sum(vl))
    assert t.c == pytest.approx(min(0.5 * sum(math.sqrt(x * y) for x, y in zip(vf, vl)), t.a, t.b))
    # correlation below 0 is clipped to 0
    neg = {k: -torch.ones_like(v) for k, v in ff.items()}
    assert module_traces(ff, fl, groups, corr=neg)["m"].c == 0.0


def test_global_traces_sum_modules():
    tr = {"x": Traces(1.0, 2.0, 0.5), "y": Traces(3.0, 1.0, 0.2)}
    g = global_traces(tr)
    assert (g.a, g.b, g.c) == (4.0, 3.0, 0.7)


def test_nan_fisher_names_the_parameter():
    ff, fl = _fishers()
    ff["m.lora_B.weight"][0, 0] = float("nan")
    with pytest.raises(InputError, match=r"m.lora_B.weight"):
        module_traces(ff, fl, {"m": list(ff)})


def test_coordinates_identical_in_both_adapters_do_not_move_the_weight():
    # Regression: coordinates with zero Fisher in both models (e.g. LoRA A-columns of always-zero inputs,
    # never updated, hence identical in both adapters) were counted as independent errors with
    # v = 1/δ each; a few of them dragged λ* toward 0.5 whatever the informative coordinates said.
    ff = {"m.w": torch.tensor([4.0, 9.0, 1.0])}
    fl = {"m.w": torch.tensor([0.5, 1.0, 0.25])}
    lam0 = module_traces(ff, fl, {"m": ["m.w"]}, damping=1e-3)["m"].weight
    ffp = {"m.w": torch.cat([ff["m.w"], torch.zeros(20)])}
    flp = {"m.w": torch.cat([fl["m.w"], torch.zeros(20)])}
    same = {"m.w": torch.cat([torch.zeros(3, dtype=torch.bool), torch.ones(20, dtype=torch.bool)])}
    t = module_traces(ffp, flp, {"m": ["m.w"]}, damping=1e-3, same=same)["m"]
    assert lam0 > 0.8
    assert t.weight == pytest.approx(lam0, rel=1e-3)
    assert abs(module_traces(ffp, flp, {"m": ["m.w"]}, damping=1e-3)["m"].weight - 0.5) < 0.01
    with pytest.raises(InputError, match="same-mask shape"):
        module_traces(ffp, flp, {"m": ["m.w"]}, same={"m.w": torch.ones(3, dtype=torch.bool)})
