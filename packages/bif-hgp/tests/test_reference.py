"""The GPyTorch/BoTorch path against the loop-and-solve reference of reference.py, in float64."""

import copy

import numpy as np
import pytest
import torch
from bif_hgp import reference
from bif_hgp.data import make_problem
from bif_hgp.experiments import run_method

TOL = 1e-8  # both sides are float64; a Cholesky vs a LU solve of a ≤ 20×20 system differ by ~1e-12


def _state(method):
    torch.set_num_threads(1)
    problem = make_problem("additive2d", seed=3, grid=8)
    return run_method(problem, method, 7, seed=3).model


@pytest.fixture(scope="module")
def state():
    return _state("bif")


@pytest.fixture(scope="module", params=["bif", "bif-acq", "bif-paper"])
def any_state(request):
    return _state(request.param)


def _child_reference(child):
    gp = child.gp
    X = child.points[torch.as_tensor(child.x_index)].numpy()
    if child.normalization == "paper":
        y = reference.normalize_groups(child.y_raw, child.source)
    else:
        y = reference.shared_targets(
            child.y_raw, child.source, child.share, child.epoch, child.scales, child.env_centers
        )
    ls = gp.covar_module.base_kernel.lengthscale.detach().numpy().ravel()
    s = float(gp.covar_module.outputscale.detach())
    c = float(gp.mean_module.constant.detach())
    noise = float(gp.likelihood.noise.detach())
    G = child.points.numpy()

    def kern(a, b):
        return reference.matern(a, b, ls, s, child.nu)

    return reference.gp_posterior(X, y, G, kern, np.full(len(X), c), np.full(len(G), c), noise), y


def test_child_posteriors_and_acquisitions_match_reference(any_state):
    for child in any_state.children.values():
        (mu_ref, sd_ref), y = _child_reference(child)
        np.testing.assert_allclose(child.targets(), y, atol=1e-15)
        mu, sd = child.predict()
        np.testing.assert_allclose(mu.numpy(), mu_ref, atol=TOL)
        np.testing.assert_allclose(sd.numpy(), sd_ref, atol=TOL)
        counts = child.counts.numpy()
        for kind in ("pi", "ucb", "ei"):
            child.acquisition = kind
            child.refresh_acquisition()
            ref = reference.acquisition(mu_ref, sd_ref, kind, child.gamma, counts, float(y.max()))
            np.testing.assert_allclose(child.acq.numpy(), ref, atol=TOL, rtol=1e-7)
        child.acquisition = "pi"
        child.refresh_acquisition()


def _standardised(model):
    y = np.asarray(model.parent_y)
    return (y - y.mean()) / y.std(ddof=1)


def test_prior_equals_its_definition(any_state):
    state = any_state
    names = list(state.composition_)
    child_of = [idx.numpy() for idx in state.child_index]
    if state.method == "bif":  # Σ_i μ_i(x_i), the children's reference posterior means
        mus = [_child_reference(state.children[n])[0][0] for n in names]
        expected = sum(mu[idx] for mu, idx in zip(mus, child_of))
    else:  # the authors' map (1/K)·Σ_i a_i(x_i)/|max|, calibrated on the shared scale
        maps = [state.children[n].acq.numpy() for n in names]
        expected = reference.prior_map(maps, child_of)
        if state.method == "bif-acq":
            expected = reference.calibrated_prior(expected, state.parent_x, _standardised(state))
    np.testing.assert_allclose(state.parent.mean_module.values.numpy(), expected, atol=1e-8)
    # and it is not trivially flat (the calibrated map may be: α = 0 when the map and the targets
    # disagree, so there the map it calibrates must not be)
    assert (state.prior_raw.numpy() if state.method == "bif-acq" else expected).std() > 1e-3


def test_one_scale_for_the_whole_hierarchy(any_state):
    """Shared normalisation: every child's targets are in the parent's standardised units, the children's
    targets of one observation sum to its parent target, and the prior mean is on the targets' scale."""
    state = any_state
    t = _standardised(state)
    P = state.parent.mean_module.values.numpy()[state.parent_x]
    per_child = [[v for v, s in zip(c.targets(), c.source) if s == "bif"] for c in state.children.values()]
    if state.method == "bif-paper":  # the authors' scaling: children in [0, 1], parent standardised
        assert all(0.0 <= v <= 1.0 for c in state.children.values() for v in c.targets())
        assert not np.allclose(np.sum(per_child, axis=0), t, atol=1e-3)
        assert P.min() >= 0.0 and np.all(P <= 1.0)  # the raw map: probabilities divided by their max
        return
    y = np.asarray(state.parent_y)
    for c in state.children.values():
        assert c.scales[-1] == pytest.approx((y.mean(), y.std(ddof=1)), rel=1e-12)
    np.testing.assert_allclose(np.sum(per_child, axis=0), t, atol=1e-12)
    # the direct observations sit in the same frame: the children's centres add up to the parent's
    centers = [c.env_centers[-1] for c in state.children.values()]
    assert sum(centers) == pytest.approx(y.mean(), abs=1e-12)
    env = [np.mean([v for v, s in zip(c.y_raw, c.source) if s == "env"]) for c in state.children.values()]
    delta = (y.mean() - sum(env)) / len(env)  # each: its own mean plus an equal share of the gap
    np.testing.assert_allclose(centers, np.array(env) + delta, atol=1e-12)
    if state.method == "bif-acq":  # least squares: the calibrated map is centred on the targets
        assert P.mean() == pytest.approx(t.mean(), abs=1e-12)


