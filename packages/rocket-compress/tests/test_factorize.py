"""The factorization against the reference and against known answers."""

import itertools
import math

import numpy as np
import pytest
import torch
from rocket_compress import LayerProblem, rank_and_sparsity, sparse_factorize, whiten
from rocket_compress.factorize import recover_count
from rocket_compress.reference import (
    eckart_young_tail_ref,
    rank_and_sparsity_ref,
    sparse_factorize_ref,
    whiten_ref,
)

from papershelf.errors import InputError


def _layer(d1=24, d2=18, n=300, seed=0):
    g = torch.Generator().manual_seed(seed)
    mix = torch.randn(d1, d1, generator=g, dtype=torch.float64) * torch.linspace(
        1, 0.1, d1, dtype=torch.float64
    )
    X = torch.randn(n, d1, generator=g, dtype=torch.float64) @ mix  # correlated inputs
    W = torch.randn(d1, d2, generator=g, dtype=torch.float64)
    return X, W


def test_whitening_identity():
    X, W = _layer()
    W2 = W + 0.3 * torch.randn_like(W)
    S, S_inv = whiten(X.T @ X)
    assert torch.allclose(S.T @ S, X.T @ X, rtol=1e-10, atol=1e-9)
    lhs = torch.linalg.norm(X @ (W - W2))
    rhs = torch.linalg.norm(S @ (W - W2))
    assert abs(float(lhs - rhs)) <= 1e-10 * float(lhs)
    assert torch.allclose(S @ S_inv, torch.eye(len(S), dtype=S.dtype), atol=1e-10)


def test_whiten_matches_reference_and_jitters_singular_grams():
    X, _ = _layer(d1=10, n=5)  # rank 5 < 10: not positive definite
    C = X.T @ X
    S, S_inv = whiten(C)
    S_ref, _ = whiten_ref(C.numpy())
    np.testing.assert_allclose(S.numpy(), S_ref, rtol=1e-8, atol=1e-10)
    assert torch.isfinite(S_inv).all()
    assert torch.allclose(S.T @ S, C, atol=1e-4 * float(C.diagonal().mean()))


def test_rank_and_sparsity_budget_and_reference():
    for d1, d2 in [(64, 64), (256, 688), (688, 256), (384, 96)]:
        for ratio in (0.1, 0.3, 0.5, 0.7):
            for ks in (1.0, 1.5, 2.0, 3.0):
                try:
                    k, nnz = rank_and_sparsity(ratio, d1, d2, ks)
                except InputError:
                    continue
                assert (k, nnz) == rank_and_sparsity_ref(ratio, d1, d2, ks)
                budget = (1 - ratio) * d1 * d2
                assert d1 * k + d2 * nnz <= budget + 1e-6
                assert budget - (d1 * k + d2 * nnz) < d1 + d2  # within rounding
                assert 1 <= nnz <= k <= min(d1, d2)


def test_ratio_zero_reproduces_w_exactly():
    X, W = _layer()
    S, S_inv = whiten(X.T @ X)
    f = sparse_factorize(W, S, S_inv, 0.0)
    assert torch.equal(f.weight(), W) and f.rel_error == 0 and f.params == W.numel()


def test_full_rank_without_sparsity_is_exact():
    X, W = _layer(d1=12, d2=9)
    S, S_inv = whiten(X.T @ X)
    f = LayerProblem(W, S, S_inv).factorize(9, 9)
    assert torch.allclose(f.weight(), W, atol=1e-10)


@pytest.mark.parametrize("ratio", [0.2, 0.5])
def test_no_sparsity_error_is_the_eckart_young_tail(ratio):
    X, W = _layer()
    S, S_inv = whiten(X.T @ X)
    f = sparse_factorize(W, S, S_inv, ratio, ks=1.0)
    assert f.nnz == f.k
    tail = eckart_young_tail_ref((S @ W).numpy(), f.k)
    assert abs(f.rel_error - tail) < 1e-9
    direct = float(torch.linalg.norm(X @ (W - f.weight())) / torch.linalg.norm(X @ W))
    assert abs(direct - tail) < 1e-9


