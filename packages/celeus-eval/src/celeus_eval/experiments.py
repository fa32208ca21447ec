"""The paper's headline experiment at small scale, and the benchmark against the uniform betting CS.

Each method is run to the same stopping rule (full width <= target) on the same pool, repeated with
different seeds; we record the labels used and whether the pool risk lay inside the interval at the
stopping time (coverage at a data-dependent stopping time — what anytime validity is for).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from celeus_eval import __version__
from celeus_eval.baselines import celeus_ablation, cer_eval, clt_peeking, ppi_fixed_n, uniform_betting
from celeus_eval.celeus import EvalResult, evaluate
from celeus_eval.cs import BettingCS
from celeus_eval.data import Pool, digits_pool, synthetic_pool
from celeus_eval.reference import ReferenceBettingCS
from papershelf.bench import record
from papershelf.progress import progress

Method = Callable[[Pool, int, dict[str, Any]], EvalResult]

METHODS: dict[str, Method] = {
    "celeus": lambda p, s, o: evaluate(p.losses, p.surrogate, proxy=p.proxy, seed=s, **o),
    "M2-fixed-bounds": lambda p, s, o: celeus_ablation(
        "M2-fixed-bounds", p.losses, p.surrogate, p.proxy, seed=s, **o
    ),
    "M3-no-surrogate": lambda p, s, o: celeus_ablation("M3-no-surrogate", p.losses, p.surrogate, seed=s, **o),
    "surrogate-uniform": lambda p, s, o: celeus_ablation(
        "surrogate-uniform", p.losses, p.surrogate, seed=s, **o
    ),
    "uniform-betting": lambda p, s, o: uniform_betting(p.losses, seed=s, **o),
    "cer-eval": lambda p, s, o: cer_eval(
        p.losses, p.features, seed=s, **{k: v for k, v in o.items() if k in ("alpha", "target_width")}
    ),
    "clt-peeking": lambda p, s, o: clt_peeking(
        p.losses, seed=s, **{k: v for k, v in o.items() if k in ("alpha", "target_width")}
    ),
    "celeus-oracle-q": lambda p, s, o: evaluate(
        p.losses, p.surrogate, sampling="oracle", oracle_losses=p.losses, seed=s, **o
    ),
}


@dataclass
class MethodRuns:
    """Labels used and coverage at the stopping time over repeated runs of one method on one pool."""

    method: str
    pool: str
    labels: np.ndarray
    covered: np.ndarray
    reached: np.ndarray
    seconds: float

    @property
    def median_labels(self) -> float:
        return float(np.median(self.labels))

    @property
    def coverage(self) -> float:
        return float(self.covered.mean())

    def row(self, baseline: MethodRuns | None = None) -> dict[str, Any]:
        out = {
            "pool": self.pool,
            "method": self.method,
            "median_labels": self.median_labels,
            "mean_labels": float(self.labels.mean()),
            "coverage": self.coverage,
            "reached": float(self.reached.mean()),
            "reps": int(self.labels.size),
        }
        if baseline is not None:
            out["ratio_to_uniform"] = self.median_labels / baseline.median_labels
        return out


def run_method(
    method: str, pool: Pool, reps: int, *, seed: int = 0, quiet: bool = True, **options: Any
) -> MethodRuns:
    """Run ``method`` ``reps`` times on ``pool`` (seeds seed, seed+1, ...)."""
    fn = METHODS[method]
    labels, covered, reached = [], [], []
    start = time.perf_counter()
    for r in progress(range(reps), desc=f"{pool.name}/{method}", quiet=quiet):
        res = fn(pool, seed + r, options)
        labels.append(res.n_labels)
        covered.append(res.lower <= pool.risk <= res.upper)
        reached.append(res.reached)
    return MethodRuns(
        method, pool.name, np.array(labels), np.array(covered), np.array(reached), time.perf_counter() - start
    )


def ppi_coverage(
    pool: Pool, n_labels: int, reps: int, *, seed: int = 0, alpha: float = 0.05
) -> dict[str, float]:
    """Coverage and mean width of the fixed-n prediction-powered interval at a given label count."""
    results = [
        ppi_fixed_n(pool.losses, pool.surrogate, n_labels, alpha=alpha, seed=seed + r) for r in range(reps)
    ]
    return {
        "pool": pool.name,
        "method": f"ppi-fixed-n (n={n_labels})",
        "median_labels": float(n_labels),
        "coverage": float(np.mean([r.lower <= pool.risk <= r.upper for r in results])),
        "mean_width": float(np.mean([r.width for r in results])),
        "reps": reps,
    }


def make_pools(quick: bool, *, seed: int = 0) -> list[Pool]:
    """The bench pools: digits (paper structure) and synthetic (surrogate AUC ~ 0.85)."""
    if quick:
        return [digits_pool(shifts=0, seed=seed), synthetic_pool(1500, seed=seed)]
    return [digits_pool(seed=seed), synthetic_pool(10_000, seed=seed)]


LABEL_TARGETS = {"digits": 0.5, "synthetic": 0.7}


def update_cost(grid: int = 2000, steps: int = 30, repeat: int = 5) -> dict[str, Any]:
    """Seconds per BettingCS update, vectorised versus the plain-Python loop over the grid."""
    rng = np.random.default_rng(0)
    z = rng.random(steps) * 0.5 + 0.2

    def feed(cs_type: type) -> Callable[[], None]:
        def go() -> None:
            cs = cs_type(0.05, grid=grid)
            for value in z:
                cs.update(float(value), -0.5, 1.5)

        return go

    from papershelf.bench import compare

    comp = compare(feed(ReferenceBettingCS), feed(BettingCS), warmup=1, repeat=repeat)
    return {
        "grid": grid,
        "steps": steps,
        "repeat": repeat,
        "vectorised_s_per_update": comp.candidate.median / steps,
        "python_loop_s_per_update": comp.baseline.median / steps,
        "ratio": comp.ratio,
    }


def bench(*, quick: bool = False, reps: int | None = None, seed: int = 0, quiet: bool = True) -> list[dict]:
    """Labels to reach width 0.05 at alpha 0.05: Celeus versus uniform betting, same pools, same run."""
    reps = reps or (4 if quick else 200)
    records: list[dict] = []
    for pool in make_pools(quick, seed=seed):
        celeus = run_method("celeus", pool, reps, seed=seed, quiet=quiet)
        uniform = run_method("uniform-betting", pool, reps, seed=seed, quiet=quiet)
        setting = {
            "pool": pool.name,
            "pool_size": pool.size,
            "pool_risk": round(pool.risk, 4),
            "surrogate_auc": round(pool.auc(), 3),
            "alpha": 0.05,
            "target_width": 0.05,
            "estimand": "pool",
        }
        records.append(
            record(
                package="celeus-eval",
                version=__version__,
                benchmark=f"labels-to-width-{pool.name}",
                setting=setting,
                metric="median labels to width 0.05",
                better="lower",
                candidate="celeus",
                candidate_value=celeus.median_labels,
                baseline="uniform-betting (WSR without replacement)",
                baseline_value=uniform.median_labels,
                repeats=reps,
                target=None if quick else LABEL_TARGETS[pool.name],
                candidate_coverage=celeus.coverage,
                baseline_coverage=uniform.coverage,
                coverage_target=0.95,
                candidate_mean_labels=float(celeus.labels.mean()),
                baseline_mean_labels=float(uniform.labels.mean()),
            )
        )
    cost = update_cost(grid=200 if quick else 2000, steps=10 if quick else 30, repeat=3 if quick else 7)
    records.append(
        record(
            package="celeus-eval",
            version=__version__,
            benchmark="cs-update-cost",
            setting={"grid": cost["grid"], "steps": cost["steps"]},
            metric="seconds per confidence-sequence update (median)",
            better="lower",
            candidate="BettingCS (numpy, vectorised over the grid)",
            candidate_value=cost["vectorised_s_per_update"],
            baseline="ReferenceBettingCS (plain-Python loop over the grid)",
            baseline_value=cost["python_loop_s_per_update"],
            repeats=cost["repeat"],
        )
    )
    return records


ALL_METHODS = tuple(METHODS)
CORE_METHODS = ("celeus", "M2-fixed-bounds", "M3-no-surrogate", "uniform-betting")


def reproduce_settings(quick: bool, seed: int = 0) -> list[tuple[Pool, dict[str, Any], tuple[str, ...]]]:
    """(pool, options, methods) of the reproduction: the two bench pools with every method, a
    low-error pool (where the surrogate has little to correct), and the paper's population protocol
    on a large pool."""
    scale = 0.15 if quick else 1.0
    digits, synthetic = make_pools(quick, seed=seed)
    low_error = synthetic_pool(int(10_000 * scale), error_rate=0.03, seed=seed)
    low_error = Pool(
        "synthetic-3%-error", low_error.losses, low_error.surrogate, low_error.proxy, low_error.features
    )
    large = synthetic_pool(int(100_000 * scale), seed=seed)
    large = Pool("synthetic-100k", large.losses, large.surrogate, large.proxy, large.features)
    population = {"estimand": "population"} if not quick else {"estimand": "population", "target_width": 0.1}
    return [
        (digits, {}, ALL_METHODS),
        (synthetic, {}, ALL_METHODS),
        (low_error, {}, CORE_METHODS),
        (large, population, CORE_METHODS),
    ]


def reproduce(*, reps: int = 50, seed: int = 0, quick: bool = False, quiet: bool = True) -> dict[str, Any]:
    """Every method on every setting: median labels to the target width, ratio to uniform, coverage."""
    rows: list[dict[str, Any]] = []
    traces: dict[str, dict[str, list[float]]] = {}
    for pool, options, methods in reproduce_settings(quick, seed):
        runs = {m: run_method(m, pool, reps, seed=seed, quiet=quiet, **options) for m in methods}
        base = runs["uniform-betting"]
        for run in runs.values():
            rows.append({**run.row(base), "estimand": options.get("estimand", "pool")})
        if "cer-eval" in methods:
            rows.append(ppi_coverage(pool, int(runs["celeus"].median_labels), reps, seed=seed))
            traces[pool.name] = {
                name: [t["upper"] - t["lower"] for t in METHODS[name](pool, seed, {}).trace]
                for name in ("celeus", "uniform-betting")
            }
    return {"rows": rows, "width_traces": traces}
