"""The ``slg-search`` command line: predict, simulate, search, demo, bench, reproduce."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from papershelf.bench import format_table, write_records
from papershelf.cli import App, arg
from papershelf.errors import InputError, check_int
from papershelf.repro import atomic_write_json, run_manifest
from slg_search import __version__
from slg_search.tail import FAMILIES, RULES, check_rewards, tail_fit

app = App(
    "slg-search",
    __version__,
    "Predict best-of-N scaling from reward tails, and spend a sampling budget where it pays (SLG search).",
)

METHOD_NAMES = (
    "slg",
    "slg-with-root",
    "slg-tree",
    "best-of-n",
    "mean-guided",
    "max-guided",
    "beam",
    "oracle",
)


def _ints(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not values:
        raise argparse.ArgumentTypeError("expected at least one integer")
    return values


def _read_rewards(path: str) -> np.ndarray:
    p = Path(path)
    if not p.is_file():
        raise InputError(f"--rewards: no such file {path!r}")
    try:
        if p.suffix == ".npy":
            arr = np.load(p, allow_pickle=False)
        else:
            arr = np.loadtxt(p, delimiter="," if p.suffix == ".csv" else None, ndmin=1)
    except (ValueError, OSError) as exc:
        raise InputError(f"--rewards: cannot read {path!r} ({' '.join(str(exc).split())[:120]})") from None
    arr = np.asarray(arr)
    if arr.ndim == 2 and 1 in arr.shape:
        arr = arr.reshape(-1)
    return check_rewards(arr, name="--rewards")


@app.command(
    "predict",
    help="fit the reward tail of sampled rewards (.npy, .csv or text) and predict best-of-N",
    args=[
        arg("--rewards", required=True, help="file of sampled rewards (one prompt/state)"),
        arg("--n", type=_ints, default=[1000], help="N, or a comma list of N (default 1000)"),
        arg("--tail-fraction", type=float, default=0.2, help="fraction of top rewards kept (default 0.2)"),
        arg("--family", choices=FAMILIES, default="gaussian"),
        arg("--rule", choices=RULES, default="expected", help="E[max of N] or the (1-1/N) quantile"),
    ],
    common=["out"],
)
def _predict(args: argparse.Namespace) -> None:
    rewards = _read_rewards(args.rewards)
    ns = [check_int("--n", n, low=1) for n in args.n]
    fit = tail_fit(rewards, args.tail_fraction, args.family)
    values = np.atleast_1d(fit.predict(np.array(ns), args.rule))
    print(
        f"samples {fit.n_samples}, tail {fit.n_tail}, fit {fit.family}"
        + (f" ({fit.note})" if fit.note else "")
    )
    if fit.family == "gaussian":
        print(f"mu {fit.mu:.6g}  sigma {fit.sigma:.6g}")
    elif fit.family == "gpd":
        print(
            f"threshold {fit.threshold:.6g}  tail mass {fit.tail_mass:.4g}  shape {fit.shape:.4g}  scale {fit.scale:.4g}"  # noqa: E501
        )
    print(f"{'N':>10}  predicted best-of-N ({args.rule})")
    for n, v in zip(ns, values):
        print(f"{n:>10}  {v:.6g}")
    if args.out:
        atomic_write_json(
            args.out,
            _clean(
                {
                    "fit": {
                        k: getattr(fit, k)
                        for k in (
                            "family",
                            "n_samples",
                            "n_tail",
                            "mu",
                            "sigma",
                            "threshold",
                            "tail_mass",
                            "shape",
                            "scale",
                            "note",
                        )
                        if k
                    },
                    "rule": args.rule,
                    "tail_fraction": args.tail_fraction,
                    "predictions": [{"n": n, "value": float(v)} for n, v in zip(ns, values)],
                    "manifest": run_manifest(),
                }
            ),
        )


def _clean(obj: Any) -> Any:
    """NaN/inf → None so the JSON is strict."""
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_clean(v) for v in obj]
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def _print_gaussian(g: dict[str, Any]) -> None:
    s = g["setting"]
    print(
        f"Gaussian two-stage: N = {s['budget']}, K = {s['width']} children, m = {s['m']}, {s['reps']} repetitions"  # noqa: E501
    )
    print(f"{'method':<14}{'mean reward':>12}{'± se':>8}{'vs BoN (95% CI)':>28}{'regret ratio':>14}")
    for name, mean in g["mean"].items():
        vs = g.get("vs_bon", {}).get(name)
        ci = f"{vs['diff']:+.3f} [{vs['ci95'][0]:+.3f}, {vs['ci95'][1]:+.3f}]" if vs else "—"
        ratio = f"{vs['regret_ratio']:.3f}" if vs else "—"
        print(f"{name:<14}{mean:>12.4f}{g['se'][name]:>8.4f}{ci:>28}{ratio:>14}")
    print(f"oracle (exact E[max]) {g['oracle_exact']:.4f}; regret ratio = (oracle − method)/(oracle − BoN)")
    if "slg_picks_oracle_child" in g:
        print(f"SLG committed to the oracle's child in {100 * g['slg_picks_oracle_child']:.1f}% of runs")


@app.command(
    "simulate",
    help="the Gaussian two-stage model: SLG, its tree variant and baselines against best-of-N",
    args=[
        arg("--budget", type=int, default=1000, help="rollouts per search, N (default 1000)"),
        arg("--width", type=int, default=8, help="children K (default 8)"),
        arg("--m", type=int, default=None, help="exploration rollouts per state (default: auto)"),
        arg("--reps", type=int, default=2000, help="repetitions (default 2000)"),
        arg("--methods", default="best-of-n,slg,slg-tree,mean-guided,beam,oracle", help="comma list"),
    ],
    common=["seed", "out", "quiet"],
)
def _simulate(args: argparse.Namespace) -> None:
    from slg_search.experiments import gaussian_experiment
    from slg_search.search import min_budget

    budget = check_int("--budget", args.budget, low=1)
    width = check_int("--width", args.width, low=1, high=10_000)
    reps = check_int("--reps", args.reps, low=2)
    methods = tuple(x.strip() for x in args.methods.split(",") if x.strip())
    bad = [x for x in methods if x not in METHOD_NAMES]
    if bad or not methods:
        raise InputError(f"--methods: unknown {bad}; choose from {', '.join(METHOD_NAMES)}")
    if args.m is not None:
        m = check_int("--m", args.m, low=2)
        if budget < min_budget(width, m):
            raise InputError(
                f"--budget {budget} is smaller than the exploration phase needs: (width + 1) * m = {min_budget(width, m)}"  # noqa: E501
            )
    g = gaussian_experiment(
        budget=budget, width=width, m=args.m, reps=reps, seed=args.seed, methods=methods, quiet=args.quiet
    )
    _print_gaussian(g)
    if args.out:
        atomic_write_json(args.out, _clean({**g, "manifest": run_manifest()}))


@app.command(
    "search",
    help="run one search on a built-in environment and print the best response",
    args=[
        arg("--env", choices=("countdown", "gaussian"), required=True),
        arg("--method", choices=METHOD_NAMES, default="slg"),
        arg("--budget", type=int, default=300),
        arg("--width", type=int, default=4),
        arg("--m", type=int, default=None, help="exploration rollouts per state (default: auto)"),
        arg(
            "--numbers", type=_ints, default=None, help="countdown numbers, e.g. 3,7,25,50 (default: random)"
        ),
        arg("--target", type=int, default=None, help="countdown target (with --numbers)"),
        arg("--noise", type=float, default=0.1, help="reward-model noise sd (countdown, default 0.1)"),
    ],
    common=["seed", "out"],
)
def _search(args: argparse.Namespace) -> None:
    from slg_search.envs import Countdown, GaussianTwoStage, random_countdown
    from slg_search.experiments import METHODS

    rng = np.random.default_rng(args.seed)
    if args.env == "countdown":
        if (args.numbers is None) != (args.target is None):
            raise InputError("give both --numbers and --target, or neither (a random puzzle)")
        env: Any = (
            random_countdown(rng, noise=args.noise)
            if args.numbers is None
            else Countdown(args.numbers, args.target, noise=args.noise)
        )
        print(
            f"countdown: numbers {list(env.numbers)}, target {env.target}, reward-model noise {env.noise:g}"
        )
    else:
        env = GaussianTwoStage.random(check_int("--width", args.width, low=1, high=10_000), rng)
        print("gaussian two-stage: " + ", ".join(f"N({m:.2f}, {s:.2f}²)" for m, s in zip(env.means, env.sds)))
    m = None if args.m is None else check_int("--m", args.m, low=2)
    res = METHODS[args.method](
        env,
        env.root,
        check_int("--budget", args.budget, low=1),
        args.seed,
        {"width": check_int("--width", args.width, low=1), "m": m},
    )
    print(f"method {res.method}: {res.n_rollouts} rollouts, best reward {res.best_reward:.4f}")
    if args.env == "countdown":
        print(
            f"best response: {env.describe(res.best_response)}  -> {env.final(res.best_response)} "
            f"(solved: {'yes' if env.solves(res.best_response) else 'no'}, true score {env.true_score(res.best_response):.3f})"  # noqa: E501
        )
    if res.chosen is not None:
        print(f"committed to: {res.chosen}")
    if args.out:
        atomic_write_json(args.out, _clean({**res.as_dict(), "manifest": run_manifest()}))


@app.command("demo", help="a ten-second tour: prediction and search on built-in data", common=["seed"])
def _demo(args: argparse.Namespace) -> None:
    from slg_search.experiments import gaussian_experiment
    from slg_search.tail import expected_max_normal

    rng = np.random.default_rng(args.seed)
    rewards = rng.normal(size=200)
    fit = tail_fit(rewards)
    print("1. Predict best-of-N from one sample of 200 rewards of N(0, 1) (one draw: expect an error of")
    print("   about ±10% at N = 1000; averaged over repetitions it is under 1%, see `reproduce`):")
    print(f"{'N':>8}{'predicted':>12}{'exact':>10}")
    for n in (10, 100, 1000, 10_000):
        print(f"{n:>8}{float(fit.predict(n)):>12.3f}{float(expected_max_normal(n)):>10.3f}")
    print("\n2. Search at N = 1000 on 200 random two-stage environments (K = 8 children):")
    g = gaussian_experiment(
        budget=1000, reps=200, seed=args.seed, methods=("best-of-n", "slg", "slg-tree", "oracle")
    )
    _print_gaussian(g)


@app.command(
    "bench",
    help="SLG against best-of-N (regret ratio), prediction error, tail-fit speed",
    args=[
        arg("--quick", action="store_true", help="tiny sizes, seconds"),
        arg("--reps", type=int, default=None, help="two-stage repetitions (default 2000; quick: 20)"),
    ],
    common=["seed", "out", "quiet"],
)
def _bench(args: argparse.Namespace) -> None:
    from slg_search.experiments import bench

    if args.reps is not None:
        check_int("--reps", args.reps, low=2)
    records = bench(quick=args.quick, reps=args.reps, seed=args.seed, quiet=args.quiet)
    print(format_table(records))
    for r in records:
        if "diff_ci95" in r:
            lo, hi = r["diff_ci95"]
            print(
                f"{r['benchmark']}: {r['candidate']} − best-of-n = {r['diff_vs_bon']:+.4f} [{lo:+.4f}, {hi:+.4f}] (95% CI)"  # noqa: E501
            )
        if "error_target" in r:
            print(
                f"{r['benchmark']}: max relative error {r['candidate_value']:.4f} (target ≤ {r['error_target']}: "  # noqa: E501
                f"{'met' if r['error_met'] else 'not met'})"
            )
    if args.out:
        write_records(args.out, records)


@app.command(
    "reproduce",
    help="the headline two-stage run, sweeps, prediction and calibration, Countdown (~5 min)",
    args=[
        arg("--quick", action="store_true", help="1%% of the repetitions, seconds"),
        arg("--plot", default=None, help="folder for PNG plots (needs matplotlib)"),
    ],
    common=["seed", "out", "quiet"],
)
def _reproduce(args: argparse.Namespace) -> None:
    from slg_search.experiments import reproduce

    out = reproduce(quick=args.quick, seed=args.seed, quiet=args.quiet)
    _print_gaussian(out["headline"])
    print("\nBudget sweep (K = 8, auto m):")
    for g in [*out["budgets"], out["headline"]]:
        v = g["vs_bon"]
        print(
            f"  N = {g['setting']['budget']:>5} (m = {g['setting']['m']:>3}): regret ratio slg {v['slg']['regret_ratio']:.3f}, "  # noqa: E501
            f"slg-tree {v['slg-tree']['regret_ratio']:.3f}; slg − BoN {v['slg']['diff']:+.3f} "
            f"[{v['slg']['ci95'][0]:+.3f}, {v['slg']['ci95'][1]:+.3f}]"
        )
    print("m sweep (N = 1000, K = 8):")
    for g in out["m_sweep"]:
        v = g["vs_bon"]["slg"]
        print(
            f"  m = {g['setting']['m']:>3}: regret ratio slg {v['regret_ratio']:.3f}, slg − BoN {v['diff']:+.3f}"  # noqa: E501
        )
    pred = out["prediction"]
    print(f"\nPrediction from m = {pred['m']} samples, |mean V̂_N − E[max_N]| / (E[max_N] − E[reward]):")
    for case, data in pred["cases"].items():
        print(f"  {case} ({data['reps']} reps):")
        print("    " + f"{'N':>6}" + "".join(f"{k:>22}" for k in data["rel_err"]))
        for i, n in enumerate(pred["ns"]):
            print("    " + f"{n:>6}" + "".join(f"{v[i]:>22.4f}" for v in data["rel_err"].values()))
        print("    " + f"{'max':>6}" + "".join(f"{v:>22.4f}" for v in data["max_rel_err"].values()))
    print("Calibration (predicted V̂_N vs one realised best-of-N, N in 10/100/1000):")
    for kind, s in out["calibration"]["summary"].items():
        print(
            f"  {kind}: corr {s['corr_predicted_realised']:.3f}, mean(predicted − exact) {s['mean_predicted_minus_exact']:+.4f}, "  # noqa: E501
            f"mean|predicted − exact| {s['mean_abs_predicted_minus_exact']:.4f}"
        )
    cd = out["countdown"]
    cs = cd["setting"]
    print(
        f"\nCountdown: {cs['puzzles']} puzzles, N = {cs['budget']}, K = {cs['width']}, m = {cs['m']}, noise {cs['noise']}"  # noqa: E501
    )
    print(f"{'method':<14}{'solve rate':>12}{'true score':>12}{'RM reward':>12}{'score − BoN (95% CI)':>32}")
    for name in cd["solve_rate"]:
        vs = cd.get("true_score_vs_bon", {}).get(name)
        ci = f"{vs['diff']:+.3f} [{vs['lo']:+.3f}, {vs['hi']:+.3f}]" if vs else "—"
        print(
            f"{name:<14}{cd['solve_rate'][name]:>12.3f}{cd['true_score'][name]:>12.3f}{cd['rm_reward'][name]:>12.3f}{ci:>32}"
        )
    if args.out:
        atomic_write_json(args.out, _clean({**out, "manifest": run_manifest(quick=args.quick)}))
    if args.plot:
        _plots(out, Path(args.plot))


def _plots(out: dict[str, Any], folder: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots (pip install 'slg-search[plots]')", file=sys.stderr)
        return
    folder.mkdir(parents=True, exist_ok=True)
    pred = out["prediction"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    ns = pred["ns"]
    for ax, (case, data) in zip(axes, pred["cases"].items()):
        ax.plot(ns, data["exact"], "k-", lw=2, label="exact E[max of N]")
        for key, style in (
            ("tail_expected", "o-"),
            ("tail_quantile", "s--"),
            ("tail_gpd", "^:"),
            ("anchor_full_gaussian", "x-."),
        ):
            if key in data:
                ax.plot(ns, data[key], style, label=key.replace("_", " "))
        ax.set(
            xscale="log",
            xlabel="N",
            ylabel="best-of-N reward",
            title=f"{case}: prediction from m = {pred['m']}",
        )
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(folder / "prediction.png", dpi=120)
    plt.close(fig)
    rows = out["calibration"]["rows"]
    fig, ax = plt.subplots(figsize=(4.6, 4.2))
    for kind, marker in (("gaussian", "o"), ("countdown", "s")):
        sel = [r for r in rows if r["kind"] == kind]
        ax.scatter(
            [r["predicted"] for r in sel],
            [r["realised"] for r in sel],
            s=12,
            marker=marker,
            alpha=0.7,
            label=kind,
        )
    lo = min(min(r["predicted"], r["realised"]) for r in rows)
    hi = max(max(r["predicted"], r["realised"]) for r in rows)
    ax.plot([lo, hi], [lo, hi], "k:", lw=1)
    ax.set(
        xlabel="predicted best-of-N (from m = 200)",
        ylabel="realised best-of-N",
        title="calibration, N = 10/100/1000",
    )
    ax.legend()
    fig.tight_layout()
    fig.savefig(folder / "calibration.png", dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    return app.main(argv)


if __name__ == "__main__":
    sys.exit(main())
