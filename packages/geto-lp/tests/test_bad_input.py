"""Bad input raises InputError naming the problem, before anything large is allocated."""

import time

import numpy as np
import pytest
from geto_lp import barycenter, solve_barycenter, transport
from geto_lp.reference import full_lp_barycenter

from papershelf.errors import InputError


def good(shape=(3, 4), m=2):
    A = np.random.default_rng(0).random((int(np.prod(shape)), m)) + 0.1
    return A / A.sum(axis=0)


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda A: A * np.array([1.0, -1.0]), "negative"),
        (lambda A: np.where(np.arange(A.size).reshape(A.shape) == 3, np.nan, A), "NaN"),
        (lambda A: np.where(np.arange(A.size).reshape(A.shape) == 3, np.inf, A), "infinite"),
        (lambda A: A * np.array([1.0, 0.0]), "zero total mass"),
        (lambda A: A * np.array([1.0, 1.5]), "unequal masses"),
        (lambda A: A[:-1], "grid has 12 points"),
        (lambda A: A[:, 0], "2-D"),
        (lambda A: A[:, :0], "at least one histogram"),
        (lambda A: np.array([["a", "b"]] * 12), "numeric"),
    ],
)
def test_bad_histograms(mutate, match):
    with pytest.raises(InputError, match=match):
        barycenter(mutate(good()), (3, 4))


def test_unequal_masses_hint_at_normalize():
    with pytest.raises(InputError) as info:
        barycenter(good() * np.array([1.0, 2.0]), (3, 4))
    assert "normalize" in info.value.one_line()
    nu = barycenter(good() * np.array([1.0, 2.0]), (3, 4), normalize=True)
    assert nu.sum() == pytest.approx(1.0)


@pytest.mark.parametrize(
    "weights,match",
    [
        ([1.0], "one entry per histogram"),
        ([0.5, -0.5], ">= 0"),
        ([0.0, 0.0], "all be zero"),
        ([np.nan, 1], "finite"),
    ],
)
def test_bad_weights(weights, match):
    with pytest.raises(InputError, match=match):
        barycenter(good(), (3, 4), weights=weights)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"grid_shape": (3, 0)}, "positive integers"),
        ({"grid_shape": (3.5, 4)}, "positive integers"),
        ({"grid_shape": ()}, "at least one axis"),
        ({"spacing": -1.0}, "spacing"),
        ({"spacing": (1.0, 2.0, 3.0)}, "one per axis"),
        ({"p": 0.5}, "p must be"),
        ({"solver": "simplex"}, "solver"),
        ({"time_limit": -1}, "time_limit"),
    ],
)
def test_bad_options(kwargs, match):
    args = {"grid_shape": (3, 4), **kwargs}
    shape = args.pop("grid_shape")
    with pytest.raises(InputError, match=match):
        barycenter(good(), shape, **args)


def test_too_large_grid_is_refused_before_allocating():
    shape = (2048, 2048)  # M·N·Σn_k ≈ 5e10 variables; the input is a lazy broadcast view
    start = time.perf_counter()
    with pytest.raises(InputError, match="GiB"):
        solve_barycenter(np.broadcast_to(np.float64(1.0), (2048 * 2048, 3)), shape)
    assert time.perf_counter() - start < 1.0


def test_max_memory_limit_is_honoured():
    A = good((16, 16), 3)
    with pytest.raises(InputError, match="allowed"):
        solve_barycenter(A, (16, 16), max_memory=1e6)
    with pytest.raises(InputError, match="full LP"):
        full_lp_barycenter(A, (16, 16), max_memory=1e6)


def test_transport_rejects_mismatched_inputs():
    with pytest.raises(InputError, match="same number"):
        transport(np.ones(4) / 4, np.ones(5) / 5, (2, 2))
    with pytest.raises(InputError, match="unequal"):
        transport(np.ones(4) / 4, np.ones(4), (2, 2))
