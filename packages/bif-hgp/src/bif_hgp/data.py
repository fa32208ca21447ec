"""Offline benchmark problems with ground truth: synthetic composites and the ElasticNet HPO surface.

A :class:`Problem` bundles the noisy objective over the joint input (what the optimiser may call),
the composition (child name → the parent dimensions it owns), the bounds, the grid size, the
children's own sub-objectives (the paper gives each child a few direct observations of its
sub-function) and the noiseless truth used only for scoring.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from papershelf.errors import InputError, MissingDependencyError, check_choice, check_int, check_number

Objective = Callable[[np.ndarray], float]


@dataclass
class Problem:
    """A composite black-box problem; ``truth``/``child_truth`` are vectorised and noiseless.

    ``truth(X)``: (m, D) real coordinates → (m,) values; ``child_truth[name](Z)``: (m, d_i) → (m,).
    """

    name: str
    objective: Objective
    bounds: np.ndarray
    composition: dict[str, list[int]]
    grid: int = 32
    child_objectives: dict[str, Objective] | None = None
    truth: Callable[[np.ndarray], np.ndarray] | None = None
    child_truth: dict[str, Callable[[np.ndarray], np.ndarray]] | None = None
    noise: float = 0.0
    description: str = ""
    extra: dict = field(default_factory=dict)


# --- synthetic sub-functions on [0, 1], each ranging over about [0, 1] ---------------------------
def g_a(x: np.ndarray) -> np.ndarray:
    """Two bumps: a broad one at 0.3, a narrow lower one at 0.8."""
    return np.exp(-(((x - 0.3) / 0.12) ** 2)) + 0.6 * np.exp(-(((x - 0.8) / 0.08) ** 2))


def g_b(x: np.ndarray) -> np.ndarray:
    """A damped sine with three extrema."""
    return 0.5 + 0.5 * np.sin(3.0 * np.pi * x + 0.3) * (1.0 - 0.4 * x)


def g_c(x: np.ndarray) -> np.ndarray:
    """A wide bump at 0.55 with a ripple."""
    return 0.8 * np.exp(-(((x - 0.55) / 0.2) ** 2)) + 0.2 * np.cos(6.0 * np.pi * x) * 0.5 + 0.1


def g_d(x: np.ndarray) -> np.ndarray:
    """A cosine, the new child of the transfer task."""
    return 0.5 + 0.5 * np.cos(2.5 * np.pi * x)


SUBFUNCTIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {"a": g_a, "b": g_b, "c": g_c, "d": g_d}

# problem name → (children in dimension order, how they combine, description)
SYNTHETIC: dict[str, tuple[tuple[str, ...], str, str]] = {
    "additive2d": (("a", "b"), "add", "f = g_a(x1) + g_b(x2)"),
    "additive3d": (("a", "b", "c"), "add", "f = g_a(x1) + g_b(x2) + g_c(x3)"),
    "multiplicative2d": (("a", "b"), "mul", "f = g_a(x1) · g_b(x2)"),
    "nonadditive3d": (("a", "b", "c"), "mul+add", "f = g_a(x1) · g_b(x2) + g_c(x3)"),
    "transfer2d": (("a", "d"), "add", "f = g_a(x1) + g_d(x2) (shares child a with additive2d)"),
}
PROBLEMS = (*SYNTHETIC, "hpo")


def _combine(kind: str, parts: list[np.ndarray]) -> np.ndarray:
    if kind == "add":
        return np.sum(parts, axis=0)
    if kind == "mul":
        return np.prod(parts, axis=0)
    return parts[0] * parts[1] + parts[2]  # mul+add


def _noisy(fn: Callable[[np.ndarray], np.ndarray], noise: float, rng: np.random.Generator) -> Objective:
    def objective(x: np.ndarray) -> float:
        value = float(fn(np.asarray(x, float).reshape(1, -1))[0])
        return value + (noise * float(rng.standard_normal()) if noise > 0 else 0.0)

    return objective


def synthetic_problem(name: str, *, seed: int = 0, noise: float = 0.1, grid: int | None = None) -> Problem:
    """One of the synthetic composites (``additive2d``, ``additive3d``, ``multiplicative2d``,
    ``nonadditive3d``, ``transfer2d``) with Gaussian observation noise of s.d. ``noise``.

    >>> p = synthetic_problem("additive2d", noise=0.0)
    >>> round(p.objective(np.array([0.3, 0.5])), 4) == round(float(g_a(0.3) + g_b(0.5)), 4)
    True
    """
    check_choice("problem", name, tuple(SYNTHETIC))
    noise = check_number("noise", noise, low=0)
    children, kind, desc = SYNTHETIC[name]
    D = len(children)
    grid = check_int("grid", grid if grid is not None else (32 if D == 2 else 16), low=2, high=256)
    composition = {c: [k] for k, c in enumerate(children)}

    def truth(X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, float)
        return _combine(kind, [SUBFUNCTIONS[c](X[:, k]) for k, c in enumerate(children)])

    rng = np.random.default_rng([seed, 1])
    child_truth = {c: (lambda Z, g=SUBFUNCTIONS[c]: g(np.asarray(Z, float)[:, 0])) for c in children}
    child_objectives = {c: _noisy(child_truth[c], noise, rng) for c in children}
    return Problem(
        name=name,
        objective=_noisy(truth, noise, rng),
        bounds=np.array([[0.0, 1.0]] * D),
        composition=composition,
        grid=grid,
        child_objectives=child_objectives,
        truth=truth,
        child_truth=child_truth,
        noise=noise,
        description=desc,
    )


# --- the paper's HPO composite: ElasticNet on scikit-learn's diabetes data -------------------------
HPO_ALPHA = (0.001, 1.0)
HPO_L1 = (0.01, 0.99)
HPO_GRID = 32


def _sklearn():
    try:
        from sklearn.datasets import load_diabetes
        from sklearn.linear_model import ElasticNet
        from sklearn.model_selection import cross_val_score
    except ImportError:  # pragma: no cover - scikit-learn is in the bench extra
        raise MissingDependencyError("sklearn", package="bif-hgp", extra="bench") from None
    return load_diabetes, ElasticNet, cross_val_score


@functools.lru_cache(maxsize=1)
def _diabetes() -> tuple[np.ndarray, np.ndarray]:
    load_diabetes, _, _ = _sklearn()
    X, y = load_diabetes(return_X_y=True)
    return X, y


def elasticnet_cv_r2(alpha: float, l1_ratio: float) -> float:
    """Mean 5-fold cross-validated R² of ElasticNet(alpha, l1_ratio) on the diabetes data."""
    _, ElasticNet, cross_val_score = _sklearn()
    X, y = _diabetes()
    model = ElasticNet(alpha=float(alpha), l1_ratio=float(l1_ratio), max_iter=10_000)
    return float(np.mean(cross_val_score(model, X, y, cv=5)))


@functools.lru_cache(maxsize=1)
def hpo_surface() -> np.ndarray:
    """The 32×32 table of CV R² over alpha = linspace(0.001, 1, 32) × l1_ratio = linspace(0.01, 0.99, 32)."""
    alphas = np.linspace(*HPO_ALPHA, HPO_GRID)
    l1s = np.linspace(*HPO_L1, HPO_GRID)
    return np.array([[elasticnet_cv_r2(a, r) for r in l1s] for a in alphas])


def hpo_problem(*, seed: int = 0) -> Problem:
    """The paper's offline HPO composite: children ``alpha`` (dim 0) and ``l1_ratio`` (dim 1).

    Each child's ground truth is the surface's slice through the other child's middle grid value
    (index 16), as in the authors' benchmark; its direct observations are CV runs on that slice.
    The objective is deterministic (no added noise): cross-validation is its own noise.
    """
    del seed  # deterministic
    surface = hpo_surface()
    alphas = np.linspace(*HPO_ALPHA, HPO_GRID)
    l1s = np.linspace(*HPO_L1, HPO_GRID)

    def index(values: np.ndarray, axis: np.ndarray) -> np.ndarray:
        return np.abs(np.asarray(values, float)[:, None] - axis[None, :]).argmin(axis=1)

    def truth(X: np.ndarray) -> np.ndarray:
        X = np.asarray(X, float)
        return surface[index(X[:, 0], alphas), index(X[:, 1], l1s)]

    def objective(x: np.ndarray) -> float:
        x = np.asarray(x, float)
        return elasticnet_cv_r2(x[0], x[1])

    mid = HPO_GRID // 2
    child_truth = {
        "alpha": lambda Z: surface[index(np.asarray(Z)[:, 0], alphas), mid],
        "l1_ratio": lambda Z: surface[mid, index(np.asarray(Z)[:, 0], l1s)],
    }
    child_objectives = {
        "alpha": lambda z: elasticnet_cv_r2(float(np.asarray(z).ravel()[0]), l1s[mid]),
        "l1_ratio": lambda z: elasticnet_cv_r2(alphas[mid], float(np.asarray(z).ravel()[0])),
    }
    return Problem(
        name="hpo",
        objective=objective,
        bounds=np.array([HPO_ALPHA, HPO_L1]),
        composition={"alpha": [0], "l1_ratio": [1]},
        grid=HPO_GRID,
        child_objectives=child_objectives,
        truth=truth,
        child_truth=child_truth,
        noise=0.0,
        description="mean 5-fold CV R² of ElasticNet(alpha, l1_ratio) on load_diabetes",
    )


def make_problem(name: str, *, seed: int = 0, noise: float = 0.1, grid: int | None = None) -> Problem:
    """Any built-in problem by name (see :data:`PROBLEMS`)."""
    check_choice("problem", name, PROBLEMS)
    if name == "hpo":
        return hpo_problem(seed=seed)
    if name in SYNTHETIC:
        return synthetic_problem(name, seed=seed, noise=noise, grid=grid)
    raise InputError(f"unknown problem {name!r}")  # pragma: no cover
