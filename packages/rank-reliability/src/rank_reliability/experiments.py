"""The benchmark (issue targets, anchors in the same run) and the headline experiment (``reproduce``)."""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from papershelf.bench import compare, record

from . import __version__
from .analysis import analyze, cohort_reliability
from .components import variance_components
from .concordance import discordance, subset_concordance
from .data import digits_matrix, simulate_2pl, simulate_crossed, twopl_components
from .reference import analyze as reference_analyze
from .selection import DEFAULT_METHOD, METHODS, selection_stability

PACKAGE = "rank-reliability"
SELECTION_METHODS = METHODS  # lambda6_star_pool (default), lambda6_star, lambda6_star_strat, item_rest, ...
CHEAP_METHODS = tuple(m for m in METHODS if m != "irt_info")  # settings too many for 2PL fits


def _say(quiet: bool, text: str) -> None:
    if not quiet:
        print(text, flush=True)


def _summary(taus: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    out = {}
    for m, t in taus.items():
        disc = discordance(t)
        out[m] = {
            "mean_tau": float(np.mean(t)),
            "mean_discordance": float(np.mean(disc)),
            "se_discordance": float(np.std(disc, ddof=1) / math.sqrt(t.size)) if t.size > 1 else 0.0,
        }
    return out


def _selection_records(
    name: str, taus: dict[str, np.ndarray], setting: dict[str, Any], draws: int, *, targets: bool = True
) -> list[dict[str, Any]]:
    """vs random (target 0.8), vs IRT information (target 1.0), internal-consistency greedy vs random."""
    s = _summary(taus)
    common = {
        "package": PACKAGE,
        "version": __version__,
        "setting": setting,
        "metric": "discordant-pair rate (1 - tau_b)/2 vs held-out items",
        "better": "lower",
        "repeats": draws,
    }
    extra = {f"{m}_mean_discordance": v["mean_discordance"] for m, v in s.items()}
    default = {
        "candidate": f"{DEFAULT_METHOD}-greedy",
        "candidate_value": s[DEFAULT_METHOD]["mean_discordance"],
    }
    records = []
    if "random" in s:
        records.append(
            record(
                benchmark=f"{name}-vs-random",
                baseline="random subsets",
                baseline_value=s["random"]["mean_discordance"],
                target=0.8 if targets else None,
                **default,
                **common,
                **extra,
            )
        )
    if "irt_info" in s:
        records.append(
            record(
                benchmark=f"{name}-vs-irt-information",
                baseline="2PL Fisher-information selection",
                baseline_value=s["irt_info"]["mean_discordance"],
                target=1.0 if targets else None,
                **default,
                **common,
                **extra,
            )
        )
    if "lambda6_star" in s and "random" in s:  # the internal-consistency greedy of 0.1.0, no target
        records.append(
            record(
                benchmark=f"{name}-internal-greedy-vs-random",
                candidate="lambda6_star-greedy (internal consistency of the subset)",
                candidate_value=s["lambda6_star"]["mean_discordance"],
                baseline="random subsets",
                baseline_value=s["random"]["mean_discordance"],
                **common,
                **extra,
            )
        )
    return records


def _timing_records(n_models: int, n_items: int, repeat: int, quiet: bool) -> list[dict[str, Any]]:
    X = simulate_2pl(n_models, n_items, seed=7).X
    X = X[:, X.min(axis=0) < X.max(axis=0)]
    setting = {"n_models": n_models, "n_items": int(X.shape[1]), "n_splits_fast": 200, "n_splits_ref": 20}
    _say(quiet, f"timing the analysis of a {X.shape[0]} x {X.shape[1]} matrix (fast vs reference)")
    comp = compare(
        lambda: reference_analyze(X, n_splits=20),
        lambda: analyze(X, n_splits=200),
        warmup=0,
        repeat=repeat,
    )
    common = {"package": PACKAGE, "version": __version__, "setting": setting, "metric": "seconds"}
    return [
        record(
            benchmark=f"analysis-{n_models}x{n_items}-vs-reference",
            better="lower",
            candidate="analyze (vectorised, 200 splits)",
            candidate_value=comp.candidate.median,
            baseline="reference.analyze (loops from the equations, 20 splits)",
            baseline_value=comp.baseline.median,
            repeats=repeat,
            **common,
        ),
        record(
            benchmark=f"analysis-{n_models}x{n_items}-wallclock",
            better="lower",
            candidate="analyze (vectorised, 200 splits)",
            candidate_value=comp.candidate.median,
            baseline="issue time budget (10 s on 2 cores)",
            baseline_value=10.0,
            target=1.0,
            repeats=repeat,
            **common,
        ),
    ]


def bench(*, quick: bool = False, draws: int | None = None, seed: int = 0, quiet: bool = False) -> list[dict]:
    """Issue targets: selection at budget 100 on digits (100 draws) and the 100 × 10,000 analysis time."""
    if quick:
        n_draws = draws or 3
        X = simulate_2pl(40, 300, log_a_sd=0.5, seed=seed).X
        X = X[:, X.min(axis=0) < X.max(axis=0)]
        taus = selection_stability(X, 20, methods=SELECTION_METHODS, n_draws=n_draws, seed=seed)
        setting = {"data": "2PL simulated 40 x 300 (quick)", "budget": 20, "draws": n_draws}
        return _selection_records("select-2pl-quick-b20", taus, setting, n_draws) + _timing_records(
            30, 500, 1, quiet
        )
    n_draws = draws or 100
    _say(quiet, "building / loading the digits response matrix")
    D = digits_matrix(quiet=quiet)
    _say(quiet, f"digits matrix {D.X.shape[0]} models x {D.X.shape[1]} items; {n_draws} draws at budget 100")
    start = time.perf_counter()
    taus = selection_stability(D.X, 100, methods=SELECTION_METHODS, n_draws=n_draws, seed=seed)
    setting = {
        "data": f"digits {D.X.shape[0]} models x {D.X.shape[1]} items",
        "budget": 100,
        "draws": n_draws,
        "seed": seed,
        "pool": "random half of the items; tau vs the other half",
        "seconds": round(time.perf_counter() - start, 1),
    }
    records = _selection_records("select-digits-b100", taus, setting, n_draws)
    _say(quiet, "held-out models: selection sees half of the models, tau on the other half (no IRT fits)")
    start = time.perf_counter()
    taus = selection_stability(
        D.X, 100, methods=CHEAP_METHODS, n_draws=n_draws, seed=seed, heldout_models=True
    )
    setting = {
        **setting,
        "pool": "random half of the items and of the models; tau on the other items and models",
        "seconds": round(time.perf_counter() - start, 1),
    }
    # a check of generalisation to new models, not an issue target
    held = _selection_records("select-digits-b100-heldout-models", taus, setting, n_draws, targets=False)
    return records + held + _timing_records(100, 10_000, 3, quiet)


def _concordance_check(X: np.ndarray, sizes: list[int], draws: int, seed: int) -> list[dict[str, float]]:
    vc = variance_components(X)
    rows = []
    for n in sizes:
        taus = subset_concordance(X, n, draws, seed=seed)
        rows.append(
            {
                "n_items": n,
                "rho": vc.g_coefficient(n),
                "predicted_kendall": vc.expected_kendall(n, n),
                "mean_kendall": float(np.mean(taus)),
                "se_kendall": float(np.std(taus, ddof=1) / math.sqrt(draws)),
            }
        )
    return rows


def selection_profile(X: np.ndarray, budget: int, seed: int = 0) -> dict[str, dict[str, float]]:
    """What each rule picks from the whole matrix: difficulty spread, ties, own λ★6, rest correlation.

    ``difficulty_spread`` = sd of the picked items' mean scores / sd over all items; ``distinct_scores``
    = number of different model totals on the subset (fewer = more ties); ``lambda6_star`` = the subset's
    own λ★6 (internal consistency); ``rest_correlation`` = corr(subset total, total of the other items).
    """
    from .classical import lambda6_star
    from .selection import select_items

    p = X.mean(axis=0)
    out = {}
    for m in SELECTION_METHODS:
        sel = select_items(X, budget, method=m, seed=seed)
        inside = np.zeros(X.shape[1], dtype=bool)
        inside[sel] = True
        total = X[:, inside].sum(axis=1)
        out[m] = {
            "difficulty_spread": float(p[sel].std() / p.std()),
            "mean_item_score": float(p[sel].mean()),
            "distinct_scores": int(np.unique(total).size),
            "lambda6_star": float(lambda6_star(X[:, sel], drop_constant=True)),
            "rest_correlation": float(np.corrcoef(total, X[:, ~inside].sum(axis=1))[0, 1]),
        }
    return out


def reproduce(*, quick: bool = False, draws: int = 20, seed: int = 0, quiet: bool = False) -> dict[str, Any]:
    """Variance components ↔ concordance, cohorts and budgeted selection on digits and a 2PL simulator."""
    out: dict[str, Any] = {"draws": draws}
    # 1. simulators with known components
    _say(quiet, "[1/4] simulators with known variance components")
    crossed = simulate_crossed(
        300, 400, var_model=0.5, var_item=1.0, var_residual=2.0, missing=0.2, seed=seed
    )
    vc = variance_components(crossed.X)
    out["crossed_missing20"] = {
        "true_population": [0.5, 1.0, 2.0],
        "true_realised": list(crossed.realised),
        "estimated": [vc.model, vc.item, vc.residual],
    }
    sim_kw = {"log_a_sd": 0.5}
    n_m, n_i = (60, 400) if quick else (100, 2000)
    sim = simulate_2pl(n_m, n_i, seed=seed, **sim_kw)
    Xs = sim.X[:, sim.X.min(axis=0) < sim.X.max(axis=0)]
    truth = twopl_components(**sim_kw)
    vcs = variance_components(Xs)
    out["twopl"] = {
        "shape": list(Xs.shape),
        "true_population": {k: truth[k] for k in ("model", "item", "residual")},
        "estimated": {"model": vcs.model, "item": vcs.item, "residual": vcs.residual},
        "concordance": _concordance_check(Xs, [10, 25, 50, 100, Xs.shape[1] // 2], draws * 5, seed),
    }
    # 2. digits: analysis and concordance
    _say(quiet, "[2/4] digits response matrix: analysis")
    D = digits_matrix(quiet=quiet)
    rep = analyze(D.X, n_splits=200, seed=seed)
    out["digits"] = {
        "models": D.models,
        "n_test_items": D.n_test,
        "n_constant_dropped": D.n_constant_dropped,
        "analysis": rep.as_dict(),
        "concordance": _concordance_check(D.X, [10, 25, 50, 100, 200, D.X.shape[1] // 2], draws * 5, seed),
    }
    # 3. cohorts
    _say(quiet, "[3/4] cohorts")
    out["cohorts"] = {
        "digits": cohort_reliability(D.X, n_random=10 if quick else 50, seed=seed),
        "twopl": cohort_reliability(Xs, n_random=10 if quick else 50, seed=seed),
    }
    # 4. selection
    _say(quiet, "[4/4] item selection at fixed budgets")
    budgets = [100] if quick else [50, 100, 150]
    sel: dict[str, Any] = {"digits": {}, "twopl": {}}
    for b in budgets:
        _say(quiet, f"  digits, budget {b}, {draws} draws")
        sel["digits"][f"heldout_items_b{b}"] = _summary(
            selection_stability(D.X, b, methods=SELECTION_METHODS, n_draws=draws, seed=seed)
        )
    _say(quiet, "  digits, budget 100: held-out models, parallel forms")
    sel["digits"]["heldout_models_b100"] = _summary(
        selection_stability(
            D.X, 100, methods=SELECTION_METHODS, n_draws=draws, seed=seed, heldout_models=True
        )
    )
    sel["digits"]["parallel_b100"] = _summary(
        selection_stability(D.X, 100, methods=SELECTION_METHODS, n_draws=draws, seed=seed, parallel=True)
    )
    _say(quiet, "  2PL simulator, budget 100")
    sel["twopl"]["heldout_items_b100"] = _summary(
        selection_stability(Xs, 100, methods=SELECTION_METHODS, n_draws=draws, seed=seed)
    )
    out["selection"] = sel
    _say(quiet, "  what each rule picks from the whole digits matrix (budget 100)")
    out["selection_profile"] = {"digits_b100": selection_profile(D.X, 100, seed=seed)}
    return out
