"""Streaming LDA: the exact mode equals batch LDA in any order; the published mode equals its recurrence."""

import numpy as np
import pytest
import torch
from circle_cil import StreamingLDA
from circle_cil.reference import batch_lda, lda_scores, slda_stream, softmax
from hypothesis import given, settings
from hypothesis import strategies as st

from papershelf.errors import InputError


def _data(seed, n=240, d=6, k=5):
    rng = np.random.default_rng(seed)
    centers = rng.normal(scale=3, size=(k, d))
    y = rng.integers(0, k, n) * 7 - 3  # arbitrary integer labels
    X = centers[(y + 3) // 7] + rng.normal(size=(n, d)) @ rng.normal(size=(d, d))
    return X, y


def _aligned(h, classes):
    idx = [h.classes_.index(c) for c in classes]
    return h.means_[idx]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_exact_mode_equals_batch_lda_in_any_order(seed):
    X, y = _data(seed)
    classes, means, Sigma = batch_lda(X, y)
    ref_scores = lda_scores(X, means, Sigma, 1e-4)
    rng = np.random.default_rng(100 + seed)
    for trial in range(4):
        perm = rng.permutation(len(X))
        h = StreamingLDA(X.shape[1], cov_update="exact")
        chunk = [1, 7, 50, 1000][trial]
        for i in range(0, len(X), chunk):  # one sample at a time, odd chunks, everything at once
            h.partial_fit(X[perm[i : i + chunk]], y[perm[i : i + chunk]])
        np.testing.assert_allclose(_aligned(h, classes), means, atol=1e-8, rtol=0)
        np.testing.assert_allclose(h.covariance_, Sigma, atol=1e-8, rtol=0)
        scores = h.decision_function(X).numpy()[:, [h.classes_.index(c) for c in classes]]
        np.testing.assert_allclose(scores, ref_scores, atol=1e-8, rtol=1e-10)
        pred = h.predict(X)
        np.testing.assert_array_equal(pred, np.asarray(classes)[ref_scores.argmax(1)])


def test_exact_mode_matches_sklearn_lda_statistics():
    from sklearn.discriminant_analysis import LinearDiscriminantAnalysis

    X, y = _data(5)
    lda = LinearDiscriminantAnalysis(solver="lsqr", store_covariance=True).fit(X, y)
    h = StreamingLDA(X.shape[1], cov_update="exact")
    h.partial_fit(X, y)
    np.testing.assert_allclose(_aligned(h, list(lda.classes_)), lda.means_, atol=1e-10)
    np.testing.assert_allclose(h.covariance_, lda.covariance_, atol=1e-10)


def test_published_mode_equals_recurrence_written_by_hand():
    x1, x2, x3 = np.array([1.0, 2.0]), np.array([3.0, -1.0]), np.array([2.0, 0.0])
    h = StreamingLDA(2, cov_update="hayes_kanan", shrinkage=0.0)
    h.partial_fit(np.stack([x1, x2, x3]), [0, 1, 0])
    # t = 0: Σ = (0·0 + 0·ΔΔᵀ)/1 = 0; μ0 = x1
    # t = 1: Δ = x2 − 0 (μ1 starts at 0); Σ = (1·0 + ½ x2x2ᵀ)/2
    S = 0.5 * np.outer(x2, x2) / 2
    # t = 2: Δ = x3 − x1; Σ = (2Σ + ⅔ ΔΔᵀ)/3
    d = x3 - x1
    S = (2 * S + (2 / 3) * np.outer(d, d)) / 3
    np.testing.assert_allclose(h.covariance_, S, atol=1e-15)
    np.testing.assert_allclose(h.means_, [(x1 + x3) / 2, x2], atol=1e-15)
    assert h.n_seen == 3 and h.counts_.tolist() == [2, 1]


@settings(max_examples=25, deadline=None)
@given(
    st.integers(0, 10_000),
    st.lists(st.integers(1, 40), min_size=1, max_size=6),
    st.sampled_from(["hayes_kanan", "exact"]),
)
def test_chunked_updates_equal_the_per_sample_reference(seed, chunks, mode):
    X, y = _data(seed, n=sum(chunks), d=4, k=3)
    h = StreamingLDA(4, cov_update=mode)
    start = 0
    for c in chunks:
        h.partial_fit(X[start : start + c], y[start : start + c])
        start += c
    classes, means, counts, Sigma, t = slda_stream(X, y, mode)
    assert h.classes_ == classes and h.counts_.tolist() == counts.tolist() and h.n_seen == t
    np.testing.assert_allclose(h.means_, means, atol=1e-10)
    np.testing.assert_allclose(h.covariance_, Sigma, atol=1e-10)


def test_published_mode_is_order_dependent_and_not_batch_lda():
    X, y = _data(3)
    h1, h2 = StreamingLDA(6), StreamingLDA(6)
    h1.partial_fit(X, y)
    perm = np.random.default_rng(0).permutation(len(X))
    h2.partial_fit(X[perm], y[perm])
    assert np.abs(h1.covariance_ - h2.covariance_).max() > 1e-3
    assert np.abs(h1.covariance_ - batch_lda(X, y)[2]).max() > 1e-3


def test_predict_proba_is_softmax_of_scores():
    X, y = _data(4)
    h = StreamingLDA(6, cov_update="exact")
    h.partial_fit(X, y)
    p = h.predict_proba(X[:10]).numpy()
    np.testing.assert_allclose(p, softmax(h.decision_function(X[:10]).numpy()), atol=1e-12)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)


