"""Offline data: simulators with known variance components, and a real digits response matrix.

* :func:`simulate_crossed` — Gaussian crossed random effects X = μ + a_m + b_i + e_mi (optionally with
  missing cells); returns the realised effects, so the estimators can be checked on the data at hand.
* :func:`simulate_2pl` — 0/1 responses from a 2PL item response model; :func:`twopl_components` gives
  the population variance components of that generator by quadrature.
* :func:`digits_matrix` — ~60 scikit-learn model configurations (logistic regression, SVMs, k-NN,
  trees, naive Bayes, small MLPs; several training-set sizes and seeds) scored right/wrong on held-out
  digits images. Needs scikit-learn (the ``[bench]`` extra); built once and cached on disk.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from papershelf.errors import MissingDependencyError, check_int, check_number
from papershelf.repro import atomic_path


@dataclass(frozen=True)
class CrossedSample:
    """A Gaussian crossed random-effects matrix and the realised effects that generated it."""

    X: np.ndarray
    model_effects: np.ndarray
    item_effects: np.ndarray
    residuals: np.ndarray

    @property
    def realised(self) -> tuple[float, float, float]:
        """Sample variances (ddof=1) of the drawn model effects, item effects and residuals."""
        e = self.residuals[~np.isnan(self.X)]
        return (
            float(np.var(self.model_effects, ddof=1)),
            float(np.var(self.item_effects, ddof=1)),
            float(np.var(e, ddof=1)),
        )


def simulate_crossed(
    n_models: int,
    n_items: int,
    *,
    var_model: float = 1.0,
    var_item: float = 1.0,
    var_residual: float = 1.0,
    mean: float = 0.0,
    missing: float = 0.0,
    seed: int = 0,
) -> CrossedSample:
    """Draw X[m, i] = mean + a_m + b_i + e_mi with normal effects; a fraction ``missing`` of cells → NaN."""
    n_models = check_int("n_models", n_models, low=3)
    n_items = check_int("n_items", n_items, low=2)
    for name, v in (("var_model", var_model), ("var_item", var_item), ("var_residual", var_residual)):
        check_number(name, v, low=0)
    missing = check_number("missing", missing, low=0, high=1, high_open=True)
    rng = np.random.default_rng(seed)
    a = rng.normal(0, np.sqrt(var_model), n_models)
    b = rng.normal(0, np.sqrt(var_item), n_items)
    e = rng.normal(0, np.sqrt(var_residual), (n_models, n_items))
    X = mean + a[:, None] + b[None, :] + e
    if missing > 0:
        drop = rng.random(X.shape) < missing
        X[drop] = np.nan
    return CrossedSample(X, a, b, e)


@dataclass(frozen=True)
class TwoPLSample:
    """0/1 responses ``X`` drawn with probabilities ``P`` from abilities ``theta`` and items (a, b)."""

    X: np.ndarray
    P: np.ndarray
    theta: np.ndarray
    a: np.ndarray
    b: np.ndarray


def simulate_2pl(
    n_models: int,
    n_items: int,
    *,
    theta_mean: float = 0.0,
    theta_sd: float = 1.0,
    log_a_mean: float = 0.0,
    log_a_sd: float = 0.3,
    b_mean: float = 0.0,
    b_sd: float = 1.0,
    seed: int = 0,
    drop_constant: bool = False,
) -> TwoPLSample:
    """Draw a 0/1 models × items matrix from P = σ(a (θ − b)) with θ ~ N, log a ~ N, b ~ N.

    ``drop_constant`` removes the items every model got right (or wrong), with their parameters.
    """
    n_models = check_int("n_models", n_models, low=3)
    n_items = check_int("n_items", n_items, low=2)
    rng = np.random.default_rng(seed)
    theta = rng.normal(theta_mean, theta_sd, n_models)
    a = np.exp(rng.normal(log_a_mean, log_a_sd, n_items))
    b = rng.normal(b_mean, b_sd, n_items)
    P = 0.5 * (1.0 + np.tanh(0.5 * a[None, :] * (theta[:, None] - b[None, :])))  # σ(a(θ − b)), overflow-free
    X = (rng.random(P.shape) < P).astype(np.float64)
    if drop_constant:
        keep = X.min(axis=0) < X.max(axis=0)
        X, P, a, b = X[:, keep], P[:, keep], a[keep], b[keep]
    return TwoPLSample(X, P, theta, a, b)


def twopl_components(
    *,
    theta_mean: float = 0.0,
    theta_sd: float = 1.0,
    log_a_mean: float = 0.0,
    log_a_sd: float = 0.3,
    b_mean: float = 0.0,
    b_sd: float = 1.0,
    n_nodes: int = 81,
) -> dict[str, float]:
    """Population variance components of :func:`simulate_2pl`'s generator, by Gauss–Hermite quadrature.

    With P(θ, item) the success probability: σ²_M = Var_θ E_item P, σ²_I = Var_item E_θ P and
    σ²_E = Var(interaction of P) + E[P(1 − P)] (the Bernoulli noise); ``mean`` = E P.
    """
    x, w = np.polynomial.hermite_e.hermegauss(n_nodes)
    w = w / w.sum()
    theta = theta_mean + theta_sd * x
    la = log_a_mean + log_a_sd * x
    b = b_mean + b_sd * x
    a_grid, b_grid = np.meshgrid(np.exp(la), b, indexing="ij")
    item_w = np.outer(w, w).ravel()
    A, B = a_grid.ravel(), b_grid.ravel()
    P = 0.5 * (1.0 + np.tanh(0.5 * A[None, :] * (theta[:, None] - B[None, :])))  # (θ nodes, item nodes)
    mean = float(w @ P @ item_w)
    row = P @ item_w
    col = w @ P
    inter = P - row[:, None] - col[None, :] + mean
    return {
        "mean": mean,
        "model": float(w @ (row - mean) ** 2),
        "item": float(item_w @ (col - mean) ** 2),
        "residual": float(w @ (inter**2 + P * (1 - P)) @ item_w),
        "interaction": float(w @ inter**2 @ item_w),
    }


# ---- digits --------------------------------------------------------------------------------------
DIGITS_VERSION = 1


def digits_configs() -> list[dict[str, object]]:
    """The model configurations of the digits matrix: family, hyper-parameters, training size, seed."""
    configs: list[dict[str, object]] = []
    for c in (1e-4, 1e-3, 1e-2, 1e-1, 1.0):
        for n in (40, 120, 400):
            configs.append({"family": "logreg", "C": c, "n_train": n, "seed": 0})
    for k in (1, 3, 9, 25):
        for n in (40, 120, 400):
            configs.append({"family": "knn", "k": k, "n_train": n, "seed": 1})
    for depth in (2, 3, 5, 8):
        for n in (120, 400, 898):
            configs.append({"family": "tree", "depth": depth, "n_train": n, "seed": 2})
    for gamma in (1e-4, 1e-3, 1e-2):
        for n in (40, 120, 400):
            configs.append({"family": "svm", "gamma": gamma, "n_train": n, "seed": 3})
    for nb in ("gaussian", "bernoulli"):
        for n in (40, 400):
            configs.append({"family": "nb", "kind": nb, "n_train": n, "seed": 4})
    for hidden in (4, 16):
        for n in (120, 400, 898):
            configs.append({"family": "mlp", "hidden": hidden, "n_train": n, "seed": 5})
    for seed in (11, 12):  # the same small-data configurations on other training draws
        configs.append({"family": "logreg", "C": 0.01, "n_train": 120, "seed": seed})
        configs.append({"family": "knn", "k": 3, "n_train": 120, "seed": seed})
    return configs


def _config_name(cfg: dict[str, object]) -> str:
    params = ",".join(f"{k}={v}" for k, v in cfg.items() if k not in ("family", "seed"))
    return f"{cfg['family']}({params})"


def _make_estimator(cfg: dict[str, object]):
    from sklearn.linear_model import LogisticRegression
    from sklearn.naive_bayes import BernoulliNB, GaussianNB
    from sklearn.neighbors import KNeighborsClassifier
    from sklearn.neural_network import MLPClassifier
    from sklearn.svm import SVC
    from sklearn.tree import DecisionTreeClassifier

    seed = int(cfg["seed"])  # type: ignore[call-overload]
    family = cfg["family"]
    if family == "logreg":
        return LogisticRegression(C=float(cfg["C"]), max_iter=500)  # type: ignore[arg-type]
    if family == "knn":
        return KNeighborsClassifier(n_neighbors=int(cfg["k"]))  # type: ignore[call-overload]
    if family == "tree":
        return DecisionTreeClassifier(max_depth=int(cfg["depth"]), random_state=seed)  # type: ignore[call-overload]
    if family == "svm":
        return SVC(gamma=float(cfg["gamma"]))  # type: ignore[arg-type]
    if family == "nb":
        return GaussianNB() if cfg["kind"] == "gaussian" else BernoulliNB(binarize=8.0)
    return MLPClassifier(
        hidden_layer_sizes=(int(cfg["hidden"]),),  # type: ignore[call-overload]
        max_iter=200,
        random_state=seed,
    )


@dataclass(frozen=True)
class DigitsMatrix:
    """The digits response matrix: ``X`` (models × items, 0/1), model names, test-image indices kept."""

    X: np.ndarray
    models: list[str]
    items: np.ndarray
    n_test: int
    n_constant_dropped: int


def cache_dir() -> Path:
    """Where built matrices are cached: $RANK_RELIABILITY_CACHE, else $XDG_CACHE_HOME/rank-reliability."""
    env = os.environ.get("RANK_RELIABILITY_CACHE")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rank-reliability"


def digits_matrix(*, cache: bool = True, quiet: bool = True) -> DigitsMatrix:
    """Build (or load from the cache) the digits response matrix of :func:`digits_configs`.

    The 1,797 bundled 8×8 digits are split in half (stratified, seed 0): every configuration trains on
    the first ``n_train`` images of a seeded shuffle of the training half and is scored right (1) / wrong
    (0) on every image of the test half (899 items). Items every model gets right are dropped (they are
    constant and carry no ranking information); the count is kept in ``n_constant_dropped``.
    """
    try:
        import sklearn
        from sklearn.datasets import load_digits
        from sklearn.model_selection import train_test_split
    except ImportError:
        raise MissingDependencyError("sklearn", package="rank-reliability", extra="bench") from None
    configs = digits_configs()
    key = hashlib.sha256(
        json.dumps([DIGITS_VERSION, sklearn.__version__, configs], sort_keys=True).encode()
    ).hexdigest()[:12]
    path = cache_dir() / f"digits-{key}.npz"
    if cache and path.is_file():
        with np.load(path, allow_pickle=False) as data:
            return DigitsMatrix(
                X=data["X"],
                models=[str(m) for m in data["models"]],
                items=data["items"],
                n_test=int(data["n_test"]),
                n_constant_dropped=int(data["n_constant_dropped"]),
            )
    digits = load_digits()
    x_train, x_test, y_train, y_test = train_test_split(
        digits.data, digits.target, test_size=0.5, stratify=digits.target, random_state=0
    )
    rows, names = [], []
    for cfg in configs:
        rng = np.random.default_rng(int(cfg["seed"]))  # type: ignore[call-overload]
        idx = rng.permutation(len(x_train))[: int(cfg["n_train"])]  # type: ignore[call-overload]
        est = _make_estimator(cfg)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # small MLPs / strongly regularised fits warn about convergence
            est.fit(x_train[idx], y_train[idx])
            rows.append((est.predict(x_test) == y_test).astype(np.float64))
        names.append(_config_name(cfg))
        if not quiet:
            print(f"  trained {names[-1]}: accuracy {rows[-1].mean():.3f}")
    full = np.vstack(rows)
    keep = np.flatnonzero(full.min(axis=0) < full.max(axis=0))
    out = DigitsMatrix(full[:, keep], names, keep, int(full.shape[1]), int(full.shape[1] - keep.size))
    if cache:
        with atomic_path(path, mode="wb") as handle:
            np.savez(
                handle,
                X=out.X,
                models=np.array(out.models),
                items=out.items,
                n_test=out.n_test,
                n_constant_dropped=out.n_constant_dropped,
            )
    return out
