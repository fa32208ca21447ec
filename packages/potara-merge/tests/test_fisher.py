"""Diagonal Fisher against the analytic logistic-regression Fisher; per-sample gradient paths agree."""

import numpy as np
import pytest
import torch
from potara_merge.federated import base_mlp, get_state, lora_model, lora_per_sample_grads, train
from potara_merge.fisher import correlation, diag_fisher, grad_correlation, per_sample_grads
from potara_merge.reference import logistic_fisher_reference
from torch import nn

from papershelf.errors import InputError
from papershelf.testing import assert_close


class Logistic(nn.Module):
    """Binary logistic regression p(1|x) = σ(x·w) written as 2-class logits [0, x·w]."""

    def __init__(self, w):
        super().__init__()
        self.w = nn.Parameter(torch.as_tensor(w, dtype=torch.float64))

    def forward(self, x):
        z = x @ self.w
        return torch.stack([torch.zeros_like(z), z], dim=-1)


@pytest.fixture
def logreg():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 5))
    w = rng.normal(size=5)
    y = (rng.random(40) < 1 / (1 + np.exp(-X @ w))).astype(np.int64)
    return X, w, y


def test_expected_fisher_equals_analytic_logistic_fisher(logreg):
    X, w, _y = logreg
    F = diag_fisher(Logistic(w), torch.tensor(X), kind="expected")["w"].numpy()
    np.testing.assert_allclose(F, logistic_fisher_reference(X, w), rtol=1e-10)


@pytest.mark.parametrize("method", ["loop", "vmap"])
def test_empirical_fisher_equals_analytic_logistic_fisher(logreg, method):
    X, w, y = logreg
    m = Logistic(w)
    g = per_sample_grads(m, torch.tensor(X), torch.tensor(y), method=method)["w"]
    F = (g**2).mean(0).numpy()
    np.testing.assert_allclose(F, logistic_fisher_reference(X, w, y), rtol=1e-10)
    F2 = diag_fisher(m, torch.tensor(X), torch.tensor(y), kind="empirical")["w"].numpy()
    np.testing.assert_allclose(F2, F, rtol=1e-12)


def test_fast_lora_per_sample_grads_equal_one_backward_per_sample():
    m = lora_model(base_mlp(64, 16, 10, seed=0), rank=3, alpha=6.0, seed=1)
    X, y = torch.rand(12, 64), torch.randint(0, 10, (12,))
    train(m, get_state(m), X, y, steps=10)
    fast = lora_per_sample_grads(m, X, y)
    slow = per_sample_grads(m, X, y)
    assert sorted(fast) == sorted(slow)
    for k in fast:
        assert_close(fast[k], slow[k], rtol=1e-4, atol=1e-6)


def test_gradient_correlation_of_a_model_with_itself_is_one_where_defined(logreg):
    X, w, y = logreg
    m = Logistic(w)
    r = grad_correlation(m, Logistic(w), torch.tensor(X), torch.tensor(y))["w"]
    assert_close(r, torch.ones_like(r))
    r2 = grad_correlation(m, Logistic(-w), torch.tensor(X), torch.tensor(y))["w"]
    assert (r2 <= 1).all() and (r2 >= -1).all()
    assert correlation(torch.zeros(3, 2), torch.ones(3, 2)).eq(0).all()  # zero gradients: no correlation


def test_fisher_bad_input():
    m = Logistic(np.ones(3))
    for kind in ("expected", "empirical"):
        with pytest.raises(InputError, match="no samples"):
            diag_fisher(
                m, torch.zeros(0, 3, dtype=torch.float64), torch.zeros(0, dtype=torch.long), kind=kind
            )
        with pytest.raises(InputError, match="NaN"):
            diag_fisher(
                m,
                torch.full((2, 3), float("nan"), dtype=torch.float64),
                torch.zeros(2, dtype=torch.long),
                kind=kind,
            )
    with pytest.raises(InputError, match="needs the labels"):
        diag_fisher(m, torch.ones(2, 3, dtype=torch.float64), kind="empirical")
