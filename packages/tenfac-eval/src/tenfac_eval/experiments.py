"""The headline experiments at small scale: per-cell human log-loss, CI width/coverage, robustness,
fitting time, new-model fold-in and granular leaderboards — TenFac against the anchors, same run."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import numpy as np

from tenfac_eval.baselines import HumanOnly, MaskedCP, ppi_plus_plus, raw_autorater
from tenfac_eval.data import Ratings
from tenfac_eval.model import TenFac
from tenfac_eval.simulate import digits_proxy, simulate, split_human


def _logloss(probs: np.ndarray, levels: np.ndarray) -> float:
    return float(-np.mean(np.log(np.clip(probs[np.arange(levels.size), levels], 1e-12, 1.0))))


def compare_predictions(
    auto: Ratings,
    human_all: Ratings,
    *,
    frac: float = 0.1,
    rank: int = 2,
    seed: int = 0,
    masked_cp: bool = True,
    oracle: Any = None,
) -> dict[str, Any]:
    """Held-out per-(prompt, model) human log-loss of TenFac and the anchors at ``frac`` human labels."""
    cal, held = split_human(human_all, frac, seed=seed)
    t0 = time.perf_counter()
    model = TenFac(rank, seed=seed).pretrain(auto)
    t_stage1 = time.perf_counter() - t0
    model.calibrate(cal)
    t_fit = time.perf_counter() - t0
    hp, hm = list(held.prompt), list(held.model)
    out = {
        "n_calibration": len(cal),
        "n_heldout": len(held),
        "fit_seconds": t_fit,
        "stage1_seconds": t_stage1,
        "stage1_iterations": model.stage1_result_["nit"],
        "logloss": {
            "tenfac": _logloss(model.predict_proba(hp, hm), held.level),
            "human-only": _logloss(HumanOnly(seed=seed).fit(cal).predict_proba(hp, hm), held.level),
            "raw-autorater": _logloss(raw_autorater(auto, hp, hm, human_all.scale)[1], held.level),
        },
    }
    if masked_cp:
        out["logloss"]["masked-cp"] = _logloss(
            MaskedCP(rank, seed=seed).fit(auto, cal).predict_proba(hp, hm), held.level
        )
    if oracle is not None:  # the simulation's true probabilities: the best any method can do
        pi = {p: i for i, p in enumerate(oracle.prompts)}
        mi = {m: i for i, m in enumerate(oracle.models)}
        truth = oracle.human_probs[[pi[p] for p in hp], [mi[m] for m in hm]]
        out["oracle_logloss"] = _logloss(truth, held.level)
    out["ratio_tenfac_over_human_only"] = out["logloss"]["tenfac"] / out["logloss"]["human-only"]
    return out


def raw_scores(
    auto: Ratings, prompts: list[str], models: list[str], human_scale
) -> dict[tuple[str, str], float]:
    """The raw-autorater score of every (prompt, model) cell, as a lookup table."""
    pp = [p for p in prompts for _ in models]
    mm = [m for _ in prompts for m in models]
    return dict(zip(zip(pp, mm, strict=True), raw_autorater(auto, pp, mm, human_scale)[0], strict=True))


def mean_intervals(
    model: TenFac,
    auto: Ratings,
    cal: Ratings,
    prompts: list[str],
    truth: dict[str, float],
    *,
    level: float = 0.95,
    raw: dict | None = None,
) -> dict[str, dict[str, list[float]]]:
    """Per-model intervals for the mean human score over ``prompts``: TenFac (wald, debiased) and PPI++."""
    out: dict[str, dict[str, list[float]]] = {}
    for ci in ("wald", "debiased"):
        rows = model.model_means(prompts, ci=ci, level=level)
        out[f"tenfac-{ci}"] = {
            "width": [r["upper"] - r["lower"] for r in rows],
            "covered": [float(r["lower"] <= truth[r["model"]] <= r["upper"]) for r in rows],
        }
    out["ppi++"] = {"width": [], "covered": []}
    hvals = cal.values
    raw = raw if raw is not None else raw_scores(auto, prompts, list(model.models_), cal.scale)
    for m in model.models_:
        lab = cal.model == m
        lab_prompts = set(cal.prompt[lab].tolist())
        unl = [p for p in prompts if p not in lab_prompts]
        f_lab = np.array([raw[(p, m)] for p in cal.prompt[lab]])
        f_unl = np.array([raw[(p, m)] for p in unl])
        r = ppi_plus_plus(hvals[lab], f_lab, f_unl, level=level)
        out["ppi++"]["width"].append(r["upper"] - r["lower"])
        out["ppi++"]["covered"].append(float(r["lower"] <= truth[m] <= r["upper"]))
    return out


def coverage_study(
    n_sims: int = 200,
    *,
    n_prompts: int = 300,
    n_models: int = 8,
    n_raters: int = 3,
    rank: int = 2,
    frac: float = 0.1,
    level: float = 0.95,
    inverted: int = 0,
    seed: int = 0,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Coverage and mean width of 95% intervals for every model's mean human score, over simulations
    from the model (new factors, ratings and calibration draw each time)."""
    acc: dict[str, dict[str, list[float]]] = {}
    for s in range(n_sims):
        sim = simulate(n_prompts, n_models, n_raters, rank=rank, inverted=inverted, seed=seed + 1000 * s + 7)
        cal, _ = split_human(sim.human_all, frac, seed=seed + s)
        model = TenFac(rank, seed=s).fit(sim.autorater, cal)
        truth = dict(zip(sim.models, sim.human_mean.mean(0), strict=True))
        res = mean_intervals(model, sim.autorater, cal, sim.prompts, truth, level=level)
        for k, v in res.items():
            acc.setdefault(k, {"width": [], "covered": []})
            acc[k]["width"] += v["width"]
            acc[k]["covered"] += v["covered"]
        if progress:
            progress(s)
    return {
        "n_sims": n_sims,
        "setting": {
            "n_prompts": n_prompts,
            "n_models": n_models,
            "n_raters": n_raters,
            "rank": rank,
            "frac": frac,
            "level": level,
        },
        "methods": {
            k: {"coverage": float(np.mean(v["covered"])), "mean_width": float(np.mean(v["width"]))}
            for k, v in acc.items()
        },
    }


