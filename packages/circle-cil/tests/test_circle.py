"""CIRCLE: G = M is the average of independent heads, exact-mode order invariance, streaming, bad input."""

import numpy as np
import pytest
import torch
from circle_cil import CIRCLE, BiRC2D, StreamingLDA, class_incremental_stream, load_digits_dataset

from papershelf.errors import InputError


@pytest.fixture(scope="module")
def digits():
    return load_digits_dataset()


KW = dict(units=16, patch=2)


def test_g_equals_m_is_the_average_of_independent_heads(digits):
    X, y = digits.X_train[:200], digits.y_train[:200]
    m = CIRCLE(n_reservoirs=3, n_groups=3, seed=11, **KW)
    m.partial_fit(X, y)
    probs = []
    for s in m.reservoir_seeds:  # rebuild each reservoir and its own head from scratch
        r = BiRC2D(1, 8, seed=s, **KW)
        h = StreamingLDA(r.out_dim)
        h.partial_fit(r(torch.from_numpy(X)), y)
        probs.append(h.predict_proba(r(torch.from_numpy(digits.X_test[:100]))).numpy())
    np.testing.assert_allclose(m.predict_proba(digits.X_test[:100]).numpy(), np.mean(probs, 0), atol=1e-6)


def test_g1_concatenates_all_reservoirs_into_one_head(digits):
    m = CIRCLE(n_reservoirs=3, n_groups=1, seed=2, **KW)
    m.partial_fit(digits.X_train[:200], digits.y_train[:200])
    assert len(m.heads) == 1 and m.heads[0].dim == 3 * m.reservoirs[0].out_dim
    m2 = CIRCLE(n_reservoirs=5, n_groups=2, seed=2, **KW)
    assert m2.groups == [[0, 1, 2], [3, 4]]


def test_exact_mode_is_invariant_to_order_and_task_split(digits):
    kw = dict(n_reservoirs=2, n_groups=2, cov_update="exact", seed=4, **KW)
    a = CIRCLE(**kw)
    a.partial_fit(digits.X_train, digits.y_train)
    b = CIRCLE(**kw)
    for task in class_incremental_stream(digits, 5, seed=9):
        for i in range(0, len(task.y_train), 97):
            b.partial_fit(task.X_train[i : i + 97], task.y_train[i : i + 97])
    pa, pb = a.predict_proba(digits.X_test[:200]), b.predict_proba(digits.X_test[:200])
    order = [b.classes_.index(c) for c in a.classes_]
    np.testing.assert_allclose(pa.numpy(), pb.numpy()[:, order], atol=1e-8)


def test_sample_by_sample_equals_batch(digits):
    kw = dict(n_reservoirs=2, n_groups=1, seed=1, **KW)
    a, b = CIRCLE(**kw), CIRCLE(**kw)
    X, y = digits.X_train[:30], digits.y_train[:30]
    a.partial_fit(X, y)
    for i in range(30):
        b.partial_fit(X[i], int(y[i]))  # one (C, H, W) image and a scalar label
    # float32 features differ in the last bit between batch shapes; the heads agree to that precision
    np.testing.assert_allclose(a.heads[0].covariance_, b.heads[0].covariance_, atol=1e-8)
    assert b.heads[0].n_seen == 30


def test_learns_incrementally_and_forgets_little(digits):
    m = CIRCLE(n_reservoirs=4, n_groups=2, seed=0, units=32, patch=2)
    accs = []
    seen = []
    for task in class_incremental_stream(digits, 5):
        m.partial_fit(task.X_train, task.y_train)
        seen += task.classes
        mask = np.isin(digits.y_test, seen)
        accs.append(m.score(digits.X_test[mask], digits.y_test[mask]))
    assert accs[-1] > 0.9  # measured 0.96; a broken head or extractor falls to ~0.2


def test_bad_inputs(digits):
    m = CIRCLE(n_reservoirs=2, n_groups=1, **KW)
    with pytest.raises(InputError, match="no samples"):
        m.predict(digits.X_test)
    m.partial_fit(digits.X_train[:50], digits.y_train[:50])
    with pytest.raises(InputError, match="built for"):
        m.predict(np.zeros((2, 1, 16, 16)))
    with pytest.raises(InputError, match="built for"):
        m.partial_fit(np.zeros((2, 3, 8, 8)), [0, 1])
    with pytest.raises(InputError, match="integer"):
        m.partial_fit(digits.X_train[:2], [0.5, 1.5])
    bad = digits.X_train[:2].copy()
    bad[0, 0, 0, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        m.partial_fit(bad, [0, 1])
    seen = set(digits.y_train[:50].tolist())
    unseen = next(c for c in range(10) if c not in seen) if len(seen) < 10 else None
    if unseen is not None:
        with pytest.raises(InputError, match="never seen"):
            m.score(digits.X_test[:1], [unseen])
    with pytest.raises(InputError, match="never seen"):
        m.score(digits.X_test[:1], [99])
    with pytest.raises(InputError, match="n_groups"):
        CIRCLE(n_reservoirs=2, n_groups=3)


def test_lwf_trains_each_task_until_its_loss_plateaus(digits):
    from circle_cil.baselines import LwF

    keep = np.concatenate([np.flatnonzero(digits.y_train == c)[:16] for c in (0, 1)])
    X, y = digits.X_train[keep], digits.y_train[keep]
    assert set(y.tolist()) == {0, 1}
    fixed = LwF(1, 2, epochs=3, batch=32, seed=0)
    fixed.learn_task(X, y)
    assert fixed.epochs_run == [3]
    # a tolerance no epoch can beat: the best loss is the first epoch's, so it stops after 1 + patience
    early = LwF(1, 2, epochs=50, patience=2, tol=1e3, batch=32, seed=0)
    early.learn_task(X, y)
    assert early.epochs_run == [3]
    # a real plateau rule: more epochs than the fixed budget, fewer than the cap, and a lower final loss
    plateau = LwF(1, 2, epochs=40, patience=3, tol=0.01, batch=8, seed=0)
    plateau.learn_task(X, y)
    assert 3 < plateau.epochs_run[0] < 40
    assert plateau.final_losses[0] < fixed.final_losses[0]
