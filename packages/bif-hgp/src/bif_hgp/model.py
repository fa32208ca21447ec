"""BIF: a hierarchy of GPyTorch GPs with bottom-up priors and top-down soft decomposition.

Children are ExactGPs over their own sub-inputs; the parent is an ExactGP over the joint input whose
mean is built from the children (the sum of their posterior means by default, or the authors' *prior
map* of their averaged acquisition maps) and whose additive kernel carries the children's
hyperparameters (bottom-up). Each parent observation is split into sub-responses that sum to it and
are fed back to the children (top-down): by default ỹ_i = μ_i(x_i) + w_i·(t − Σ_j μ_j(x_j)), each
child's current belief plus its share of what the children leave unexplained (:meth:`BIF._redecompose`),
or, as in the authors' code, ỹ_i = y·w_i; the shares are w = softmax(ĉ), ĉ_i = a_i(x_i)/max a_i.
Parent and children share one scale, the parent's standardisation (:func:`shared_targets`).

All inputs live on the unit cube internally; the objective is called in the user's units.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from bif_hgp._gp import (
    ACQUISITIONS,
    DTYPE,
    ChildExactGP,
    GridIndexer,
    ParentExactGP,
    acquisition_values,
    mean_and_sigma,
    posterior_mean,
    train_exact_gp,
)
from bif_hgp.metrics import exploration_score, minmax, r2, r2_offset, r2_scale_free
from papershelf.errors import InputError, check_choice, check_int, check_number

NONFINITE = ("raise", "skip")
PRIORS = ("acquisition", "scaled", "constant", "mean")
# The likelihood noise every GP of the hierarchy starts from under the shared normalisation, in
# standardised target units. GPyTorch's default, softplus(0) = 0.693, would claim 69% of the targets'
# variance is noise, and the paper's recipe (10 Adam steps at lr 0.01 per update) cannot unlearn that
# within a few dozen queries (the parent ended at 0.65 after 40).
INITIAL_NOISE = 0.1
NORMALIZATIONS = ("shared", "paper")
DECOMPOSITIONS = ("residual", "softmax")


# --- validation -------------------------------------------------------------------------------------
def check_bounds(bounds: Any) -> np.ndarray:
    """(D, 2) finite array with lower < upper in every row."""
    try:
        b = np.asarray(bounds, dtype=float)
    except (TypeError, ValueError):
        raise InputError("bounds must be a (D, 2) array of numbers [lower, upper]") from None
    if b.ndim != 2 or b.shape[1] != 2 or b.shape[0] < 1:
        raise InputError(
            f"bounds must have shape (D, 2) with one [lower, upper] row per dimension, got {b.shape}"
        )
    if not np.all(np.isfinite(b)):
        raise InputError("bounds must be finite")
    bad = np.nonzero(b[:, 0] >= b[:, 1])[0]
    if bad.size:
        k = int(bad[0])
        raise InputError(f"bounds for dimension {k}: lower {b[k, 0]:g} must be < upper {b[k, 1]:g}")
    return b


def check_problem(bounds: Any, composition: Any, grid: Any) -> tuple[np.ndarray, dict[str, list[int]], int]:
    """Validated (bounds, composition, grid) of a search problem; the parent grid must stay tractable."""
    bounds = check_bounds(bounds)
    n_dims = bounds.shape[0]
    composition = check_composition(composition, n_dims)
    grid = check_int("grid", grid, low=2, high=1024)
    if grid**n_dims > 200_000:
        raise InputError(f"grid {grid}^{n_dims} = {grid**n_dims} parent points is too many (max 200,000)")
    return bounds, composition, grid


def check_budget(budget: Any, n_init: int) -> int:
    """A query budget that covers the initial design."""
    budget = check_int("budget", budget, low=1)
    if budget < max(n_init, 1):
        raise InputError(f"budget ({budget}) must be at least the initial design n_init ({n_init})")
    return budget


def check_composition(composition: Any, n_dims: int) -> dict[str, list[int]]:
    """child name → disjoint parent dimensions that together cover 0..D−1."""
    if not isinstance(composition, Mapping) or not composition:
        raise InputError("composition must be a non-empty mapping child name → list of parent dimensions")
    seen: dict[int, str] = {}
    out: dict[str, list[int]] = {}
    for name, dims in composition.items():
        if not isinstance(name, str) or not name:
            raise InputError(f"composition: child names must be non-empty strings, got {name!r}")
        if isinstance(dims, int | np.integer):
            dims = [int(dims)]
        if not isinstance(dims, Sequence | np.ndarray) or len(dims) == 0:
            raise InputError(f"composition[{name!r}] must be a non-empty list of parent dimensions")
        clean = []
        for d in dims:
            d = check_int(f"composition[{name!r}]", d, low=0, high=n_dims - 1)
            if d in seen:
                raise InputError(f"composition: dimension {d} belongs to both {seen[d]!r} and {name!r}")
            seen[d] = name
            clean.append(d)
        out[name] = clean
    missing = sorted(set(range(n_dims)) - set(seen))
    if missing:
        raise InputError(f"composition leaves parent dimension(s) {missing} to no child")
    return out


def check_children_keys(arg: str, mapping: Mapping[str, Any] | None, composition: Mapping[str, Any]) -> None:
    if mapping is None:
        return
    if not isinstance(mapping, Mapping):
        raise InputError(f"{arg} must be a mapping child name → value")
    unknown = [k for k in mapping if k not in composition]
    if unknown:
        raise InputError(
            f"{arg} refers to unknown child {unknown[0]!r}; the composition has {sorted(composition)}"
        )


# --- the paper's formulas (vectorised) -------------------------------------------------------------
def normalize_groups(y: np.ndarray, source: Sequence[str]) -> np.ndarray:
    """Min–max normalise each source group ("env", "bif") of a child's targets to [0, 1] separately.

    A one-point group (or one with no spread) is divided by its maximum instead; an all-zero one is
    left at zero.
    """
    y = np.asarray(y, float)
    out = np.zeros_like(y)
    src = np.asarray(source)
    for group in ("env", "bif"):
        mask = src == group
        if not mask.any():
            continue
        v = y[mask]
        lo, hi = float(v.min()), float(v.max())
        if mask.sum() > 1 and hi > lo:
            out[mask] = (v - lo) / (hi - lo)
        elif hi != 0.0:
            out[mask] = v / hi
    return out


def shared_targets(
    y: np.ndarray,
    source: Sequence[str],
    share: np.ndarray,
    epoch: np.ndarray,
    scales: Sequence[tuple[float, float]],
    env_centers: Sequence[float | None] | None = None,
) -> np.ndarray:
    """A child's targets on its parent's standardised scale (the ``"shared"`` normalisation).

    Entry k was recorded on the parent task ``epoch[k]``, whose targets are t = (y − c)/s with
    ``scales[epoch[k]] = (c, s)``. A sub-response ỹ = w·y (share w of the parent observation y)
    becomes w·(y − c)/s = (ỹ − w·c)/s, so the children's targets of one observation sum to the
    parent's target exactly. A direct ("env") observation v becomes (v − c_i)/s with c_i =
    ``env_centers[epoch[k]]``: the child's share of the parent's centre c (:meth:`BIF._sync_scale`
    chooses the c_i of a task so that Σ_i c_i = c, which puts the children's direct observations in
    the frame their sub-responses sum in); None (or no ``env_centers``) uses v̄, the mean of that
    task's direct observations.

    >>> shared_targets(np.array([3.0, 1.0, 5.0]), ["bif", "env", "env"], np.array([0.5, 1.0, 1.0]),
    ...                np.array([0, 0, 0]), [(2.0, 2.0)]).tolist()
    [1.0, -1.0, 1.0]
    """
    y = np.asarray(y, float)
    share = np.asarray(share, float)
    epoch = np.asarray(epoch, int)
    src = np.asarray(source)
    out = np.zeros_like(y)
    for e, (center, scale) in enumerate(scales):
        bif = (epoch == e) & (src == "bif")
        out[bif] = (y[bif] - share[bif] * center) / scale
        env = (epoch == e) & (src == "env")
        if env.any():
            ec = env_centers[e] if env_centers is not None and e < len(env_centers) else None
            out[env] = (y[env] - (y[env].mean() if ec is None else ec)) / scale
    return out


def target_scale(ys: Sequence[float], fallback: Sequence[float] = ()) -> tuple[float, float]:
    """(mean, s.d.) that standardise the parent's observations ``ys`` (s.d. with ddof 1).

    With fewer than two observations (or no spread) the s.d. falls back to that of ``fallback``
    (the children's direct observations), then to 1.
    """
    y = np.asarray([v for v in ys if math.isfinite(v)], float)
    center = float(y.mean()) if y.size else 0.0
    for v in (y, np.asarray([v for v in fallback if math.isfinite(v)], float)):
        if v.size > 1:
            sd = float(np.std(v, ddof=1))
            if sd > 0:
                return center, sd
    return center, 1.0


def calibrate(m_obs: torch.Tensor, t: torch.Tensor, m_range: float) -> tuple[float, float]:
    """Least-squares α, β of t ≈ α·m + β over the observed points, with 0 ≤ α ≤ (max t − min t)/m_range.

    The prior map is a unit-free shape (acquisition values divided by their maximum); this puts it on
    the scale of the parent's standardised targets ``t``. The cap keeps the calibrated map's spread
    over the whole grid (``m_range`` = its max − min there) within the spread of the observed targets,
    so a map that happens to be nearly flat at the few observed points cannot be blown up
    (α = 0 when m has no spread there; the raw map, α = 1, before any observation).
    """
    if t.numel() == 0:  # nothing to calibrate on yet: the raw map (it then only ranks the first query)
        return 1.0, 0.0
    mc = m_obs - m_obs.mean()
    den = float((mc * mc).sum())
    alpha = max(float((mc * (t - t.mean())).sum()) / den, 0.0) if den > 1e-24 else 0.0
    if m_range > 0:
        alpha = min(alpha, float(t.max() - t.min()) / m_range)
    return alpha, float(t.mean() - alpha * m_obs.mean())


def prior_map(acq_maps: Sequence[torch.Tensor], child_index: Sequence[torch.Tensor]) -> torch.Tensor:
    """m(x) = (1/K) Σ_i a_i(x_i) on the parent grid, divided by |max m| when that is non-zero."""
    m = torch.stack([a[idx] for a, idx in zip(acq_maps, child_index)]).mean(0)
    top = float(m.max().abs())
    return m / top if top != 0.0 else m


def contributions(acq_at_query: Sequence[float], acq_max: Sequence[float]) -> np.ndarray:
    """ĉ_i = a_i(x_i)/max a_i, with a NaN or infinite ratio set to 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        c = np.asarray(acq_at_query, float) / np.asarray(acq_max, float)
    c[~np.isfinite(c)] = 0.0
    return c


def decompose(y: float, acq_at_query: Sequence[float], acq_max: Sequence[float]) -> np.ndarray:
    """Sub-responses ỹ_i = y·exp(ĉ_i)/Σ_j exp(ĉ_j); Σ_i ỹ_i = y (up to round-off of one ulp or two).

    >>> decompose(3.0, [1.0, 1.0, 1.0], [2.0, 2.0, 2.0]).tolist()
    [1.0, 1.0, 1.0]
    """
    c = contributions(acq_at_query, acq_max)
    w = np.exp(c - c.max())
    w /= w.sum()
    return float(y) * w


# --- the models -------------------------------------------------------------------------------------
class ChildGP:
    """A child: a GPyTorch ExactGP over its own sub-input grid, with its data, counts and acquisition.

    ``dims`` are the parent dimensions it owns; its grid has ``grid`` points per dimension on [0, 1].
    It stores the raw sub-responses (with their shares) and direct ("env") observations; the GP sees
    them on the parent's standardised scale (``normalization="shared"``, :func:`shared_targets`) or,
    as in the authors' code, min–max normalised per source (``"paper"``, :func:`normalize_groups`).
    Transfer a trained child by passing it to
    :meth:`BIF.run` as ``pretrained={name: child}`` (it is copied, never modified).
    """

    def __init__(
        self,
        name: str,
        dims: Sequence[int],
        grid: int,
        *,
        nu: float = 0.5,
        acquisition: str = "ucb",
        gamma: float = 2.0,
        train_iters: int = 10,
        lr: float = 0.01,
        normalization: str = "shared",
    ) -> None:
        self.name = name
        self.normalization = normalization
        self.dims = list(dims)
        self.grid = int(grid)
        self.nu = nu
        self.acquisition = acquisition
        self.gamma = float(gamma)
        self.train_iters = int(train_iters)
        self.lr = float(lr)
        self.indexer = GridIndexer([self.grid] * len(self.dims))
        self.points = self.indexer.points()
        self.gp = ChildExactGP(len(self.dims), nu)
        if normalization == "shared":
            self.gp.likelihood.noise = INITIAL_NOISE
        self.x_index: list[int] = []
        self.y_raw: list[float] = []
        self.source: list[str] = []
        self.share: list[float] = []  # a sub-response's share of its parent observation (1 for "env")
        self.epoch: list[int] = []  # which parent task an entry was recorded on (transfer adds one)
        self.scales: list[tuple[float, float]] = [(0.0, 1.0)]  # each task's (centre, scale) of targets
        self.env_centers: list[float | None] = [None]  # each task's centre c_i of the direct observations
        self.counts = torch.ones(self.indexer.n, dtype=DTYPE)
        self.acq = torch.zeros(self.indexer.n, dtype=DTYPE)
        self.refresh_acquisition()

    @property
    def n_data(self) -> int:
        return len(self.y_raw)

    def targets(self) -> np.ndarray:
        """What the GP is fitted to (see the class docstring)."""
        if self.normalization == "paper":
            return normalize_groups(np.asarray(self.y_raw), self.source)
        return shared_targets(
            np.asarray(self.y_raw),
            self.source,
            np.asarray(self.share),
            np.asarray(self.epoch),
            self.scales,
            self.env_centers,
        )

    def add(self, index: int, y: float, source: str, share: float = 1.0) -> None:
        self.x_index.append(int(index))
        self.y_raw.append(float(y))
        self.source.append(source)
        self.share.append(float(share))
        self.epoch.append(len(self.scales) - 1)
        self.counts[int(index)] += 1.0

    def set_scale(self, center: float, scale: float, env_center: float | None = None) -> None:
        """The current task's (centre, scale) of the parent's targets (``"shared"`` normalisation) and the
        centre this child's direct observations of the task are measured from (None: their mean)."""
        self.scales[-1] = (float(center), float(scale))
        self.env_centers[-1] = None if env_center is None else float(env_center)

    def new_task(self) -> None:
        """Start a new parent task (transfer): earlier entries keep their own task's scale."""
        self.scales.append((0.0, 1.0))
        self.env_centers.append(None)

    def task_entries(self, source: str) -> list[int]:
        """Positions of this task's (the latest epoch's) entries from ``source`` ("env" or "bif")."""
        e = len(self.scales) - 1
        return [k for k, (src, ep) in enumerate(zip(self.source, self.epoch)) if src == source and ep == e]

    def load(self) -> None:
        """Load the (re-normalised) data into the GP, without training."""
        if self.n_data:
            x = self.points[torch.as_tensor(self.x_index)]
            y = torch.as_tensor(self.targets(), dtype=DTYPE)
            self.gp.set_train_data(x, y, strict=False)

    def refit(self, train: bool = True) -> None:
        """Load the (re-normalised) data into the GP, take ``train_iters`` Adam steps, refresh the map."""
        if self.n_data:
            self.load()
            if train:
                train_exact_gp(self.gp, self.train_iters, self.lr)
        self.refresh_acquisition()

    def predict(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Posterior mean and s.d. on the child's grid."""
        return mean_and_sigma(self.gp, self.points)

    def best_f(self) -> float:
        return float(self.targets().max()) if self.n_data else 0.0

    def refresh_acquisition(self) -> None:
        self.acq = acquisition_values(
            self.gp, self.points, self.acquisition, self.gamma, self.counts, self.indexer, self.best_f()
        )

    def hyperparameters(self) -> dict[str, torch.Tensor]:
        k = self.gp.covar_module
        return {
            "lengthscale": k.base_kernel.lengthscale.detach().clone(),
            "outputscale": k.outputscale.detach().clone(),
        }

    def copy(self) -> ChildGP:
        return copy.deepcopy(self)


@dataclass
class BOResult:
    """What a run returns. Curves are indexed by the number of parent observations, from ``n_init``."""

    method: str
    queries: np.ndarray  # (T, D) real coordinates of the parent queries, in order
    y: np.ndarray  # (T,) observations (NaN where a non-finite value was skipped)
    skipped: list[int]
    n_queries: list[int] = field(default_factory=list)
    best_y: list[float] = field(default_factory=list)
    parent_r2: list[float] = field(default_factory=list)
    child_r2: dict[str, list[float]] = field(default_factory=dict)
    child_r2_raw: dict[str, list[float]] = field(default_factory=dict)
    child_r2_offset: dict[str, list[float]] = field(default_factory=dict)
    exploration: list[float] = field(default_factory=list)
    seconds: float = 0.0
    children: dict[str, ChildGP] = field(default_factory=dict)
    model: Any = None
    child_evaluations: int = 0

    def mean_child_r2(self) -> np.ndarray:
        if not self.child_r2:
            return np.zeros(len(self.n_queries))
        return np.mean([v for v in self.child_r2.values()], axis=0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "queries": self.queries.tolist(),
            "y": [None if not math.isfinite(v) else float(v) for v in self.y],
            "skipped": list(self.skipped),
            "n_queries": list(self.n_queries),
            "best_y": _json_floats(self.best_y),  # NaN before the first observation (n_init = 0)
            "parent_r2": list(self.parent_r2),
            "child_r2": {k: list(v) for k, v in self.child_r2.items()},
            "child_r2_raw": {k: list(v) for k, v in self.child_r2_raw.items()},
            "child_r2_offset": {k: list(v) for k, v in self.child_r2_offset.items()},
            "exploration": list(self.exploration),
            "seconds": self.seconds,
            "child_evaluations": self.child_evaluations,
        }


def _json_floats(values) -> list[float | None]:
    """Floats for a strict JSON file: NaN (no value yet) and infinities become ``null``."""
    return [float(v) if math.isfinite(v) else None for v in values]


class Truth:
    """Ground truth on the grids, for scoring only (never seen by the optimiser)."""

    def __init__(
        self,
        parent: np.ndarray | None,
        children: dict[str, np.ndarray] | None,
    ) -> None:
        self.parent = parent
        self.children = children or {}


def grid_truth(
    truth: Callable[[np.ndarray], np.ndarray] | None,
    child_truth: Mapping[str, Callable[[np.ndarray], np.ndarray]] | None,
    bounds: np.ndarray,
    composition: Mapping[str, list[int]],
    grid: int,
) -> Truth:
    """Evaluate the vectorised truths on the parent grid and on each child's grid."""
    D = bounds.shape[0]
    lo, span = bounds[:, 0], bounds[:, 1] - bounds[:, 0]
    parent = None
    if truth is not None:
        U = GridIndexer([grid] * D).points().numpy()
        parent = np.asarray(truth(lo + U * span), float).reshape(-1)
    children = {}
    for name, fn in (child_truth or {}).items():
        dims = composition[name]
        U = GridIndexer([grid] * len(dims)).points().numpy()
        children[name] = np.asarray(fn(lo[dims] + U * span[dims]), float).reshape(-1)
    return Truth(parent, children)


class BIF:
    """Bidirectional Information Flow hierarchical GP Bayesian optimisation.

    Parameters (stored verbatim, validated in :meth:`run`):

    - ``composition``: child name → parent dimensions it owns (disjoint, covering all dimensions).
    - ``bounds``: (D, 2) lower/upper per parent dimension; ``grid``: points per dimension.
    - ``acquisition`` / ``kappa``: the parent's acquisition (``ucb``: μ + κσ/√n; ``ei``/``pi``: jitter κ).
    - ``child_acquisition`` / ``gamma``: the children's (default ``pi``, the paper's main run; None = same
      kind as the parent), γ = 2.
    - ``child_nu`` (0.5), ``parent_nu`` (2.5): Matérn smoothness of the children's and parent's kernels.
    - ``train_iters`` (10), ``lr`` (0.01): Adam steps after every update, for children and parent.
    - ``topdown``: feed sub-responses back to the children (False = the bottom-up-only ablation).
    - ``prior``: the parent's mean. ``"mean"`` (default): the sum of the children's posterior means,
      Σ_i μ_i(x_i) — on the shared scale the children's targets of one observation sum to the parent's
      target, so this is the bottom-up estimate of the parent's target itself. ``"acquisition"``: the
      authors' prior map, the children's acquisition maps averaged and divided by |max| (a unit-free
      shape), put on the targets' scale by a least-squares α·map + β (:func:`calibrate`) under the
      shared normalisation, used raw under ``"paper"``. ``"scaled"``: α·map + β with α, β learned by
      the parent's MLL (the authors' ``ScaledPriorMean``). ``"constant"``: a learnable constant mean
      (nothing flows bottom-up through the mean).
    - ``normalization``: ``"shared"`` (default) — one scale for the whole hierarchy: the parent's
      targets are standardised, t = (y − ȳ)/s, and every child's targets are expressed in the same
      units (sub-responses w_i·t, direct observations centred and divided by s; :func:`shared_targets`),
      so the children's outputscales, copied into the parent's kernel, and their means are in the
      parent's units. ``"paper"`` — as in the authors' code: children min–max normalise their direct and
      inferred targets to [0, 1] separately, the parent standardises its own (a scale mismatch: the
      copied outputscales and the prior map are not in the parent's units).
    - ``decomposition``: ``"residual"`` (default under the shared normalisation) — sub-responses
      ỹ_i = μ_i(x_i) + w_i·(t − Σ_j μ_j(x_j)), every past observation re-decomposed with the current
      children ``sweeps`` (3) times per update; ``"softmax"`` (the default under ``"paper"``) — the
      authors' ỹ_i = w_i·y, kept as inferred. w = the softmax of the children's normalised acquisition
      values at the query in both.
    - ``n_init``: random parent queries before BO; ``n_child_init``: direct observations per child
      when child objectives are given (the paper's protocol: 3).
    - ``on_nonfinite``: ``"raise"`` (default) an :class:`~papershelf.errors.InputError` when the objective
      returns NaN/inf, or ``"skip"``: record the query (it uses budget) and feed nothing to the models.
    """

    method = "bif"

    def __init__(
        self,
        composition: Mapping[str, Sequence[int]],
        bounds: Any,
        *,
        grid: int = 32,
        acquisition: str = "ucb",
        kappa: float = 7.5,
        child_acquisition: str | None = "pi",
        gamma: float = 2.0,
        child_nu: float = 0.5,
        parent_nu: float = 2.5,
        train_iters: int = 10,
        lr: float = 0.01,
        topdown: bool = True,
        prior: str = "mean",
        n_init: int = 3,
        n_child_init: int = 3,
        on_nonfinite: str = "raise",
        normalization: str = "shared",
        decomposition: str | None = None,
        sweeps: int = 3,
    ) -> None:
        self.composition = composition
        self.bounds = bounds
        self.grid = grid
        self.acquisition = acquisition
        self.kappa = kappa
        self.child_acquisition = child_acquisition
        self.gamma = gamma
        self.child_nu = child_nu
        self.parent_nu = parent_nu
        self.train_iters = train_iters
        self.lr = lr
        self.topdown = topdown
        self.prior = prior
        self.n_init = n_init
        self.n_child_init = n_child_init
        self.on_nonfinite = on_nonfinite
        self.normalization = normalization
        self.decomposition = decomposition
        self.sweeps = sweeps

    # ---- validation ----------------------------------------------------------------------------
    def _validate(self, budget: Any) -> None:
        self.bounds_, self.composition_, self.grid_ = check_problem(self.bounds, self.composition, self.grid)
        check_choice("acquisition", self.acquisition, ACQUISITIONS)
        self.child_acquisition_ = check_choice(
            "child_acquisition",
            self.child_acquisition if self.child_acquisition is not None else self.acquisition,
            ACQUISITIONS,
        )
        check_number("kappa", self.kappa, low=0)
        check_number("gamma", self.gamma, low=0)
        check_choice("child_nu", self.child_nu, (0.5, 1.5, 2.5))
        check_choice("parent_nu", self.parent_nu, (0.5, 1.5, 2.5))
        check_int("train_iters", self.train_iters, low=0, high=10_000)
        check_number("lr", self.lr, low=0, low_open=True)
        check_choice("prior", self.prior, PRIORS)
        check_choice("normalization", self.normalization, NORMALIZATIONS)
        default = "residual" if self.normalization == "shared" else "softmax"
        self.decomposition_ = check_choice(
            "decomposition", self.decomposition if self.decomposition is not None else default, DECOMPOSITIONS
        )
        if self.decomposition_ == "residual" and self.normalization != "shared":
            raise InputError(
                'decomposition="residual" needs normalization="shared" (the children\'s beliefs and the '
                'parent\'s targets must be in the same units); use decomposition="softmax"'
            )
        check_int("sweeps", self.sweeps, low=1, high=100)
        check_choice("on_nonfinite", self.on_nonfinite, NONFINITE)
        check_int("n_init", self.n_init, low=0)
        check_int("n_child_init", self.n_child_init, low=0, high=10_000)
        self.budget_ = check_budget(budget, self.n_init)

    # ---- grid helpers ---------------------------------------------------------------------------
    def _to_real(self, u: np.ndarray) -> np.ndarray:
        b = self.bounds_
        return b[:, 0] + np.asarray(u, float) * (b[:, 1] - b[:, 0])

    def _child_index(self, flat: np.ndarray, dims: list[int]) -> np.ndarray:
        steps = self.indexer.multi_index(flat)[..., dims]
        sub = GridIndexer([self.grid_] * len(dims))
        return (steps * np.asarray(sub.strides)).sum(-1)

    # ---- the loop ------------------------------------------------------------------------------
    def run(
        self,
        objective: Callable[[np.ndarray], float],
        budget: int,
        *,
        seed: int = 0,
        child_objectives: Mapping[str, Callable[[np.ndarray], float]] | None = None,
        pretrained: Mapping[str, ChildGP] | None = None,
        truth: Callable[[np.ndarray], np.ndarray] | None = None,
        child_truth: Mapping[str, Callable[[np.ndarray], np.ndarray]] | None = None,
        callback: Callable[[BIF, int], None] | None = None,
    ) -> BOResult:
        """Optimise ``objective`` (a callable on a (D,) array in the bounds' units → float) with
        ``budget`` parent evaluations in all (``n_init`` random ones included).

        ``child_objectives[name](x_i)`` are the children's direct sub-objectives (optional);
        ``pretrained[name]`` a trained :class:`ChildGP` to reuse (modular transfer); ``truth`` and
        ``child_truth`` are noiseless vectorised functions used only to score the run.
        ``callback(self, t)`` is called after every parent update.
        """
        if not callable(objective):
            raise InputError("objective must be callable: objective(x: (D,) array) -> float")
        self._validate(budget)
        check_children_keys("child_objectives", child_objectives, self.composition_)
        check_children_keys("pretrained", pretrained, self.composition_)
        for name, child in (pretrained or {}).items():
            if not isinstance(child, ChildGP):
                raise InputError(f"pretrained[{name!r}] must be a ChildGP, got {type(child).__name__}")
            if len(child.dims) != len(self.composition_[name]) or child.grid != self.grid_:
                raise InputError(
                    f"pretrained[{name!r}] has {len(child.dims)} dimension(s) on a {child.grid}-point grid; "
                    f"this task needs {len(self.composition_[name])} on a {self.grid_}-point grid"
                )
        rng = np.random.default_rng([seed, 2])  # the children's random direct observations
        torch.manual_seed(seed)
        start = time.perf_counter()
        names = list(self.composition_)
        D = self.bounds_.shape[0]
        self.indexer = GridIndexer([self.grid_] * D)
        self.points = self.indexer.points()
        all_flat = np.arange(self.indexer.n)
        self.child_index = [torch.as_tensor(self._child_index(all_flat, self.composition_[n])) for n in names]
        scores = grid_truth(truth, child_truth, self.bounds_, self.composition_, self.grid_)

        # children
        self.children: dict[str, ChildGP] = {}
        child_evals = 0
        for name in names:
            if pretrained and name in pretrained:
                child = pretrained[name].copy()
                child.dims = list(self.composition_[name])
                child.normalization = self.normalization
                child.new_task()  # its old entries keep the source task's scale
                child.refit(train=False)  # the acquisition map that picks its direct observation
                n_env = 1  # a transferred child takes one direct observation at its acquisition argmax
                picks = [int(torch.argmax(child.acq))]
            else:
                child = ChildGP(
                    name,
                    self.composition_[name],
                    self.grid_,
                    nu=self.child_nu,
                    acquisition=self.child_acquisition_,
                    gamma=self.gamma,
                    train_iters=self.train_iters,
                    lr=self.lr,
                    normalization=self.normalization,
                )
                n_env = self.n_child_init
                picks = [int(i) for i in rng.integers(0, child.indexer.n, size=n_env)]
            if child_objectives and name in child_objectives:
                for idx in picks:
                    u = child.points[idx].numpy()
                    dims = self.composition_[name]
                    b = self.bounds_[dims]
                    value = _call(
                        child_objectives[name], b[:, 0] + u * (b[:, 1] - b[:, 0]), f"child {name!r}"
                    )
                    child_evals += 1
                    if math.isfinite(value):
                        child.add(idx, value, "env")
                    elif self.on_nonfinite == "raise":
                        raise InputError(f"child objective {name!r} returned {value} at x={u.tolist()}")
            self.children[name] = child
        self.parent_y: list[float] = []
        self._sync_scale()
        for name in names:
            if child_objectives and name in child_objectives:
                self.children[name].refit()

        # parent
        self.parent = ParentExactGP(
            [self.composition_[n] for n in names],
            self.indexer,
            mean={"acquisition": "prior", "scaled": "scaled", "constant": "constant", "mean": "prior"}[
                self.prior
            ],
            nu=self.parent_nu,
        )
        if self.normalization == "shared":
            self.parent.likelihood.noise = INITIAL_NOISE
        self.parent_counts = torch.ones(self.indexer.n, dtype=DTYPE)
        self.parent_x: list[int] = []
        self._bottom_up()

        queries: list[np.ndarray] = []
        ys: list[float] = []
        skipped: list[int] = []
        result = BOResult(self.method, np.zeros((0, D)), np.zeros(0), skipped)
        init = initial_design(seed, self.indexer.n, self.n_init)
        for t in range(self.budget_):
            if t == self.n_init:
                self._score(result, scores, t)  # the state after the initial design
            flat = init[t] if t < self.n_init else self.propose()
            x = self._to_real(self.points[flat].numpy())
            y = _call(objective, x, "objective")
            queries.append(x)
            ys.append(y)
            if not math.isfinite(y):
                if self.on_nonfinite == "raise":
                    raise InputError(f"objective returned {y} at x={x.tolist()} (query {t + 1})")
                skipped.append(t)
                self.parent_counts[flat] += 1.0  # do not ask for the same point again right away
            else:
                self.observe(flat, y)
            if callback is not None:
                callback(self, t)
            if t + 1 > self.n_init:
                self._score(result, scores, t + 1)
        if self.n_init == self.budget_:
            self._score(result, scores, self.budget_)
        result.queries = np.asarray(queries, float).reshape(-1, D)
        result.y = np.asarray(ys, float)
        result.seconds = time.perf_counter() - start
        result.children = self.children
        result.model = self
        result.child_evaluations = child_evals
        return result

    # ---- the two flows ------------------------------------------------------------------------
    def _bottom_up(self) -> None:
        """Children → parent: the prior map and the kernel hyperparameters."""
        names = list(self.composition_)
        if self.prior in ("acquisition", "scaled"):
            m = prior_map([self.children[n].acq for n in names], self.child_index)
            self.prior_raw = m
            if self.prior == "acquisition" and self.normalization == "shared":
                # the map is a unit-free shape: put it on the standardised targets' scale
                self.prior_alpha, self.prior_beta = calibrate(
                    m[torch.as_tensor(self.parent_x, dtype=torch.long)],
                    self._standardised(),
                    float(m.max() - m.min()),
                )
                m = self.prior_alpha * m + self.prior_beta
            self.parent.mean_module.values.copy_(m)
        elif self.prior == "mean":
            mu = [posterior_mean(self.children[n].gp, self.children[n].points) for n in names]
            self.parent.mean_module.values.copy_(
                torch.stack([a[idx] for a, idx in zip(mu, self.child_index)]).sum(0)
            )
        with torch.no_grad():  # raw parameters, same positivity constraint: the values are equal bit for bit
            for sub, n in zip(self.parent.sub_kernels, names):
                ck = self.children[n].gp.covar_module
                sub.base_kernel.raw_lengthscale.copy_(ck.base_kernel.raw_lengthscale)
                sub.raw_outputscale.copy_(ck.raw_outputscale)
        self._load_parent()

    def _scale(self) -> tuple[float, float]:
        """(centre, scale) of the parent's standardised targets; in the ``"shared"`` normalisation the
        scale falls back to the children's direct observations' s.d. before two parent observations."""
        fallback: list[float] = []
        if self.normalization == "shared":
            for c in self.children.values():
                fallback += [
                    v
                    for v, src, e in zip(c.y_raw, c.source, c.epoch)
                    if src == "env" and e == len(c.scales) - 1
                ]
        return target_scale(self.parent_y, fallback)

    def _sync_scale(self) -> None:
        """Give every child the parent's current (centre, scale): one scale for the whole hierarchy.

        Under the shared normalisation the children's direct observations are also put in the frame
        their sub-responses sum in: a sub-function is identified only up to a constant, and the
        children's constants must add up to the parent's centre c (Σ_i ỹ_i = y, so Σ_i targets = t).
        Child i's direct observations v are measured from c_i = v̄_i + (c − Σ_j v̄_j)/|E| (E: the
        children with direct observations in this task, v̄_j their means), so Σ_{i∈E} c_i = c. Before
        the first parent observation there is no c yet and each child uses its own v̄_i.
        """
        center, scale = self._scale()
        means = {}
        if self.normalization == "shared" and self.parent_y:
            for name, c in self.children.items():
                env = c.task_entries("env")
                if env:
                    means[name] = float(np.mean([c.y_raw[k] for k in env]))
        delta = (center - sum(means.values())) / len(means) if means else 0.0
        for name, c in self.children.items():
            c.set_scale(center, scale, means[name] + delta if name in means else None)

    def _standardised(self) -> torch.Tensor:
        """The parent's targets (y − centre)/scale."""
        center, scale = self._scale()
        return (torch.as_tensor(self.parent_y, dtype=DTYPE) - center) / scale

    def _load_parent(self) -> None:
        if self.parent_x:
            self.parent.set_train_data(
                self.points[torch.as_tensor(self.parent_x)], self._standardised(), strict=False
            )
        self.parent.eval()

    def _acq_at(self, flat: int) -> tuple[list[float], list[float]]:
        names = list(self.composition_)
        at = [float(self.children[n].acq[self.child_index[i][flat]]) for i, n in enumerate(names)]
        return at, [float(self.children[n].acq.max()) for n in names]

    def decompose(self, flat: int, y: float) -> np.ndarray:
        """Top-down split of observation ``y`` at parent grid point ``flat`` with the children's maps."""
        return decompose(y, *self._acq_at(flat))

    def observe(self, flat: int, y: float) -> np.ndarray:
        """Incorporate one parent observation: decompose, update children, rebuild the parent.

        Returns the sub-responses of ``y`` (in the objective's units, summing to ``y``)."""
        names = list(self.composition_)
        sub = self.decompose(flat, y)
        self.parent_x.append(int(flat))
        self.parent_y.append(float(y))
        self.parent_counts[flat] += 1.0
        self._sync_scale()  # the new observation moves the parent's centre and scale, hence the children's
        share = decompose(1.0, *self._acq_at(flat))  # sub = y·share
        if self.topdown:
            for i, n in enumerate(names):
                self.children[n].add(int(self.child_index[i][flat]), float(sub[i]), "bif", float(share[i]))
            if self.decomposition_ == "residual":
                self._redecompose()
                sub = np.array([self.children[n].y_raw[-1] for n in names])
        if self.topdown or self.normalization == "shared":  # shared: the children's scale moved too
            for n in names:
                self.children[n].refit()
        self._bottom_up()
        train_exact_gp(self.parent, self.train_iters, self.lr)
        return sub

    def _redecompose(self) -> None:
        """Residual decomposition of every parent observation of this task with the children's beliefs.

        With t_k the k-th standardised parent target, μ_i child i's posterior mean and w_ik the softmax
        share of observation k (the authors' contribution system, fixed when it was observed):
        ỹ_ik = μ_i(x_ik) + w_ik·(t_k − Σ_j μ_j(x_jk)). Each child keeps what it already believes and
        takes its share of what the children together do not explain, so Σ_i ỹ_ik = t_k exactly, and
        children that are right (Σ_j μ_j = t) are a fixed point. Past observations are re-decomposed
        with the current children, ``sweeps`` times (the children's posteriors, not their
        hyperparameters, are updated between sweeps): damped backfitting of an additive model.
        """
        children = list(self.children.values())
        rows = [c.task_entries("bif") for c in children]
        n = len(self.parent_y)
        if any(len(r) != n for r in rows):  # pragma: no cover - one sub-response per parent observation
            raise RuntimeError("children's sub-responses out of step with the parent's observations")
        center, scale = self._scale()
        t = self._standardised()
        at = [torch.as_tensor([c.x_index[k] for k in r], dtype=torch.long) for c, r in zip(children, rows)]
        w = [torch.as_tensor([c.share[k] for k in r], dtype=DTYPE) for c, r in zip(children, rows)]
        for _ in range(self.sweeps):
            mus = []
            for c, idx in zip(children, at):
                c.load()
                mus.append(posterior_mean(c.gp, c.points)[idx])  # on the child's grid, read at the queries
            resid = t - torch.stack(mus).sum(0)
            for c, r, mu, wi in zip(children, rows, mus, w):
                target = mu + wi * resid
                raw = (target * scale + wi * center).tolist()
                for k, v in zip(r, raw):
                    c.y_raw[k] = float(v)

    def parent_posterior(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Parent posterior mean and s.d. on the grid, on the standardised scale."""
        return mean_and_sigma(self.parent, self.points)

    def parent_acquisition(self) -> torch.Tensor:
        best = float(self._standardised().max()) if self.parent_y else 0.0
        return acquisition_values(
            self.parent, self.points, self.acquisition, self.kappa, self.parent_counts, self.indexer, best
        )

    def propose(self) -> int:
        """The next parent query: the acquisition's argmax over the grid (first index on ties)."""
        return int(np.argmax(self.parent_acquisition().numpy()))

    def parent_mean_real(self) -> np.ndarray:
        """The parent posterior mean on the grid in the objective's units."""
        mu = posterior_mean(self.parent, self.points)
        if not self.parent_y:
            return mu.numpy()
        center, scale = self._scale()
        return mu.numpy() * scale + center

    def child_mean_real(self, name: str) -> np.ndarray:
        """Child ``name``'s posterior mean on its grid in the objective's units (``"shared"``:
        μ·s + c_i, c_i its direct observations' centre, or c/K without them); under ``"paper"`` its
        own min–max units, which have no map back to the objective's."""
        child = self.children[name]
        mu = posterior_mean(child.gp, child.points).numpy()
        if self.normalization != "shared":
            return mu
        center, scale = child.scales[-1]
        ci = child.env_centers[-1]
        return mu * scale + (center / len(self.children) if ci is None else ci)

    def _score(self, result: BOResult, scores: Truth, t: int) -> None:
        mean = self.parent_mean_real() if scores.parent is not None else None
        child_means = {name: self.child_mean_real(name) for name in scores.children}
        record_scores(
            result,
            scores,
            t,
            self.parent_y,
            mean,
            None if mean is None else int(np.argmax(mean)),
            child_means,
        )


def initial_design(seed: int, n_points: int, n_init: int) -> list[int]:
    """The random initial parent queries (grid indices); the same for every method at a given seed."""
    rng = np.random.default_rng([seed, 0])
    return [int(i) for i in rng.integers(0, n_points, size=n_init)]


def record_scores(
    result: BOResult,
    scores: Truth,
    t: int,
    ys: Sequence[float],
    parent_mean: np.ndarray | None,
    chosen: int | None,
    child_means: Mapping[str, np.ndarray],
) -> None:
    """Append the scores of the state after ``t`` parent observations to ``result``'s curves."""
    result.n_queries.append(t)
    finite = [v for v in ys if math.isfinite(v)]
    result.best_y.append(max(finite) if finite else float("nan"))
    if scores.parent is not None and parent_mean is not None and chosen is not None:
        result.parent_r2.append(r2(parent_mean, scores.parent))
        result.exploration.append(exploration_score(scores.parent, chosen))
    for name, truth in scores.children.items():
        mu = child_means[name]
        result.child_r2.setdefault(name, []).append(r2_scale_free(mu, truth))
        result.child_r2_raw.setdefault(name, []).append(r2(mu, minmax(truth)))
        result.child_r2_offset.setdefault(name, []).append(r2_offset(mu, truth))


def _call(fn: Callable[[np.ndarray], float], x: np.ndarray, what: str) -> float:
    value = fn(np.array(x, float))
    try:
        return float(np.asarray(value, float).reshape(()))
    except (TypeError, ValueError):
        raise InputError(f"{what} must return one number, got {value!r}") from None
