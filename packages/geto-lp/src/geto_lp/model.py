"""The GETO-LP model: axis-wise flows through d + 1 layered copies of the grid.

For every input m and every axis k = 1..d there is one flow variable f^{m,k}(z → z') for each ordered
pair of grid points z, z' that differ at most in coordinate k (z = z' included); it costs
λ_m |h_k (z_k − z'_k)|^p. Layers L_0..L_d are copies of the grid:

    L_0, node x:          Σ_t f^{m,1}(x → x[k=1 ← t])            = μ_m(x)
    L_ℓ, node x, 0<ℓ<d:   in-flow from layer ℓ − out-flow of ℓ+1  = 0
    L_d, node y:          in-flow from layer d − ν(y)             = 0

with ν >= 0 shared by all m (the only coupling). A path L_0 → L_d changes coordinate k only in layer k,
so the path from x to y is unique and costs exactly Σ_k |h_k (x_k − y_k)|^p = c(x, y); any plan maps to
a flow of equal cost, and any flow decomposes into paths, i.e. into a plan of equal cost. The LP is
therefore exact for every per-axis cost (convexity is not needed), with M·N·Σ_k n_k + N variables
(M·d·N^{1+1/d} + N on a cube) and M(d+1)N equality rows.

The constraint matrix is assembled directly in CSC form: every arc column has exactly two entries,
every ν column has M.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from geto_lp.grid import Grid, make_grid
from papershelf.errors import InputError, PapershelfError, check_choice, check_number

__all__ = [
    "BarycenterResult",
    "GetoModel",
    "SolverError",
    "TransportResult",
    "barycenter",
    "barycenter_objective",
    "build_model",
    "check_histograms",
    "check_weights",
    "estimate_memory",
    "full_variable_count",
    "solve_barycenter",
    "transport",
    "variable_count",
]

SOLVERS = ("highs-ipm", "highs-ds", "highs")
# Zero-cost moves of a flow below this fraction of the total mass are dropped from the sparse flows.
_DROP = 1e-15


class SolverError(PapershelfError):
    """HiGHS stopped without an optimal solution (time limit, numerical trouble)."""


# ---- sizes ---------------------------------------------------------------------------------------
def variable_count(grid_shape: Any, n_inputs: int) -> int:
    """M·N·Σ_k n_k + N: the number of GETO-LP variables (M·d·N^{1+1/d} + N on a cube)."""
    shape = make_grid(grid_shape).shape
    n = math.prod(shape)
    return int(n_inputs) * n * sum(shape) + n


def full_variable_count(grid_shape: Any, n_inputs: int) -> int:
    """M·N² + N: the number of variables of the classical fixed-support barycenter LP."""
    n = math.prod(make_grid(grid_shape).shape)
    return int(n_inputs) * n * n + n


def _available_memory() -> int:
    """Bytes of memory the OS says are available (MemAvailable), or physical memory as a fallback."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return 8 * 2**30


def estimate_memory(n_variables: int, n_constraints: int, n_nonzeros: int) -> int:
    """Bytes needed to assemble and solve an LP of this size with HiGHS (IPM + crossover).

    Calibrated on the peak RSS that ``geto-lp bench`` measured (GETO-LP at 32×32 and 64×64, the full
    LP at 32×32): about 300 bytes per nonzero (assembly, HiGHS's copies, interior-point work), 64 per
    variable and 2 kB per row, plus 100 MiB. It errs on the high side by up to ~1.5×; it is meant to
    refuse hopeless sizes before allocating, not to be tight.
    """
    return int(300 * n_nonzeros + 64 * n_variables + 2048 * n_constraints + 100 * 2**20)


def _check_memory(what: str, n_var: int, n_con: int, nnz: int, max_memory: float | None) -> None:
    need = estimate_memory(n_var, n_con, nnz)
    limit = _available_memory() if max_memory is None else check_number("max_memory", max_memory, low=0)
    if need > limit:
        raise InputError(
            f"{what} needs about {need / 2**30:.1f} GiB ({n_var:,} variables, {nnz:,} nonzeros), "
            f"more than the {limit / 2**30:.1f} GiB {'available' if max_memory is None else 'allowed'}",
            hint="use a coarser grid or fewer inputs, or raise max_memory (bytes)",
        )


