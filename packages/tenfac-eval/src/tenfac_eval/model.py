"""``TenFac``: pretrain prompt/model factors on autorater ratings, calibrate a human head, infer.

Stage 1 (``pretrain``): maximise the autorater likelihood of the ordinal CP model (``core``) over
prompt factors theta, model factors phi, autorater loadings psi and thresholds, with a Gaussian
penalty (l2 / 2) * ||.||^2 on the factors (a MAP fit), by L-BFGS on the exact gradient.

Stage 2 (``calibrate``): with theta and phi frozen, fit the human loadings psi_H and thresholds tau_H
by maximum likelihood — a cumulative-logit regression on the features x_pm = theta_p * phi_m — by
Newton's method; its observed information gives Wald intervals by the delta method.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.stats import norm

from papershelf.errors import InputError, check_choice, check_int, check_number
from papershelf.repro import atomic_write_json
from tenfac_eval.core import (
    FIXED_PHI_COL,
    FIXED_THETA_COL,
    Obs,
    fit_glm,
    level_probs,
    nll_and_grad,
    pair_features,
    raw_from_thresholds,
    thresholds_from_raw,
)
from tenfac_eval.data import Ratings

CI_METHODS = ("wald", "debiased", "bootstrap")
OBS_PER_PARAM = 10  # minimum human ratings per stage-2 parameter


def min_calibration_size(rank: int, n_levels: int) -> int:
    """Smallest human calibration set accepted: 10 ratings per stage-2 parameter ((rank + 2) + L - 1)."""
    return OBS_PER_PARAM * ((rank + 2) + (n_levels - 1))


class TenFac:
    """Ordinal CP factorisation of (prompt x model x rater) ratings with a calibrated human head.

    Parameters are stored verbatim; validation happens in :meth:`pretrain` / :meth:`calibrate`.
    ``rank``: K interaction factors (plus one model and one prompt main-effect column);
    ``l2``: Gaussian penalty on the factors in stage 1; ``max_iter``/``tol``: L-BFGS controls.
    """

    def __init__(
        self, rank: int = 4, *, l2: float = 1.0, max_iter: int = 300, tol: float = 1e-8, seed: int = 0
    ) -> None:
        self.rank = rank
        self.l2 = l2
        self.max_iter = max_iter
        self.tol = tol
        self.seed = seed

    # ---- encoding ----------------------------------------------------------------------------
    def _check_params(self) -> None:
        check_int("rank", self.rank, low=0, high=64)
        check_number("l2", self.l2, low=0)
        check_int("max_iter", self.max_iter, low=1)
        check_number("tol", self.tol, low=0)
        check_int("seed", self.seed, low=0)

    def _encode(self, ratings: Ratings, *, rater_index: Mapping[str, int], what: str) -> Obs:
        pi = {p: i for i, p in enumerate(self.prompts_)}
        mi = {m: i for i, m in enumerate(self.models_)}
        for col, table, label in ((ratings.prompt, pi, "prompt"), (ratings.model, mi, "model")):
            _check_known(col, table, label, what)
        if ratings.model_b is not None:
            _check_known(ratings.model_b, mi, "model", what)
        _check_known(ratings.rater, rater_index, "rater", what)
        p = np.fromiter((pi[x] for x in ratings.prompt), np.int64, len(ratings))
        a = np.fromiter((mi[x] for x in ratings.model), np.int64, len(ratings))
        b = (
            np.full(len(ratings), -1, np.int64)
            if ratings.model_b is None
            else np.fromiter((mi[x] for x in ratings.model_b), np.int64, len(ratings))
        )
        r = np.fromiter((rater_index[x] for x in ratings.rater), np.int64, len(ratings))
        return Obs(p, a, b, r, ratings.level.astype(np.int64))

    # ---- stage 1 -------------------------------------------------------------------------------
    def pretrain(self, autorater: Ratings, *, init: TenFac | None = None) -> TenFac:
        """Stage 1: fit theta, phi, psi and thresholds on autorater ratings (MAP, L-BFGS)."""
        self._check_params()
        if not isinstance(autorater, Ratings):
            raise InputError("autorater must be a Ratings object (see tenfac_eval.read_ratings)")
        self.prompts_ = sorted(set(autorater.prompt.tolist()))
        models = set(autorater.model.tolist())
        if autorater.model_b is not None:
            models |= set(autorater.model_b.tolist())
        self.models_ = sorted(models)
        self.raters_ = sorted(set(autorater.rater.tolist()))
        self.auto_scale_ = autorater.scale
        self.auto_pairwise_ = autorater.pairwise
        L = len(autorater.scale)
        obs = self._encode(
            autorater, rater_index={r: i for i, r in enumerate(self.raters_)}, what="autorater"
        )
        for r_i, name in enumerate(self.raters_):
            seen = np.unique(obs.y[obs.r == r_i])
            if seen.size < 2:
                raise InputError(f"autorater {name!r} uses a single rating level; it carries no information")
        C = self.rank + 2
        P, M, R = len(self.prompts_), len(self.models_), len(self.raters_)
        rng = np.random.default_rng(self.seed)
        theta = rng.normal(0, 0.3, (P, C))
        phi = rng.normal(0, 0.3, (M, C))
        psi = rng.normal(0, 0.3, (R, C))
        tau_raw = np.empty((R, L - 1))
        for r_i in range(R):
            counts = np.bincount(obs.y[obs.r == r_i], minlength=L) + 0.5
            cum = np.cumsum(counts)[:-1] / counts.sum()
            tau_raw[r_i] = raw_from_thresholds(np.log(cum / (1 - cum))[None, :])[0]
        if init is not None:  # warm start from a previous fit (bootstrap, refits)
            theta, phi, psi, tau_raw = _warm(init, self, theta, phi, psi, tau_raw)
        theta[:, FIXED_THETA_COL] = 1.0
        phi[:, FIXED_PHI_COL] = 1.0
        n_levels = np.full(R, L)
        blocks = {"theta": theta, "phi": phi, "psi": psi, "tau_raw": tau_raw}
        free = {
            "theta": _col_mask(C, FIXED_THETA_COL, P),
            "phi": _col_mask(C, FIXED_PHI_COL, M),
            "psi": np.ones((R, C), bool),
            "tau_raw": np.ones((R, L - 1), bool),
        }
        self._optimise(blocks, free, obs, n_levels)
        self.theta_, self.phi_, self.psi_, self.tau_raw_ = (
            blocks[k] for k in ("theta", "phi", "psi", "tau_raw")
        )
        self.n_auto_ = len(obs)
        self._auto_obs = obs
        return self

    def _optimise(
        self, blocks: dict[str, np.ndarray], free: dict[str, np.ndarray], obs: Obs, n_levels
    ) -> None:
        names = [k for k in blocks if free[k].any()]
        n = max(len(obs), 1)
        l2 = float(self.l2)

        def unpack(vec: np.ndarray) -> None:
            i = 0
            for k in names:
                m = free[k]
                c = int(m.sum())
                blocks[k][m] = vec[i : i + c]
                i += c

        def fun(vec: np.ndarray):
            unpack(vec)
            with np.errstate(all="ignore"):  # a wild line-search trial point is rejected below
                f, g = nll_and_grad(
                    blocks["theta"], blocks["phi"], blocks["psi"], blocks["tau_raw"], obs, n_levels
                )
            if not (np.isfinite(f) and all(np.all(np.isfinite(v)) for v in g.values())):
                return 1e20, np.zeros_like(vec)
            out = []
            for k in names:
                gk = g[k]
                if k != "tau_raw":
                    vals = blocks[k] * free[k]
                    f += 0.5 * l2 * float(np.sum(vals**2))
                    gk = gk + l2 * vals
                out.append(gk[free[k]])
            return f / n, np.concatenate(out) / n

        x0 = np.concatenate([blocks[k][free[k]] for k in names])
        res = minimize(
            fun,
            x0,
            jac=True,
            method="L-BFGS-B",
            options={"maxiter": int(self.max_iter), "ftol": float(self.tol), "gtol": 1e-7, "maxcor": 20},
        )
        unpack(res.x)
        self.stage1_result_ = {
            "nit": int(res.nit),
            "objective": float(res.fun),
            "converged": bool(res.success),
        }

    # ---- stage 2 -------------------------------------------------------------------------------
    def calibrate(self, human: Ratings, *, rater: str = "human", l2: float = 0.0) -> TenFac:
        """Stage 2: with theta and phi frozen, fit the human head (psi_H, tau_H) by maximum likelihood."""
        self._require_pretrained()
        if not isinstance(human, Ratings):
            raise InputError("human must be a Ratings object (see tenfac_eval.read_ratings)")
        if rater in self.raters_:
            raise InputError(
                f"human rater name {rater!r} is already an autorater id; pick another --human-rater"
            )
        l2 = check_number("l2", l2, low=0)
        obs = self._encode(human, rater_index={rater: 0}, what="human set")
        L = len(human.scale)
        need = min_calibration_size(self.rank, L)
        if len(obs) < need:
            raise InputError(
                f"human calibration set has {len(obs)} ratings; rank {self.rank} with {L} levels "
                f"needs at least "
                f"{need} ({OBS_PER_PARAM} per stage-2 parameter) — add labels or lower --rank"
            )
        counts = np.bincount(obs.y, minlength=L)
        if np.any(counts == 0):
            missing = [human.scale[j] for j in np.flatnonzero(counts == 0)]
            raise InputError(
                f"human set never uses level(s) {missing} of its scale; the thresholds are not identified — "
                "declare a smaller --human-scale"
            )
        X = pair_features(self.theta_, self.phi_, obs)
        active = np.flatnonzero(np.any(X != 0, axis=0))
        beta, tau, H = fit_glm(X[:, active], obs.y, L, l2=l2)
        if not (np.all(np.isfinite(beta)) and np.all(np.isfinite(tau))):
            raise InputError(
                "stage-2 fit diverged (the human ratings are perfectly separated by the features)"
            )
        psi_h = np.zeros(self.theta_.shape[1])
        psi_h[active] = beta
        self.human_rater_ = rater
        self.human_scale_ = human.scale
        self.human_pairwise_ = human.pairwise
        self.psi_h_ = psi_h
        self.tau_h_ = tau
        self.active_ = active
        self.cov_h_ = _safe_inverse(-H)
        self._human_obs = obs
        self._human = human
        return self

    def fit(self, autorater: Ratings, human: Ratings, *, rater: str = "human") -> TenFac:
        """Stage 1 then stage 2."""
        return self.pretrain(autorater).calibrate(human, rater=rater)

    # ---- fold-in -------------------------------------------------------------------------------
    def fold_in_prompts(self, autorater: Ratings) -> TenFac:
        """Add new prompts: fit their theta rows from their autorater ratings, everything else frozen."""
        return self._fold_in(autorater, "prompt")

    def fold_in_models(self, autorater: Ratings) -> TenFac:
        """Add new generative models: fit their phi rows from autorater ratings alone (no human labels)."""
        return self._fold_in(autorater, "model")

    def _fold_in(self, autorater: Ratings, kind: str) -> TenFac:
        self._require_pretrained()
        if autorater.scale != self.auto_scale_:
            raise InputError(f"fold-in ratings use scale {autorater.scale}, the fit used {self.auto_scale_}")
        ids = autorater.prompt if kind == "prompt" else autorater.model
        known = self.prompts_ if kind == "prompt" else self.models_
        new = sorted(set(ids.tolist()) - set(known))
        if not new:
            raise InputError(f"no new {kind} ids to fold in (all are already in the fit)")
        C = self.theta_.shape[1]
        if kind == "prompt":
            self.prompts_ = list(self.prompts_) + new
            self.theta_ = np.concatenate([self.theta_, _fresh(len(new), C, FIXED_THETA_COL)])
        else:
            self.models_ = list(self.models_) + new
            self.phi_ = np.concatenate([self.phi_, _fresh(len(new), C, FIXED_PHI_COL)])
        obs = self._encode(
            autorater, rater_index={r: i for i, r in enumerate(self.raters_)}, what="fold-in set"
        )
        start = len(known)
        sel = (obs.p if kind == "prompt" else obs.a) >= start
        if kind == "model" and (obs.b >= 0).any():
            sel |= obs.b >= start
        obs = obs.take(np.flatnonzero(sel))
        blocks = {"theta": self.theta_, "phi": self.phi_, "psi": self.psi_, "tau_raw": self.tau_raw_.copy()}
        free = {k: np.zeros_like(v, bool) for k, v in blocks.items()}
        key, fixed = ("theta", FIXED_THETA_COL) if kind == "prompt" else ("phi", FIXED_PHI_COL)
        free[key][start:] = True
        free[key][:, fixed] = False
        self._optimise(blocks, free, obs, np.full(len(self.raters_), len(self.auto_scale_)))
        self.theta_, self.phi_ = blocks["theta"], blocks["phi"]
        return self

    # ---- prediction ------------------------------------------------------------------------------
    def _index(self, ids: Sequence[str], table: Sequence[str], label: str) -> np.ndarray:
        lookup = {x: i for i, x in enumerate(table)}
        _check_known(np.asarray(ids, dtype=object), lookup, label, "request")
        return np.fromiter((lookup[x] for x in ids), np.int64, len(ids))

    def eta(
        self,
        prompts: Sequence[str],
        models: Sequence[str],
        rater: str | None = None,
        models_b: Sequence[str] | None = None,
    ) -> np.ndarray:
        """Linear predictor for (prompt, model[, model_b]) pairs under ``rater`` (default: human)."""
        psi, _ = self._rater_head(rater)
        p = self._index(prompts, self.prompts_, "prompt")
        a = self._index(models, self.models_, "model")
        b = np.full(len(a), -1) if models_b is None else self._index(models_b, self.models_, "model")
        obs = Obs(p, a, b, np.zeros_like(p), np.zeros_like(p))
        return pair_features(self.theta_, self.phi_, obs) @ psi

    def _rater_head(self, rater: str | None) -> tuple[np.ndarray, np.ndarray]:
        if rater is None or rater == getattr(self, "human_rater_", None):
            self._require_calibrated()
            return self.psi_h_, self.tau_h_
        self._require_pretrained()
        if rater not in self.raters_:
            raise InputError(f"unknown rater {rater!r}; known: {', '.join(self.raters_)}")
        r = self.raters_.index(rater)
        return self.psi_[r], thresholds_from_raw(self.tau_raw_[r : r + 1])[0]

    def predict_proba(
        self,
        prompts: Sequence[str],
        models: Sequence[str],
        rater: str | None = None,
        models_b: Sequence[str] | None = None,
    ) -> np.ndarray:
        """P(rating = each scale level) for each pair, (n, L) float64; rater None = the human head."""
        _, tau = self._rater_head(rater)
        return level_probs(self.eta(prompts, models, rater, models_b), tau)

    def expected_score(self, prompts: Sequence[str], models: Sequence[str]) -> np.ndarray:
        """Expected human rating (on the human scale's values) for each (prompt, model) pair, (n,)."""
        return self.predict_proba(prompts, models) @ np.asarray(self.human_scale_)

    # ---- inference -------------------------------------------------------------------------------
    def model_means(
        self,
        prompts: Sequence[str] | None = None,
        *,
        ci: str = "wald",
        level: float = 0.95,
        n_boot: int = 200,
        models: Sequence[str] | None = None,
    ) -> list[dict[str, Any]]:
        """Mean human score of each model over ``prompts`` (default all) with a ``level`` interval.

        ``ci="wald"``: delta method on the stage-2 observed information, conditional on the stage-1
        factors. ``"debiased"``: the model's mean prediction plus the mean human residual on the
        calibration cells among ``prompts``, with a CLT interval (valid even if the model is wrong).
        ``"bootstrap"``: percentile interval over ``n_boot`` refits of both stages on prompts resampled
        with replacement.
        """
        self._require_calibrated()
        if self.human_pairwise_:
            raise InputError(
                "model means need absolute human ratings; this fit was calibrated on side-by-side data"
            )
        check_choice("ci", ci, CI_METHODS)
        level = check_number("level", level, low=0, high=1, low_open=True, high_open=True)
        prompts = list(self.prompts_) if prompts is None else list(prompts)
        if not prompts:
            raise InputError("prompts is empty")
        models = list(self.models_) if models is None else list(models)
        z = float(norm.ppf(0.5 + level / 2))
        p_idx = self._index(prompts, self.prompts_, "prompt")
        if ci == "bootstrap":
            if not hasattr(self, "_auto_obs"):  # a saved model keeps the fit, not the ratings it refits
                raise InputError(
                    "ci='bootstrap' refits both stages on the ratings, which a loaded model does not keep; "
                    "fit the model again in this session, or use ci='wald' or 'debiased'"
                )
            boot = self._bootstrap_means(p_idx, models, check_int("n_boot", n_boot, low=10))
            alpha = 1 - level
        rows = []
        values = np.asarray(self.human_scale_)
        for m in models:
            mi = self._index([m], self.models_, "model")[0]
            est, grad = self._mean_and_grad(p_idx, mi)
            if ci == "wald":
                se = float(math.sqrt(max(grad @ self.cov_h_ @ grad, 0.0)))
                lo, hi = est - z * se, est + z * se
            elif ci == "debiased":
                est, se = self._debiased(p_idx, mi, est, values)
                lo, hi = est - z * se, est + z * se
            else:
                draws = boot[m]
                lo, hi = (float(v) for v in np.quantile(draws, [alpha / 2, 1 - alpha / 2]))
                se = float(np.std(draws, ddof=1))
            rows.append(
                {"model": m, "estimate": float(est), "lower": float(lo), "upper": float(hi), "se": se}
            )
        return rows

    def _mean_and_grad(self, p_idx: np.ndarray, mi: int) -> tuple[float, np.ndarray]:
        """Mean expected human score over prompts p_idx for model mi, and its gradient in (beta, tau)."""
        X = self.theta_[p_idx] * self.phi_[mi][None, :]
        Xa = X[:, self.active_]
        eta = Xa @ self.psi_h_[self.active_]
        v = np.asarray(self.human_scale_)
        dv = np.diff(v)
        s = 1.0 / (1.0 + np.exp(-(self.tau_h_[None, :] - eta[:, None])))  # (n, L-1)
        f = s * (1 - s)
        score = v[-1] - (s * dv[None, :]).sum(1)
        g_beta = ((f * dv[None, :]).sum(1)[:, None] * Xa).mean(0)
        g_tau = -(f * dv[None, :]).mean(0)
        return float(score.mean()), np.concatenate([g_beta, g_tau])

    def _debiased(self, p_idx: np.ndarray, mi: int, est: float, values: np.ndarray) -> tuple[float, float]:
        obs = self._human_obs
        inside = np.isin(obs.p, p_idx) & (obs.a == mi) & (obs.b < 0)
        n = int(inside.sum())
        if n < 2:
            raise InputError(
                f"ci='debiased' needs at least 2 human ratings of model {self.models_[mi]!r} "
                "in the prompt set"
            )
        pr = [self.prompts_[i] for i in obs.p[inside]]
        resid = values[obs.y[inside]] - self.expected_score(pr, [self.models_[mi]] * n)
        X = self.theta_[p_idx] * self.phi_[mi][None, :]
        v = np.asarray(self.human_scale_)
        f_all = level_probs(X @ self.psi_h_, self.tau_h_) @ v
        var = resid.var(ddof=1) / n + f_all.var(ddof=1) / max(len(p_idx), 2) * (len(p_idx) > 1)
        return est + float(resid.mean()), float(math.sqrt(var))

    def _bootstrap_means(
        self, p_idx: np.ndarray, models: Sequence[str], n_boot: int
    ) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(self.seed + 1)
        auto, human = self._auto_obs, self._human_obs
        P = len(self.prompts_)
        out: dict[str, list[float]] = {m: [] for m in models}
        for _ in range(n_boot):
            draw = rng.integers(0, P, P)
            mult = np.bincount(draw, minlength=P)
            a_rows = np.repeat(np.arange(len(auto)), mult[auto.p])
            h_rows = np.repeat(np.arange(len(human)), mult[human.p])
            sub = TenFac(self.rank, l2=self.l2, max_iter=self.max_iter, tol=self.tol, seed=self.seed)
            _copy_encoding(self, sub)
            blocks = {
                "theta": self.theta_.copy(),
                "phi": self.phi_.copy(),
                "psi": self.psi_.copy(),
                "tau_raw": self.tau_raw_.copy(),
            }
            C = blocks["theta"].shape[1]
            free = {
                "theta": _col_mask(C, FIXED_THETA_COL, P),
                "phi": _col_mask(C, FIXED_PHI_COL, len(self.models_)),
                "psi": np.ones_like(self.psi_, bool),
                "tau_raw": np.ones_like(self.tau_raw_, bool),
            }
            free["theta"][mult == 0] = False
            sub._optimise(blocks, free, auto.take(a_rows), np.full(len(self.raters_), len(self.auto_scale_)))
            hb = human.take(h_rows)
            X = pair_features(blocks["theta"], blocks["phi"], hb)
            if np.bincount(hb.y, minlength=len(self.human_scale_)).min() == 0:
                continue
            beta, tau, _ = fit_glm(X[:, self.active_], hb.y, len(self.human_scale_))
            v = np.asarray(self.human_scale_)
            pw = mult[p_idx].astype(float)
            for m in models:
                mi = self.models_.index(m)
                Xm = (blocks["theta"][p_idx] * blocks["phi"][mi][None, :])[:, self.active_]
                sc = level_probs(Xm @ beta, tau) @ v
                # resampled prompt population: weights = bootstrap multiplicities of the evaluated prompts
                w = pw if pw.sum() > 0 else np.ones_like(pw)
                out[m].append(float(np.sum(w * sc) / w.sum()))
        return {m: np.asarray(v) for m, v in out.items()}

    def leaderboard(
        self, groups: Mapping[str, str] | None = None, *, ci: str = "wald", level: float = 0.95
    ) -> list[dict[str, Any]]:
        """Models ranked by mean human score, overall or within each prompt group ({prompt: group}).

        Rows: group, rank, model, estimate, lower, upper, se, n_prompts. Prompts missing from the
        fit are an error; fit prompts missing from ``groups`` are left out of every group.
        """
        self._require_calibrated()
        if groups is None:
            buckets = {"all": list(self.prompts_)}
        else:
            unknown = sorted(set(groups) - set(self.prompts_))
            if unknown:
                raise InputError(f"groups names unknown prompt id(s) {unknown[:3]}; fold them in first")
            buckets = {}
            for pid in self.prompts_:
                if pid in groups:
                    buckets.setdefault(groups[pid], []).append(pid)
        rows = []
        for g in sorted(buckets):
            res = sorted(self.model_means(buckets[g], ci=ci, level=level), key=lambda r: -r["estimate"])
            for rank, r in enumerate(res, 1):
                rows.append({"group": g, "rank": rank, **r, "n_prompts": len(buckets[g])})
        return rows

    # ---- persistence -----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        self._require_pretrained()
        out = {
            "format": "tenfac-eval/1",
            "rank": self.rank,
            "l2": self.l2,
            "seed": self.seed,
            "prompts": list(self.prompts_),
            "models": list(self.models_),
            "raters": list(self.raters_),
            "auto_scale": list(self.auto_scale_),
            "theta": self.theta_,
            "phi": self.phi_,
            "psi": self.psi_,
            "tau_raw": self.tau_raw_,
        }
        if hasattr(self, "psi_h_"):
            out.update(
                human_rater=self.human_rater_,
                human_scale=list(self.human_scale_),
                human_pairwise=self.human_pairwise_,
                psi_h=self.psi_h_,
                tau_h=self.tau_h_,
                active=self.active_,
                cov_h=self.cov_h_,
                human_obs={k: getattr(self._human_obs, k) for k in ("p", "a", "b", "y")},
            )
        return out

    def save(self, path: str | Path) -> None:
        atomic_write_json(path, self.to_dict(), indent=None)

    @classmethod
    def load(cls, path: str | Path) -> TenFac:
        p = Path(path)
        if not p.is_file():
            raise InputError(f"model file {str(p)!r} does not exist")
        try:
            d = json.loads(p.read_text(encoding="utf-8"))
            if not isinstance(d, dict) or d.get("format") != "tenfac-eval/1":
                raise KeyError("format")
            m = cls(d["rank"], l2=d["l2"], seed=d["seed"])
            m.prompts_, m.models_, m.raters_ = d["prompts"], d["models"], d["raters"]
            m.auto_scale_ = tuple(d["auto_scale"])
            m.theta_, m.phi_, m.psi_, m.tau_raw_ = (
                np.asarray(d[k], float) for k in ("theta", "phi", "psi", "tau_raw")
            )
            if "psi_h" in d:
                m.human_rater_, m.human_scale_ = d["human_rater"], tuple(d["human_scale"])
                m.human_pairwise_ = bool(d["human_pairwise"])
                m.psi_h_, m.tau_h_ = np.asarray(d["psi_h"], float), np.asarray(d["tau_h"], float)
                m.active_, m.cov_h_ = np.asarray(d["active"], np.int64), np.asarray(d["cov_h"], float)
                ho = {k: np.asarray(d["human_obs"][k], np.int64) for k in ("p", "a", "b", "y")}
                m._human_obs = Obs(ho["p"], ho["a"], ho["b"], np.zeros_like(ho["p"]), ho["y"])
        except (json.JSONDecodeError, UnicodeDecodeError, KeyError, TypeError, ValueError):
            raise InputError(f"{p.name} is not a tenfac-eval model file") from None
        problem = _state_problem(m)
        if problem:
            raise InputError(f"{p.name} is a corrupt tenfac-eval model file: {problem}")
        return m

    def _require_pretrained(self) -> None:
        if not hasattr(self, "theta_"):
            raise InputError("the model is not pretrained; call pretrain() (stage 1) first")

    def _require_calibrated(self) -> None:
        self._require_pretrained()
        if not hasattr(self, "psi_h_"):
            raise InputError("the model has no human head; call calibrate() (stage 2) first")


def _state_problem(m: TenFac) -> str | None:
    """What is inconsistent in a loaded model's blocks, or ``None``: every id list, block shape, scale
    and index range is checked, so a hand-edited file fails here, not as a silent misalignment of ids
    and rows (or an IndexError) later."""
    if isinstance(m.rank, bool) or not isinstance(m.rank, int) or not 0 <= m.rank <= 64:
        return f"rank must be an integer in [0, 64], got {m.rank!r}"
    if isinstance(m.l2, bool) or not isinstance(m.l2, (int, float)) or not 0 <= m.l2 < math.inf:
        return f"l2 must be a finite number >= 0, got {m.l2!r}"
    if isinstance(m.seed, bool) or not isinstance(m.seed, int) or m.seed < 0:
        return f"seed must be an integer >= 0, got {m.seed!r}"
    if hasattr(m, "psi_h_") and not isinstance(m.human_rater_, str):
        return "human_rater must be a string"
    ids = {"prompts": m.prompts_, "models": m.models_, "raters": m.raters_}
    for name, values in ids.items():
        if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
            return f"{name} must be a non-empty list of id strings"
        if len(set(values)) != len(values):
            return f"{name} repeats an id"
    C = m.rank + 2
    P, M, R = len(m.prompts_), len(m.models_), len(m.raters_)
    scales = {"auto_scale": m.auto_scale_}
    if hasattr(m, "psi_h_"):
        scales["human_scale"] = m.human_scale_
    for name, scale in scales.items():
        try:
            v = np.asarray(scale, float)
        except (TypeError, ValueError):
            return f"{name} must be at least two increasing numbers"
        if v.ndim != 1 or v.size < 2 or not np.all(np.isfinite(v)) or np.any(np.diff(v) <= 0):
            return f"{name} must be at least two increasing numbers"
    shapes = {
        "theta": (m.theta_, (P, C)),
        "phi": (m.phi_, (M, C)),
        "psi": (m.psi_, (R, C)),
        "tau_raw": (m.tau_raw_, (R, len(m.auto_scale_) - 1)),
    }
    if hasattr(m, "psi_h_"):
        Lh, A = len(m.human_scale_), m.active_.size
        shapes.update(psi_h=(m.psi_h_, (C,)), tau_h=(m.tau_h_, (Lh - 1,)))
        shapes.update(cov_h=(m.cov_h_, (A + Lh - 1,) * 2))
        if m.active_.ndim != 1 or np.any((m.active_ < 0) | (m.active_ >= C)):
            return f"active must list feature columns in [0, {C})"
        o = m._human_obs
        bounds = {"p": (o.p, 0, P), "a": (o.a, 0, M), "b": (o.b, -1, M), "y": (o.y, 0, Lh)}
        for key, (col, low, high) in bounds.items():
            if col.ndim != 1 or col.size != o.p.size or np.any((col < low) | (col >= high)):
                return f"human_obs.{key} must hold {o.p.size} indices in [{low}, {high})"
    for name, (block, shape) in shapes.items():
        if block.shape != shape:
            return f"{name} has shape {block.shape}, expected {shape}"
        if not np.all(np.isfinite(block)):
            return f"{name} holds NaN or infinite values"
    return None


def _check_known(col: np.ndarray, table: Mapping[str, int], label: str, what: str) -> None:
    unknown = sorted(set(col.tolist()) - set(table))
    if unknown:
        shown = ", ".join(repr(u) for u in unknown[:3]) + (" …" if len(unknown) > 3 else "")
        raise InputError(f"unknown {label} id(s) in the {what}: {shown} ({len(unknown)} in all)")


def _col_mask(C: int, fixed: int, rows: int) -> np.ndarray:
    m = np.ones((rows, C), bool)
    m[:, fixed] = False
    return m


def _fresh(n: int, C: int, fixed: int) -> np.ndarray:
    out = np.zeros((n, C))
    out[:, fixed] = 1.0
    return out


def _safe_inverse(A: np.ndarray) -> np.ndarray:
    try:
        return np.linalg.inv(A)
    except np.linalg.LinAlgError:
        return np.linalg.pinv(A)


def _copy_encoding(src: TenFac, dst: TenFac) -> None:
    for k in ("prompts_", "models_", "raters_", "auto_scale_", "auto_pairwise_"):
        setattr(dst, k, getattr(src, k))


def _warm(init: TenFac, new: TenFac, theta, phi, psi, tau_raw):
    """Copy rows of a previous fit's blocks into fresh blocks wherever the ids match."""
    for old_ids, new_ids, old, cur in (
        (init.prompts_, new.prompts_, init.theta_, theta),
        (init.models_, new.models_, init.phi_, phi),
        (init.raters_, new.raters_, init.psi_, psi),
    ):
        pos = {x: i for i, x in enumerate(old_ids)}
        for j, x in enumerate(new_ids):
            if x in pos and old.shape[1] == cur.shape[1]:
                cur[j] = old[pos[x]]
    pos = {x: i for i, x in enumerate(init.raters_)}
    for j, x in enumerate(new.raters_):
        if x in pos and init.tau_raw_.shape[1] == tau_raw.shape[1]:
            tau_raw[j] = init.tau_raw_[pos[x]]
    return theta, phi, psi, tau_raw
