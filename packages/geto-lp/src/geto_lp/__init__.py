"""geto-lp — exact fixed-support Wasserstein barycenters on d-dimensional grids (GETO-LP).

For histograms on a grid and a cost that separates along the axes (c(x, y) = Σ_k |x_k − y_k|^p,
squared Euclidean by default), an optimal plan decomposes into moves along axis 1, then axis 2, …,
through d + 1 layered copies of the grid. The barycenter LP then needs M·N·Σ_k n_k + N variables
(O(dMN^{1+1/d})) instead of M·N² + N, and is still exact: the same optimal value as the classical LP,
with the barycenter ν and every optimal plan recovered from its flows.

>>> import numpy as np
>>> from geto_lp import barycenter
>>> A = np.zeros((9, 2)); A[0, 0] = 1.0; A[8, 1] = 1.0   # Diracs at (0, 0) and (2, 2) on a 3×3 grid
>>> nu, log = barycenter(A, (3, 3), log=True)
>>> int(np.argmax(nu)), round(log["objective"], 9)        # the Dirac at (1, 1); ½·2 + ½·2
(4, 2.0)

Main entry points: :func:`barycenter` (POT-style, ``ot.lp.barycenter`` conventions),
:func:`solve_barycenter` (a :class:`BarycenterResult` with flows and plans), :func:`transport`
(exact transport cost between two histograms on a grid), :func:`variable_count`.
"""

from geto_lp.grid import Grid, make_grid
from geto_lp.model import (
    BarycenterResult,
    SolverError,
    TransportResult,
    barycenter,
    barycenter_objective,
    build_model,
    estimate_memory,
    full_variable_count,
    solve_barycenter,
    transport,
    variable_count,
)

__version__ = "0.1.0"

__all__ = [
    "BarycenterResult",
    "Grid",
    "SolverError",
    "TransportResult",
    "__version__",
    "barycenter",
    "barycenter_objective",
    "build_model",
    "estimate_memory",
    "full_variable_count",
    "make_grid",
    "solve_barycenter",
    "transport",
    "variable_count",
]