# ---- validation ----------------------------------------------------------------------------------
def check_histograms(A: Any, n_points: int, *, normalize: bool = False, name: str = "A") -> np.ndarray:
    """Return ``A`` as a float64 (N, M) array after checking it holds M valid histograms as columns.

    Entries must be finite and >= 0 and every column must have positive mass. Columns must have equal
    mass (relative tolerance 1e-9) unless ``normalize`` is true, in which case each is divided by its
    sum. Equal masses other than 1 are kept (the barycenter then has that mass too).
    """
    try:
        arr = np.array(A, dtype=np.float64)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a numeric array of histograms") from None
    if arr.ndim != 2:
        raise InputError(
            f"{name} must be 2-D with one histogram per column (N, M), got shape {arr.shape}",
            hint="for a single histogram use A[:, None]",
        )
    if arr.shape[0] != n_points:
        raise InputError(
            f"{name} has {arr.shape[0]} rows but the grid has {n_points} points",
            hint="histograms must be flattened in C order over grid_shape",
        )
    if arr.shape[1] < 1:
        raise InputError(f"{name} must hold at least one histogram (column)")
    if not np.all(np.isfinite(arr)):
        col = int(np.nonzero(~np.isfinite(arr).all(axis=0))[0][0])
        raise InputError(f"{name} histogram {col} contains NaN or infinite entries")
    if np.any(arr < 0):
        col = int(np.nonzero((arr < 0).any(axis=0))[0][0])
        raise InputError(f"{name} histogram {col} has negative entries (min {arr[:, col].min():g})")
    mass = arr.sum(axis=0)
    if np.any(mass <= 0):
        raise InputError(f"{name} histogram {int(np.argmin(mass))} has zero total mass")
    if normalize:
        arr = arr / mass
    elif np.any(np.abs(mass - mass[0]) > 1e-9 * mass[0]):
        raise InputError(
            f"{name} histograms have unequal masses (from {mass.min():.6g} to {mass.max():.6g})",
            hint="normalise them to the same mass, or pass normalize=True (--normalize)",
        )
    return arr


