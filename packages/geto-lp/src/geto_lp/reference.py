"""Slow, obviously-correct versions: the oracles the GETO-LP is tested against.

- :func:`full_lp_barycenter`: the classical fixed-support barycenter LP with one N×N plan per input,
  O(MN²) variables, built from the dense cost matrix and solved with the same HiGHS settings.
- :func:`full_transport`: the N×N transport LP between two histograms.
- :func:`geto_model_loops`: the GETO-LP assembled arc by arc with plain Python loops, straight from
  the definition; the vectorised :func:`geto_lp.model.build_model` must produce the same matrix.
- :func:`quantile_barycenter_1d`: the 1-D W_2 barycenter by averaging quantile functions (free support).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp

from geto_lp.grid import Grid, make_grid
from geto_lp.model import _check_memory, check_histograms, check_weights, solve_lp

__all__ = [
    "FullLPResult",
    "cost_matrix",
    "full_lp_barycenter",
    "full_transport",
    "geto_model_loops",
    "quantile_barycenter_1d",
]


def cost_matrix(grid: Grid) -> np.ndarray:
    """Dense N×N matrix C[x, y] = Σ_k |x_k − y_k|^p from the point coordinates."""
    pts = grid.points()
    return (np.abs(pts[:, None, :] - pts[None, :, :]) ** grid.p).sum(axis=2)


@dataclass
class FullLPResult:
    barycenter: np.ndarray
    objective: float
    plans: list[np.ndarray]  # plans[m][x, y]: mass from μ_m at x to ν at y
    n_variables: int
    seconds: float


def full_lp_barycenter(
    A: Any,
    grid_shape: Any,
    weights: Any = None,
    spacing: Any = 1.0,
    *,
    p: float = 2.0,
    normalize: bool = False,
    solver: str = "highs-ipm",
    max_memory: float | None = None,
) -> FullLPResult:
    """min Σ_m λ_m ⟨C, π_m⟩ s.t. π_m 1 = μ_m, π_mᵀ 1 = ν, π_m >= 0 — M·N² + N variables."""
    grid = make_grid(grid_shape, spacing, p)
    A = check_histograms(A, grid.size, normalize=normalize)
    w = check_weights(weights, A.shape[1])
    n, m_count = grid.size, A.shape[1]
    n_var = m_count * n * n + n
    _check_memory(
        f"the full LP on a {grid.shape} grid",
        n_var,
        2 * m_count * n,
        2 * m_count * n * n + m_count * n,
        max_memory,
    )
    C = cost_matrix(grid)
    c = np.concatenate([w[m] * C.ravel() for m in range(m_count)] + [np.zeros(n)])
    # π_m is stored row-major: variable m·N² + x·N + y.
    rows_sum = sp.kron(sp.eye(n), np.ones((1, n)))  # Σ_y π(x, y)
    cols_sum = sp.kron(np.ones((1, n)), sp.eye(n))  # Σ_x π(x, y)
    blocks = []
    for m in range(m_count):
        left = [None] * m_count
        left[m] = rows_sum
        blocks.append([*left, sp.csr_matrix((n, n))])
    for m in range(m_count):
        left = [None] * m_count
        left[m] = cols_sum
        blocks.append([*left, -sp.eye(n)])
    A_eq = sp.bmat(blocks, format="csc")
    b = np.concatenate([A[:, m] for m in range(m_count)] + [np.zeros(n * m_count)])
    start = time.perf_counter()
    x, fun, _ = solve_lp(c, A_eq, b, solver=solver)
    seconds = time.perf_counter() - start
    plans = [x[m * n * n : (m + 1) * n * n].reshape(n, n) for m in range(m_count)]
    return FullLPResult(np.maximum(x[m_count * n * n :], 0.0), fun, plans, n_var, seconds)


def full_transport(mu: Any, nu: Any, grid_shape: Any, spacing: Any = 1.0, *, p: float = 2.0) -> float:
    """min ⟨C, π⟩ over plans with marginals (mu, nu): the N² variable transport LP."""
    grid = make_grid(grid_shape, spacing, p)
    pair = check_histograms(np.stack([np.ravel(mu), np.ravel(nu)], 1), grid.size, name="(mu, nu)")
    n = grid.size
    A_eq = sp.vstack([sp.kron(sp.eye(n), np.ones((1, n))), sp.kron(np.ones((1, n)), sp.eye(n))]).tocsc()
    _, fun, _ = solve_lp(cost_matrix(grid).ravel(), A_eq, np.concatenate([pair[:, 0], pair[:, 1]]))
    return fun


def geto_model_loops(
    A: np.ndarray, grid: Grid, weights: np.ndarray
) -> tuple[np.ndarray, sp.csr_array, np.ndarray]:
    """The GETO-LP (c, A_eq, b_eq) built one arc at a time, in :class:`GetoModel`'s variable order."""
    n, d, m_count = grid.size, grid.ndim, A.shape[1]
    points = list(itertools.product(*(range(s) for s in grid.shape)))  # C order
    flat = {pt: i for i, pt in enumerate(points)}

    def row(m: int, layer: int, point: int) -> int:
        return (m * (d + 1) + layer) * n + point

    costs, entries = [], []
    col = 0
    for m in range(m_count):
        for k in range(d):
            for z in points:
                for t in range(grid.shape[k]):
                    target = list(z)
                    target[k] = t
                    costs.append(weights[m] * abs(grid.spacing[k] * (z[k] - t)) ** grid.p)
                    # leaving layer k: out-flow (+1 in the source rows, -1 in conservation rows)
                    entries.append((row(m, k, flat[z]), col, 1.0 if k == 0 else -1.0))
                    entries.append((row(m, k + 1, flat[tuple(target)]), col, 1.0))
                    col += 1
    for y in range(n):
        costs.append(0.0)
        for m in range(m_count):
            entries.append((row(m, d, y), col, -1.0))
        col += 1
    r, cidx, v = zip(*entries)
    A_eq = sp.csr_array((v, (r, cidx)), shape=(m_count * (d + 1) * n, col))
    b = np.zeros(m_count * (d + 1) * n)
    for m in range(m_count):
        for x in range(n):
            b[row(m, 0, x)] = A[x, m]
    return np.array(costs), A_eq, b


def quantile_barycenter_1d(
    positions: np.ndarray, A: np.ndarray, weights: np.ndarray
) -> tuple[np.ndarray, np.ndarray, float]:
    """1-D W_2 barycenter: its quantile function is Σ_m λ_m F_m^{-1}.

    Returns (atoms, masses, objective) with the objective Σ_m λ_m W_2²(ν, μ_m), computed by
    integrating over the common refinement of the input CDFs' levels.
    """
    A = np.asarray(A, dtype=np.float64) / np.asarray(A).sum(axis=0)
    cdfs = np.cumsum(A, axis=0)
    levels = np.unique(np.concatenate([[0.0], np.clip(cdfs.ravel(), 0, 1), [1.0]]))
    mids = 0.5 * (levels[:-1] + levels[1:])
    widths = np.diff(levels)
    keep = widths > 1e-15
    mids, widths = mids[keep], widths[keep]
    quantiles = np.stack(
        [
            positions[np.minimum(np.searchsorted(cdfs[:, m], mids), len(positions) - 1)]
            for m in range(A.shape[1])
        ],
        axis=1,
    )
    atoms_per_level = quantiles @ weights
    objective = float(np.sum(widths * ((quantiles - atoms_per_level[:, None]) ** 2 @ weights)))
    atoms, inverse = np.unique(atoms_per_level, return_inverse=True)
    masses = np.bincount(inverse, weights=widths)
    return atoms, masses, objective
