"""Data: GlyphCIL is seeded and distinct, streams are class-disjoint and cover every class."""

import numpy as np
import pytest
from circle_cil import GLYPHS, class_incremental_stream, glyph_dataset, load_digits_dataset, render_glyph
from circle_cil.data import font_paths

from papershelf.errors import InputError


def test_glyphs_are_distinct_and_enough():
    assert len(set(GLYPHS)) == len(GLYPHS) >= 200
    assert len(font_paths()) >= 8


def test_glyph_dataset_is_seeded():
    a = glyph_dataset(6, 4, size=16, seed=3)
    b = glyph_dataset(6, 4, size=16, seed=3)
    c = glyph_dataset(6, 4, size=16, seed=4)
    np.testing.assert_array_equal(a.X_train, b.X_train)
    assert not np.array_equal(a.X_train, c.X_train)
    assert a.X_train.dtype == np.float32 and 0 <= a.X_train.min() and a.X_train.max() <= 1
    assert a.class_names == list(GLYPHS[:6])


def test_render_glyph_draws_ink_inside_the_frame():
    img = render_glyph("A", font_paths()[0], size=24)
    assert img.shape == (24, 24) and img.max() > 0.9
    assert img[:2].max() < 0.5 and img[:, :2].max() < 0.5  # fitted with a margin


@pytest.mark.parametrize("n_tasks", [1, 3, 10])
def test_stream_is_class_disjoint_and_complete(n_tasks):
    d = load_digits_dataset()
    tasks = class_incremental_stream(d, n_tasks)
    classes = [c for t in tasks for c in t.classes]
    assert sorted(classes) == list(range(10))
    sizes = [len(t.classes) for t in tasks]
    assert max(sizes) - min(sizes) <= 1
    assert sum(len(t.y_train) for t in tasks) == len(d.y_train)
    for t in tasks:
        assert set(np.unique(t.y_train)) == set(t.classes) == set(np.unique(t.y_test))


def test_bad_inputs():
    with pytest.raises(InputError, match="exceeds the 10 classes"):
        class_incremental_stream(load_digits_dataset(), 20)
    with pytest.raises(InputError, match="n_classes"):
        glyph_dataset(10_000)
