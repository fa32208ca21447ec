"""The fast chunked search against the float64 brute-force argmin of reference.py."""

import numpy as np
import pytest
import torch
from asvq.reference import brute_force_nearest, squared_distances
from asvq.search import cdist_nearest, nearest_code
from hypothesis import given, settings
from hypothesis import strategies as st


@pytest.mark.parametrize("chunk", [1, 7, 300, 10_000])
def test_float64_equals_brute_force_exactly(chunk):
    rng = np.random.default_rng(0)
    x, c = rng.normal(size=(300, 7)), rng.normal(size=(97, 7))
    got = nearest_code(torch.from_numpy(x), torch.from_numpy(c), chunk_size=chunk).numpy()
    np.testing.assert_array_equal(got, brute_force_nearest(x, c))


def test_float32_equals_brute_force_up_to_near_ties():
    rng = np.random.default_rng(1)
    x, c = rng.normal(size=(1000, 64)).astype(np.float32), rng.normal(size=(256, 64)).astype(np.float32)
    got = nearest_code(torch.from_numpy(x), torch.from_numpy(c)).numpy()
    want = brute_force_nearest(x, c)
    differ = got != want
    # a float32 score can only flip a near-tie: the chosen code is within float32 rounding of the best
    assert differ.mean() < 1e-3
    rows = np.flatnonzero(differ)
    d = squared_distances(x[rows], c)
    np.testing.assert_allclose(
        d[np.arange(rows.size), got[rows]], d[np.arange(rows.size), want[rows]], rtol=1e-5
    )
    np.testing.assert_array_equal(
        cdist_nearest(torch.from_numpy(x), torch.from_numpy(c)).numpy()[~differ], want[~differ]
    )


def test_precomputed_norms_are_used():
    rng = np.random.default_rng(2)
    x, c = torch.from_numpy(rng.normal(size=(50, 3))), torch.from_numpy(rng.normal(size=(9, 3)))
    wrong = torch.zeros(9, dtype=torch.float64)
    wrong[4] = -1e6  # a (deliberately wrong) norm that makes code 4 win everywhere
    assert (nearest_code(x, c, codes_sqnorm=wrong) == 4).all()
    assert not (nearest_code(x, c) == 4).all()


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 40),
    k=st.integers(1, 12),
    d=st.integers(1, 5),
    chunk=st.integers(1, 50),
    seed=st.integers(0, 10_000),
)
def test_property_matches_brute_force(n, k, d, chunk, seed):
    rng = np.random.default_rng(seed)
    x = rng.integers(-3, 4, size=(n, d)).astype(np.float64)  # integer grid: many exact ties
    c = rng.integers(-3, 4, size=(k, d)).astype(np.float64)
    got = nearest_code(torch.from_numpy(x), torch.from_numpy(c), chunk_size=chunk).numpy()
    np.testing.assert_array_equal(got, brute_force_nearest(x, c))  # ties → lowest index in both