def check_weights(weights: Any, n_inputs: int) -> np.ndarray:
    """Barycentric weights λ: finite, >= 0, not all zero; returned normalised to sum to 1."""
    if weights is None:
        return np.full(n_inputs, 1.0 / n_inputs)
    try:
        w = np.array(weights, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise InputError("weights must be a sequence of numbers") from None
    if w.size != n_inputs:
        raise InputError(f"weights must have one entry per histogram ({n_inputs}), got {w.size}")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise InputError(f"weights must be finite and >= 0, got {w.tolist()}")
    if w.sum() <= 0:
        raise InputError("weights must not all be zero")
    return w / w.sum()


# ---- assembly ------------------------------------------------------------------------------------
@dataclass
class GetoModel:
    """The assembled LP  min c·x  s.t.  A_eq x = b_eq, x >= 0.

    Variables: for m = 0..M−1 and axis k = 0..d−1 a block of N·n_k arc flows ordered (z, t) — source
    point z (flat index), target coordinate t along axis k — starting at ``offsets[m][k]``; then ν
    (N entries at ``nu_offset``) unless the target marginal is fixed (``transport``).
    Rows: (m·(d+1) + ℓ)·N + x for layer ℓ = 0..d and point x.
    """

    grid: Grid
    n_inputs: int
    c: np.ndarray
    A_eq: sp.csc_array
    b_eq: np.ndarray
    offsets: list[list[int]]
    nu_offset: int | None

    @property
    def n_variables(self) -> int:
        return int(self.c.size)

    @property
    def n_constraints(self) -> int:
        return int(self.b_eq.size)

    @property
    def n_nonzeros(self) -> int:
        return int(self.A_eq.nnz)


def _layer_targets(grid: Grid, k: int) -> tuple[np.ndarray, np.ndarray]:
    """For the arcs of axis k in (z, t) order: the target point and the per-arc cost index."""
    n, nk, stride = grid.size, grid.shape[k], grid.strides()[k]
    z = np.arange(n, dtype=np.int64)
    zk = (z // stride) % nk  # coordinate k of every point
    t = np.arange(nk, dtype=np.int64)
    targets = (z[:, None] + (t[None, :] - zk[:, None]) * stride).ravel()
    return targets, zk


def build_model(
    A: np.ndarray, grid: Grid, weights: np.ndarray, *, target: np.ndarray | None = None
) -> GetoModel:
    """Assemble the GETO-LP for validated histograms ``A`` (N, M) and normalised ``weights``.

    With ``target`` (a histogram of the same mass), ν is fixed to it and the model computes the M
    optimal transport costs instead of a barycenter.
    """
    n, m_count, d = grid.size, A.shape[1], grid.ndim
    sizes = [n * nk for nk in grid.shape]
    per_input = sum(sizes)
    n_arcs = m_count * per_input
    n_nu = 0 if target is not None else n
    n_var = n_arcs + n_nu
    n_rows = m_count * (d + 1) * n
    nnz = 2 * n_arcs + m_count * n_nu
    index = np.int32 if max(nnz, n_rows, n_var) < 2**31 - 1 else np.int64

    layer_targets = [_layer_targets(grid, k) for k in range(d)]
    costs_k = [grid.axis_cost(k)[zk].ravel() for k, (_, zk) in enumerate(layer_targets)]
    sources_k = [np.repeat(np.arange(n, dtype=np.int64), grid.shape[k]) for k in range(d)]

    c = np.empty(n_var, dtype=np.float64)
    indices = np.empty(nnz, dtype=index)
    data = np.empty(nnz, dtype=np.float64)
    offsets: list[list[int]] = []
    pos = 0
    for m in range(m_count):
        row_block = [(m * (d + 1) + layer) * n for layer in range(d + 1)]
        offsets.append([])
        for k in range(d):
            size = sizes[k]
            offsets[m].append(pos)
            c[pos : pos + size] = weights[m] * costs_k[k]
            lo, hi = 2 * pos, 2 * (pos + size)
            indices[lo:hi:2] = row_block[k] + sources_k[k]  # leaves layer k (rows sorted per column)
            indices[lo + 1 : hi : 2] = row_block[k + 1] + layer_targets[k][0]  # enters layer k+1
            data[lo:hi:2] = 1.0 if k == 0 else -1.0
            data[lo + 1 : hi : 2] = 1.0
            pos += size
    indptr_parts = [np.arange(0, 2 * n_arcs + 1, 2, dtype=np.int64)]
    nu_offset = None
    if target is None:
        nu_offset = n_arcs
        c[n_arcs:] = 0.0
        last = np.array([(m * (d + 1) + d) * n for m in range(m_count)], dtype=np.int64)
        indices[2 * n_arcs :] = (np.arange(n, dtype=np.int64)[:, None] + last[None, :]).ravel()
        data[2 * n_arcs :] = -1.0
        indptr_parts.append(2 * n_arcs + m_count * np.arange(1, n + 1, dtype=np.int64))
    indptr = np.concatenate(indptr_parts).astype(index)
    A_eq = sp.csc_array((data, indices, indptr), shape=(n_rows, n_var))
    A_eq.has_sorted_indices = True

    b = np.zeros(n_rows, dtype=np.float64)
    for m in range(m_count):
        b[m * (d + 1) * n : m * (d + 1) * n + n] = A[:, m]
        if target is not None:
            b[(m * (d + 1) + d) * n : (m * (d + 1) + d + 1) * n] = target
    return GetoModel(grid, m_count, c, A_eq, b, offsets, nu_offset)


def model_size(grid: Grid, n_inputs: int, *, fixed_target: bool = False) -> tuple[int, int, int]:
    """(variables, rows, nonzeros) of the GETO-LP, computed without building it."""
    n = grid.size
    arcs = n_inputs * n * sum(grid.shape)
    n_nu = 0 if fixed_target else n
    return arcs + n_nu, n_inputs * (grid.ndim + 1) * n, 2 * arcs + n_inputs * n_nu


# ---- solving -------------------------------------------------------------------------------------
def solve_lp(
    c: np.ndarray,
    A_eq: Any,
    b_eq: np.ndarray,
    *,
    solver: str = "highs-ipm",
    time_limit: float | None = None,
    verbose: bool = False,
) -> tuple[np.ndarray, float, dict[str, Any]]:
    """Solve min c·x, A_eq x = b_eq, x >= 0 with HiGHS through scipy; IPM runs crossover to a vertex."""
    check_choice("solver", solver, SOLVERS)
    options: dict[str, Any] = {
        "disp": bool(verbose),
        "presolve": False,  # faster on these well-structured models (measured); results are identical
        "primal_feasibility_tolerance": 1e-10,
        "dual_feasibility_tolerance": 1e-10,
    }
    if time_limit is not None:
        options["time_limit"] = check_number("time_limit", time_limit, low=0, low_open=True)
    start = time.perf_counter()
    res = linprog(c, A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method=solver, options=options)
    retried = None
    # HiGHS occasionally ends without presolve in an "unknown" model status (scipy status 4, numerical
    # difficulties) on a feasible, bounded model at our 1e-10 tolerances (found by the property test:
    # 3x3 grid, m = 3, p = 1). Retry with presolve on, then with the dual simplex, same tolerances; a
    # genuine failure (infeasible, unbounded, time limit) is never retried.
    for fallback in ({"presolve": True}, {"presolve": True, "method": "highs-ds"}):
        if res.status != 4:
            break
        method = fallback.get("method", solver)
        opts = {**options, **{k: v for k, v in fallback.items() if k != "method"}}
        res = linprog(c, A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method=method, options=opts)
        retried = f"{method}, presolve"
    seconds = time.perf_counter() - start
    if res.status != 0 or res.x is None:
        raise SolverError(f"HiGHS did not reach an optimal solution: {res.message}")
    info = {"status": int(res.status), "message": str(res.message), "nit": int(res.nit), "seconds": seconds}
    if retried:
        info["retried"] = retried
    return np.asarray(res.x, dtype=np.float64), float(res.fun), info


def _block_flows(model: GetoModel, x: np.ndarray, m: int, scale: float) -> list[sp.csr_array]:
    """The d layer flows of input m as N×N CSR matrices (row: source point, column: target point)."""
    grid, n = model.grid, model.grid.size
    out = []
    for k, nk in enumerate(grid.shape):
        start = model.offsets[m][k]
        vals = np.array(x[start : start + n * nk])
        vals[vals < _DROP * scale] = 0.0
        targets, _ = _layer_targets(grid, k)
        flow = sp.csr_array((vals, targets, np.arange(0, n * nk + 1, nk)), shape=(n, n))
        flow.eliminate_zeros()
        out.append(flow)
    return out


def _scale_rows(mat: sp.csr_array, s: np.ndarray) -> sp.csr_array:
    out = mat.copy()
    out.data *= np.repeat(s, np.diff(out.indptr))
    return out


def compose_flows(flows: list[sp.csr_array]) -> sp.csr_array:
    """A transport plan from layer flows by proportional (Markov) composition.

    π = F_1 · diag(1/r_2) F_2 · … · diag(1/r_d) F_d with r_k the row sums (out-flows) of F_k. Its row
    sums are the out-flows of layer 0 (μ_m), its column sums the in-flows of layer d (ν), and — since
    the path between two points is unique — its cost equals the flow's cost.
    """
    plan = flows[0].tocsr()
    for flow in flows[1:]:
        out = np.asarray(flow.sum(axis=1)).ravel()
        inv = np.divide(1.0, out, out=np.zeros_like(out), where=out > 0)
        plan = (plan @ _scale_rows(flow, inv)).tocsr()
    plan.eliminate_zeros()
    return plan


def plan_cost(plan: Any, grid: Grid) -> float:
    """Σ π(x, y) c(x, y) over the nonzeros of a sparse plan."""
    coo = sp.coo_array(plan)
    return float(np.dot(coo.data, grid.pair_cost(coo.row, coo.col)))


@dataclass
class BarycenterResult:
    """The solution of one GETO-LP barycenter problem.

    ``barycenter`` is ν (N,), flattened in C order over ``grid.shape``; ``objective`` is
    Σ_m λ_m W(ν, μ_m) with W the optimal transport cost for c (W_2² for p = 2) and λ the normalised
    weights; ``costs[m]`` is W(ν, μ_m). ``flows[m][k]`` is the N×N sparse flow of input m along axis k
    (row: point left, column: point entered).
    """

    barycenter: np.ndarray
    objective: float
    costs: np.ndarray
    weights: np.ndarray
    flows: list[list[sp.csr_array]]
    grid: Grid
    n_variables: int
    n_constraints: int
    n_nonzeros: int
    build_seconds: float
    solve_seconds: float
    solver_info: dict[str, Any] = field(default_factory=dict)

    @property
    def n_inputs(self) -> int:
        return len(self.flows)

    def plan(self, m: int) -> sp.csr_array:
        """An optimal plan between ν and input m: N×N sparse, rows sum to ν, columns to μ_m."""
        if not 0 <= int(m) < self.n_inputs:
            raise InputError(f"m must be in [0, {self.n_inputs - 1}], got {m}")
        return compose_flows(self.flows[int(m)]).T.tocsr()

    def plans(self) -> list[sp.csr_array]:
        return [self.plan(m) for m in range(self.n_inputs)]

    def as_dict(self) -> dict[str, Any]:
        """The log dictionary of :func:`barycenter` (arrays kept as arrays)."""
        return {
            "objective": self.objective,
            "fun": self.objective,
            "costs": self.costs,
            "weights": self.weights,
            "flows": self.flows,
            "n_variables": self.n_variables,
            "n_constraints": self.n_constraints,
            "n_nonzeros": self.n_nonzeros,
            "build_seconds": self.build_seconds,
            "solve_seconds": self.solve_seconds,
            **self.solver_info,
        }


def solve_barycenter(
    A: Any,
    grid_shape: Any,
    weights: Any = None,
    spacing: Any = 1.0,
    *,
    p: float = 2.0,
    normalize: bool = False,
    solver: str = "highs-ipm",
    time_limit: float | None = None,
    max_memory: float | None = None,
    verbose: bool = False,
) -> BarycenterResult:
    """Exact fixed-support barycenter of the columns of ``A`` on a grid, as a :class:`BarycenterResult`.

    Parameters are those of :func:`barycenter`.
    """
    grid = make_grid(grid_shape, spacing, p)
    check_choice("solver", solver, SOLVERS)
    if np.ndim(A) == 2:  # refuse a hopeless size before even copying the input
        n_var, n_con, nnz = model_size(grid, np.shape(A)[1])
        _check_memory(
            f"a GETO-LP on a {grid.shape} grid with M = {np.shape(A)[1]}", n_var, n_con, nnz, max_memory
        )
    A = check_histograms(A, grid.size, normalize=normalize)
    w = check_weights(weights, A.shape[1])
    start = time.perf_counter()
    model = build_model(A, grid, w)
    built = time.perf_counter() - start
    x, fun, info = solve_lp(
        model.c, model.A_eq, model.b_eq, solver=solver, time_limit=time_limit, verbose=verbose
    )
    mass = float(A[:, 0].sum())
    nu = np.maximum(x[model.nu_offset :], 0.0)
    flows = [_block_flows(model, x, m, mass) for m in range(model.n_inputs)]
    costs = np.array([_unweighted_cost(model, x, m) for m in range(model.n_inputs)])
    return BarycenterResult(
        barycenter=nu,
        objective=fun,
        costs=costs,
        weights=w,
        flows=flows,
        grid=grid,
        n_variables=model.n_variables,
        n_constraints=model.n_constraints,
        n_nonzeros=model.n_nonzeros,
        build_seconds=built,
        solve_seconds=info.pop("seconds"),
        solver_info={**info, "solver": solver},
    )


def _unweighted_cost(model: GetoModel, x: np.ndarray, m: int) -> float:
    grid = model.grid
    total = 0.0
    for k, nk in enumerate(grid.shape):
        o = model.offsets[m][k]
        _, zk = _layer_targets(grid, k)
        total += float(np.dot(grid.axis_cost(k)[zk].ravel(), np.maximum(x[o : o + grid.size * nk], 0.0)))
    return total


def barycenter(
    A: Any,
    grid_shape: Any,
    weights: Any = None,
    spacing: Any = 1.0,
    log: bool = False,
    *,
    p: float = 2.0,
    normalize: bool = False,
    return_plans: bool = False,
    solver: str = "highs-ipm",
    time_limit: float | None = None,
    max_memory: float | None = None,
    verbose: bool = False,
) -> Any:
    """Exact fixed-support Wasserstein barycenter of histograms on a d-dimensional grid (GETO-LP).

    Mirrors ``ot.lp.barycenter(A, M, weights, log=...)``: pass ``grid_shape`` (and ``spacing``) instead
    of the N×N cost matrix M.

    Parameters
    ----------
    A : (N, M) array
        M histograms as columns, each flattened in C order over ``grid_shape``; entries >= 0, equal
        masses (or ``normalize=True`` to divide each by its sum).
    grid_shape : tuple of d ints
        The grid (n_1, …, n_d); N = n_1⋯n_d.
    weights : (M,) array, optional
        Barycentric weights λ >= 0, normalised to sum to 1 (default uniform).
    spacing : float or d floats
        Cell size along each axis (anisotropic grids allowed).
    log : bool
        Also return a dict with ``objective`` (= ``fun``), per-input ``costs``, ``flows`` (per input and
        axis, N×N sparse), sizes and timings; with ``return_plans`` also ``plans`` (rows ν, columns μ_m).
    p : float >= 1
        Per-axis cost exponent: c(x, y) = Σ_k |x_k − y_k|^p (2: squared Euclidean, POT's default).
    solver : "highs-ipm" (default, with crossover), "highs-ds" or "highs"
    time_limit : seconds, optional
    max_memory : bytes, optional
        Refuse (InputError) when the estimated need exceeds this (default: the available memory).

    Returns
    -------
    nu : (N,) array, or (nu, log)
    """
    result = solve_barycenter(
        A,
        grid_shape,
        weights,
        spacing,
        p=p,
        normalize=normalize,
        solver=solver,
        time_limit=time_limit,
        max_memory=max_memory,
        verbose=verbose,
    )
    if not log:
        return result.barycenter
    out = result.as_dict()
    out["result"] = result
    if return_plans:
        out["plans"] = result.plans()
    return result.barycenter, out


@dataclass
class TransportResult:
    """Optimal transport between two histograms on a grid: ``cost`` and the layer ``flows``."""

    cost: float
    flows: list[sp.csr_array]
    grid: Grid

    def plan(self) -> sp.csr_array:
        """An optimal plan, N×N sparse: rows sum to mu, columns to nu (``ot.emd``'s orientation)."""
        return compose_flows(self.flows)


def transport(
    mu: Any,
    nu: Any,
    grid_shape: Any,
    spacing: Any = 1.0,
    *,
    p: float = 2.0,
    normalize: bool = False,
    solver: str = "highs-ipm",
    max_memory: float | None = None,
) -> TransportResult:
    """Exact optimal transport cost Σ π c between two histograms on a grid (W_2² for p = 2).

    The two-marginal case of the layered model (the (d+1)-partite graph of Auricchio et al., 2018),
    solved as an LP with HiGHS.
    """
    grid = make_grid(grid_shape, spacing, p)
    mu_arr, nu_arr = (np.ravel(np.asarray(v, dtype=np.float64)) for v in (mu, nu))
    if mu_arr.size != nu_arr.size:
        raise InputError(
            f"mu and nu must have the same number of entries, got {mu_arr.size} and {nu_arr.size}"
        )
    pair = check_histograms(np.stack([mu_arr, nu_arr], 1), grid.size, normalize=normalize, name="(mu, nu)")
    n_var, n_con, nnz = model_size(grid, 1, fixed_target=True)
    _check_memory(f"a transport LP on a {grid.shape} grid", n_var, n_con, nnz, max_memory)
    model = build_model(pair[:, :1], grid, np.ones(1), target=pair[:, 1])
    x, fun, _ = solve_lp(model.c, model.A_eq, model.b_eq, solver=solver)
    return TransportResult(fun, _block_flows(model, x, 0, float(pair[:, 0].sum())), grid)


def barycenter_objective(
    nu: Any,
    A: Any,
    grid_shape: Any,
    weights: Any = None,
    spacing: Any = 1.0,
    *,
    p: float = 2.0,
    normalize: bool = False,
) -> float:
    """Σ_m λ_m W(ν, μ_m), computed exactly, for any candidate ν (e.g. an entropic barycenter).

    ν is rescaled to the inputs' mass first, so an approximate ν that lost a little mass is scored
    on its shape.
    """
    grid = make_grid(grid_shape, spacing, p)
    A = check_histograms(A, grid.size, normalize=normalize)
    w = check_weights(weights, A.shape[1])
    nu = check_histograms(np.ravel(np.asarray(nu, dtype=np.float64))[:, None], grid.size, name="nu")[:, 0]
    nu = nu * (A[:, 0].sum() / nu.sum())
    return float(
        sum(
            w[m] * transport(nu, A[:, m], grid.shape, grid.spacing, p=grid.p, normalize=True).cost
            for m in range(A.shape[1])
            if w[m] > 0
        )
    )
