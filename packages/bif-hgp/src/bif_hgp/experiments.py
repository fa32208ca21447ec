"""The paper's experiments at small scale: methods side by side, the ablation, transfer, and timing."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from bif_hgp.baselines import RandomSearch, SingleGPUCB, VanillaGPUCB, bottom_up
from bif_hgp.data import Problem, make_problem
from bif_hgp.metrics import composite_auc, regret_auc
from bif_hgp.model import BIF, BOResult, ChildGP
from papershelf.errors import check_choice, check_int

METHODS = (
    "bif",
    "bif-acq",
    "bif-paper",
    "bif-paper-init",
    "bif-scaled",
    "bif-softmax",
    "bottomup",
    "vanilla",
    "single",
    "random",
)
HIERARCHICAL = ("bif", "bif-acq", "bif-paper", "bif-paper-init", "bif-scaled", "bif-softmax", "bottomup")
# BIF variants: method name → BIF options on top of the defaults
VARIANTS = {
    "bif-acq": {"prior": "acquisition"},
    "bif-paper": {"prior": "acquisition", "normalization": "paper", "decomposition": "softmax"},
    "bif-paper-init": {"n_init": 0},
    "bif-scaled": {"prior": "scaled"},
    "bif-softmax": {"decomposition": "softmax"},
}
LABELS = {
    "bif": "BIF",
    "bif-acq": "BIF, prior = calibrated acquisition map (shared scale)",
    "bif-paper": "BIF, authors' normalisation and acquisition-map prior (scale mismatch)",
    "bif-paper-init": "BIF, authors' start (prior-map argmax, no random parent queries)",
    "bif-scaled": "BIF, scaled prior mean",
    "bif-softmax": "BIF, the authors' softmax decomposition (shared scale)",
    "bottomup": "bottom-up only (no top-down)",
    "vanilla": "vanilla GP-UCB (BoTorch)",
    "single": "single GP, paper's recipe",
    "random": "random search",
}


def limit_threads() -> None:
    """One intra-op thread: these GPs are tiny, and extra threads only spin (measured 2.5× slower)."""
    import torch

    torch.set_num_threads(1)


def make_method(name: str, problem: Problem, **opts: Any) -> Any:
    """A configured optimiser for ``problem``, one of :data:`METHODS`.

    ``bif-paper-init`` is BIF started as in the authors' experiment code: no random parent queries
    (``n_init=0``), so its first query is the argmax of the prior built from the children's direct
    observations; every other method starts from the shared random initial design (``n_init``, 3).
    ``bif-paper`` is BIF exactly as the authors' code scales it (children min–max per source, parent
    standardised, the raw acquisition-map prior); ``bif-acq`` keeps the acquisition-map prior but on
    the shared scale; ``bif-scaled`` learns α·map + β by the parent's MLL.
    """
    check_choice("method", name, METHODS)
    common = {"grid": problem.grid, "n_init": opts.pop("n_init", 3)}
    if name == "bif":
        return BIF(problem.composition, problem.bounds, **common, **opts)
    if name in VARIANTS:
        model = BIF(problem.composition, problem.bounds, **{**common, **opts, **VARIANTS[name]})
        model.method = name
        return model
    if name == "bottomup":
        return bottom_up(problem.composition, problem.bounds, **common, **opts)
    if name == "vanilla":
        kappa = opts.get("kappa", 7.5)
        return VanillaGPUCB(problem.composition, problem.bounds, kappa=kappa, **common)
    if name == "single":
        keep = {k: opts[k] for k in ("kappa", "train_iters", "lr") if k in opts}
        return SingleGPUCB(problem.composition, problem.bounds, **common, **keep)
    return RandomSearch(problem.composition, problem.bounds, **common)


def run_method(
    problem: Problem,
    method: str,
    budget: int,
    seed: int = 0,
    pretrained: dict[str, ChildGP] | None = None,
    **opts: Any,
) -> BOResult:
    """Run one method on one problem with the problem's truths attached for scoring."""
    opt = make_method(method, problem, **opts)
    kwargs: dict[str, Any] = {"truth": problem.truth, "child_truth": problem.child_truth, "seed": seed}
    if method in HIERARCHICAL:
        kwargs["child_objectives"] = problem.child_objectives
        kwargs["pretrained"] = pretrained
    return opt.run(problem.objective, budget, **kwargs)


