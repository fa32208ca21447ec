"""Colour-palette barycenters: RGB histograms on a bins³ grid, their exact barycenter, and recolouring.

Each image's colours are binned on a bins × bins × bins grid (d = 3, N = bins³); the GETO-LP barycenter
ν of the M histograms is the "average palette", and the optimal plan π_m between ν and image m moves
every colour bin j of the image to the barycentric target T_m(j) = Σ_i π_m(i, j) c_i / μ_m(j). A pixel
of colour x in bin j becomes x + T_m(j) − c_j (its position inside the bin is kept), clipped to [0, 1].
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from geto_lp.model import BarycenterResult, solve_barycenter
from papershelf.errors import InputError, check_int

__all__ = [
    "PaletteResult",
    "color_histogram",
    "composite",
    "palette_barycenter",
    "palette_swatches",
    "to_float_rgb",
]


def to_float_rgb(image: Any, name: str = "image") -> np.ndarray:
    """An (H, W, 3) float image in [0, 1] from uint8 or float input (an alpha channel is dropped)."""
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] not in (3, 4):
        raise InputError(f"{name} must be an (H, W, 3) RGB image, got shape {arr.shape}")
    arr = arr[..., :3]
    if arr.size == 0:
        raise InputError(f"{name} is empty")
    if np.issubdtype(arr.dtype, np.integer):
        return arr.astype(np.float64) / (255.0 if arr.max() > 1 else 1.0)
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)) or arr.min() < 0 or arr.max() > 1:
        raise InputError(f"{name} must hold colours in [0, 1] (float) or 0..255 (integers)")
    return arr


def color_histogram(image: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """(histogram over bins³ cells with unit mass, flat bin index of every pixel (H, W))."""
    img = to_float_rgb(image)
    q = np.minimum((img * bins).astype(np.int64), bins - 1)
    flat = (q[..., 0] * bins + q[..., 1]) * bins + q[..., 2]
    hist = np.bincount(flat.ravel(), minlength=bins**3).astype(np.float64)
    return hist / hist.sum(), flat


def _centres(bins: int) -> np.ndarray:
    idx = np.stack(np.unravel_index(np.arange(bins**3), (bins,) * 3), axis=1)
    return (idx + 0.5) / bins


@dataclass
class PaletteResult:
    bins: int
    barycenter: np.ndarray  # (bins**3,) unit mass
    recolored: list[np.ndarray]  # float (H, W, 3) in [0, 1]
    result: BarycenterResult

    @property
    def objective(self) -> float:
        return self.result.objective


def palette_barycenter(images: list[Any], *, bins: int = 16, weights: Any = None) -> PaletteResult:
    """Exact barycenter of the images' RGB histograms, and each image recoloured to it."""
    bins = check_int("bins", bins, low=2, high=64)
    if len(images) < 1:
        raise InputError("palette needs at least one image")
    imgs = [to_float_rgb(img, f"image {i}") for i, img in enumerate(images)]
    hists, flats = zip(*(color_histogram(img, bins) for img in imgs))
    A = np.stack(hists, axis=1)
    # Colours live in [0, 1]^3: one bin is 1/bins wide.
    result = solve_barycenter(A, (bins, bins, bins), weights, 1.0 / bins)
    centres = _centres(bins)
    recolored = []
    for m, (img, flat) in enumerate(zip(imgs, flats)):
        plan = result.plan(m).tocsc()  # rows ν, columns μ_m
        mass = np.asarray(plan.sum(axis=0)).ravel()
        moved = (plan.T @ centres) / np.where(mass > 0, mass, 1.0)[:, None]
        shift = np.where(mass[:, None] > 0, moved - centres, 0.0)
        recolored.append(np.clip(img + shift[flat], 0.0, 1.0))
    return PaletteResult(bins, result.barycenter, recolored, result)


def palette_swatches(hist: np.ndarray, bins: int, *, count: int = 12, size: int = 24) -> np.ndarray:
    """A (size, count·size, 3) strip of the ``count`` heaviest colour bins of ``hist``, heaviest first."""
    order = np.argsort(hist)[::-1][:count]
    colours = _centres(bins)[order]
    strip = np.repeat(colours[None, :, :], size, axis=0).repeat(size, axis=1)
    return strip


def composite(
    originals: list[np.ndarray], recolored: list[np.ndarray], hist: np.ndarray, bins: int
) -> np.ndarray:
    """One RGB picture: the originals on top, the recoloured images below, the average palette last."""
    gap = 8
    rows = []
    for row in (originals, recolored):
        height = max(img.shape[0] for img in row)
        tiles = []
        for img in row:
            tile = np.ones((height, img.shape[1], 3))
            tile[: img.shape[0]] = to_float_rgb(img)
            tiles += [tile, np.ones((height, gap, 3))]
        rows.append(np.concatenate(tiles[:-1], axis=1))
    width = max(r.shape[1] for r in rows)
    strip = palette_swatches(hist, bins, count=min(16, int(np.sum(hist > 0))), size=max(8, width // 16))
    parts = []
    for block in (*rows, strip):
        padded = np.ones((block.shape[0], width, 3))
        padded[:, : min(width, block.shape[1])] = block[:, :width]
        parts += [padded, np.ones((gap, width, 3))]
    return np.concatenate(parts[:-1], axis=0)
