"""Offline data: generators with known answers, and loaders of data that scikit-learn ships.

Nothing is downloaded. ``digits`` and ``sample_images`` need scikit-learn (the ``bench`` extra); the
generators need only numpy and scipy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.ndimage import gaussian_filter

from papershelf.errors import InputError, MissingDependencyError, check_int

__all__ = [
    "KnownBarycenter",
    "digits",
    "dirac",
    "sample_images",
    "smooth_histograms",
    "translated_shapes",
    "volume_shape",
]


def smooth_histograms(
    shape: tuple[int, ...], n: int, *, seed: int = 0, sigma: float | None = None
) -> np.ndarray:
    """``n`` random smooth positive histograms on a grid, as the columns of an (N, n) array (mass 1).

    Blurred uniform noise raised to the 4th power: a few soft bumps per histogram, every cell > 0.
    """
    rng = np.random.default_rng(seed)
    sigma = max(1.0, min(shape) / 16) if sigma is None else sigma
    cols = []
    for _ in range(n):
        field = gaussian_filter(rng.random(shape), sigma, mode="wrap")
        field = (field - field.min()) / (np.ptp(field) + 1e-12)
        field = field**4 + 1e-3
        cols.append((field / field.sum()).ravel())
    return np.stack(cols, axis=1)


def dirac(shape: tuple[int, ...], index: tuple[int, ...]) -> np.ndarray:
    """A unit mass at the grid point ``index`` (flattened in C order)."""
    out = np.zeros(shape)
    out[tuple(index)] = 1.0
    return out.ravel()


@dataclass
class KnownBarycenter:
    """Inputs whose barycenter and objective are known exactly (translates of one shape)."""

    A: np.ndarray  # (N, M)
    weights: np.ndarray
    shape: tuple[int, ...]
    spacing: tuple[float, ...]
    barycenter: np.ndarray  # (N,)
    objective: float
    offsets: np.ndarray  # (M, d) integer translations


def volume_shape(size: tuple[int, ...], *, radius: float | None = None) -> np.ndarray:
    """A smooth "organ" — an ellipsoid with an off-centre cavity — centred in a box of ``size`` cells."""
    d = len(size)
    radius = min(size) / 2 - 0.5 if radius is None else radius
    axes = np.array([radius * (1.0 - 0.15 * k) for k in range(d)])
    coords = np.meshgrid(*[np.arange(s) - (s - 1) / 2 for s in size], indexing="ij")
    r = np.sqrt(sum((c / a) ** 2 for c, a in zip(coords, axes)))
    body = np.clip(1.2 - r, 0, None)
    hole_centre = [0.35 * axes[0]] + [0.0] * (d - 1)
    rh = np.sqrt(sum((c - h) ** 2 for c, h in zip(coords, hole_centre)))
    body[rh < 0.3 * axes[0]] *= 0.1
    body[r > 1.0] = 0.0
    return body


def translated_shapes(
    grid_shape: tuple[int, ...],
    offsets: Any,
    *,
    weights: Any = None,
    spacing: Any = 1.0,
    shape_size: tuple[int, ...] | None = None,
) -> KnownBarycenter:
    """Translates of :func:`volume_shape` by integer ``offsets`` (M, d); weights must make Σλ_m a_m integral.

    For the squared Euclidean cost, W_2²(T_a μ, T_b μ) = |a − b|² and every barycenter has mean
    Σ λ_m (mean μ + a_m), so the translate by ā = Σ λ_m a_m is the unique barycenter, with objective
    Σ λ_m |a_m − ā|² (in spacing units). This holds on the grid whenever ā is integral.
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    m_count, d = offsets.shape
    if d != len(grid_shape):
        raise InputError(f"offsets must have {len(grid_shape)} columns, got {d}")
    w = np.full(m_count, 1.0 / m_count) if weights is None else np.asarray(weights, dtype=np.float64)
    w = w / w.sum()
    centre = w @ offsets
    if not np.allclose(centre, np.round(centre), atol=1e-9):
        raise InputError(
            f"Σ λ_m a_m = {centre.tolist()} is not integral; the barycenter would leave the grid"
        )
    centre = np.round(centre).astype(np.int64)
    spacing_v = np.broadcast_to(np.asarray(spacing, dtype=np.float64), (d,))
    shape_size = tuple(min(s // 2, 12) for s in grid_shape) if shape_size is None else shape_size
    base = volume_shape(shape_size)
    base = base / base.sum()

    def place(offset: np.ndarray) -> np.ndarray:
        grid = np.zeros(grid_shape)
        start = np.asarray(offset)
        if np.any(start < 0) or np.any(start + np.array(shape_size) > np.array(grid_shape)):
            raise InputError(f"offset {start.tolist()} puts the shape outside the grid {grid_shape}")
        grid[tuple(slice(int(a), int(a) + s) for a, s in zip(start, shape_size))] = base
        return grid.ravel()

    A = np.stack([place(a) for a in offsets], axis=1)
    objective = float(sum(w[m] * np.sum((spacing_v * (offsets[m] - centre)) ** 2) for m in range(m_count)))
    return KnownBarycenter(A, w, tuple(grid_shape), tuple(spacing_v), place(centre), objective, offsets)


def digits(digit: int = 3, count: int = 8, *, upsample: int = 1) -> tuple[np.ndarray, tuple[int, int]]:
    """The first ``count`` images of ``digit`` in scikit-learn's digits (8×8, bundled), as histograms.

    Returns (A (N, count) with unit-mass columns, grid shape). ``upsample`` repeats pixels.
    """
    digit = check_int("digit", digit, low=0, high=9)
    count = check_int("count", count, low=1)
    try:
        from sklearn.datasets import load_digits
    except ImportError:
        raise MissingDependencyError("sklearn", package="geto-lp", extra="bench") from None
    data = load_digits()
    images = data.images[data.target == digit][:count].astype(np.float64)
    if upsample > 1:
        images = images.repeat(upsample, axis=1).repeat(upsample, axis=2)
    images = images + 1e-9 * images.max()  # every pixel keeps a trace of mass: no empty histogram
    shape = images.shape[1:]
    A = images.reshape(len(images), -1).T
    return A / A.sum(axis=0), (int(shape[0]), int(shape[1]))


def sample_images() -> dict[str, np.ndarray]:
    """scikit-learn's bundled sample photographs (china.jpg, flower.jpg) as uint8 (H, W, 3) arrays."""
    try:
        from sklearn.datasets import load_sample_images
    except ImportError:
        raise MissingDependencyError("sklearn", package="geto-lp", extra="bench") from None
    try:
        bunch = load_sample_images()
    except ImportError:  # scikit-learn reads the JPEGs with pillow
        raise MissingDependencyError("PIL", package="geto-lp", extra="bench") from None
    names = [name.rsplit("/", 1)[-1].rsplit(".", 1)[0] for name in bunch.filenames]
    return {name: np.asarray(img) for name, img in zip(names, bunch.images)}


def downsample(image: np.ndarray, max_side: int) -> np.ndarray:
    """Every k-th pixel so that the longer side is at most ``max_side`` (palettes need no detail)."""
    step = max(1, math.ceil(max(image.shape[:2]) / max_side))
    return image[::step, ::step]