def summarise(res: BOResult, start: int = 0) -> dict[str, Any]:
    """Final and area scores of one run; the areas cover the states after ``start`` or more queries,
    so that methods with different initial designs are compared over the same range."""
    keep = np.asarray(res.n_queries) >= start
    child = res.mean_child_r2()
    expl, parent, area_child = np.asarray(res.exploration), np.asarray(res.parent_r2), child
    if expl.size:
        expl, parent, area_child = expl[keep], parent[keep], child[keep]
    return {
        "parent_r2": float(res.parent_r2[-1]) if res.parent_r2 else None,
        "child_r2": float(child[-1]) if len(child) else None,
        "child_r2_each": {k: float(v[-1]) for k, v in res.child_r2.items()},
        "child_r2_raw": float(np.mean([v[-1] for v in res.child_r2_raw.values()]))
        if res.child_r2_raw
        else None,
        "child_r2_offset_each": {k: float(v[-1]) for k, v in res.child_r2_offset.items()},
        "child_r2_offset": float(np.mean([v[-1] for v in res.child_r2_offset.values()]))
        if res.child_r2_offset
        else None,
        "exploration": float(res.exploration[-1]) if res.exploration else None,
        "best_y": float(res.best_y[-1]) if res.best_y else None,
        "auc": composite_auc(expl, parent, area_child) if expl.size else None,
        "regret_auc": regret_auc(expl) if expl.size else None,
        "seconds": res.seconds,
        "child_evaluations": res.child_evaluations,
    }


def curves(res: BOResult) -> dict[str, list[float]]:
    return {
        "n_queries": list(map(int, res.n_queries)),
        "parent_r2": list(res.parent_r2),
        "child_r2": res.mean_child_r2().tolist(),
        "exploration": list(res.exploration),
    }


def wilcoxon_p(a: Sequence[float], b: Sequence[float], alternative: str = "greater") -> float | None:
    """Paired Wilcoxon signed-rank p-value for a > b (None when all pairs tie or scipy is missing)."""
    try:
        from scipy.stats import wilcoxon
    except ImportError:  # pragma: no cover
        return None
    d = np.asarray(a, float) - np.asarray(b, float)
    if np.all(d == 0) or len(d) < 2:
        return None
    return float(wilcoxon(a, b, alternative=alternative).pvalue)


def compare(
    problem_name: str,
    *,
    methods: Sequence[str] = METHODS,
    seeds: Sequence[int] = range(10),
    budget: int = 40,
    noise: float = 0.1,
    grid: int | None = None,
    progress: Callable[[str], None] | None = None,
    **opts: Any,
) -> dict[str, Any]:
    """Every method on ``problem_name`` for every seed (same seed → same noise and initial design)."""
    budget = check_int("budget", budget, low=1)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in methods}
    start = int(opts.get("n_init", 3))  # the areas cover the same queries for every method
    for seed in seeds:
        for m in methods:
            problem = make_problem(problem_name, seed=seed, noise=noise, grid=grid)
            res = run_method(problem, m, budget, seed=seed, **dict(opts))
            entry = summarise(res, start=start)
            entry["seed"] = int(seed)
            entry["curves"] = curves(res)
            runs[m].append(entry)
            if progress is not None:
                progress(
                    f"{problem_name} seed {seed} {m}: parent R² {entry['parent_r2']:.3f}, "
                    f"child R² {entry['child_r2']:.3f}, AUC {entry['auc']:.1f} ({res.seconds:.1f} s)"
                )
    return {"problem": problem_name, "budget": budget, "seeds": list(map(int, seeds)), "runs": runs}


