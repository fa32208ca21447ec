"""Colour palettes: histograms, the barycentric palette, and recolouring by the recovered plans."""

import numpy as np
import pytest
from geto_lp.palette import color_histogram, composite, palette_barycenter, to_float_rgb

from papershelf.errors import InputError


def test_color_histogram_bins_pixels_in_c_order():
    img = np.array([[[0, 0, 0], [255, 255, 255]], [[255, 0, 0], [0, 0, 255]]], dtype=np.uint8)
    hist, flat = color_histogram(img, 4)
    assert hist.sum() == pytest.approx(1.0) and hist.shape == (64,)
    assert flat.tolist() == [[0, 63], [48, 3]]  # (r, g, b) -> (r·4 + g)·4 + b


def test_one_image_keeps_its_palette_and_colours():
    rng = np.random.default_rng(0)
    img = rng.random((9, 7, 3))
    res = palette_barycenter([img], bins=4)
    hist, _ = color_histogram(img, 4)
    np.testing.assert_allclose(res.barycenter, hist, atol=1e-12)
    np.testing.assert_allclose(res.recolored[0], img, atol=1e-12)
    assert res.objective == pytest.approx(0.0, abs=1e-12)


def test_two_flat_colours_meet_in_the_middle():
    dark = np.full((4, 5, 3), 0.1)  # bin (0, 0, 0) of 4
    light = np.full((3, 3, 3), 0.6)  # bin (2, 2, 2)
    res = palette_barycenter([dark, light], bins=4)
    middle = (1 * 4 + 1) * 4 + 1
    assert res.barycenter[middle] == pytest.approx(1.0)
    # each pixel moves by the distance between bin centres, keeping its offset inside the bin
    np.testing.assert_allclose(res.recolored[0], 0.1 + 0.25, atol=1e-12)
    np.testing.assert_allclose(res.recolored[1], 0.6 - 0.25, atol=1e-12)
    assert res.objective == pytest.approx(3 * 0.25**2, rel=1e-9)  # ½·3·(1/4)² + ½·3·(1/4)²


def test_composite_and_bad_images():
    a, b = np.zeros((4, 6, 3)), np.ones((5, 3, 3))
    pic = composite([a, b], [a, b], np.ones(8) / 8, 2)
    assert pic.ndim == 3 and pic.shape[2] == 3 and pic.min() >= 0 and pic.max() <= 1
    with pytest.raises(InputError, match="RGB"):
        to_float_rgb(np.zeros((4, 4)))
    with pytest.raises(InputError, match="0, 1"):
        to_float_rgb(np.full((2, 2, 3), 1.5))
    with pytest.raises(InputError, match="bins"):
        palette_barycenter([a], bins=1)
