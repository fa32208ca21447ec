"""The anchors, run side by side with the GETO-LP.

- ``full_lp``: the classical O(MN²) barycenter LP, our own sparse build, same HiGHS settings
  (:func:`geto_lp.reference.full_lp_barycenter`); runtime dependencies only.
- ``pot_lp``: POT's ``ot.lp.barycenter`` (the same full LP, POT's build, scipy HiGHS IPM).
- ``pot_ibp``: POT's entropic ``ot.bregman.barycenter`` (iterative Bregman projections, log domain).
- ``pot_convolutional``: POT's ``ot.bregman.convolutional_barycenter2d`` (Solomon et al. 2015; 2-D only).
- ``convolutional``: the same convolutional (separable Gibbs kernel) barycenter re-implemented here in
  the log domain for any d, so 3-D volumes get an entropic anchor too; it agrees with POT's in 2-D.

Every function takes histograms as the columns of ``A`` (N, M), flattened in C order over
``grid_shape``, and returns :class:`Anchor` with the barycenter and the anchor's own objective (the
exact LP value for the LP anchors, ``None`` for the entropic ones — evaluate those with
:func:`geto_lp.model.barycenter_objective`).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.special import logsumexp

from geto_lp.grid import make_grid
from geto_lp.model import check_histograms, check_weights
from geto_lp.reference import cost_matrix, full_lp_barycenter
from papershelf.errors import InputError, MissingDependencyError, check_number

__all__ = [
    "ANCHORS",
    "Anchor",
    "convolutional",
    "full_lp",
    "pot_convolutional",
    "pot_ibp",
    "pot_lp",
    "require_pot",
]


@dataclass
class Anchor:
    name: str
    barycenter: np.ndarray
    objective: float | None
    seconds: float


def require_pot() -> Any:
    """Import POT, or raise :class:`MissingDependencyError` naming the ``bench`` extra.

    POT's sources contain invalid escape sequences; compiling them emits SyntaxWarnings, which a
    warnings-as-errors setting would turn into a SyntaxError, so the import runs with warnings silenced.
    """
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import ot
    except ImportError:
        raise MissingDependencyError("ot", package="geto-lp", extra="bench") from None
    return ot


def _prepare(A: Any, grid_shape: Any, weights: Any, spacing: Any, p: float):
    grid = make_grid(grid_shape, spacing, p)
    A = check_histograms(A, grid.size)
    return grid, A, check_weights(weights, A.shape[1])


def full_lp(A: Any, grid_shape: Any, weights: Any = None, spacing: Any = 1.0, *, p: float = 2.0) -> Anchor:
    """The full LP (M·N² + N variables) built by this package and solved with HiGHS IPM."""
    start = time.perf_counter()
    res = full_lp_barycenter(A, grid_shape, weights, spacing, p=p)
    return Anchor("full-lp", res.barycenter, res.objective, time.perf_counter() - start)


def pot_lp(A: Any, grid_shape: Any, weights: Any = None, spacing: Any = 1.0, *, p: float = 2.0) -> Anchor:
    """``ot.lp.barycenter(A, C, weights, solver="highs-ipm")`` with C the grid's N×N cost matrix."""
    ot = require_pot()
    grid, A, w = _prepare(A, grid_shape, weights, spacing, p)
    C = cost_matrix(grid)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nu, log = ot.lp.barycenter(A, C, w, log=True, solver="highs-ipm")
    seconds = time.perf_counter() - start
    return Anchor("pot-lp", np.maximum(np.asarray(nu, dtype=np.float64), 0.0), float(log.fun), seconds)


def pot_ibp(
    A: Any,
    grid_shape: Any,
    weights: Any = None,
    spacing: Any = 1.0,
    *,
    p: float = 2.0,
    reg: float = 1.0,
    max_iter: int = 2000,
) -> Anchor:
    """POT's entropic barycenter (IBP, log domain); ``reg`` is ε in the cost's units (cells² for W_2²)."""
    ot = require_pot()
    grid, A, w = _prepare(A, grid_shape, weights, spacing, p)
    reg = check_number("reg", reg, low=0, low_open=True)
    C = cost_matrix(grid)
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nu = ot.bregman.barycenter(
            A, C, reg, w, method="sinkhorn_log", numItermax=max_iter, stopThr=1e-9, warn=False
        )
    seconds = time.perf_counter() - start
    return Anchor("pot-ibp", np.maximum(np.asarray(nu, dtype=np.float64), 0.0), None, seconds)


