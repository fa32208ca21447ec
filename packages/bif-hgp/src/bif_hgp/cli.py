"""The ``bif-hgp`` command line: ``run``, ``transfer``, ``demo``, ``bench`` and ``reproduce``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from bif_hgp import __version__
from papershelf.bench import format_table, record, write_records
from papershelf.cli import App, arg
from papershelf.errors import InputError, MissingDependencyError, check_int, check_number
from papershelf.repro import atomic_path, atomic_write_json, run_manifest

app = App(
    "bif-hgp",
    __version__,
    "BIF: hierarchical GP Bayesian optimisation with bottom-up priors and top-down soft decomposition.",
)

METHOD_CHOICES = (
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
PROBLEM_CHOICES = ("additive2d", "additive3d", "multiplicative2d", "nonadditive3d", "transfer2d", "hpo")


def _say(args: argparse.Namespace):
    return (lambda msg: None) if getattr(args, "quiet", False) else (lambda msg: print(msg, flush=True))


def _out_path(path: str | None, what: str = "--out") -> Path | None:
    if path is None:
        return None
    p = Path(path)
    if p.exists() and p.is_dir():
        raise InputError(f"{what} {path!r} is a directory; give a file name")
    if p.parent != Path("") and p.parent.exists() and not p.parent.is_dir():
        raise InputError(f"{what} {path!r}: {p.parent} is not a directory")
    return p


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[k])) for r in [header, *rows]) for k in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def _fmt(v: Any, digits: int = 3) -> str:
    return "—" if v is None else f"{v:.{digits}f}"


# Every BO step refits exact GPs on all points so far (O(n³) each): beyond this a run takes days.
MAX_BUDGET = 2000


# ---- run -------------------------------------------------------------------------------------------
@app.command(
    "run",
    help="one optimisation run of a built-in problem",
    args=[
        arg("--problem", default="additive2d", help=f"one of {', '.join(PROBLEM_CHOICES)}"),
        arg("--method", default="bif", help=f"one of {', '.join(METHOD_CHOICES)} (default bif)"),
        arg(
            "--budget", type=int, default=40, help="parent evaluations, initial design included (default 40)"
        ),
        arg("--n-init", type=int, default=3, help="random initial parent queries (default 3)"),
        arg("--noise", type=float, default=0.1, help="observation noise s.d. of synthetic problems"),
        arg("--grid", type=int, default=None, help="grid points per dimension (default: the problem's)"),
        arg("--kappa", type=float, default=7.5, help="parent UCB κ (default 7.5)"),
        arg("--gamma", type=float, default=2.0, help="children's acquisition parameter γ (default 2)"),
        arg("--acquisition", default="ucb", help="parent acquisition: ucb, ei or pi (default ucb)"),
        arg("--child-acquisition", default="pi", help="children's acquisition: ucb, ei or pi (default pi)"),
    ],
    common=["seed", "out", "quiet"],
)
def _run(args: argparse.Namespace) -> None:
    from papershelf.errors import check_choice

    check_choice("--problem", args.problem, PROBLEM_CHOICES)
    check_choice("--method", args.method, METHOD_CHOICES)
    out = _out_path(args.out)
    budget = check_int("--budget", args.budget, low=1, high=MAX_BUDGET)
    n_init = check_int("--n-init", args.n_init, low=0)
    if budget < n_init:
        raise InputError(f"--budget ({budget}) must be at least the initial design --n-init ({n_init})")
    from bif_hgp.data import make_problem
    from bif_hgp.experiments import HIERARCHICAL, limit_threads, run_method, summarise

    limit_threads()
    problem = make_problem(
        args.problem, seed=args.seed, noise=check_number("--noise", args.noise, low=0), grid=args.grid
    )
    opts: dict[str, Any] = {"n_init": n_init, "kappa": args.kappa}
    if args.method in HIERARCHICAL:
        opts.update(gamma=args.gamma, acquisition=args.acquisition, child_acquisition=args.child_acquisition)
    res = run_method(problem, args.method, budget, seed=args.seed, **opts)
    s = summarise(res)
    say = _say(args)
    say(f"{args.problem} ({problem.description}), {args.method}, budget {budget}, seed {args.seed}")
    rows = [
        ["best observed y", _fmt(s["best_y"], 4)],
        ["parent R²", _fmt(s["parent_r2"])],
        ["mean child R² (scale-free)", _fmt(s["child_r2"])],
        ["mean child R² up to a constant", _fmt(s["child_r2_offset"])],
        ["mean child R² raw (vs min-max truth)", _fmt(s["child_r2_raw"])],
        *(
            [f"child {k}: R² up to a constant / scale-free", f"{_fmt(v)} / {_fmt(s['child_r2_each'][k])}"]
            for k, v in s["child_r2_offset_each"].items()
        ),
        ["exploration score", _fmt(s["exploration"])],
        ["AUC (paper, ×100)", _fmt(s["auc"], 1)],
        ["seconds", _fmt(s["seconds"], 1)],
    ]
    model = res.model
    if hasattr(model, "parent") and hasattr(model, "children"):  # the hierarchy's learned state
        for name, child in model.children.items():
            hp = child.hyperparameters()
            rows.append(
                [
                    f"child {name}: lengthscale / outputscale / noise",
                    f"{_fmt(float(hp['lengthscale'].flatten()[0]))} / {_fmt(float(hp['outputscale']))} / "
                    f"{_fmt(float(child.gp.likelihood.noise.detach()))}",
                ]
            )
        noise = float(model.parent.likelihood.noise.detach())
        rows.append(["parent noise (standardised units)", _fmt(noise)])
    print(_table(rows, ["metric", "value"]))
    if out is not None:
        atomic_write_json(
            out, {"problem": args.problem, "summary": s, "run": res.to_dict(), "manifest": run_manifest()}
        )
        say(f"written {out}")


# ---- transfer -------------------------------------------------------------------------------------
@app.command(
    "transfer",
    help="modular reuse: train BIF on one task, transfer a child to a new composite task",
    args=[
        arg("--source", default="additive2d", help="task the child is trained on (default additive2d)"),
        arg(
            "--target",
            default="transfer2d",
            help="new composite task sharing that child (default transfer2d)",
        ),
        arg("--child", default="a", help="the child to transfer (default a)"),
        arg("--seeds", type=int, default=5, help="number of seeds (default 5)"),
        arg("--source-budget", type=int, default=40),
        arg("--budget", type=int, default=20, help="budget on the target task (default 20)"),
    ],
    common=["out", "quiet"],
)
def _transfer(args: argparse.Namespace) -> None:
    from bif_hgp.data import SYNTHETIC
    from bif_hgp.experiments import limit_threads, transfer_experiment
    from papershelf.errors import check_choice

    check_choice("--source", args.source, tuple(SYNTHETIC))
    check_choice("--target", args.target, tuple(SYNTHETIC))
    src_children, tgt_children = SYNTHETIC[args.source][0], SYNTHETIC[args.target][0]
    if args.child not in src_children or args.child not in tgt_children:
        raise InputError(
            f"--child {args.child!r} must be a child of both tasks: {args.source} has {list(src_children)}, "
            f"{args.target} has {list(tgt_children)}"
        )
    seeds = check_int("--seeds", args.seeds, low=1)
    budget = check_int("--budget", args.budget, low=4, high=MAX_BUDGET)
    sbudget = check_int("--source-budget", args.source_budget, low=4, high=MAX_BUDGET)
    out = _out_path(args.out)
    limit_threads()
    res = transfer_experiment(
        source=args.source,
        target=args.target,
        child=args.child,
        seeds=range(seeds),
        source_budget=sbudget,
        budget=budget,
        progress=_say(args),
    )
    rows = [
        [
            key,
            _fmt(res[f"{key}_transfer"], 3 if key != "auc" else 1),
            _fmt(res[f"{key}_scratch"], 3 if key != "auc" else 1),
        ]
        for key in ("auc", "parent_r2", "child_r2")
    ]
    start_t = sum(r["transfer_child_curve"][0] for r in res["rows"]) / len(res["rows"])
    start_s = sum(r["scratch_child_curve"][0] for r in res["rows"]) / len(res["rows"])
    rows.append([f"child {args.child!r} R² after the initial design", _fmt(start_t), _fmt(start_s)])
    print(
        f"transfer child {args.child!r}: {args.source} → {args.target}, "
        f"budget {budget}, {seeds} seeds (means)"
    )
    print(_table(rows, ["metric", "transferred child", "from scratch"]))
    print(f"Wilcoxon p (AUC transfer > scratch): {_fmt(res['p_auc'])}")
    if out is not None:
        atomic_write_json(out, {**res, "manifest": run_manifest()})


# ---- demo -----------------------------------------------------------------------------------------
@app.command(
    "demo", help="BIF vs its baselines on a small 2-D additive problem (about 20 s)", common=["seed"]
)
def _demo(args: argparse.Namespace) -> None:
    from bif_hgp.data import make_problem
    from bif_hgp.experiments import LABELS, limit_threads, run_method, summarise

    limit_threads()
    print("additive2d on a 16×16 grid, budget 15 (3 random + 12 BO queries), seed", args.seed)
    rows = []
    for method in ("bif", "bottomup", "vanilla", "random"):
        problem = make_problem("additive2d", seed=args.seed, grid=16)
        s = summarise(run_method(problem, method, 15, seed=args.seed))
        rows.append(
            [
                LABELS[method],
                _fmt(s["parent_r2"]),
                _fmt(s["child_r2"]),
                _fmt(s["exploration"]),
                _fmt(s["auc"], 1),
                _fmt(s["seconds"], 1),
            ]
        )
    print(_table(rows, ["method", "parent R²", "child R²", "exploration", "AUC", "s"]))


# ---- bench ----------------------------------------------------------------------------------------
@app.command(
    "bench",
    help="the issue's targets, BIF against the anchors in one run; --out writes bench records",
    args=[
        arg("--quick", action="store_true", help="2 seeds, budget 8, grid 8: proves the path in seconds"),
        arg("--seeds", type=int, default=10, help="seeds (default 10)"),
        arg("--budget", type=int, default=40, help="queries for the ratio targets (default 40)"),
    ],
    common=["out", "quiet"],
)
def _bench(args: argparse.Namespace) -> None:
    import numpy as np

    from bif_hgp.experiments import aggregate, compare, limit_threads, r2_at, time_run, wilcoxon_p

    out = _out_path(args.out)
    seeds = check_int("--seeds", args.seeds, low=2)  # checked even when --quick replaces it
    seeds = 2 if args.quick else seeds
    budget = check_int("--budget", args.budget, low=4, high=MAX_BUDGET)
    budget = 8 if args.quick else budget
    grid = 8 if args.quick else None
    t_budget = 10 if args.quick else 60
    limit_threads()
    say = _say(args)
    methods = ("bif", "bif-softmax", "bif-acq", "bif-paper", "bottomup", "vanilla", "random")
    block = compare("additive2d", methods=methods, seeds=range(seeds), budget=budget, grid=grid, progress=say)
    agg = aggregate(block)
    m, med = agg["means"], agg["medians"]
    setting = {"problem": "additive2d", "budget": budget, "seeds": seeds, "noise": 0.1, "grid": grid or 32}
    common = {"package": "bif-hgp", "version": __version__, "repeats": seeds}
    names = {
        "bif": "bif",
        "bif-softmax": "bif, authors' softmax decomposition",
        "bif-acq": "bif, calibrated acquisition-map prior",
        "bif-paper": "bif, authors' normalisation (children min-max, parent standardised)",
        "bottomup": "bottom-up only (no top-down)",
        "vanilla": "vanilla GP-UCB (BoTorch)",
        "random": "random search",
    }
    metrics = {
        "parent_r2": ("parent R² (mean over seeds)", "higher"),
        "auc": ("paper AUC: exploration + parent R² + child R²", "higher"),
        "regret_auc": ("area under normalised simple regret", "lower"),
        "child_r2": ("mean child R² (scale-free)", "higher"),
        "child_r2_offset": ("mean child R² up to a constant", "higher"),
    }

    def rec(
        bench: str,
        key: str,
        cand: str,
        base: str,
        target: float | None = None,
        better: str | None = None,
        blk: dict[str, Any] | None = None,
        sett: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        metric, default = metrics[key]
        better = better or default  # the ablation's claim is that its candidate scores lower
        blk = blk or block
        a, b = [e[key] for e in blk["runs"][cand]], [e[key] for e in blk["runs"][base]]
        mean = aggregate(blk)["means"] if blk is not block else m
        medians = aggregate(blk)["medians"] if blk is not block else med
        alt = "greater" if better == "higher" else "less"
        return record(
            **common,
            benchmark=bench,
            setting=sett or setting,
            metric=metric,
            better=better,
            candidate=names[cand],
            candidate_value=mean[cand][key],
            baseline=names[base],
            baseline_value=mean[base][key],
            target=target,
            candidate_median=medians[cand][key],
            baseline_median=medians[base][key],
            wilcoxon_p=wilcoxon_p(a, b, alternative=alt),
        )

    recs = [
        rec("parent-r2-vs-vanilla", "parent_r2", "bif", "vanilla", 2.0),
        rec("auc-vs-vanilla", "auc", "bif", "vanilla", 1.5),
        rec("regret-auc-vs-vanilla", "regret_auc", "bif", "vanilla", round(1 / 1.5, 4)),
        rec("ablation-no-topdown-child-r2", "child_r2", "bottomup", "bif", 0.7, better="lower"),
        rec("auc-softmax-decomposition-vs-vanilla", "auc", "bif-softmax", "vanilla", 1.5),
        rec("parent-r2-residual-vs-softmax-decomposition", "parent_r2", "bif", "bif-softmax"),
        rec("auc-residual-vs-softmax-decomposition", "auc", "bif", "bif-softmax"),
        rec("parent-r2-vs-random", "parent_r2", "bif", "random"),
        rec("regret-auc-vs-random", "regret_auc", "bif", "random"),
        rec("parent-r2-vs-bottomup", "parent_r2", "bif", "bottomup"),
        rec("parent-r2-shared-vs-authors-normalisation", "parent_r2", "bif", "bif-paper"),
        rec("auc-shared-vs-authors-normalisation", "auc", "bif", "bif-paper"),
        rec("parent-r2-acquisition-prior-vs-vanilla", "parent_r2", "bif-acq", "vanilla"),
        rec("parent-r2-authors-normalisation-vs-vanilla", "parent_r2", "bif-paper", "vanilla"),
    ]
    # the fit with few points: parent R² after n parent observations, from the curves
    few = [n for n in (10, 20) if n <= budget and n >= 3]
    for n in few:
        for base in ("vanilla", "bif-paper"):
            a, b = r2_at(block, "bif", n), r2_at(block, base, n)
            recs.append(
                record(
                    **common,
                    benchmark=f"parent-r2-at-{n}-vs-{base}",
                    setting={**setting, "queries": n},
                    metric=f"parent R² after {n} queries (mean over seeds)",
                    better="higher",
                    candidate="bif",
                    candidate_value=float(np.mean(a)),
                    baseline=names[base],
                    baseline_value=float(np.mean(b)),
                    target=None,
                    candidate_median=float(np.median(a)),
                    baseline_median=float(np.median(b)),
                    wilcoxon_p=wilcoxon_p(a, b),
                )
            )
    # the same ratio targets on the 3-D additive composite, where the flat GP has to learn a 3-D
    # surface from 40 points while each child still learns a 1-D one
    say(f"additive3d, budget {budget}: BIF, its no-top-down ablation, BoTorch and random search")
    methods3 = ("bif", "bottomup", "vanilla", "random")
    block3 = compare(
        "additive3d", methods=methods3, seeds=range(seeds), budget=budget, grid=grid, progress=say
    )
    setting3 = {**setting, "problem": "additive3d", "grid": grid or 16}
    for bench, key, cand, base, target, better in (
        ("parent-r2-vs-vanilla", "parent_r2", "bif", "vanilla", 2.0, None),
        ("auc-vs-vanilla", "auc", "bif", "vanilla", 1.5, None),
        ("regret-auc-vs-vanilla", "regret_auc", "bif", "vanilla", round(1 / 1.5, 4), None),
        ("ablation-no-topdown-child-r2", "child_r2", "bottomup", "bif", 0.7, "lower"),
        ("regret-auc-vs-random", "regret_auc", "bif", "random", None, None),
    ):
        recs.append(rec(f"{bench}-additive3d", key, cand, base, target, better, blk=block3, sett=setting3))
    # the correctness check: noiseless additive2d, 60 queries, every child's R² > 0.95
    n_budget = 10 if args.quick else 60
    say(f"noiseless additive2d, {n_budget} queries: child R² of BIF and of the authors' decomposition")
    nb = compare(
        "additive2d",
        methods=("bif", "bif-softmax"),
        seeds=range(seeds),
        budget=n_budget,
        noise=0.0,
        grid=grid,
        progress=say,
    )
    nsetting = {**setting, "budget": n_budget, "noise": 0.0}
    worst = min(min(e["child_r2_offset_each"].values()) for e in nb["runs"]["bif"])
    nmean = aggregate(nb)["means"]
    recs.append(
        record(
            **common,
            benchmark="noiseless-child-r2-offset-vs-threshold",
            setting=nsetting,
            metric="mean child R² up to a constant / the issue's 0.95",
            better="higher",
            candidate="bif",
            candidate_value=nmean["bif"]["child_r2_offset"],
            baseline="the issue's threshold 0.95",
            baseline_value=0.95,
            target=1.0,
            worst_child_any_seed=worst,
            child_r2_scale_free=nmean["bif"]["child_r2"],
            child_r2_raw=nmean["bif"]["child_r2_raw"],
        )
    )
    for key, bench in (("child_r2_offset", "child-r2-offset"), ("child_r2", "child-r2")):
        recs.append(
            rec(f"noiseless-{bench}-residual-vs-softmax", key, "bif", "bif-softmax", blk=nb, sett=nsetting)
        )
    say(f"timing: {t_budget} BIF iterations on additive3d (16³ grid), BoTorch GP-UCB on the same run length")
    t_bif = time_run("additive3d", t_budget, method="bif")
    t_van = time_run("additive3d", t_budget, method="vanilla")
    tsetting = {"problem": "additive3d", "iterations": t_budget, "grid": 16}
    recs.append(
        record(
            **{**common, "repeats": 1},
            benchmark="time-3d-60-iterations",
            setting=tsetting,
            metric="wall seconds / the issue's 120 s allowance",
            better="lower",
            candidate="bif",
            candidate_value=t_bif,
            baseline="120 s allowance",
            baseline_value=120.0,
            target=1.0,
        )
    )
    recs.append(
        record(
            **{**common, "repeats": 1},
            benchmark="time-3d-vs-vanilla",
            setting=tsetting,
            metric="wall seconds",
            better="lower",
            candidate="bif",
            candidate_value=t_bif,
            baseline="vanilla GP-UCB (BoTorch)",
            baseline_value=t_van,
            target=None,
        )
    )
    print(format_table(recs))
    rows = [
        [
            names[k],
            f"{m[k]['parent_r2']:.3f} / {med[k]['parent_r2']:.3f}",
            f"{m[k]['child_r2']:.3f} / {m[k]['child_r2_offset']:.3f}",
            f"{m[k]['auc']:.1f} / {med[k]['auc']:.1f}",
            f"{m[k]['regret_auc']:.1f} / {med[k]['regret_auc']:.1f}",
            " ".join(f"{np.mean(r2_at(block, k, n)):.3f}" for n in few),
            f"{m[k]['seconds']:.1f}",
        ]
        for k in methods
    ]
    header = [
        "method",
        "parent R² mean/median",
        "child R² scale-free / up to a constant",
        "AUC mean/median",
        "regret AUC mean/median",
    ]
    print(_table(rows, [*header, "parent R² at " + ", ".join(map(str, few)), "s/run"]))
    print(f"child R² drop without top-down: {100 * agg['child_r2_drop']:.1f}%")
    agg3 = aggregate(block3)
    m3, med3 = agg3["means"], agg3["medians"]
    print(f"additive3d, budget {budget}, {seeds} seeds:")
    rows = [
        [
            names[k],
            f"{m3[k]['parent_r2']:.3f} / {med3[k]['parent_r2']:.3f}",
            f"{m3[k]['child_r2']:.3f} / {m3[k]['child_r2_offset']:.3f}",
            f"{m3[k]['auc']:.1f} / {med3[k]['auc']:.1f}",
            f"{m3[k]['regret_auc']:.1f} / {med3[k]['regret_auc']:.1f}",
            f"{m3[k]['seconds']:.1f}",
        ]
        for k in methods3
    ]
    print(_table(rows, [*header, "s/run"]))
    print(f"child R² drop without top-down: {100 * agg3['child_r2_drop']:.1f}%")
    rows = [
        [
            names[k],
            f"{nmean[k]['parent_r2']:.3f}",
            f"{nmean[k]['child_r2']:.3f}",
            f"{nmean[k]['child_r2_offset']:.3f}",
            f"{nmean[k]['child_r2_raw']:.3f}",
            f"{min(min(e['child_r2_offset_each'].values()) for e in nb['runs'][k]):.3f}",
        ]
        for k in ("bif", "bif-softmax")
    ]
    for e in nb["runs"]["bif"]:
        each = ", ".join(f"{k} {v:.3f}" for k, v in e["child_r2_offset_each"].items())
        say(f"noiseless seed {e['seed']}: BIF child R² up to a constant {each}")
    print(f"noiseless additive2d, {n_budget} queries, {seeds} seeds:")
    print(
        _table(
            rows,
            ["method", "parent R²", "child R² scale-free", "up to a constant", "raw", "worst child"],
        )
    )
    if out is not None:
        write_records(out, recs)
        say(f"written {out}")


# ---- reproduce ------------------------------------------------------------------------------------
@app.command(
    "reproduce",
    help="every method on every benchmark problem, ≥ 10 seeds; JSON, table and plot",
    args=[
        arg("--seeds", type=int, default=10),
        arg("--budget", type=int, default=40),
        arg(
            "--problems",
            nargs="+",
            default=["additive2d", "additive3d", "multiplicative2d", "nonadditive3d", "hpo"],
        ),
        arg("--methods", nargs="+", default=["bif", "bottomup", "vanilla", "random"]),
        arg("--grid", type=int, default=None, help="grid points per dimension of synthetic problems"),
        arg("--plot", default=None, metavar="FILE.png", help="regret and R² curves (needs matplotlib)"),
    ],
    common=["out", "quiet"],
)
def _reproduce(args: argparse.Namespace) -> None:
    from papershelf.errors import check_choice

    for p in args.problems:
        check_choice("--problems", p, PROBLEM_CHOICES)
    for m in args.methods:
        check_choice("--methods", m, METHOD_CHOICES)
    seeds = check_int("--seeds", args.seeds, low=1)
    budget = check_int("--budget", args.budget, low=4)
    out = _out_path(args.out)
    plot = _out_path(args.plot, "--plot")
    if plot is not None:
        _matplotlib()
    from bif_hgp.experiments import aggregate, compare, limit_threads

    limit_threads()
    say = _say(args)
    started = time.perf_counter()
    blocks = []
    for name in args.problems:
        block = compare(
            name, methods=args.methods, seeds=range(seeds), budget=budget, grid=args.grid, progress=say
        )
        block["aggregate"] = aggregate(block)
        blocks.append(block)
    rows = []
    for b in blocks:
        agg = b["aggregate"]
        for m in args.methods:
            mm = agg["means"][m]
            rows.append(
                [
                    b["problem"],
                    m,
                    _fmt(mm["parent_r2"]),
                    _fmt(mm.get("child_r2")),
                    _fmt(mm["exploration"]),
                    _fmt(mm["auc"], 1),
                    _fmt(mm["regret_auc"], 1),
                    _fmt(mm["seconds"], 1),
                ]
            )
    print(f"{seeds} seeds, budget {budget} (means over seeds)")
    print(
        _table(
            rows, ["problem", "method", "parent R²", "child R²", "exploration", "AUC", "regret AUC", "s/run"]
        )
    )
    srows = []
    for b in blocks:
        a = b["aggregate"]
        srows.append(
            [
                b["problem"],
                _fmt(a.get("parent_r2_ratio"), 2),
                _fmt(a.get("p_parent_r2")),
                _fmt(a.get("auc_ratio"), 2),
                _fmt(a.get("p_auc")),
                _fmt(a.get("regret_auc_ratio"), 2),
                _fmt(a.get("p_regret_auc")),
                _fmt(None if a.get("child_r2_drop") is None else 100 * a["child_r2_drop"], 1),
                _fmt(a.get("p_child_r2")),
            ]
        )
    print(
        _table(
            srows,
            ["problem", "R² BIF/van", "p", "AUC BIF/van", "p", "regret van/BIF", "p", "child drop %", "p"],
        )
    )
    print(f"total {time.perf_counter() - started:.0f} s")
    if out is not None:
        atomic_write_json(
            out,
            {
                "seeds": seeds,
                "budget": budget,
                "problems": blocks,
                "manifest": run_manifest(command=sys.argv),
            },
        )
        say(f"written {out}")
    if plot is not None:
        _plot(blocks, plot)
        say(f"written {plot}")


def _matplotlib():
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise MissingDependencyError("matplotlib", package="bif-hgp", extra="plots") from None
    return plt


def _plot(blocks: list[dict[str, Any]], path: Path) -> None:
    import numpy as np

    plt = _matplotlib()
    fig, axes = plt.subplots(3, len(blocks), figsize=(3.2 * len(blocks), 7.5), squeeze=False)
    for col, b in enumerate(blocks):
        for method, entries in b["runs"].items():
            n = entries[0]["curves"]["n_queries"]
            for row, key in enumerate(("exploration", "parent_r2", "child_r2")):
                vals = np.array([e["curves"][key] for e in entries])
                axes[row, col].plot(n, vals.mean(0), label=method)
        axes[0, col].set_title(b["problem"])
        for row, lab in enumerate(("exploration", "parent R²", "child R²")):
            axes[row, col].set_ylabel(lab)
            axes[row, col].set_ylim(-0.5, 1.05)
        axes[2, col].set_xlabel("queries")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    with atomic_path(path, mode="wb") as handle:
        fig.savefig(handle, format="png", dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
