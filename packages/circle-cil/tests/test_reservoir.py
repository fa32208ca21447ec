"""The BiRC2D extractor against the loop reference; determinism, boundedness, pooling, bad input."""

import numpy as np
import pytest
import torch
from circle_cil import BiRC2D, ReservoirBank
from circle_cil.reference import birc2d_state_map, pool_reference
from circle_cil.reservoir import POOLINGS

from papershelf.errors import InputError


@pytest.mark.parametrize("shape", [(8, 12), (6, 10)])
@pytest.mark.parametrize("activation", ["leaky_relu", "tanh"])
def test_state_map_and_pooling_match_reference(shape, activation):
    r = BiRC2D(2, shape, patch=2, units=16, seed=3, activation=activation, dtype=torch.float64)
    x = np.random.default_rng(0).random((3, 2, *shape))
    ref = np.stack([birc2d_state_map(r, xi) for xi in x])
    np.testing.assert_allclose(r.state_map(torch.tensor(x)).numpy(), ref, atol=1e-12)
    for pooling in POOLINGS:
        r.pooling = pooling
        feats = r(torch.tensor(x)).numpy()
        expect = np.stack([pool_reference(m, pooling) for m in ref])
        assert feats.shape == (3, r.out_dim)
        np.testing.assert_allclose(feats, expect, atol=1e-12)


def test_directions_are_really_directional():
    # a single bright patch at the left edge only reaches the → quarter's later positions
    r = BiRC2D(1, (4, 16), patch=4, units=8, seed=0, dtype=torch.float64)
    x = torch.zeros(1, 1, 4, 16, dtype=torch.float64)
    x[..., :4] = 1.0
    m = r.state_map(x)[0, 0]  # (Nw=4, 8): quarters → ← ↓ ↑ of 2 units
    assert torch.all(m[1:, 0:2].abs() > 0)  # → carries the patch to the right
    assert torch.all(m[1:, 2:4] == 0)  # ← starts at the right: nothing seen yet at positions 1..3
    assert torch.all(m[1:, 4:] == 0)  # vertical scans of empty columns stay at 0


def test_bank_equals_individual_reservoirs_and_is_deterministic():
    rs = [BiRC2D(1, 16, patch=4, units=16, seed=s) for s in (1, 2, 3)]
    x = torch.rand(5, 1, 16, 16)
    bank = ReservoirBank(rs).features(x, chunk=2)
    for i, r in enumerate(rs):
        torch.testing.assert_close(bank[:, i], r(x), atol=1e-5, rtol=1e-5)
    again = BiRC2D(1, 16, patch=4, units=16, seed=2)
    np.testing.assert_array_equal(again.weights[0].W_rec, rs[1].weights[0].W_rec)
    torch.testing.assert_close(again(x), rs[1](x), atol=0, rtol=0)
    assert not np.allclose(rs[0].weights[0].W_in, rs[1].weights[0].W_in)
    # the four directions have different weights
    assert not np.allclose(rs[0].weights[0].W_in, rs[0].weights[1].W_in)


@pytest.mark.parametrize("rescale", ["spectral_radius", "spectral_norm"])
def test_states_bounded_by_construction(rescale):
    r = BiRC2D(1, 32, units=32, seed=7, rescale=rescale, dtype=torch.float64)
    for w in r.weights:
        rho = np.max(np.abs(np.linalg.eigvals(w.W_rec)))
        size = rho if rescale == "spectral_radius" else np.linalg.norm(w.W_rec, 2)
        assert abs(size - 0.95) < 1e-9
    x = torch.rand(20, 1, 32, 32, dtype=torch.float64) * 10  # large inputs
    m = r.state_map(x)
    u_norm = float(np.sqrt(16) * 10)  # a 4×4 patch with pixels ≤ 10
    q = r.units // 4
    worst = max(float(m[..., k * q : (k + 1) * q].norm(dim=-1).max()) for k in range(4))
    assert np.isfinite(worst) and worst <= r.state_bound(u_norm) + 1e-9
    if rescale == "spectral_norm":  # a contraction: the bound does not grow with sequence length
        L = 1 - r.leak + r.leak * 0.95
        assert r.state_bound(u_norm) <= r.leak * max(
            np.linalg.norm(w.W_in, 2) for w in r.weights
        ) * u_norm / (1 - L)


def test_bad_inputs():
    r = BiRC2D(1, 16, patch=4, units=16)
    with pytest.raises(InputError, match="built for"):
        r(torch.rand(2, 1, 12, 12))
    with pytest.raises(InputError, match="built for"):
        r(torch.rand(2, 3, 16, 16))
    bad = torch.rand(2, 1, 16, 16)
    bad[0, 0, 3, 3] = float("nan")
    with pytest.raises(InputError, match="NaN"):
        r(bad)
    with pytest.raises(InputError, match="divisible by patch"):
        BiRC2D(1, 10, patch=4)
    with pytest.raises(InputError, match="divisible by 4"):
        BiRC2D(1, 16, units=10)
    with pytest.raises(InputError, match="spectral_radius"):
        BiRC2D(1, 16, spectral_radius=1.0)
    with pytest.raises(InputError, match="pooling"):
        BiRC2D(1, 16, pooling="median")
    with pytest.raises(InputError, match="shape"):
        r(np.zeros((16, 16)))
    with pytest.raises(InputError, match="numeric"):
        r(np.array([["a"]]))
