"""The paper's experiments at small scale (``reproduce``) and the benchmark against best-of-N (``bench``).

* Gaussian two-stage model: K heterogeneous children from a prior, every method at the same budget on
  the same sampled environment, many repetitions; SLG − BoN with a 95% CI, and the regret ratio
  (oracle − SLG) / (oracle − BoN).
* Scaling-law prediction: V̂_N from m samples against the exact E[max of N], averaged over repetitions;
  a calibration of predicted against realised best-of-N.
* Countdown with a noisy reward model: solve rate and true score of the returned response.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from papershelf.progress import progress
from slg_search import __version__
from slg_search.baselines import beam_search, best_of_n, max_guided_search, mean_guided_search, oracle_search
from slg_search.envs import Countdown, GaussianTwoStage, random_countdown
from slg_search.search import SearchResult, auto_m, slg_search, slg_tree_search
from slg_search.tail import expected_max_normal, tail_fit, tail_fit_batch

PACKAGE = "slg-search"
PRIOR = {"mean_sd": 0.5, "sd_low": 0.2, "sd_high": 1.5}

Method = Callable[[Any, Any, int, int, dict], SearchResult]
METHODS: dict[str, Method] = {
    "best-of-n": lambda env, root, n, s, o: best_of_n(env, root, n, seed=s),
    "slg": lambda env, root, n, s, o: slg_search(env, root, n, width=o["width"], m=o["m"], seed=s),
    "slg-with-root": lambda env, root, n, s, o: slg_search(
        env, root, n, width=o["width"], m=o["m"], include_root=True, seed=s
    ),
    "slg-tree": lambda env, root, n, s, o: slg_tree_search(
        env, root, n, width=o["width"], batch=o["m"], seed=s
    ),
    "mean-guided": lambda env, root, n, s, o: mean_guided_search(
        env, root, n, width=o["width"], m=o["m"], seed=s
    ),
    "max-guided": lambda env, root, n, s, o: max_guided_search(
        env, root, n, width=o["width"], m=o["m"], seed=s
    ),
    "beam": lambda env, root, n, s, o: beam_search(
        env, root, n, beam=max(1, o["width"] // 2), m=o["m"], seed=s
    ),
    "oracle": lambda env, root, n, s, o: oracle_search(env, root, n, seed=s),
}


def _ci(diff: np.ndarray) -> tuple[float, float, float]:
    mean = float(np.mean(diff))
    half = 1.96 * float(np.std(diff, ddof=1)) / math.sqrt(diff.size) if diff.size > 1 else math.inf
    return mean, mean - half, mean + half


def gaussian_experiment(
    *,
    budget: int = 1000,
    width: int = 8,
    m: int | None = None,
    reps: int = 2000,
    seed: int = 0,
    methods: tuple[str, ...] = (
        "best-of-n",
        "slg",
        "slg-with-root",
        "slg-tree",
        "mean-guided",
        "beam",
        "oracle",
    ),
    prior: dict[str, float] | None = None,
    quiet: bool = True,
) -> dict[str, Any]:
    """Every method on the same sampled two-stage environments (K = ``width`` children per environment).

    The oracle's value is its exact expected reward (E[max of N] at the best child), which removes its
    sampling noise; the other methods' rewards are realised.
    """
    prior = dict(PRIOR if prior is None else prior)
    m_used = auto_m(budget, width) if m is None else m
    opts = {"width": width, "m": m_used}
    master = np.random.default_rng(seed)
    rewards = {name: np.empty(reps) for name in methods}
    exact_oracle = np.empty(reps)
    oracle_hits = np.zeros(reps, dtype=bool)
    seconds = dict.fromkeys(methods, 0.0)
    for r in progress(range(reps), desc=f"two-stage N={budget}", quiet=quiet):
        env = GaussianTwoStage.random(width, master, **prior)
        s = int(master.integers(2**63))
        values = [env.expected_best(i, budget) for i in range(env.k)]
        exact_oracle[r] = max(max(values), env.expected_best(env.root, budget))
        for name in methods:
            t0 = time.perf_counter()
            res = METHODS[name](env, env.root, budget, s, opts)
            seconds[name] += time.perf_counter() - t0
            if res.n_rollouts != budget:
                raise AssertionError(f"{name} spent {res.n_rollouts} rollouts of {budget}")
            rewards[name][r] = res.best_reward
            if name == "slg":
                oracle_hits[r] = res.chosen == int(np.argmax(values))
    out: dict[str, Any] = {
        "setting": {
            "budget": budget,
            "width": width,
            "m": m_used,
            "reps": reps,
            "seed": seed,
            "prior": prior,
        },
        "mean": {k: float(v.mean()) for k, v in rewards.items()},
        "se": {
            k: float(v.std(ddof=1) / math.sqrt(reps)) if reps > 1 else math.nan for k, v in rewards.items()
        },
        "oracle_exact": float(exact_oracle.mean()),
        "seconds": seconds,
    }
    if "slg" in methods:
        out["slg_picks_oracle_child"] = float(oracle_hits.mean())
    if "best-of-n" in methods:
        bon = rewards["best-of-n"]
        oracle = out["oracle_exact"]
        out["vs_bon"] = {}
        for name in methods:
            if name in ("best-of-n", "oracle"):
                continue
            mean, lo, hi = _ci(rewards[name] - bon)
            out["vs_bon"][name] = {
                "diff": mean,
                "ci95": [lo, hi],
                "ci_excludes_0": bool(lo > 0 or hi < 0),
                "regret_ratio": (oracle - float(rewards[name].mean())) / (oracle - float(bon.mean())),
            }
    return out


# ---- prediction ------------------------------------------------------------------------------------
NS = (2, 5, 10, 20, 50, 100, 200, 500, 1000)


def prediction_experiment(
    *, m: int = 200, reps: int = 2000, ns: tuple[int, ...] = NS, seed: int = 0, gpd_reps: int = 100
) -> dict[str, Any]:
    """V̂_N from m samples against the exact E[max of N], mean over repetitions.

    Error is measured relative to the best-of-N gain E[max_N] − E[reward] (scale- and shift-free; equal
    to the error relative to E[max_N] itself for a zero-mean reward). Cases: a standard normal (exact by
    quadrature) and the reward at the root of a Countdown puzzle (a non-Gaussian mixture, exact by
    enumerating the policy). The anchor is a Gaussian fitted to *all* m rewards (mean and std).
    """
    rng = np.random.default_rng(seed)
    nsa = np.asarray(ns, dtype=np.float64)
    exact = expected_max_normal(nsa)
    x = rng.standard_normal((reps, m))
    mu, sigma = tail_fit_batch(x)
    from scipy import special

    pred_exp = (mu[:, None] + sigma[:, None] * exact[None, :]).mean(axis=0)
    pred_q = (mu[:, None] + sigma[:, None] * special.ndtri(1 - 1 / nsa)[None, :]).mean(axis=0)
    anchor = (x.mean(axis=1)[:, None] + x.std(axis=1, ddof=1)[:, None] * exact[None, :]).mean(axis=0)
    gpd = np.mean(
        [tail_fit(x[i], family="gpd").predict(nsa, "expected") for i in range(min(gpd_reps, reps))], 0
    )

    def rel(pred: np.ndarray, truth: np.ndarray, base: float) -> list[float]:
        return (np.abs(pred - truth) / (truth - base)).tolist()

    cases: dict[str, Any] = {
        "gaussian": {
            "exact": exact.tolist(),
            "tail_expected": pred_exp.tolist(),
            "tail_quantile": pred_q.tolist(),
            "tail_gpd": gpd.tolist(),
            "anchor_full_gaussian": anchor.tolist(),
            "rel_err": {
                "tail_expected": rel(pred_exp, exact, 0.0),
                "tail_quantile": rel(pred_q, exact, 0.0),
                "tail_gpd": rel(gpd, exact, 0.0),
                "anchor_full_gaussian": rel(anchor, exact, 0.0),
            },
            "reps": reps,
            "gpd_reps": min(gpd_reps, reps),
        }
    }
    # Countdown root: rewards are a mixture of N(score_j, noise²) over the policy's final numbers.
    env = Countdown((3, 6, 25, 50), 144, noise=0.1)
    values, probs = env.outcome_distribution(())
    base = float(np.sum(env.score_value(values) * probs))
    truth = np.array([env.expected_best((), int(n)) for n in ns])
    cd_reps = max(1, reps // 10)
    preds_e, preds_a = [], []
    for _ in range(cd_reps):
        _, r = env.rollout((), m, rng)
        fit = tail_fit(r)
        preds_e.append(fit.predict(nsa, "expected"))
        preds_a.append(r.mean() + r.std(ddof=1) * exact)
    pe, pa = np.mean(preds_e, axis=0), np.mean(preds_a, axis=0)
    cases["countdown"] = {
        "puzzle": {"numbers": list(env.numbers), "target": env.target, "noise": env.noise},
        "exact": truth.tolist(),
        "tail_expected": pe.tolist(),
        "anchor_full_gaussian": pa.tolist(),
        "rel_err": {"tail_expected": rel(pe, truth, base), "anchor_full_gaussian": rel(pa, truth, base)},
        "reps": cd_reps,
    }
    for case in cases.values():
        case["max_rel_err"] = {k: float(max(v)) for k, v in case["rel_err"].items()}
    return {"m": m, "ns": list(ns), "cases": cases}


def calibration(
    *, m: int = 200, ns: tuple[int, ...] = (10, 100, 1000), n_states: int = 60, seed: int = 0
) -> dict[str, Any]:
    """Predicted V̂_N (from m samples) against one realised best-of-N draw and the exact E[max of N], for
    states of random two-stage environments and of random Countdown puzzles."""
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n_states):
        if i % 2 == 0:
            env: Any = GaussianTwoStage.random(4, rng, **PRIOR)
            state: Any = int(rng.integers(env.k))
            kind = "gaussian"
        else:
            env = random_countdown(rng, noise=0.1)
            kids = env.children(())
            state = kids[int(rng.integers(len(kids)))]
            kind = "countdown"
        _, sample = env.rollout(state, m, rng)
        fit = tail_fit(sample)
        for n in ns:
            _, draws = env.rollout(state, n, rng)
            rows.append(
                {
                    "kind": kind,
                    "n": n,
                    "predicted": float(fit.predict(n, "expected")),
                    "realised": float(draws.max()),
                    "exact": float(env.expected_best(state, n)),
                }
            )
    summary = {}
    for kind in ("gaussian", "countdown"):
        sel = [r for r in rows if r["kind"] == kind]
        p = np.array([r["predicted"] for r in sel])
        e = np.array([r["exact"] for r in sel])
        z = np.array([r["realised"] for r in sel])
        summary[kind] = {
            "corr_predicted_realised": float(np.corrcoef(p, z)[0, 1]),
            "mean_predicted_minus_exact": float(np.mean(p - e)),
            "mean_abs_predicted_minus_exact": float(np.mean(np.abs(p - e))),
            "mean_realised_minus_exact": float(np.mean(z - e)),
        }
    return {"m": m, "ns": list(ns), "rows": rows, "summary": summary}


# ---- Countdown search ------------------------------------------------------------------------------
def countdown_experiment(
    *,
    puzzles: int = 60,
    budget: int = 300,
    width: int = 4,
    m: int | None = None,
    noise: float = 0.1,
    seed: int = 0,
    methods: tuple[str, ...] = ("best-of-n", "slg", "slg-tree", "mean-guided", "beam", "oracle"),
    quiet: bool = True,
) -> dict[str, Any]:
    """Every method on the same random Countdown puzzles at the same budget: the returned response's
    exact solve rate, true score, and reward-model reward (paired differences to best-of-N)."""
    rng = np.random.default_rng(seed)
    m_used = auto_m(budget, width) if m is None else m
    opts = {"width": width, "m": m_used}
    score = {k: np.empty(puzzles) for k in methods}
    solved = {k: np.empty(puzzles) for k in methods}
    rm = {k: np.empty(puzzles) for k in methods}
    for p in progress(range(puzzles), desc="countdown", quiet=quiet):
        env = random_countdown(rng, noise=noise)
        s = int(rng.integers(2**63))
        for name in methods:
            res = METHODS[name](env, env.root, budget, s, opts)
            score[name][p] = env.true_score(res.best_response)
            solved[name][p] = env.solves(res.best_response)
            rm[name][p] = res.best_reward
    out: dict[str, Any] = {
        "setting": {
            "puzzles": puzzles,
            "budget": budget,
            "width": width,
            "m": m_used,
            "noise": noise,
            "seed": seed,
        },
        "solve_rate": {k: float(v.mean()) for k, v in solved.items()},
        "true_score": {k: float(v.mean()) for k, v in score.items()},
        "rm_reward": {k: float(v.mean()) for k, v in rm.items()},
    }
    if "best-of-n" in methods:
        out["true_score_vs_bon"] = {
            k: dict(zip(("diff", "lo", "hi"), _ci(score[k] - score["best-of-n"])))
            for k in methods
            if k != "best-of-n"
        }
    return out


# ---- bench ----------------------------------------------------------------------------------------
def bench(*, quick: bool = False, reps: int | None = None, seed: int = 0, quiet: bool = True) -> list[dict]:
    """Comparison records (papershelf.bench schema): regret ratio to best-of-N on the two-stage model,
    prediction error against the full-sample Gaussian anchor, and the batched tail fit's speed."""
    from papershelf.bench import compare, record
    from slg_search.reference import tail_fit_ref

    reps = reps if reps is not None else (20 if quick else 2000)
    budget = 200 if quick else 1000
    g = gaussian_experiment(
        budget=budget,
        width=8,
        reps=reps,
        seed=seed,
        methods=("best-of-n", "slg", "slg-tree", "oracle"),
        quiet=quiet,
    )
    bon_regret = g["oracle_exact"] - g["mean"]["best-of-n"]
    records = []
    for name, target in (("slg", 0.5), ("slg-tree", None)):
        v = g["vs_bon"][name]
        records.append(
            record(
                package=PACKAGE,
                version=__version__,
                benchmark=f"two-stage-regret-{name}",
                setting=g["setting"],
                metric="regret to the oracle (oracle - method)",
                better="lower",
                candidate=name,
                candidate_value=g["oracle_exact"] - g["mean"][name],
                baseline="best-of-n",
                baseline_value=bon_regret,
                repeats=reps,
                target=target,
                diff_vs_bon=v["diff"],
                diff_ci95=v["ci95"],
                ci_excludes_0=v["ci_excludes_0"],
            )
        )
    pred = prediction_experiment(reps=200 if quick else 2000, gpd_reps=5 if quick else 100, seed=seed)
    for case, data in pred["cases"].items():
        cand, anchor = data["max_rel_err"]["tail_expected"], data["max_rel_err"]["anchor_full_gaussian"]
        records.append(
            record(
                package=PACKAGE,
                version=__version__,
                benchmark=f"prediction-{case}",
                setting={"m": pred["m"], "ns": pred["ns"], "reps": data["reps"]},
                metric="max over N of abs(mean V̂_N - E[max_N]) / (E[max_N] - E[reward])",
                better="lower",
                candidate="tail fit (gaussian, expected)",
                candidate_value=cand,
                baseline="gaussian fit to all samples",
                baseline_value=anchor,
                repeats=data["reps"],
                target=None,
                error_target=0.03,
                error_met=bool(cand <= 0.03),
            )
        )
    rows = np.random.default_rng(seed).standard_normal((50 if quick else 500, 200))
    cmp = compare(
        lambda: [tail_fit_ref(r) for r in rows], lambda: tail_fit_batch(rows), repeat=3 if quick else 7
    )
    records.append(
        record(
            package=PACKAGE,
            version=__version__,
            benchmark="tail-fit-speed",
            setting={"rows": rows.shape[0], "m": rows.shape[1]},
            metric="seconds (median)",
            better="lower",
            candidate="tail_fit_batch (numpy)",
            candidate_value=cmp.candidate.median,
            baseline="reference loop",
            baseline_value=cmp.baseline.median,
            repeats=len(cmp.candidate.times),
        )
    )
    return records


