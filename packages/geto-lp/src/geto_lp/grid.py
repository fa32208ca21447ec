"""Regular d-dimensional grids and the separable ground cost c(x, y) = Σ_k |x_k − y_k|^p.

Points are flattened in C order over ``shape`` (the last axis varies fastest), exactly as
``numpy.ravel`` flattens an array of that shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from papershelf.errors import InputError, check_number

__all__ = ["Grid", "make_grid"]


@dataclass(frozen=True)
class Grid:
    """A regular grid with ``shape`` (n_1, …, n_d), per-axis ``spacing`` h_k and cost exponent ``p``.

    The coordinate of index i along axis k is i·h_k; the cost between two points is
    Σ_k |h_k (i_k − j_k)|^p (squared Euclidean for p = 2).
    """

    shape: tuple[int, ...]
    spacing: tuple[float, ...]
    p: float = 2.0

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        """N, the number of grid points."""
        return math.prod(self.shape)

    def strides(self) -> tuple[int, ...]:
        """Index step of one cell along each axis in the C-order flattening."""
        return tuple(math.prod(self.shape[k + 1 :]) for k in range(self.ndim))

    def axis_coords(self, k: int) -> np.ndarray:
        return self.spacing[k] * np.arange(self.shape[k], dtype=np.float64)

    def axis_cost(self, k: int) -> np.ndarray:
        """(n_k, n_k) matrix of per-axis costs |x_k − y_k|^p."""
        x = self.axis_coords(k)
        return np.abs(x[:, None] - x[None, :]) ** self.p

    def multi_index(self, flat: np.ndarray) -> tuple[np.ndarray, ...]:
        return np.unravel_index(np.asarray(flat), self.shape)

    def points(self) -> np.ndarray:
        """(N, d) coordinates of every grid point, in flattening order."""
        idx = self.multi_index(np.arange(self.size))
        return np.stack([self.spacing[k] * idx[k] for k in range(self.ndim)], axis=1).astype(np.float64)

    def pair_cost(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Cost between flat indices ``i`` and ``j`` (arrays of equal shape), without an N×N matrix."""
        ii, jj = self.multi_index(i), self.multi_index(j)
        total = np.zeros(np.shape(i), dtype=np.float64)
        for k in range(self.ndim):
            total += np.abs(self.spacing[k] * (ii[k] - jj[k]).astype(np.float64)) ** self.p
        return total


def make_grid(grid_shape: Any, spacing: Any = 1.0, p: Any = 2.0) -> Grid:
    """Validate a grid description; ``spacing`` is one positive number or one per axis; ``p`` >= 1."""
    if isinstance(grid_shape, int | np.integer):
        grid_shape = (int(grid_shape),)
    if not isinstance(grid_shape, Sequence | np.ndarray) or isinstance(grid_shape, str):
        raise InputError(f"grid_shape must be a tuple of positive integers, got {grid_shape!r}")
    shape = []
    for n in grid_shape:
        if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
            raise InputError(f"grid_shape must be a tuple of positive integers, got {tuple(grid_shape)!r}")
        shape.append(int(n))
    if not shape:
        raise InputError("grid_shape must have at least one axis")
    d = len(shape)
    if np.ndim(spacing) == 0:
        spacings = (check_number("spacing", spacing, low=0, low_open=True),) * d
    else:
        values = list(np.asarray(spacing, dtype=object).ravel())
        if len(values) != d:
            raise InputError(f"spacing must be one number or {d} numbers (one per axis), got {len(values)}")
        spacings = tuple(check_number(f"spacing[{k}]", v, low=0, low_open=True) for k, v in enumerate(values))
    p = check_number("p", p, low=1.0)
    return Grid(tuple(shape), spacings, p)
