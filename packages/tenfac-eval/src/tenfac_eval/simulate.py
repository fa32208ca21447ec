"""Offline data with ground truth: a simulator from the model itself, and a scikit-learn digits proxy."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from papershelf.errors import InputError, check_int, check_number
from tenfac_eval.core import level_probs
from tenfac_eval.data import Ratings


@dataclass(frozen=True)
class Simulated:
    """Autorater ratings of every (prompt, model, autorater) cell, human ratings of every (prompt, model)
    cell, and the truth: ``human_probs`` (P, M, L_H) and ``human_mean`` (P, M) expected human scores."""

    autorater: Ratings
    human_all: Ratings
    human_probs: np.ndarray
    human_mean: np.ndarray
    prompts: list[str]
    models: list[str]
    groups: dict[str, str]


def simulate(
    n_prompts: int = 500,
    n_models: int = 8,
    n_raters: int = 3,
    *,
    rank: int = 2,
    levels: int = 5,
    human_levels: int | None = None,
    quality: tuple[float, ...] | None = None,
    inverted: int = 0,
    seed: int = 0,
) -> Simulated:
    """Ratings drawn from the ordinal CP model with known parameters.

    Autorater r's loadings are ``quality[r] * psi_H + sqrt(1 - quality[r]^2) * noise`` (quality in
    [0, 1]; default evenly 0.9 .. 0.5); the first ``inverted`` autoraters use ``-psi_H`` instead
    (adversarially inverted). Prompts carry a group tag ("g0".."g3") that shifts their prompt effect.
    """
    P = check_int("n_prompts", n_prompts, low=2)
    M = check_int("n_models", n_models, low=2)
    R = check_int("n_raters", n_raters, low=1)
    K = check_int("rank", rank, low=0)
    L = check_int("levels", levels, low=2)
    LH = L if human_levels is None else check_int("human_levels", human_levels, low=2)
    inverted = check_int("inverted", inverted, low=0, high=R)
    q = np.linspace(0.9, 0.5, R) if quality is None else np.asarray(quality, float)
    if q.shape != (R,):
        raise InputError(f"quality needs {R} values, got {q.size}")
    for v in q:
        check_number("quality", v, low=0, high=1)
    rng = np.random.default_rng(seed)
    C = K + 2
    group = rng.integers(0, 4, P)
    theta = rng.normal(0, 1, (P, C))
    theta[:, 0] = 1.0
    theta[:, 1] = 0.8 * theta[:, 1] + (group - 1.5) * 0.6
    phi = rng.normal(0, 1, (M, C))
    phi[:, 1] = 1.0
    phi[:, 0] = np.linspace(-1.0, 1.0, M) + 0.2 * rng.normal(size=M)
    psi_h = np.concatenate([[1.0, 1.0], rng.normal(0, 1, K) * 0.9 + np.sign(rng.normal(size=K)) * 0.6])
    psi = np.empty((R, C))
    for r in range(R):
        noise = rng.normal(0, 1, C)
        psi[r] = q[r] * psi_h + np.sqrt(1 - q[r] ** 2) * noise
        if r < inverted:
            psi[r] = -psi_h
    bias = rng.normal(0, 0.5, R)
    prompts = [f"p{i:05d}" for i in range(P)]
    models = [f"m{j:02d}" for j in range(M)]
    pp, mm = np.meshgrid(np.arange(P), np.arange(M), indexing="ij")
    pp, mm = pp.ravel(), mm.ravel()
    X = theta[pp] * phi[mm]
    cols: dict[str, list] = {"prompt": [], "model": [], "rater": [], "rating": []}
    for r in range(R):
        tau = np.linspace(-1.8, 1.8, L - 1) + bias[r]
        y = _draw(level_probs(X @ psi[r], tau), rng)
        cols["prompt"].append(np.asarray(prompts, object)[pp])
        cols["model"].append(np.asarray(models, object)[mm])
        cols["rater"].append(np.full(pp.size, f"auto{r}", object))
        cols["rating"].append(y + 1)
    auto = Ratings.from_columns(
        *(np.concatenate(cols[k]) for k in ("prompt", "model", "rater", "rating")),
        scale=list(range(1, L + 1)),
        name="simulated autorater",
    )
    tau_h = np.linspace(-1.5, 1.5, LH - 1)
    probs = level_probs(X @ psi_h, tau_h)
    yh = _draw(probs, rng)
    human_scale = list(range(LH)) if LH == 2 else list(range(1, LH + 1))
    human = Ratings.from_columns(
        np.asarray(prompts, object)[pp],
        np.asarray(models, object)[mm],
        ["human"] * pp.size,
        np.asarray(human_scale)[yh],
        scale=human_scale,
        name="simulated human",
    )
    mean = (probs @ np.asarray(human_scale, float)).reshape(P, M)
    groups = {prompts[i]: f"g{group[i]}" for i in range(P)}
    return Simulated(auto, human, probs.reshape(P, M, LH), mean, prompts, models, groups)


def _draw(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    u = rng.random(probs.shape[0])[:, None]
    return np.minimum((u > np.cumsum(probs, axis=1)).sum(1), probs.shape[1] - 1)


def split_human(human: Ratings, frac: float, *, seed: int = 0) -> tuple[Ratings, Ratings]:
    """A random ``frac`` of the human ratings as the calibration set, the rest held out."""
    frac = check_number("frac", frac, low=0, high=1, low_open=True, high_open=True)
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(human), bool)
    mask[rng.choice(len(human), max(1, round(frac * len(human))), replace=False)] = True
    return human.subset(mask), human.subset(~mask)


# ---- the digits proxy ----------------------------------------------------------------------------


@dataclass(frozen=True)
class DigitsProxy:
    """Prompts = digits test images, models = sklearn classifiers, human = correctness (0/1),
    autoraters = judges rating "is this prediction right?" on 1..5; ``correct`` is (P, M)."""

    autorater: Ratings
    human_all: Ratings
    correct: np.ndarray
    prompts: list[str]
    models: list[str]
    groups: dict[str, str]
    judges: list[str]


def digits_proxy(*, n_train: int = 900, inverted_judge: bool = True, seed: int = 0) -> DigitsProxy:
    """Build the digits proxy (scikit-learn's bundled digits; nothing is downloaded).

    Twelve classifiers of varied strength play the generative models; four judges of varied quality rate
    each (image, prediction) pair by the judge's probability that the predicted class is right, binned
    to 1..5; with ``inverted_judge`` one judge reports 6 - the good judge's rating. Prompt groups are the
    true digit classes.
    """
    try:
        from sklearn.datasets import load_digits
        from sklearn.discriminant_analysis import LinearDiscriminantAnalysis
        from sklearn.ensemble import ExtraTreesClassifier, RandomForestClassifier
        from sklearn.linear_model import LogisticRegression, Perceptron, RidgeClassifier
        from sklearn.naive_bayes import GaussianNB
        from sklearn.neighbors import KNeighborsClassifier, NearestCentroid
        from sklearn.tree import DecisionTreeClassifier
    except ImportError:
        from papershelf.errors import MissingDependencyError

        raise MissingDependencyError("sklearn", package="tenfac-eval", extra="bench") from None
    import warnings

    n_train = check_int("n_train", n_train, low=100, high=1500)
    rng = np.random.default_rng(seed)
    X, y = load_digits(return_X_y=True)
    order = rng.permutation(len(y))
    X, y = X[order] / 16.0, y[order]
    Xtr, ytr, Xte, yte = X[:n_train], y[:n_train], X[n_train:], y[n_train:]
    small = slice(0, 60)
    specs = [
        ("logreg", LogisticRegression(max_iter=300), slice(None)),
        ("logreg-small", LogisticRegression(max_iter=300), small),
        ("gnb", GaussianNB(), slice(None)),
        ("knn1", KNeighborsClassifier(1), slice(None)),
        ("knn25-small", KNeighborsClassifier(25), slice(0, 120)),
        ("tree4", DecisionTreeClassifier(max_depth=4, random_state=seed), slice(None)),
        ("tree10", DecisionTreeClassifier(max_depth=10, random_state=seed), slice(None)),
        ("forest", RandomForestClassifier(30, random_state=seed), slice(None)),
        ("extra-small", ExtraTreesClassifier(10, random_state=seed), small),
        ("perceptron", Perceptron(random_state=seed), slice(None)),
        ("centroid", NearestCentroid(), slice(None)),
        ("ridge", RidgeClassifier(), slice(0, 200)),
    ]
    preds = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _, clf, rows in specs:
            preds.append(clf.fit(Xtr[rows], ytr[rows]).predict(Xte))
        judges_spec = [
            ("judge-lda", LinearDiscriminantAnalysis(), slice(None), None),
            ("judge-logreg-coarse", LogisticRegression(max_iter=300), slice(0, 150), np.arange(0, 64, 3)),
            ("judge-nb-tiny", GaussianNB(), slice(0, 40), None),
        ]
        judge_probs = []
        for _, clf, rows, feats in judges_spec:
            cols = slice(None) if feats is None else feats
            clf.fit(Xtr[rows][:, cols], ytr[rows])
            proba = np.zeros((len(yte), 10))
            proba[:, clf.classes_] = clf.predict_proba(Xte[:, cols])
            judge_probs.append(proba)
    pred = np.stack(preds, 1)  # (P, M)
    correct = (pred == yte[:, None]).astype(int)
    P, M = pred.shape
    prompts = [f"img{i:04d}" for i in range(P)]
    models = [s[0] for s in specs]
    judges = [j[0] for j in judges_spec]
    ratings = [np.clip(np.ceil(jp[np.arange(P)[:, None], pred] * 5), 1, 5).astype(int) for jp in judge_probs]
    if inverted_judge:
        ratings.append(6 - ratings[0])
        judges.append("judge-inverted")
    pp, mm = np.meshgrid(np.arange(P), np.arange(M), indexing="ij")
    po, mo = np.asarray(prompts, object)[pp.ravel()], np.asarray(models, object)[mm.ravel()]
    auto = Ratings.from_columns(
        np.tile(po, len(judges)),
        np.tile(mo, len(judges)),
        np.repeat(np.asarray(judges, object), po.size),
        np.concatenate([r.ravel() for r in ratings]),
        scale="1-5",
        name="digits judges",
    )
    human = Ratings.from_columns(
        po, mo, ["human"] * po.size, correct.ravel(), scale="0,1", name="digits correctness"
    )
    groups = {prompts[i]: f"digit-{yte[i]}" for i in range(P)}
    return DigitsProxy(auto, human, correct, prompts, models, groups, judges)