def digits_study(*, frac: float = 0.1, rank: int = 2, n_draws: int = 200, seed: int = 0) -> dict[str, Any]:
    """The digits proxy: held-out log-loss (with the inverted judge present) and, over ``n_draws``
    calibration draws on the same stage-1 fit, coverage/width of model-accuracy intervals."""
    dp = digits_proxy(seed=seed)
    pred = compare_predictions(dp.autorater, dp.human_all, frac=frac, rank=rank, seed=seed)
    model = TenFac(rank, seed=seed).pretrain(dp.autorater)
    truth = dict(zip(dp.models, dp.correct.mean(0), strict=True))
    acc: dict[str, dict[str, list[float]]] = {}
    raw = raw_scores(dp.autorater, dp.prompts, dp.models, dp.human_all.scale)
    for d in range(n_draws):
        cal, _ = split_human(dp.human_all, frac, seed=10_000 + d)
        model.calibrate(cal)
        for k, v in mean_intervals(model, dp.autorater, cal, dp.prompts, truth, raw=raw).items():
            acc.setdefault(k, {"width": [], "covered": []})
            acc[k]["width"] += v["width"]
            acc[k]["covered"] += v["covered"]
    return {
        "n_prompts": len(dp.prompts),
        "models": dp.models,
        "judges": dp.judges,
        "accuracy": {m: float(a) for m, a in truth.items()},
        "prediction": pred,
        "intervals": {
            "n_draws": n_draws,
            "methods": {
                k: {"coverage": float(np.mean(v["covered"])), "mean_width": float(np.mean(v["width"]))}
                for k, v in acc.items()
            },
        },
    }