@pytest.mark.parametrize(("ratio", "ks", "recover"), [(0.3, 2.0, 0.0), (0.4, 1.5, 0.1), (0.2, 3.0, 0.05)])
def test_fast_factorization_equals_reference(ratio, ks, recover):
    X, W = _layer(seed=3)
    S, S_inv = whiten(X.T @ X)
    f = sparse_factorize(W, S, S_inv, ratio, ks, recover=recover)
    r = recover_count(f.k, f.nnz, recover)
    A_ref, B_ref = sparse_factorize_ref(W.numpy(), S.numpy(), f.k, f.nnz, recover=r)
    # eigenvectors are defined up to sign: compare the products and the masks' per-row counts
    np.testing.assert_allclose(f.weight().numpy(), A_ref @ B_ref, rtol=1e-8, atol=1e-10)
    assert int(f.mask.sum()) == W.shape[1] * f.nnz == int((B_ref != 0).sum())
    rel = float(torch.linalg.norm(S @ (W - f.weight())) / torch.linalg.norm(S @ W))
    assert abs(rel - f.rel_error) < 1e-9  # the Gram-trick error equals the direct one
    assert f.params == W.shape[0] * f.k + W.shape[1] * f.nnz


def test_least_squares_update_never_increases_error_and_zeroes_the_gradient():
    for seed in range(4):
        X, W = _layer(seed=seed)
        S, S_inv = whiten(X.T @ X)
        p = LayerProblem(W, S, S_inv)
        k, nnz = rank_and_sparsity(0.35, 24, 18, 2.0)
        f0 = p.factorize(k, nnz, eps=0.0, build=False)  # U (whitened dictionary), ε = 0: plain LS
        Vs = f0.B
        init = float(torch.linalg.norm(p.Xt - p.U[:, :k] @ Vs))
        after = float(torch.linalg.norm(p.Xt - f0.A @ Vs))
        assert after <= init + 1e-12 and f0.extra["ls_applied"]
        grad = (f0.A @ Vs - p.Xt) @ Vs.T  # ∂/∂U ½‖X̃ − U V_s‖²
        assert float(grad.abs().max()) < 1e-9 * float(p.Xt.abs().max()) * Vs.abs().max()
        f = p.factorize(k, nnz)  # default ridge ε: still never worse than the initial dictionary
        assert f.rel_error <= init / math.sqrt(p.norm2) + 1e-12


def test_sparsity_scoring_beats_random_masks():
    X, W = _layer(seed=5)
    S, S_inv = whiten(X.T @ X)
    p = LayerProblem(W, S, S_inv)
    k, nnz = rank_and_sparsity(0.3, 24, 18, 2.5)
    ours = p.factorize(k, nnz).rel_error
    g = torch.Generator().manual_seed(0)
    V = p.sig[:k, None] * p.Vh[:k]
    worse = 0
    for _ in range(20):
        mask = torch.zeros(k, 18, dtype=torch.bool)
        mask.scatter_(0, torch.rand(k, 18, generator=g).argsort(0)[:nnz], True)
        Vs = V * mask
        U = p.Xt @ Vs.T @ torch.linalg.inv(Vs @ Vs.T + 1e-9 * torch.eye(k, dtype=V.dtype))
        worse += float(torch.linalg.norm(p.Xt - U @ Vs)) / float(torch.linalg.norm(p.Xt)) > ours
    assert worse == 20


def test_profile_error_mostly_grows_with_ratio():
    from rocket_compress.factorize import best_per_ratio, profile_layer

    X, W = _layer(d1=32, d2=40, n=400, seed=2)
    S, S_inv = whiten(X.T @ X)
    best = best_per_ratio(profile_layer(LayerProblem(W, S, S_inv)))
    errs = [best[r].rel_error for r in sorted(best)]
    assert errs[0] == 0.0  # the dense option
    assert all(b >= a - 1e-12 for a, b in itertools.pairwise(errs))


def test_bad_inputs():
    X, W = _layer()
    S, S_inv = whiten(X.T @ X)
    for ratio in (-0.1, 1.0, 1.5, float("nan")):
        with pytest.raises(InputError, match="ratio"):
            sparse_factorize(W, S, S_inv, ratio)
    with pytest.raises(InputError, match="too small"):
        rank_and_sparsity(0.9, 2, 2, 1.0)
    with pytest.raises(InputError, match="ks"):
        rank_and_sparsity(0.3, 8, 8, 0.5)
    with pytest.raises(InputError, match="S must be"):
        LayerProblem(W, S[:5, :5], S_inv[:5, :5])
    with pytest.raises(InputError, match="NaN"):
        whiten(torch.full((3, 3), float("nan")))