def test_parent_kernel_carries_children_hyperparameters(state):
    for sub, name in zip(state.parent.sub_kernels, state.composition_):
        hp = state.children[name].hyperparameters()
        assert torch.equal(sub.base_kernel.lengthscale.detach(), hp["lengthscale"])
        assert torch.equal(sub.outputscale.detach(), hp["outputscale"])


def test_parent_posterior_acquisition_and_query_match_reference(state):
    names = list(state.composition_)
    groups = [state.composition_[n] for n in names]
    hypers = [
        (
            state.children[n].gp.covar_module.base_kernel.lengthscale.detach().numpy().ravel(),
            float(state.children[n].gp.covar_module.outputscale.detach()),
        )
        for n in names
    ]
    P = state.points.numpy()
    X = P[state.parent_x]
    y = np.asarray(state.parent_y)
    ys = (y - y.mean()) / y.std(ddof=1)
    m = state.parent.mean_module.values.numpy()

    def kern(a, b):
        return reference.additive_kernel(a, b, groups, hypers, 2.5)

    noise = float(state.parent.likelihood.noise.detach())
    mu_ref, sd_ref = reference.gp_posterior(X, ys, P, kern, m[state.parent_x], m, noise)
    mu, sd = state.parent_posterior()
    np.testing.assert_allclose(mu.numpy(), mu_ref, atol=TOL)
    np.testing.assert_allclose(sd.numpy(), sd_ref, atol=TOL)
    acq_ref = reference.acquisition(mu_ref, sd_ref, "ucb", state.kappa, state.parent_counts.numpy(), ys.max())
    np.testing.assert_allclose(state.parent_acquisition().numpy(), acq_ref, atol=TOL)
    assert state.propose() == int(np.argmax(acq_ref))
    # the top-down split at that query, from the children's maps
    q = state.propose()
    pts = [int(idx[q]) for idx in state.child_index]
    maps = [state.children[n].acq.numpy() for n in names]
    np.testing.assert_allclose(state.decompose(q, 1.7), reference.decompose(1.7, maps, pts), atol=1e-15)


def test_hand_written_adam_equals_the_textbook_update():
    # Kingma & Ba's Adam (β = 0.9, 0.999, ε = 1e-8, bias-corrected), stepped here in NumPy on the
    # gradients torch computes at the same points; torch.optim.Adam's defaults are this update
    # (comparing with torch.optim itself would import torch._dynamo, seconds per test session).
    from bif_hgp._gp import ChildExactGP, gpytorch, train_exact_gp

    torch.manual_seed(0)
    x = torch.rand(9, 1, dtype=torch.float64)
    y = torch.sin(6 * x[:, 0])
    a = ChildExactGP(1, 2.5)
    a.set_train_data(x, y, strict=False)
    b = copy.deepcopy(a)
    train_exact_gp(a, 25, 0.05)
    b.train()
    mll = gpytorch.mlls.ExactMarginalLogLikelihood(b.likelihood, b)
    params = list(b.parameters())
    theta = [p.detach().numpy().copy() for p in params]
    m = [np.zeros_like(t) for t in theta]
    v = [np.zeros_like(t) for t in theta]
    for step in range(1, 26):
        with torch.no_grad():
            for p, t in zip(params, theta):
                p.copy_(torch.as_tensor(t))
        grads = torch.autograd.grad(-mll(b(x), y), params)
        for k, g in enumerate(grads):
            g = g.numpy()
            m[k] = 0.9 * m[k] + 0.1 * g
            v[k] = 0.999 * v[k] + 0.001 * g * g
            m_hat, v_hat = m[k] / (1 - 0.9**step), v[k] / (1 - 0.999**step)
            theta[k] = theta[k] - 0.05 * m_hat / (np.sqrt(v_hat) + 1e-8)
    for (name, pa), t in zip(a.named_parameters(), theta):
        np.testing.assert_allclose(pa.detach().numpy(), t, rtol=1e-10, atol=1e-12, err_msg=name)
    # and training actually moved the hyperparameters
    assert not torch.equal(a.covar_module.raw_outputscale, ChildExactGP(1, 2.5).covar_module.raw_outputscale)


def test_residual_decomposition_matches_reference(state):
    """One sweep of ỹ_ik = μ_i(x_ik) + w_ik·(t_k − Σ_j μ_j(x_jk)) against the loop reference, with the
    children's reference posterior means; the new sub-responses still sum to each observation."""
    model = copy.deepcopy(state)
    model.sweeps = 1
    children = list(model.children.values())
    rows = [[k for k, s in enumerate(c.source) if s == "bif"] for c in children]
    means, shares = [], []
    for c, r in zip(children, rows):
        (mu, _), _ = _child_reference(c)
        means.append([mu[c.x_index[k]] for k in r])
        shares.append([c.share[k] for k in r])
    t = _standardised(model)
    expected = reference.residual_decompose(t, means, shares)
    model._redecompose()
    for c, r, e in zip(children, rows, expected):
        np.testing.assert_allclose(c.targets()[r], e, atol=TOL)
    per_child = [[c.y_raw[k] for k in r] for c, r in zip(children, rows)]
    np.testing.assert_allclose(np.sum(per_child, axis=0), model.parent_y, rtol=0, atol=1e-12)
    # and it is not the softmax split: each child's own belief enters its sub-response
    softmax = [[c.share[k] * y for k, y in zip(r, model.parent_y)] for c, r in zip(children, rows)]
    assert not np.allclose(per_child, softmax, atol=1e-3)