def new_model_study(
    *, n_prompts: int = 1000, rank: int = 2, frac: float = 0.1, seed: int = 0
) -> dict[str, Any]:
    """Leave one generative model out of both stages; fold it in from autorater ratings alone and
    estimate its mean human score (no human label of it is used)."""
    sim = simulate(n_prompts, 8, 4, rank=rank, seed=seed + 3)
    held_model = sim.models[-1]
    auto_in = sim.autorater.subset(sim.autorater.model != held_model)
    auto_new = sim.autorater.subset(sim.autorater.model == held_model)
    human_in = sim.human_all.subset(sim.human_all.model != held_model)
    cal, _ = split_human(human_in, frac, seed=seed)
    model = TenFac(rank, seed=seed).fit(auto_in, cal)
    model.fold_in_models(auto_new)
    est = model.model_means(models=[held_model])[0]["estimate"]
    raw = float(
        raw_autorater(sim.autorater, sim.prompts, [held_model] * len(sim.prompts), sim.human_all.scale)[
            0
        ].mean()
    )
    truth = float(sim.human_mean[:, -1].mean())
    return {
        "model": held_model,
        "truth": truth,
        "tenfac_fold_in": float(est),
        "raw_autorater": raw,
        "abs_error": {"tenfac_fold_in": abs(est - truth), "raw_autorater": abs(raw - truth)},
    }


def leaderboard_study(
    *, n_prompts: int = 1000, rank: int = 2, frac: float = 0.1, seed: int = 0
) -> dict[str, Any]:
    """Granular leaderboards by prompt group: Spearman correlation of the estimated and true per-group
    model orderings, TenFac against the human-only calibration means."""
    from scipy.stats import spearmanr

    sim = simulate(n_prompts, 8, 3, rank=rank, seed=seed + 5)
    cal, _ = split_human(sim.human_all, frac, seed=seed)
    model = TenFac(rank, seed=seed).fit(sim.autorater, cal)
    board = model.leaderboard(sim.groups)
    out = {}
    groups = sorted(set(sim.groups.values()))
    for g in groups:
        pidx = [i for i, p in enumerate(sim.prompts) if sim.groups[p] == g]
        truth = sim.human_mean[pidx].mean(0)
        est = np.array(
            [next(r["estimate"] for r in board if r["group"] == g and r["model"] == m) for m in sim.models]
        )
        in_g = np.isin(cal.prompt, [sim.prompts[i] for i in pidx])
        naive = np.array([cal.values[in_g & (cal.model == m)].mean() for m in sim.models])
        out[g] = {
            "spearman_tenfac": float(spearmanr(est, truth)[0]),
            "spearman_human_mean": float(spearmanr(naive, truth)[0]),
            "n_prompts": len(pidx),
        }
    return out


def headline(
    *,
    quick: bool = False,
    seed: int = 0,
    n_sims: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Everything the issue's targets need, in one run."""
    say = progress or (lambda _msg: None)
    if quick:
        sizes = {"P": 200, "M": 5, "R": 3, "sims": n_sims or 3, "cov_P": 200, "draws": 3}
    else:
        sizes = {"P": 3000, "M": 8, "R": 4, "sims": n_sims or 200, "cov_P": 300, "draws": 200}
    say(f"simulated prediction, P={sizes['P']} M={sizes['M']} R={sizes['R']}")
    sim = simulate(sizes["P"], sizes["M"], sizes["R"], rank=2, seed=seed + 1)
    main = compare_predictions(sim.autorater, sim.human_all, frac=0.1, rank=2, seed=seed, oracle=sim)
    say("robustness: inverted autorater")
    sim_inv = simulate(sizes["P"], sizes["M"], 2, rank=2, quality=(0.0, 0.3), inverted=1, seed=seed + 2)
    robust = compare_predictions(
        sim_inv.autorater, sim_inv.human_all, frac=0.1, rank=2, seed=seed, masked_cp=False, oracle=sim_inv
    )
    say(f"coverage study, {sizes['sims']} simulations")
    cov = coverage_study(sizes["sims"], n_prompts=sizes["cov_P"], n_models=sizes["M"], seed=seed)
    out = {"setting": sizes, "prediction": main, "robustness": robust, "coverage": cov}
    if not quick:
        say("digits proxy")
        out["digits"] = digits_study(n_draws=sizes["draws"], seed=seed)
        say("new-model fold-in and granular leaderboards")
        out["new_model"] = new_model_study(seed=seed)
        out["leaderboards"] = leaderboard_study(seed=seed)
    return out