def aggregate(block: dict[str, Any]) -> dict[str, Any]:
    """Means over seeds, the paper's ratios, and paired Wilcoxon p-values."""
    runs = block["runs"]
    agg: dict[str, Any] = {}
    for m, entries in runs.items():
        agg[m] = {
            key: float(np.mean([e[key] for e in entries]))
            for key in (
                "parent_r2",
                "child_r2",
                "child_r2_raw",
                "child_r2_offset",
                "exploration",
                "auc",
                "regret_auc",
                "seconds",
            )
            if entries and entries[0].get(key) is not None
        }
    out: dict[str, Any] = {
        "means": agg,
        "medians": {
            m: {k: float(np.median([e[k] for e in entries])) for k in agg[m]} for m, entries in runs.items()
        },
    }

    def vals(m: str, key: str) -> list[float]:
        return [e[key] for e in runs[m]]

    if "bif" in runs and "vanilla" in runs:
        out["parent_r2_ratio"] = agg["bif"]["parent_r2"] / agg["vanilla"]["parent_r2"]
        out["auc_ratio"] = agg["bif"]["auc"] / agg["vanilla"]["auc"]
        out["regret_auc_ratio"] = agg["vanilla"]["regret_auc"] / agg["bif"]["regret_auc"]
        out["p_parent_r2"] = wilcoxon_p(vals("bif", "parent_r2"), vals("vanilla", "parent_r2"))
        out["p_auc"] = wilcoxon_p(vals("bif", "auc"), vals("vanilla", "auc"))
        out["p_regret_auc"] = wilcoxon_p(vals("vanilla", "regret_auc"), vals("bif", "regret_auc"))
    for variant in ("bif-acq", "bif-paper", "bif-paper-init", "bif-scaled", "bif-softmax"):
        for base in ("vanilla", "single"):
            if variant in runs and base in runs:
                out[f"{variant}/{base}"] = {
                    "parent_r2_ratio": agg[variant]["parent_r2"] / agg[base]["parent_r2"],
                    "auc_ratio": agg[variant]["auc"] / agg[base]["auc"],
                    "regret_auc_ratio": agg[base]["regret_auc"] / agg[variant]["regret_auc"],
                    "p_parent_r2": wilcoxon_p(vals(variant, "parent_r2"), vals(base, "parent_r2")),
                    "p_auc": wilcoxon_p(vals(variant, "auc"), vals(base, "auc")),
                }
    if "bif" in runs and "bottomup" in runs:
        out["child_r2_drop"] = 1.0 - agg["bottomup"]["child_r2"] / agg["bif"]["child_r2"]
        out["p_child_r2"] = wilcoxon_p(vals("bif", "child_r2"), vals("bottomup", "child_r2"))
    return out


def r2_at(block: dict[str, Any], method: str, n: int) -> list[float]:
    """Each seed's parent R² after ``n`` parent observations (from the stored curves)."""
    out = []
    for e in block["runs"][method]:
        c = e["curves"]
        out.append(float(c["parent_r2"][c["n_queries"].index(n)]))
    return out


def transfer_experiment(
    *,
    source: str = "additive2d",
    target: str = "transfer2d",
    child: str = "a",
    seeds: Sequence[int] = range(5),
    source_budget: int = 40,
    budget: int = 20,
    noise: float = 0.1,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Train BIF on ``source``, reuse its child ``child`` on ``target``; compare with BIF from scratch."""
    rows = []
    for seed in seeds:
        src = run_method(make_problem(source, seed=seed, noise=noise), "bif", source_budget, seed=seed)
        trained = src.children[child]
        scratch = run_method(make_problem(target, seed=seed, noise=noise), "bif", budget, seed=seed)
        reused = run_method(
            make_problem(target, seed=seed, noise=noise),
            "bif",
            budget,
            seed=seed,
            pretrained={child: trained},
        )
        row = {
            "seed": int(seed),
            "scratch": summarise(scratch),
            "transfer": summarise(reused),
            "scratch_child_curve": scratch.child_r2[child],
            "transfer_child_curve": reused.child_r2[child],
        }
        rows.append(row)
        if progress is not None:
            progress(
                f"seed {seed}: child {child!r} R² at start {reused.child_r2[child][0]:.3f} (transfer) vs "
                f"{scratch.child_r2[child][0]:.3f} (scratch); AUC {row['transfer']['auc']:.1f} vs "
                f"{row['scratch']['auc']:.1f}"
            )
    out = {"source": source, "target": target, "child": child, "budget": budget, "rows": rows}
    for key in ("auc", "parent_r2", "child_r2"):
        out[f"{key}_transfer"] = float(np.mean([r["transfer"][key] for r in rows]))
        out[f"{key}_scratch"] = float(np.mean([r["scratch"][key] for r in rows]))
    out["p_auc"] = wilcoxon_p([r["transfer"]["auc"] for r in rows], [r["scratch"]["auc"] for r in rows])
    return out


def time_run(problem_name: str = "additive3d", budget: int = 60, seed: int = 0, method: str = "bif") -> float:
    """Wall-clock seconds of one run (scoring off, so only the optimiser is timed)."""
    problem = make_problem(problem_name, seed=seed)
    opt = make_method(method, problem)
    kwargs: dict[str, Any] = {"seed": seed}
    if method in HIERARCHICAL:
        kwargs["child_objectives"] = problem.child_objectives
    start = time.perf_counter()
    opt.run(problem.objective, budget, **kwargs)
    return time.perf_counter() - start