def pot_convolutional(
    A: Any,
    grid_shape: Any,
    weights: Any = None,
    spacing: Any = 1.0,
    *,
    reg: float = 1.0,
    max_iter: int = 2000,
) -> Anchor:
    """POT's convolutional barycenter on a 2-D grid; ``reg`` is ε in cells² (POT's unit square scaled)."""
    ot = require_pot()
    grid, A, w = _prepare(A, grid_shape, weights, spacing, 2.0)
    if grid.ndim != 2:
        raise InputError(f"the convolutional barycenter needs a 2-D grid, got {grid.ndim}-D")
    reg = check_number("reg", reg, low=0, low_open=True)
    h = grid.shape[0]
    # POT places each axis on [0, 1]: one cell is 1/(n-1), so ε cells² is ε/(n-1)² there.
    reg_unit = reg * grid.spacing[0] ** 2 / max(h - 1, 1) ** 2
    images = np.stack([A[:, m].reshape(grid.shape) for m in range(A.shape[1])])
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        nu = ot.bregman.convolutional_barycenter2d(
            images, reg_unit, w, method="sinkhorn_log", numItermax=max_iter, stopThr=1e-9, warn=False
        )
    seconds = time.perf_counter() - start
    nu = np.maximum(np.asarray(nu, dtype=np.float64).ravel(), 0.0)
    return Anchor("pot-convolutional", nu, None, seconds)


def _log_convolve(log_img: np.ndarray, log_kernels: list[np.ndarray]) -> np.ndarray:
    """log(K ⊛ exp(log_img)) for the separable kernel K = ⊗_k K_k, one axis at a time."""
    out = log_img
    for axis, log_k in enumerate(log_kernels):
        moved = np.moveaxis(out, axis, -1)
        out = np.moveaxis(logsumexp(moved[..., None, :] + log_k, axis=-1), -1, axis)
    return out


def convolutional(
    A: Any,
    grid_shape: Any,
    weights: Any = None,
    spacing: Any = 1.0,
    *,
    reg: float = 1.0,
    max_iter: int = 2000,
    tol: float = 1e-9,
) -> Anchor:
    """Entropic barycenter by iterative Bregman projections with the separable Gibbs kernel, any d.

    K_k[i, j] = exp(−h_k² (i − j)² / reg), so K = ⊗_k K_k is the kernel of the squared Euclidean cost
    and every product with it costs O(N Σ_k n_k) (Solomon et al. 2015); log domain, stopping when the
    M projections agree to ``tol`` (checked every 10 iterations, as POT does).
    """
    grid, A, w = _prepare(A, grid_shape, weights, spacing, 2.0)
    reg = check_number("reg", reg, low=0, low_open=True)
    log_kernels = [-grid.axis_cost(k) / reg for k in range(grid.ndim)]
    log_a = np.log(A.T.reshape((-1, *grid.shape)) + 1e-30)
    start = time.perf_counter()
    log_v = np.zeros_like(log_a)
    log_bar = np.zeros(grid.shape)
    for it in range(max_iter):
        log_ku = np.stack(
            [_log_convolve(la - _log_convolve(lv, log_kernels), log_kernels) for la, lv in zip(log_a, log_v)]
        )
        log_bar = np.tensordot(w, log_ku, axes=1)
        if it % 10 == 9 and np.exp(log_v + log_ku).std(axis=0).sum() < tol:
            break
        log_v = log_bar[None] - log_ku
    nu = np.exp(log_bar).ravel()
    return Anchor("convolutional", nu, None, time.perf_counter() - start)


ANCHORS = {
    "full-lp": full_lp,
    "pot-lp": pot_lp,
    "pot-ibp": pot_ibp,
    "pot-convolutional": pot_convolutional,
    "convolutional": convolutional,
}
