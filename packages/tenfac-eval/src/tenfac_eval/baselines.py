"""The anchors, run side by side with TenFac.

- :class:`HumanOnly`: a per-prompt ordinal model fitted on the human calibration ratings alone
  (model effect + ridge-shrunk prompt effect, the rank-0 case of the same likelihood).
- :func:`raw_autorater`: the autoraters' mean rating, rescaled to the human scale, used as is.
- :func:`ppi_plus_plus`: prediction-powered inference with power tuning (PPI++) for a mean.
- :class:`MaskedCP`: one masked ordinal CP fit of all raters with the human as one more rater slice —
  the same factorisation without the separate calibration stage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.optimize import minimize
from scipy.stats import norm

from papershelf.errors import InputError, check_number
from tenfac_eval.core import (
    FIXED_PHI_COL,
    FIXED_THETA_COL,
    Obs,
    concat_obs,
    level_probs,
    nll_and_grad,
    pair_features,
    raw_from_thresholds,
    thresholds_from_raw,
)
from tenfac_eval.data import Ratings
from tenfac_eval.model import TenFac, _col_mask


class HumanOnly:
    """Human-only per-prompt model: P(y <= j) = sigmoid(tau_j - a_m - b_p), with b_p ~ N(0, 1/l2).

    ``l2=None`` (default) picks the prompt-effect penalty from (0.3, 1, 3, 10) by 3-fold
    cross-validated log-likelihood on the human ratings; prompts without a human label get b_p = 0.
    """

    GRID = (0.3, 1.0, 3.0, 10.0)

    def __init__(self, *, l2: float | None = None, seed: int = 0) -> None:
        self.l2 = l2
        self.seed = seed

    def fit(self, human: Ratings) -> HumanOnly:
        self.prompts_ = sorted(set(human.prompt.tolist()))
        self.models_ = sorted(set(human.model.tolist()))
        pi = {p: i for i, p in enumerate(self.prompts_)}
        mi = {m: i for i, m in enumerate(self.models_)}
        p = np.array([pi[x] for x in human.prompt])
        a = np.array([mi[x] for x in human.model])
        obs = Obs(p, a, np.full(len(p), -1), np.zeros_like(p), human.level.astype(np.int64))
        L = len(human.scale)
        if self.l2 is None:
            rng = np.random.default_rng(self.seed)
            fold = rng.integers(0, 3, len(obs))
            scores = []
            for lam in self.GRID:
                ll = 0.0
                for k in range(3):
                    params = self._fit(obs.take(np.flatnonzero(fold != k)), L, lam)
                    test = obs.take(np.flatnonzero(fold == k))
                    ll -= nll_and_grad(*params, test, np.array([L]))[0]
                scores.append(ll)
            self.l2_ = self.GRID[int(np.argmax(scores))]
        else:
            self.l2_ = check_number("l2", self.l2, low=0, low_open=True)
        self.params_ = self._fit(obs, L, self.l2_)
        return self

    def _fit(self, obs: Obs, L: int, lam: float):
        P, M = len(self.prompts_), len(self.models_)
        counts = np.bincount(obs.y, minlength=L) + 0.5
        cum = np.cumsum(counts)[:-1] / counts.sum()
        tau0 = raw_from_thresholds(np.log(cum / (1 - cum))[None, :])[0]
        psi = np.ones((1, 2))
        n_levels = np.array([L])

        def unpack(v):
            theta = np.column_stack([np.ones(P), v[:P]])
            phi = np.column_stack([v[P : P + M], np.ones(M)])
            return theta, phi, psi, v[P + M :][None, :]

        def fun(v):
            theta, phi, _, tau_raw = unpack(v)
            with np.errstate(all="ignore"):
                f, g = nll_and_grad(theta, phi, psi, tau_raw, obs, n_levels)
            if not np.isfinite(f):
                return 1e20, np.zeros_like(v)
            f += 0.5 * lam * np.sum(v[:P] ** 2) + 0.5e-4 * np.sum(v[P : P + M] ** 2)
            grad = np.concatenate(
                [g["theta"][:, 1] + lam * v[:P], g["phi"][:, 0] + 1e-4 * v[P : P + M], g["tau_raw"][0]]
            )
            return f, grad

        v0 = np.concatenate([np.zeros(P + M), tau0])
        res = minimize(fun, v0, jac=True, method="L-BFGS-B", options={"maxiter": 500})
        return unpack(res.x)

    def predict_proba(self, prompts: Sequence[str], models: Sequence[str]) -> np.ndarray:
        theta, phi, psi, tau_raw = self.params_
        known = {p: i for i, p in enumerate(self.prompts_)}
        mi = {m: i for i, m in enumerate(self.models_)}
        unknown = sorted(set(models) - set(mi))
        if unknown:
            raise InputError(f"human-only model has no human rating of model(s) {unknown[:3]}")
        theta = np.vstack([theta, [1.0, 0.0]])  # an unseen prompt: b_p = 0
        p = np.array([known.get(x, len(self.prompts_)) for x in prompts])
        a = np.array([mi[x] for x in models])
        obs = Obs(p, a, np.full(len(p), -1), np.zeros_like(p), np.zeros_like(p))
        eta = pair_features(theta, phi, obs) @ psi[0]
        return level_probs(eta, thresholds_from_raw(tau_raw)[0])


def raw_autorater(
    autorater: Ratings,
    prompts: Sequence[str],
    models: Sequence[str],
    human_scale: Sequence[float],
    *,
    eps: float = 0.05,
) -> tuple[np.ndarray, np.ndarray]:
    """The autoraters' mean rating per (prompt, model), taken at face value.

    Returns ``(score (n,), probs (n, L_H))``: ``score`` is the mean rating's position on the autorater
    scale mapped linearly onto the human scale's range; ``probs`` splits mass between the two human
    levels nearest to that position, mixed with ``eps`` uniform mass so log-loss stays finite.
    """
    eps = check_number("eps", eps, low=0, high=1, low_open=True)
    lo, hi = autorater.scale[0], autorater.scale[-1]
    q = (autorater.values - lo) / (hi - lo)
    keys = {}
    for i, (p, m) in enumerate(zip(autorater.prompt, autorater.model, strict=True)):
        keys.setdefault((p, m), []).append(i)
    pos = np.empty(len(prompts))
    for j, (p, m) in enumerate(zip(prompts, models, strict=True)):
        rows = keys.get((p, m))
        if rows is None:
            raise InputError(f"no autorater rating for prompt {p!r} and model {m!r}")
        pos[j] = q[rows].mean()
    hs = np.asarray(human_scale, float)
    L = hs.size
    t = pos * (L - 1)
    probs = np.maximum(1 - np.abs(np.arange(L)[None, :] - t[:, None]), 0.0)
    probs = (1 - eps) * probs + eps / L
    score = hs[0] + pos * (hs[-1] - hs[0])
    return score, probs


def ppi_plus_plus(y_lab: np.ndarray, f_lab: np.ndarray, f_unl: np.ndarray, *, level: float = 0.95) -> dict:
    """PPI++ mean estimate and CLT interval with the variance-optimal power-tuning lambda.

    theta = mean(y) + lambda * (mean(f_unl) - mean(f_lab)); lambda = Cov(y, f) / ((1 + n/N) Var(f)),
    clipped to [0, 1] as in Angelopoulos et al. (2023); Var = Var(y - lambda f)/n + lambda^2 Var(f_unl)/N.
    """
    y, fl, fu = (np.asarray(v, float) for v in (y_lab, f_lab, f_unl))
    n, N = y.size, fu.size
    if n < 2 or N < 2 or fl.size != n:
        raise InputError(f"PPI++ needs >= 2 labelled and >= 2 unlabelled items, got n={n}, N={N}")
    var_f = np.var(np.concatenate([fl, fu]), ddof=1)
    lam = 0.0 if var_f == 0 else float(np.cov(y, fl)[0, 1] / ((1 + n / N) * var_f))
    lam = min(max(lam, 0.0), 1.0)
    est = float(y.mean() + lam * (fu.mean() - fl.mean()))
    var = np.var(y - lam * fl, ddof=1) / n + lam**2 * np.var(fu, ddof=1) / N
    z = float(norm.ppf(0.5 + level / 2))
    se = math.sqrt(var)
    return {"estimate": est, "lower": est - z * se, "upper": est + z * se, "se": se, "lambda": lam}


class MaskedCP:
    """One-stage masked ordinal CP of all raters at once, the human being one more rater slice."""

    def __init__(self, rank: int = 4, *, l2: float = 1.0, max_iter: int = 300, seed: int = 0) -> None:
        self.rank = rank
        self.l2 = l2
        self.max_iter = max_iter
        self.seed = seed

    def fit(self, autorater: Ratings, human: Ratings) -> MaskedCP:
        m = TenFac(self.rank, l2=self.l2, max_iter=self.max_iter, seed=self.seed).pretrain(autorater)
        h = (
            m._encode(human, rater_index={"human": 0}, what="human set")
            if set(human.rater) <= {"human"}
            else None
        )
        if h is None:
            h = m._encode(
                Ratings(
                    human.prompt,
                    human.model,
                    np.full(len(human), "human", object),
                    human.level,
                    human.scale,
                    human.model_b,
                ),
                rater_index={"human": 0},
                what="human set",
            )
        R = len(m.raters_)
        h = Obs(h.p, h.a, h.b, np.full(len(h), R), h.y)
        obs = concat_obs(m._auto_obs, h)
        La, Lh = len(m.auto_scale_), len(human.scale)
        J = max(La, Lh) - 1
        tau_raw = np.zeros((R + 1, J))
        tau_raw[:R, : La - 1] = m.tau_raw_
        counts = np.bincount(h.y, minlength=Lh) + 0.5
        cum = np.cumsum(counts)[:-1] / counts.sum()
        tau_raw[R, : Lh - 1] = raw_from_thresholds(np.log(cum / (1 - cum))[None, :])[0]
        C = m.theta_.shape[1]
        rng = np.random.default_rng(self.seed)
        psi = np.vstack([m.psi_, rng.normal(0, 0.3, C)])
        blocks = {"theta": m.theta_.copy(), "phi": m.phi_.copy(), "psi": psi, "tau_raw": tau_raw}
        free = {
            "theta": _col_mask(C, FIXED_THETA_COL, len(m.prompts_)),
            "phi": _col_mask(C, FIXED_PHI_COL, len(m.models_)),
            "psi": np.ones_like(psi, bool),
            "tau_raw": np.zeros_like(tau_raw, bool),
        }
        free["tau_raw"][:R, : La - 1] = True
        free["tau_raw"][R, : Lh - 1] = True
        m._optimise(blocks, free, obs, np.array([La] * R + [Lh]))
        self.model_, self.blocks_, self.human_levels_ = m, blocks, Lh
        return self

    def predict_proba(self, prompts: Sequence[str], models: Sequence[str]) -> np.ndarray:
        m, b = self.model_, self.blocks_
        p = m._index(list(prompts), m.prompts_, "prompt")
        a = m._index(list(models), m.models_, "model")
        obs = Obs(p, a, np.full(len(p), -1), np.zeros_like(p), np.zeros_like(p))
        eta = pair_features(b["theta"], b["phi"], obs) @ b["psi"][-1]
        tau = thresholds_from_raw(b["tau_raw"][-1:, : self.human_levels_ - 1])[0]
        return level_probs(eta, tau)
