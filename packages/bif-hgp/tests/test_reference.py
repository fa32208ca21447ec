"""The GPyTorch/BoTorch path against the loop-and-solve reference of reference.py, in float64."""

import copy

import numpy as np
import pytest
import torch
from bif_hgp import reference
from bif_hgp.data import make_problem
from bif_hgp.experiments import run_method

TOL = 1e-8  # both sides are float64; a Cholesky vs a LU solve of a ≤ 20×20 system differ by ~1e-12


@pytest.fixture(scope="module")
def state():
    torch.set_num_threads(1)
    problem = make_problem("additive2d", seed=3, grid=8)
    res = run_method(problem, "bif", 7, seed=3)
    return res.model


def _child_reference(child):
    gp = child.gp
    X = child.points[torch.as_tensor(child.x_index)].numpy()
    y = reference.normalize_groups(child.y_raw, child.source)
    ls = gp.covar_module.base_kernel.lengthscale.detach().numpy().ravel()
    s = float(gp.covar_module.outputscale.detach())
    c = float(gp.mean_module.constant.detach())
    noise = float(gp.likelihood.noise.detach())
    G = child.points.numpy()

    def kern(a, b):
        return reference.matern(a, b, ls, s, child.nu)

    return reference.gp_posterior(X, y, G, kern, np.full(len(X), c), np.full(len(G), c), noise), y


def test_child_posteriors_and_acquisitions_match_reference(state):
    for child in state.children.values():
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


def test_prior_map_equals_its_definition(state):
    names = list(state.composition_)
    maps = [state.children[n].acq.numpy() for n in names]
    child_of = [idx.numpy() for idx in state.child_index]
    expected = reference.prior_map(maps, child_of)
    np.testing.assert_allclose(state.parent.mean_module.values.numpy(), expected, atol=1e-14)
    # and it is not trivially flat
    assert expected.std() > 1e-3


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


def test_hand_written_adam_equals_torch_adam():
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
    opt = torch.optim.Adam(b.parameters(), lr=0.05)
    for _ in range(25):
        opt.zero_grad()
        (-mll(b(x), y)).backward()
        opt.step()
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        torch.testing.assert_close(pa, pb, rtol=1e-10, atol=1e-12, msg=name)
    # and training actually moved the hyperparameters
    assert not torch.equal(a.covar_module.raw_outputscale, ChildExactGP(1, 2.5).covar_module.raw_outputscale)