# ---- reproduce --------------------------------------------------------------------------------------
def reproduce(*, quick: bool = False, seed: int = 0, quiet: bool = True) -> dict[str, Any]:
    """The headline run (N = 1000, K = 8, 2000 repetitions), N and m sweeps, prediction accuracy and
    calibration, and Countdown. About 5 minutes on 2 CPU cores (``quick``: seconds)."""
    scale = 0.01 if quick else 1.0

    def r(n: int) -> int:
        return max(4, int(n * scale))

    out: dict[str, Any] = {}
    out["headline"] = gaussian_experiment(budget=1000, width=8, reps=r(2000), seed=seed, quiet=quiet)
    out["budgets"] = [
        gaussian_experiment(
            budget=n,
            width=8,
            reps=r(500),
            seed=seed + 1,
            quiet=quiet,
            methods=("best-of-n", "slg", "slg-tree", "oracle"),
        )
        for n in (100, 300)
    ]
    out["m_sweep"] = [
        gaussian_experiment(
            budget=1000,
            width=8,
            m=mm,
            reps=r(500),
            seed=seed + 2,
            quiet=quiet,
            methods=("best-of-n", "slg", "oracle"),
        )
        for mm in (20, 30, 80)
    ]
    out["prediction"] = prediction_experiment(reps=r(2000), gpd_reps=r(100), seed=seed)
    out["calibration"] = calibration(n_states=r(60) if not quick else 4, seed=seed)
    out["countdown"] = countdown_experiment(puzzles=r(60), seed=seed, quiet=quiet)
    return out