def test_bad_inputs():
    h = StreamingLDA(3)
    with pytest.raises(InputError, match="no samples"):
        h.predict(np.zeros((1, 3)))
    with pytest.raises(InputError, match="integer"):
        h.partial_fit(np.zeros((2, 3)), [0.5, 1])
    with pytest.raises(InputError, match="integer"):
        h.partial_fit(np.zeros((2, 3)), ["a", "b"])
    with pytest.raises(InputError, match="NaN"):
        h.partial_fit(np.array([[0.0, np.nan, 1.0]]), [0])
    with pytest.raises(InputError, match=r"\(n, 3\)"):
        h.partial_fit(np.zeros((2, 4)), [0, 1])
    with pytest.raises(InputError, match="2 labels for 3"):
        h.partial_fit(np.zeros((3, 3)), [0, 1])
    with pytest.raises(InputError, match="cov_update"):
        StreamingLDA(3, cov_update="magic")
    with pytest.raises(InputError, match="shrinkage"):
        StreamingLDA(3, shrinkage=-0.1)
    assert torch.is_tensor(StreamingLDA(2).__dict__["_S"])


@pytest.mark.parametrize("dim, block", [(10, 3), (9, 4), (7, 256)])
def test_lower_block_rank_k_update_equals_full_addmm(dim, block):
    from circle_cil.slda import mirror_lower_, syrk_lower_

    rng = np.random.default_rng(dim)
    A = torch.as_tensor(rng.normal(size=(5, dim)))
    w = torch.as_tensor(rng.uniform(size=5))
    S0 = torch.as_tensor(rng.normal(size=(dim, dim)))
    S0 = S0 + S0.T
    full = S0 + (A * w[:, None]).T @ A
    S = syrk_lower_(S0.clone(), A, A * w[:, None], block=block)
    assert not torch.equal(S, full) or dim <= block  # the upper blocks really are left stale
    np.testing.assert_allclose(mirror_lower_(S, block=block).numpy(), full.numpy(), atol=1e-12, rtol=0)


@pytest.mark.parametrize("mode", ["exact", "hayes_kanan"])
def test_blocked_head_equals_the_per_sample_reference_and_batch_lda(mode):
    """dim ≥ 2·SYRK_BLOCK takes the lower-triangular fast path, per sample and in chunks."""
    from circle_cil.slda import SYRK_BLOCK

    d = 2 * SYRK_BLOCK + 3
    X, y = _data(9, n=90, d=d, k=4)
    X = X + np.random.default_rng(1).normal(size=X.shape)  # full-rank noise in every coordinate
    h = StreamingLDA(d, cov_update=mode)
    assert h._blocked
    for lo, hi in [(0, 1), (1, 2), (2, 40), (40, 41), (41, 90)]:
        h.partial_fit(X[lo:hi], y[lo:hi])
    classes, means, counts, Sigma, t = slda_stream(X, y, mode)
    assert h.classes_ == classes and h.n_seen == t and h.counts_.tolist() == counts.tolist()
    np.testing.assert_allclose(h.means_, means, atol=1e-10)
    np.testing.assert_allclose(h.covariance_, Sigma, atol=1e-8, rtol=0)
    if mode == "exact":
        bclasses, bmeans, bSigma = batch_lda(X, y)
        np.testing.assert_allclose(h.covariance_, bSigma, atol=1e-8, rtol=0)
        ref = lda_scores(X, bmeans, bSigma, 1e-4)
        scores = h.decision_function(X).numpy()[:, [h.classes_.index(c) for c in bclasses]]
        np.testing.assert_allclose(scores, ref, atol=1e-6, rtol=1e-8)
        np.testing.assert_array_equal(h.predict(X), np.asarray(bclasses)[ref.argmax(1)])
